#pragma once
#include <cstdint>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

enum class ReduceOp { sum, max, min, argmax, argmin };

// Reduces each of `rows` contiguous rows of `n` elements of `in` (float32 or int32) into
// out[row]: the value for sum/max/min, the int32 index of the first extreme for argmax/argmin.
// Float sums are pairwise; long rows are reduced in several passes of partial results.
void record_reduce_rows(detail::RuntimeState& rt, detail::Recording& rec, ReduceOp op, DType dtype,
                        const detail::DeviceBuffer& in, int64_t rows, int64_t n,
                        const detail::DeviceBuffer& out);

}  // namespace meshvk::kernels

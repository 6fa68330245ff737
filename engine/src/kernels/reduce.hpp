#pragma once
#include <cstdint>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

enum class ReduceOp { sum, max, min, argmax, argmin };

// Elements one invocation reduces per pass: long enough to amortize, short enough that a
// 16M-element sum still spreads over thousands of invocations. Part of every sum's order.
constexpr int64_t kReduceChunk = 4096;

// Reduces each of `rows` contiguous rows of `n` elements of `in` (float32 or int32) into
// out[row]: the value for sum/max/min, the int32 index of the first extreme for argmax/argmin.
// Float sums are pairwise; long rows are reduced in several passes of partial results.
// With `columns`, `in` is laid out [n, rows] instead (a sum over leading axes, such as a bias
// gradient's over the batch): read in place, in the same order, so the result equals bit for bit
// that of reducing its transpose; only where can_reduce_columns says it fits.
void record_reduce_rows(detail::RuntimeState& rt, detail::Recording& rec, ReduceOp op, DType dtype,
                        const detail::DeviceBuffer& in, int64_t rows, int64_t n,
                        const detail::DeviceBuffer& out, bool columns = false);
bool can_reduce_columns(detail::RuntimeState& rt, const detail::DeviceBuffer& in, int64_t rows,
                        int64_t n);

}  // namespace meshvk::kernels

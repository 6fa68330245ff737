#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/elementwise.hpp"
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
// With `epilogue` (a float32 sum, n > 0), each row's sum goes through that elementwise program (its
// input 0) before it is stored, as record_elementwise would compute it from the stored sum: a
// mean's division by the count in the same dispatch (can_take_epilogue says which programs).
void record_reduce_rows(detail::RuntimeState& rt, detail::Recording& rec, ReduceOp op, DType dtype,
                        const detail::DeviceBuffer& in, int64_t rows, int64_t n,
                        const detail::DeviceBuffer& out, bool columns = false,
                        const EwProgram* epilogue = nullptr);
bool can_take_epilogue(ReduceOp op, DType dtype, const EwProgram& epilogue);

// The GLSL of one chunk's sum in the order every sum of meshvk takes (and its tests pin down),
// for the kernels that sum (reduce.cpp, reduce_fused.cpp): blocks of 64 elements, in four vec4
// accumulators from `quad` (elements q..q+3 of the chunk as a vector, q a uint expression, a
// multiple of 4) or one after another from `one` (element q), pairwise-merged like a binary
// counter into `total`. Reads `len`, the chunk's length; float (`f`) or int.
std::string pairwise_sum_glsl(bool f, const std::function<std::string(const std::string&)>& quad,
                              const std::function<std::string(const std::string&)>& one);
bool can_reduce_columns(detail::RuntimeState& rt, const detail::DeviceBuffer& in, int64_t rows,
                        int64_t n);

}  // namespace meshvk::kernels

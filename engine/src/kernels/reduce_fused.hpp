#pragma once
// A reduction whose input is an elementwise program not yet run (a pending fusion): the program
// is computed where the reduction reads each element, so one dispatch replaces an elementwise
// kernel writing the input and a reduction reading it back (XLA's reduction fusion).
#include <cstdint>
#include <span>

#include "kernels/elementwise.hpp"
#include "kernels/reduce.hpp"

namespace meshvk::kernels {

// Whether record_reduce_fused takes this reduction: sum, max or min of a float32 or int32 program
// whose values and inputs are all 32-bit, with each input inside one texel binding.
// `shape` is the program's output piece (the reduction's input); its last `reduced` dimensions
// are the reduced ones.
bool can_reduce_fused(detail::RuntimeState& rt, ReduceOp op, const EwProgram& program,
                      std::span<const EwInput> inputs, const Shape& shape, size_t reduced,
                      bool side = false);

// Reduces each row of the program's values over the last `reduced` dimensions of `shape` into
// out[row] (record_reduce_rows's rows and n: the kept and the reduced elements). Each element is
// computed as record_elementwise computes it and reduced in record_reduce_rows's order, so the
// result equals bit for bit that of running the program and then reducing it. With `side`, the
// values are also stored there (row-major over `shape`), as record_elementwise would: for a
// program whose values have other readers and cost more to compute again than to store. With
// `epilogue`, as record_reduce_rows's: each sum's last step (a mean's division).
void record_reduce_fused(detail::RuntimeState& rt, detail::Recording& rec, ReduceOp op,
                         const EwProgram& program, std::span<const EwInput> inputs,
                         const Shape& shape, size_t reduced, const detail::DeviceBuffer& out,
                         const detail::DeviceBuffer* side = nullptr, const EwProgram* epilogue = nullptr);

}  // namespace meshvk::kernels

#pragma once
// The machinery of elementwise operations (elementwise_ops.cpp): JAX's type promotion, and one op
// added to a pending fused program (laid out as its operands, fused with pending ones, run when
// its data is needed). The public ops (elementwise_math.cpp) are built on these.
#include <initializer_list>
#include <vector>

#include "kernels/elementwise.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::detail::ew {

// The operand's type for promotion: an array's dtype is strong, a scalar's is weak.
struct OperandType {
  DType dtype;
  bool weak;
};
OperandType type_of_operand(const Operand& o);
// JAX's promotion restricted to meshvk's dtypes (see the definition for the table).
DType promote(std::initializer_list<OperandType> types);

// Whether a program computes anything beyond a few instructions per element: a function of the
// math library, a division, a power.
bool has_costly_ops(const kernels::EwProgram& p);

// `ew` over the operands converted to `compute`, giving `result`: a pending (fused) array.
Array elementwise(const char* op, kernels::EwOp ew, std::vector<Operand> operands, DType compute,
                  DType result);
// x broadcast to `shape` (numpy's rules) as a pending program that only reads x: fused into its
// consumers, which read x with zero strides where it is broadcast, rather than copied out whole.
Array broadcast(const Array& x, const Shape& shape);
// A unary op in x's type (bools as int32; float ops of ints in float32, of bfloat16 in bfloat16).
Array unary(const char* op, kernels::EwOp ew, const Array& x);
// A binary op in the operands' promoted type, and a comparison (a bool result).
Array arithmetic(const char* op, kernels::EwOp ew, const Operand& a, const Operand& b);
Array comparison(const char* op, kernels::EwOp ew, const Operand& a, const Operand& b);

}  // namespace meshvk::detail::ew

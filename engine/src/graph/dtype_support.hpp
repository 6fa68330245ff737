#pragma once
// What uint32 supports (see meshvk/dtype.hpp): ops that compute on values call this first; and the
// constants of compositions in an operand's dtype, and numbers in messages.
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/elementwise.hpp"
#include "kernels/reduce.hpp"
#include "meshvk/array.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

// A constant of a composition meeting arrays of dtype t: a weak float (rounded to t where t is
// narrower), or for float64 the exact double as a 0-d array (a weak float is a float32 value,
// 2^-24 off in a float64 result).
inline Operand constant_for(DType t, double v) {
  if (t == DType::float64) return array(std::span<const double>(&v, 1), Shape{});
  return static_cast<float>(v);
}

// A float for an error message: 1e-08 and 0.999, not std::to_string's 0.000000 and 0.999000.
inline std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A DType given by the caller is one of meshvk's: DType(12), cast from an integer, made arrays
// printed as "unknown" and kernels that did not compile.
inline void check_dtype(const char* op, DType dtype) {
  for (const DType d : kAllDTypes)
    if (d == dtype) return;
  throw Error(std::string(op) + ": DType(" + std::to_string(static_cast<int>(dtype)) +
              ") is not a dtype; use DType::float32, DType::float64, DType::bfloat16, "
              "DType::float16, DType::int8, DType::int32, DType::int64, DType::uint8, "
              "DType::uint32 or DType::bool_");
}

inline void reject_uint32(const char* op, const Array& x) {
  if (!x.valid() || x.dtype() != DType::uint32) return;
  throw Error(std::string(op) + ": " + type_of(x) +
              " is not supported here; uint32 supports data movement, elementwise ops, reductions, "
              "sort and top_k (computed in int64), printing, .npy, the random ops and astype. "
              "astype(x, DType::int64) (every value exact) or astype(x, DType::int32) (the same bits) first");
}

// bfloat16 and float16 (computed in float32 and rounded to them).
constexpr bool is_16bit_float(DType dtype) { return dtype == DType::bfloat16 || dtype == DType::float16; }

// int8 and uint8 go through kernels written for 32-bit words (reductions, take, matmul,
// collectives that sum) as int32 and come back wrapped, which is what 8-bit arithmetic gives
// (sums and products modulo 256 agree); bfloat16 and float16 as float32. Other dtypes: themselves.
constexpr DType word_dtype(DType dtype) {
  return is_8bit(dtype) ? DType::int32 : is_16bit(dtype) ? DType::float32 : dtype;
}

// Throws Error for a weak int scalar among `operands` that is no value of `dtype` (int8 or
// uint8), as JAX raises OverflowError for uint8 + 300.
void check_8bit_scalars(const char* op, const std::vector<Operand>& operands, DType dtype);

// Throws Error for an elementwise op float64 has no kernel for: GLSL's double arithmetic covers
// + - * /, // and % (wide_types.cpp's numpy helpers), comparisons, abs, sign, sqrt, rsqrt, square, reciprocal, maximum, minimum, relu, where
// and casts; the math library's float64-dtype functions (kernels/mathlib/f64/) exp, exp2, expm1,
// log, log1p, log2, tanh, sigmoid, sinh, cosh, power, sin, cos, tan, arcsin, arccos, arctan,
// arctan2, asinh, acosh, atanh, erf and erfinv.
void check_float64_op(const char* op, kernels::EwOp ew);

// int64 / float64 `x` viewed as int32 words, shape + (2,) (the low word first): the same buffers,
// no copy, so ops that move 32-bit words (take, gathers) move 64-bit elements; and back.
Array as_words(const Array& x);
Array from_words(const Array& words, DType dtype);

// sum, max or min of an int64 / float64 `x` over the `reduced` axes: the reduced axes moved last
// and folded in halves (pairwise) with elementwise ops, which the 64-bit kernels have.
Array reduce64(const char* op, kernels::ReduceOp kind, const Array& x, const std::vector<bool>& reduced,
               bool keepdims);

// argmax / argmin of an int64 / float64 `x` along its one reduced axis: candidates compared in
// halves with elementwise ops, ties and NaN going to the first index, as numpy's.
Array arg_reduce64(kernels::ReduceOp kind, const Array& x, const std::vector<bool>& reduced, bool keepdims);

// The stable argsort of an int64 / float64 `x` along its last axis (numpy's kind='stable'; float64
// -0.0 equal to 0.0 and NaN last, as float32's): two passes of the 32-bit argsort.
Array argsort64(const Array& x);

// a @ b for int64 / float64 operands of one dtype ([..., m, k] @ [..., k, n], batch dimensions
// equal or on one side): a broadcast product summed over k in the dtype (reduce64), exact for
// int64, pairwise for float64; an Error past 2^26 products (no 64-bit matmul kernel yet).
Array matmul64(const Array& a, const Array& b);

// astype without a tape entry (for ops whose own rule covers the conversion, such as psum
// computing a bfloat16 sum in float32).
Array convert_untaped(const Array& x, DType dtype);

}  // namespace meshvk::detail

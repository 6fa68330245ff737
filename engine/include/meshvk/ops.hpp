#pragma once
// numpy / jax.numpy operations on Arrays. Elementwise operations broadcast as numpy does and
// follow JAX's type promotion: Python-style scalars are weakly typed (2 * int32 array is int32,
// 2.5 * int32 array is float32). Chains of elementwise operations fuse into one kernel.
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/source_location.hpp"

namespace meshvk {

namespace detail {
[[noreturn]] void operand_out_of_range(long long value);
[[noreturn]] void operand_out_of_range(unsigned long long value);
}  // namespace detail

// An operand of an elementwise operation: an Array, or a weakly typed scalar.
class Operand {
 public:
  Operand(const Array& a) : v_(a) {}
  template <std::floating_point F>
  Operand(F f) : v_(static_cast<float>(f)) {}
  // An integer is a weak int32, as JAX's Python ints: one past int32 throws Error (JAX's
  // OverflowError) rather than wrapping silently (x * (int64_t{1} << 33) would be x * 0). A
  // uint32_t (or narrower unsigned) is taken as its 32 bits, so 0xffffffffu is -1 there, as
  // astype(int32) of a uint32 is, and a uint32 array's fill value can be spelled as a uint32;
  // a wider unsigned (size_t) past int32 throws, as a signed one does.
  template <std::integral I>
  Operand(I i) : v_(int32_of(i)) {}
  const std::variant<Array, float, int32_t>& get() const& { return v_; }
  std::variant<Array, float, int32_t> get() const&& { return v_; }

 private:
  template <std::integral I>
  static int32_t int32_of(I i) {
    if constexpr (std::is_unsigned_v<I>) {
      if constexpr (sizeof(I) > sizeof(uint32_t))  // a size_t or uint64_t is a count, not bits
        if (i > static_cast<I>(INT32_MAX)) detail::operand_out_of_range(static_cast<unsigned long long>(i));
      return static_cast<int32_t>(static_cast<uint32_t>(i));
    } else {
      if constexpr (sizeof(I) > sizeof(int32_t))
        if (i < static_cast<I>(INT32_MIN) || i > static_cast<I>(INT32_MAX))
          detail::operand_out_of_range(static_cast<long long>(i));
      return static_cast<int32_t>(i);
    }
  }
  std::variant<Array, float, int32_t> v_;
};

// Unary
Array negative(const Array& x);
Array abs(const Array& x);
Array sign(const Array& x);
Array exp(const Array& x);
Array log(const Array& x);
Array sqrt(const Array& x);
Array rsqrt(const Array& x);
Array sin(const Array& x);
Array cos(const Array& x);
// tan, the inverse trigonometric functions and erf / erfinv (jax.scipy.special.erfinv): float32
// results from meshvk's math library, within 1 ulp of the correctly rounded value (README).
Array tan(const Array& x);
Array arcsin(const Array& x);
Array arccos(const Array& x);
Array arctan(const Array& x);
Array erf(const Array& x);
Array erfinv(const Array& x);
// jax.lax's names.
inline Array asin(const Array& x) { return arcsin(x); }
inline Array acos(const Array& x) { return arccos(x); }
inline Array atan(const Array& x) { return arctan(x); }
inline Array erf_inv(const Array& x) { return erfinv(x); }
Array tanh(const Array& x);
Array sigmoid(const Array& x);
Array expm1(const Array& x);  // exp(x) - 1, accurate near 0
Array log1p(const Array& x);  // log(1 + x), accurate near 0
Array sinh(const Array& x);
Array cosh(const Array& x);
Array exp2(const Array& x);
Array log2(const Array& x);
Array asinh(const Array& x);
Array acosh(const Array& x);
Array atanh(const Array& x);
Array relu(const Array& x);
Array square(const Array& x);
Array reciprocal(const Array& x);
// jnp.floor, ceil, trunc (jnp.fix), rint and round: exact, rint and round to the nearest with
// halves to even, as numpy. Integer and bool arrays come back unchanged, as JAX's; gradients are
// zero. round(x, decimals) is numpy's: rint(x * 10^d) / 10^d (d < 0: rint(x / 10^-d) * 10^-d),
// float16 and bfloat16 through float32; on integers a negative d rounds to a multiple of 10^-d,
// halves to the even multiple, wrapping past the dtype's limits as numpy's (JAX refuses d < 0 on
// integers). |d| past the dtype's exponent range (38, float64 308) is an Error.
Array floor(const Array& x);
Array ceil(const Array& x);
Array trunc(const Array& x);
inline Array fix(const Array& x) { return trunc(x); }
Array rint(const Array& x);
Array round(const Array& x, int decimals = 0);
Array logical_not(const Array& x);
Array astype(const Array& x, DType dtype);

// Binary
Array add(const Operand& a, const Operand& b);
Array subtract(const Operand& a, const Operand& b);
Array multiply(const Operand& a, const Operand& b);
Array divide(const Operand& a, const Operand& b);  // true division: ints give float32
// numpy's // and % exactly (floats: fmod-based npy_divmod; remainder has the divisor's sign).
// Integers by zero give 0 for both, as numpy; INT_MIN // -1 wraps to INT_MIN, as numpy.
Array floor_divide(const Operand& a, const Operand& b);
Array remainder(const Operand& a, const Operand& b);
Array power(const Operand& a, const Operand& b);
Array arctan2(const Operand& a, const Operand& b);  // atan2(a, b), C's and numpy's special cases
inline Array atan2(const Operand& a, const Operand& b) { return arctan2(a, b); }  // jax.lax's name
Array maximum(const Operand& a, const Operand& b);
Array minimum(const Operand& a, const Operand& b);
Array equal(const Operand& a, const Operand& b);
Array not_equal(const Operand& a, const Operand& b);
Array less(const Operand& a, const Operand& b);
Array less_equal(const Operand& a, const Operand& b);
Array greater(const Operand& a, const Operand& b);
Array greater_equal(const Operand& a, const Operand& b);
Array logical_and(const Operand& a, const Operand& b);
Array logical_or(const Operand& a, const Operand& b);
Array logical_xor(const Operand& a, const Operand& b);
// On int32 bitwise; on two bools logical (numpy's & | ^ ~ on booleans). Floats are an Error, as
// in numpy. bitwise_not is jnp.invert: ~x, the logical not of a bool.
Array bitwise_and(const Operand& a, const Operand& b);
Array bitwise_or(const Operand& a, const Operand& b);
Array bitwise_xor(const Operand& a, const Operand& b);
Array bitwise_not(const Array& x);
inline Array invert(const Array& x) { return bitwise_not(x); }
Array where(const Operand& condition, const Operand& x, const Operand& y);

// The shape numpy broadcasting gives two shapes; throws Error naming both when they do not
// broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// Operators as on jax.Array, with the scalar on either side (2 - x, 0.f < x, 1 & x) and weak
// typing as in JAX: 2 * int32 array is int32, 2.f * int32 array float32. Each has an
// (Array, Array) overload too, so two arrays never meet an ambiguity.
#define MESHVK_BINARY_OPERATOR(op, fn)                                                      \
  inline Array operator op(const Operand& a, const Array& b) { return fn(a, b); }           \
  inline Array operator op(const Array& a, const Operand& b) { return fn(a, b); }           \
  inline Array operator op(const Array& a, const Array& b) { return fn(a, b); }
MESHVK_BINARY_OPERATOR(+, add)
MESHVK_BINARY_OPERATOR(-, subtract)
MESHVK_BINARY_OPERATOR(*, multiply)
MESHVK_BINARY_OPERATOR(/, divide)
MESHVK_BINARY_OPERATOR(%, remainder)
MESHVK_BINARY_OPERATOR(<, less)
MESHVK_BINARY_OPERATOR(<=, less_equal)
MESHVK_BINARY_OPERATOR(>, greater)
MESHVK_BINARY_OPERATOR(>=, greater_equal)
MESHVK_BINARY_OPERATOR(==, equal)
MESHVK_BINARY_OPERATOR(!=, not_equal)
MESHVK_BINARY_OPERATOR(&, bitwise_and)
MESHVK_BINARY_OPERATOR(|, bitwise_or)
MESHVK_BINARY_OPERATOR(^, bitwise_xor)
#undef MESHVK_BINARY_OPERATOR
inline Array operator-(const Array& x) { return negative(x); }
inline Array operator+(const Array& x) { return x; }
inline Array operator~(const Array& x) { return bitwise_not(x); }
// && and || are left out on purpose: they cannot short-circuit on arrays (Python's `and` on a
// jax.Array raises too); spell them & and | or logical_and / logical_or.

// Compound assignment rebinds the handle, as `x += 1` does in JAX: arrays are immutable, so
// after `y = x; x += 1;` y still holds the old values (and x may change dtype: x /= 2).
#define MESHVK_COMPOUND_OPERATOR(op, fn) \
  inline Array& operator op(Array& a, const Operand& b) { return a = fn(a, b); }
MESHVK_COMPOUND_OPERATOR(+=, add)
MESHVK_COMPOUND_OPERATOR(-=, subtract)
MESHVK_COMPOUND_OPERATOR(*=, multiply)
MESHVK_COMPOUND_OPERATOR(/=, divide)
MESHVK_COMPOUND_OPERATOR(%=, remainder)
MESHVK_COMPOUND_OPERATOR(&=, bitwise_and)
MESHVK_COMPOUND_OPERATOR(|=, bitwise_or)
MESHVK_COMPOUND_OPERATOR(^=, bitwise_xor)
#undef MESHVK_COMPOUND_OPERATOR

}  // namespace meshvk

namespace meshvk {

// Reductions over `axes` (all axes when empty; negative axes count from the end). Float sums
// are pairwise (tree) sums.
Array sum(const Array& x, std::vector<int> axes = {}, bool keepdims = false,
          SourceLocation loc = SourceLocation::current());
Array mean(const Array& x, std::vector<int> axes = {}, bool keepdims = false,
          SourceLocation loc = SourceLocation::current());
Array var(const Array& x, std::vector<int> axes = {}, bool keepdims = false);
Array std(const Array& x, std::vector<int> axes = {}, bool keepdims = false);
Array max(const Array& x, std::vector<int> axes = {}, bool keepdims = false,
          SourceLocation loc = SourceLocation::current());
Array min(const Array& x, std::vector<int> axes = {}, bool keepdims = false,
          SourceLocation loc = SourceLocation::current());
// One int axis, as jnp.sum(x, 0) / jnp.max(x, -1, keepdims=True) spell it. Templates, so that a
// braced list still means a list of axes: sum(x, {}) reduces all axes, sum(x, {0}) axis 0.
template <std::integral I>
Array sum(const Array& x, I axis, bool keepdims = false,
          SourceLocation loc = SourceLocation::current()) {
  return sum(x, std::vector<int>{detail::int_axis(axis, "sum", x.ndim())}, keepdims, loc);
}
template <std::integral I>
Array mean(const Array& x, I axis, bool keepdims = false,
          SourceLocation loc = SourceLocation::current()) {
  return mean(x, std::vector<int>{detail::int_axis(axis, "mean", x.ndim())}, keepdims, loc);
}
template <std::integral I>
Array var(const Array& x, I axis, bool keepdims = false) {
  return var(x, std::vector<int>{detail::int_axis(axis, "var", x.ndim())}, keepdims);
}
template <std::integral I>
Array std(const Array& x, I axis, bool keepdims = false) {
  return std(x, std::vector<int>{detail::int_axis(axis, "std", x.ndim())}, keepdims);
}
template <std::integral I>
Array max(const Array& x, I axis, bool keepdims = false,
          SourceLocation loc = SourceLocation::current()) {
  return max(x, std::vector<int>{detail::int_axis(axis, "max", x.ndim())}, keepdims, loc);
}
template <std::integral I>
Array min(const Array& x, I axis, bool keepdims = false,
          SourceLocation loc = SourceLocation::current()) {
  return min(x, std::vector<int>{detail::int_axis(axis, "min", x.ndim())}, keepdims, loc);
}
// Index of the first maximum / minimum along `axis` (int32); without an axis, of the flattened
// array (jnp.argmax's axis=None).
Array argmax(const Array& x, int axis, bool keepdims = false);
Array argmin(const Array& x, int axis, bool keepdims = false);
Array argmax(const Array& x);
Array argmin(const Array& x);

// Linear algebra: numpy's matmul (batched, broadcasting batch dimensions; 1-D operands are
// promoted as numpy does), dot, and einsum (below: any number of operands).
Array matmul(const Array& a, const Array& b, SourceLocation loc = SourceLocation::current());
Array dot(const Array& a, const Array& b, SourceLocation loc = SourceLocation::current());
Array einsum(const std::string& subscripts, const Array& a, const Array& b,
          SourceLocation loc = SourceLocation::current());
// With the result's layout given (JAX's out_sharding), as explicit mode needs when a contracting
// dimension is sharded the same way on both sides.
Array matmul(const Array& a, const Array& b, const std::optional<Sharding>& out_sharding,
          SourceLocation loc = SourceLocation::current());
Array einsum(const std::string& subscripts, const Array& a, const Array& b, const std::optional<Sharding>& out_sharding,
          SourceLocation loc = SourceLocation::current());
Array einsum(const std::string& subscripts, const Array& a, SourceLocation loc = SourceLocation::current());
// JAX's preferred_element_type (jnp.matmul(a, b, preferred_element_type=jnp.float32)): the
// result's dtype. With floating operands the products are summed in float32 and the result is
// rounded to it, so bfloat16 operands give a float32 result that was never rounded to bfloat16.
// Without it, bfloat16 @ bfloat16 is bfloat16 (summed in float32, then rounded, as XLA on CPU).
// An integer type for floating operands is an Error, as in JAX.
Array matmul(const Array& a, const Array& b, DType preferred_element_type,
          SourceLocation loc = SourceLocation::current());
Array dot(const Array& a, const Array& b, DType preferred_element_type,
          SourceLocation loc = SourceLocation::current());
Array einsum(const std::string& subscripts, const Array& a, const Array& b, DType preferred_element_type,
          SourceLocation loc = SourceLocation::current());

}  // namespace meshvk

namespace meshvk {

// Shapes and data movement (numpy / jax.numpy / jax.lax names). Negative axes count from the end.
Array reshape(const Array& x, Shape shape);
Array transpose(const Array& x, std::vector<int> axes = {});  // default: reverse the axes
Array broadcast_to(const Array& x, Shape shape);
// lax.slice: [start, stop) with a positive step per dimension (step defaults to 1).
Array slice(const Array& x, std::vector<int64_t> start, std::vector<int64_t> stop,
            std::vector<int64_t> step = {});
// lax.dynamic_slice / dynamic_update_slice: a negative start counts from the end, then starts are
// clamped so the slice fits, as in JAX (allow_negative_indices=True, its default).
Array dynamic_slice(const Array& x, std::vector<int64_t> start, Shape sizes);
Array dynamic_update_slice(const Array& x, const Array& update, std::vector<int64_t> start);
// lax.dynamic_slice with starts computed on the device (int32 scalars, e.g. from axis_index
// inside shard_map), clamped the same way.
Array dynamic_slice(const Array& x, const std::vector<Array>& start, Shape sizes);
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& start);
// One start index as lax takes them: a host integer or an int32 scalar Array, mixed freely.
class StartIndex {
 public:
  template <std::integral I>
  StartIndex(I i) : v_(static_cast<int64_t>(i)) {}
  StartIndex(const Array& a) : v_(a) {}
  const std::variant<int64_t, Array>& get() const& { return v_; }
  std::variant<int64_t, Array> get() const&& { return v_; }

 private:
  std::variant<int64_t, Array> v_;
};
// Braced starts: dynamic_slice(x, {6}, {4}), dynamic_slice(x, {i, 0}, {2, 8}) with i an int32
// scalar Array, dynamic_update_slice(x, u, {2}). A braced list converts to an initializer_list
// better than to any vector, so these never meet the overloads above as an ambiguity.
Array dynamic_slice(const Array& x, std::initializer_list<StartIndex> start, Shape sizes);
Array dynamic_update_slice(const Array& x, const Array& update,
                           std::initializer_list<StartIndex> start);
// numpy.stack: the arrays (all of one shape) along a new axis.
Array stack(const std::vector<Array>& arrays, int axis = 0);
Array concatenate(const std::vector<Array>& arrays, int axis = 0);
// numpy.pad with a constant: (before, after) per dimension.
Array pad(const Array& x, std::vector<std::pair<int64_t, int64_t>> widths, float value = 0.0f);
Array roll(const Array& x, int64_t shift, int axis);
// jnp.take along `axis` with int32 indices of any shape. Out-of-bounds indices follow `mode`,
// as jnp.take's mode= does:
//   TakeMode::fill (JAX's default): a negative index counts from the end (-1 is the last);
//     one still outside [-n, n) gives fill_value, by default NaN for float32, INT32_MIN
//     (-2147483648) for int32, UINT32_MAX for uint32 and true for bool (JAX's defaults);
//   TakeMode::clip: clamped into [0, n) (negative indices take element 0, as numpy's clip);
//   TakeMode::wrap: taken modulo n.
//   take(x, idx, 1), take(x, idx, 0, TakeMode::clip), take(x, idx, 0, TakeMode::fill, 0.f)
// Gradients flow to the elements taken; filled elements get none.
enum class TakeMode { fill, clip, wrap };
Array take(const Array& x, const Array& indices, int axis = 0, TakeMode mode = TakeMode::fill,
           std::optional<Operand> fill_value = std::nullopt,
           SourceLocation loc = SourceLocation::current());
// jax.nn.one_hot: x (int32) compared against 0..num_classes-1 along a new last axis.
Array one_hot(const Array& x, int num_classes, DType dtype = DType::float32,
          SourceLocation loc = SourceLocation::current());
// jnp.argsort (stable): int32 indices that sort `x` along `axis`; NaN sorts last.
Array argsort(const Array& x, int axis = -1);

}  // namespace meshvk

namespace meshvk {

// numpy.einsum / jnp.einsum: one letter per dimension, '...' for any number of dimensions
// (broadcast as numpy does), the output after '->' or, without it, numpy's implicit output ('...'
// then the labels that appear exactly once, in alphabetical order: "ij,jk" is "ij,jk->ik"). A
// label repeated within an operand takes its diagonal ("ii->i", the trace "ii->"). Three or more
// operands are contracted two at a time, the pair with the smallest result first. Bad subscripts
// throw Error naming what is wrong. out_sharding lays out the result, as JAX's.
Array einsum(const std::string& subscripts, const std::vector<Array>& operands,
             const std::optional<Sharding>& out_sharding = std::nullopt,
             SourceLocation loc = SourceLocation::current());
Array einsum(const std::string& subscripts, const std::vector<Array>& operands, DType preferred_element_type,
             const std::optional<Sharding>& out_sharding = std::nullopt,
             SourceLocation loc = SourceLocation::current());
template <class... A>
  requires(sizeof...(A) >= 1 && (std::same_as<A, Array> && ...))
Array einsum(const std::string& subscripts, const Array& a, const Array& b, const A&... rest) {
  return einsum(subscripts, std::vector<Array>{a, b, rest...});
}

}  // namespace meshvk

namespace meshvk {

// More of jax.numpy, composed of the ops above (so each runs under jit, grad and shard_map with
// those ops' sharding rules).
// jnp.clip: x limited to [lo, hi]; either bound may be left out (std::nullopt).
Array clip(const Array& x, const std::optional<Operand>& lo, const std::optional<Operand>& hi);
// jnp.tril / jnp.triu over the last two axes: the elements on and below (tril) or on and above
// (triu) diagonal k (0: the main one, positive: above it), the others 0.
Array tril(const Array& x, int k = 0);
Array triu(const Array& x, int k = 0);
// jnp.eye: an n x m (m = n when negative) matrix with ones on diagonal k.
Array eye(int64_t n, int64_t m = -1, int k = 0, DType dtype = DType::float32);
// jnp.expand_dims: a new axis of size 1 at `axis` of the result (negative counts from its end).
Array expand_dims(const Array& x, int axis);
// jnp.squeeze: the axes of size 1 left out (all of them when `axes` is empty); an axis that is
// not of size 1 is an Error.
Array squeeze(const Array& x, std::vector<int> axes = {});
// jnp.isnan / isinf / isfinite: bool arrays (integers and bools are never NaN or infinite).
Array isnan(const Array& x);
Array isinf(const Array& x);
Array isfinite(const Array& x);
// jnp.any / jnp.all over `axes` (all when empty): whether any / every element is non-zero.
Array any(const Array& x, std::vector<int> axes = {}, bool keepdims = false);
Array all(const Array& x, std::vector<int> axes = {}, bool keepdims = false);
// jnp.full_like: x's shape, dtype and sharding, every element `value` (converted to x's dtype).
Array full_like(const Array& x, double value);
// jnp.cumsum along `axis` (bools count as int32): log2(n) steps of shifted adds, so float sums
// are in a tree order (not left to right) and may differ from numpy's in the last bits.
Array cumsum(const Array& x, int axis);
// jnp.cumprod along `axis` (bools count as int32): log2(n) steps of shifted exact multiplications
// (ones shifted in; no exp/log), so zeros and signs are exact as numpy's and gradients are right
// where x has zeros; float products are in a tree order and may differ from numpy's left-to-right
// ones in the last bits; int32 wraps as numpy's.
Array cumprod(const Array& x, int axis);

// jnp.prod over `axes` (all when empty; bools count as int32): log2(n) steps of pairwise
// multiplications of halves, so every product is an exact float32 multiplication (no exp/log) and
// zeros and signs come out exactly; float products are in a tree order, not numpy's left to right,
// and may differ from it in the last bits (int32 wraps, exactly as numpy's). Gradients flow
// through the multiplications, so they are right where x has zeros too.
Array prod(const Array& x, std::vector<int> axes = {}, bool keepdims = false);
template <std::integral I>
Array prod(const Array& x, I axis, bool keepdims = false) {
  return prod(x, std::vector<int>{detail::int_axis(axis, "prod", x.ndim())}, keepdims);
}

// jnp.take_along_axis: out[..., j, ...] = x[..., indices[..., j, ...], ...] along `axis`.
// indices (int32) has as many dimensions as x; its other dimensions broadcast against x's as
// numpy's do. Out-of-range indices follow JAX's default mode (fill): a negative index in [-n, 0)
// counts from the end, one still outside [-n, n) gives NaN (int32: INT32_MIN, bool: true), as
// jnp.take's fill. Composed as one take from the flattened array, which gathers x whole on each
// device; the result is then laid out as x along the other dimensions (x split by rows: the
// result split by rows). Gradients flow to the elements taken.
Array take_along_axis(const Array& x, const Array& indices, int axis);
// jnp.sort along `axis` (stable; NaN last, as numpy): take_along_axis(x, argsort(x, axis), axis),
// so it differentiates (the cotangent goes back to each element's original place).
Array sort(const Array& x, int axis = -1);

// JAX's x[ids] for an int32 index array on axis 0 (also spelled x[ids] on Array): rows of x in the
// shape ids.shape + x.shape[1:]. As JAX's indexing (not jnp.take's fill): a negative index counts
// from the end, and one still out of range is clamped into [0, n). Gradients scatter-add back.
Array gather(const Array& x, const Array& ids, SourceLocation loc = SourceLocation::current());
// JAX's x.at[ids].set(v) / x.at[ids].add(v) on axis 0: a new array (x is unchanged), with v (an
// Array or a scalar) broadcast to ids.shape + x.shape[1:] and cast to x's dtype. A negative index
// in [-n, 0) counts from the end; one still out of range is dropped (JAX's default for updates).
//   at_set: for an index given more than once, the last occurrence (in ids' row-major order)
//     wins (JAX leaves the choice unspecified; XLA on CPU applies them in order too). Cost: an
//     ids.size() x n int32 mask, a max over it and one gather of rows. Gradients: the elements
//     set get none from x; v's kept elements get theirs, overwritten ones get zero.
//   at_add: duplicates accumulate. Composed as a one-hot product, einsum("mn,mr->nr",
//     one_hot(ids, n), v): ids.size() * n * (3 x the row size) multiply-adds and an ids.size() x
//     n one-hot matrix (the extra columns count +inf / -inf / NaN updates, so a non-finite update
//     reaches only its own row, as a real scatter-add does: +inf and -inf together give NaN).
//     Float sums of duplicates are in the product's order. Gradients: x's cotangent passes
//     through; v's elements each get their row's cotangent (dropped ones zero). Not for bools.
Array at_set(const Array& x, const Array& ids, const Operand& v);
Array at_add(const Array& x, const Array& ids, const Operand& v);

namespace lax {
// jax.lax.top_k: the k largest elements along the last axis, largest first, and their int32
// indices. Equal elements come lower index first, as JAX documents; NaN counts as larger than
// every number (the mirror of sort's NaN last), so NaNs come first. k in [0, n]. values differentiate (the
// cotangent goes back to the elements picked).
std::pair<Array, Array> top_k(const Array& x, int k);
}  // namespace lax

}  // namespace meshvk
namespace meshvk {
// Everyday jax.numpy / jax.lax names composed of the ops above (so each runs under jit, grad and
// shard_map and lays its result out as the ops it is made of do).

// jnp.flip: the elements along `axes` (all when empty) in reverse order; the gradient is the
// cotangent flipped back.
Array flip(const Array& x, std::vector<int> axes = {});
template <std::integral I>
Array flip(const Array& x, I axis) {
  return flip(x, std::vector<int>{detail::int_axis(axis, "flip", x.ndim())});
}
// jnp.tile: x repeated reps[i] times along each dimension (reps shorter than x.ndim() count for
// the last dimensions; longer, x gains leading dimensions of size 1), as numpy.
Array tile(const Array& x, std::vector<int64_t> reps);
template <std::integral I>
Array tile(const Array& x, I reps) {
  return tile(x, std::vector<int64_t>{static_cast<int64_t>(reps)});
}
// jnp.repeat: each element `repeats` times along `axis` (of the flattened array without one);
// per-element counts (one per element along the axis) as a vector of host integers.
Array repeat(const Array& x, int64_t repeats, std::optional<int> axis = std::nullopt);
Array repeat(const Array& x, std::vector<int64_t> repeats, std::optional<int> axis = std::nullopt);
// jnp.swapaxes and jnp.moveaxis (numpy's rules): transposes.
Array swapaxes(const Array& x, int axis1, int axis2);
Array moveaxis(const Array& x, std::vector<int> source, std::vector<int> destination);
Array moveaxis(const Array& x, int source, int destination);
// jnp.split(x, sections, axis): equal pieces (sections must divide the axis; array_split allows
// the first n % sections pieces one element longer), and jnp.split(x, indices, axis) at the
// given indices (as Python slices: negative ones count from the end, past the end clip). The
// axis is required with a count: split(key, num) is jax.random.split (random.hpp).
std::vector<Array> split(const Array& x, int64_t sections, int axis);
std::vector<Array> split(const Array& x, std::vector<int64_t> indices, int axis = 0);
// A braced list is indices, as in numpy (split(x, {2}, 0) splits at 2; split(x, 2, 0) in halves).
inline std::vector<Array> split(const Array& x, std::initializer_list<int64_t> indices, int axis = 0) {
  return split(x, std::vector<int64_t>(indices), axis);
}
std::vector<Array> array_split(const Array& x, int64_t sections, int axis = 0);
// jnp.mod: remainder (the divisor's sign, as numpy's %).
inline Array mod(const Operand& a, const Operand& b) { return remainder(a, b); }
// jnp.log10: log(x) / log(10), as JAX computes it (integers give float32, int64 float64).
Array log10(const Array& x);
// jnp.logaddexp: log(exp(a) + exp(b)) without overflow (max + log1p(exp(-|a - b|))); equal
// infinities give that infinity. Gradients are JAX's (softmax weights of a and b).
Array logaddexp(const Operand& a, const Operand& b);
// jnp.isclose / jnp.allclose (JAX's rule): |a - b| <= atol + rtol |b| for finite values; an
// infinity is close only to itself; NaN to nothing unless equal_nan. Integers compare as floats.
// allclose is a bool scalar Array.
Array isclose(const Operand& a, const Operand& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
Array allclose(const Operand& a, const Operand& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// jnp.nan_to_num: NaN to `nan`, +inf to `posinf` and -inf to `neginf` (by default the dtype's
// largest and lowest finite values). Integers and bools come back unchanged.
Array nan_to_num(const Array& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                 std::optional<double> neginf = std::nullopt);
// jnp.linspace: `num` evenly spaced values from start to stop (stop included when `endpoint`),
// computed as numpy computes them in double and rounded once to `dtype` (integer dtypes take the
// floor, as numpy 2). An uncommitted array on device 0.
Array linspace(double start, double stop, int64_t num = 50, bool endpoint = true, DType dtype = DType::float32);
// jnp.outer: every a[i] * b[j] of the flattened operands, shape (a.size(), b.size()).
Array outer(const Array& a, const Array& b);
// jnp.searchsorted: for each element of v, the index in the sorted 1-D array `a` where it would
// be inserted to keep the order ("left": before equal elements, "right": after them); NaN sorts
// last, as in sort. int32 indices of v's shape. Compares every pair (JAX's method="compare_all"):
// v.size() x a.size() work.
Array searchsorted(const Array& a, const Array& v, const std::string& side = "left");
// jnp.bincount: counts (or summed weights) of each value of the 1-D integer array x in
// [0, length); negative values count as 0 and values from length on are dropped, as JAX's. Without
// `length` it is max(minlength, max(x) + 1), read from the device (so not under jit, as in JAX).
Array bincount(const Array& x, std::optional<Array> weights = std::nullopt, int64_t minlength = 0,
               std::optional<int64_t> length = std::nullopt);
// jnp.diagonal / jnp.trace: diagonal `offset` (positive: above the main one) of the matrices
// spanned by axis1 and axis2, as a new last axis (diagonal) or summed (trace); jnp.diag of a
// 1-D array: the square matrix with it on diagonal k, of a 2-D one: its diagonal k.
Array diagonal(const Array& x, int offset = 0, int axis1 = 0, int axis2 = 1);
Array trace(const Array& x, int offset = 0, int axis1 = 0, int axis2 = 1);
Array diag(const Array& x, int k = 0);
// jnp.meshgrid of 1-D arrays: indexing "xy" (the default: the first two outputs' axes swapped,
// as numpy) or "ij".
std::vector<Array> meshgrid(const std::vector<Array>& xs, const std::string& indexing = "xy");
namespace lax {
// jax.lax.dot_general: contracts lhs_contracting with rhs_contracting (pairwise, equal sizes)
// over the batch dimensions lhs_batch / rhs_batch; the result is the batch dimensions, then lhs's
// free dimensions, then rhs's, in order (as XLA's DotGeneral). Composed as an einsum.
struct DotDimensionNumbers {
  std::vector<int> lhs_contracting, rhs_contracting;
  std::vector<int> lhs_batch = {}, rhs_batch = {};
};
Array dot_general(const Array& lhs, const Array& rhs, const DotDimensionNumbers& dimension_numbers,
                  std::optional<DType> preferred_element_type = std::nullopt);
}  // namespace lax
namespace linalg {
// jnp.linalg.norm. ord: none (the 2-norm of the flattened array, or over `axes`; Frobenius for two
// axes), or for one axis (a vector) inf, -inf, 0 (the count of non-zeros) or any p
// (sum |x|^p)^(1/p); for two axes (a matrix) 1, -1 (largest / smallest column sum of |x|), inf,
// -inf (row sums). Matrix 2-norms and the nuclear norm need a singular value decomposition, which
// meshvk lacks: an Error. Without axes x must have one or two dimensions when ord is given.
Array norm(const Array& x, std::optional<double> ord = std::nullopt, std::vector<int> axes = {},
           bool keepdims = false);
}  // namespace linalg
}  // namespace meshvk

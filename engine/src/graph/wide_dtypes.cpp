// int8, uint8, int64 and float64 in the graph layer: which ops refuse them, and how the ops whose
// kernels move 32-bit words (reductions, collectives that sum, argsort) handle the 64-bit dtypes
// instead.
#include <algorithm>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <string_view>

#include "graph/array_impl.hpp"
#include "graph/dtype_support.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::detail {

void check_8bit_scalars(const char* op, const std::vector<Operand>& operands, DType dtype) {
  // bitwise_not's all-ones -1 is the bits, not a value.
  if (std::string_view(op) == "bitwise_not") return;
  const bool is_signed = dtype == DType::int8;
  for (const Operand& o : operands)
    if (const auto* i = std::get_if<int32_t>(&o.get());
        i && (*i < (is_signed ? -128 : 0) || *i > (is_signed ? 127 : 255)))
      throw Error(
          std::string(op) + ": scalar " + std::to_string(*i) + " does not fit " +
          std::string(dtype_name(dtype)) + " (" + (is_signed ? "-128 to 127" : "0 to 255") +
          "), the dtype of the array it meets (JAX raises OverflowError too); astype the array to "
          "DType::int32 first, or give a value in range");
}

void check_float64_op(const char* op, kernels::EwOp ew) {
  using kernels::EwOp;
  switch (ew) {
    case EwOp::input:
    case EwOp::constant:
    case EwOp::neg:
    case EwOp::abs:
    case EwOp::sign:
    case EwOp::sqrt:
    case EwOp::rsqrt:
    case EwOp::relu:
    case EwOp::square:
    case EwOp::floor:
    case EwOp::ceil:
    case EwOp::trunc:
    case EwOp::round_even:
    case EwOp::reciprocal:
    case EwOp::logical_not:
    case EwOp::cast:
    case EwOp::add:
    case EwOp::sub:
    case EwOp::mul:
    case EwOp::div:
    case EwOp::floordiv:
    case EwOp::mod:
    case EwOp::maximum:
    case EwOp::minimum:
    case EwOp::eq:
    case EwOp::ne:
    case EwOp::lt:
    case EwOp::le:
    case EwOp::gt:
    case EwOp::ge:
    case EwOp::logical_and:
    case EwOp::logical_or:
    case EwOp::where:
    // The math library's float64-dtype functions (kernels/mathlib/f64/).
    case EwOp::exp:
    case EwOp::exp2:
    case EwOp::expm1:
    case EwOp::log:
    case EwOp::log1p:
    case EwOp::log2:
    case EwOp::tanh:
    case EwOp::sigmoid:
    case EwOp::sinh:
    case EwOp::cosh:
    case EwOp::pow:
    case EwOp::sin:
    case EwOp::cos:
    case EwOp::tan:
    case EwOp::erf:
    case EwOp::erfinv:
    case EwOp::asin:
    case EwOp::acos:
    case EwOp::atan:
    case EwOp::atan2:
    case EwOp::asinh:
    case EwOp::acosh:
    case EwOp::atanh:
      return;
    default:
      throw Error(
          std::string(op) +
          ": float64 has no kernel for this op yet; float64 supports + - * /, // and %, "
          "comparisons, abs, sign, sqrt, rsqrt, square, floor, ceil, trunc, round, reciprocal, maximum, minimum, relu, where, "
          "astype, exp, "
          "exp2, expm1, log, log1p, log2, tanh, sigmoid, sinh, cosh, power, sin, cos, tan, "
          "arcsin, arccos, arctan, arctan2, asinh, acosh, atanh, erf and erfinv; use astype(x, "
          "DType::float32) first");
  }
}

namespace {

// x's value with another dtype over the same buffers (a bitcast, as lax.bitcast_convert_type),
// its shape (the value's own, global or per-device as x has it) widened by a trailing (2,) or
// narrowed by it: the sharding's spec names the leading dimensions only, so that dimension stays
// whole on every device.
Array reinterpreted(const Array& x, bool widen, DType dtype) {
  auto& impl = *x.impl();
  std::lock_guard lock(impl.runtime->mutex());
  exec::ShardedValue v = shareable_value(x);
  if (widen)
    v.shape.push_back(2);
  else
    v.shape.pop_back();
  v.dtype = dtype;
  return make_array(impl.runtime, std::move(v), impl.committed, impl.varying);
}

}  // namespace

Array as_words(const Array& x) {
  if (!x.valid() || !is_64bit(x.dtype())) throw Error("internal: as_words of a non-64-bit array");
  return reinterpreted(x, true, DType::int32);
}

Array from_words(const Array& words, DType dtype) {
  if (!words.valid() || words.dtype() != DType::int32 || words.ndim() == 0 ||
      words.shape().back() != 2)
    throw Error("internal: from_words of an array that is not int32[..., 2]");
  // A trailing dimension split over the mesh would hold half an element per device.
  if (const NamedSharding* n = words.sharding().named(); n && n->num_shards(words.ndim() - 1) > 1)
    return from_words(device_put(words, NamedSharding(n->mesh(), PartitionSpec())), dtype);
  return reinterpreted(words, false, dtype);
}


// Elements [from, to) along the last axis of a, whose other axes are `kept`.
static Array last_axis_part(const Array& a, const Shape& kept, int64_t from, int64_t to) {
  std::vector<int64_t> start(kept.size() + 1, 0), stop(kept.begin(), kept.end());
  start[kept.size()] = from;
  stop.push_back(to);
  return slice(a, start, stop);
}

Array reduce64(const char* op, kernels::ReduceOp kind, const Array& x,
               const std::vector<bool>& reduced, bool keepdims) {
  std::vector<int> perm;
  Shape kept, with_ones;
  int64_t count = 1;
  for (size_t d = 0; d < x.ndim(); ++d)
    if (!reduced[d]) {
      perm.push_back(static_cast<int>(d));
      kept.push_back(x.shape()[d]);
      with_ones.push_back(x.shape()[d]);
    } else {
      with_ones.push_back(1);
    }
  for (size_t d = 0; d < x.ndim(); ++d)
    if (reduced[d]) {
      perm.push_back(static_cast<int>(d));
      count *= x.shape()[d];
    }
  if (count == 0 && kind != kernels::ReduceOp::sum)
    throw Error(std::string("zero-size array to reduction operation ") + op +
                " which has no identity: reduce over non-empty dimensions");
  Shape rows = kept;
  rows.push_back(count);
  Array y = reshape(transpose(x, perm), rows);
  if (count == 0) y = zeros(kept, x.dtype());
  const auto combine = [kind](const Array& a, const Array& b) {
    return kind == kernels::ReduceOp::sum   ? add(a, b)
           : kind == kernels::ReduceOp::max ? maximum(a, b)
                                            : minimum(a, b);
  };
  const size_t last = kept.size();
  const auto part = [&](const Array& a, int64_t from, int64_t to) { return last_axis_part(a, kept, from, to); };
  for (int64_t n = count; n > 1;) {
    const int64_t half = n / 2;
    Array z = combine(part(y, 0, half), part(y, half, 2 * half));
    if (n % 2 == 1) z = concatenate({z, part(y, 2 * half, n)}, static_cast<int>(last));
    y = z;
    n = half + n % 2;
  }
  return reshape(y, keepdims ? with_ones : kept);
}

Array arg_reduce64(kernels::ReduceOp kind, const Array& x, const std::vector<bool>& reduced,
                   bool keepdims) {
  const bool is_max = kind == kernels::ReduceOp::argmax;
  size_t axis = 0;
  while (axis < reduced.size() && !reduced[axis]) ++axis;
  const int64_t count = x.shape()[axis];
  if (count == 0)
    throw Error(std::string(is_max ? "argmax" : "argmin") +
                ": an empty axis has no position to give; reduce over a non-empty one");
  std::vector<int> perm;
  Shape kept, with_one;
  for (size_t d = 0; d < x.ndim(); ++d) {
    with_one.push_back(d == axis ? 1 : x.shape()[d]);
    if (d == axis) continue;
    perm.push_back(static_cast<int>(d));
    kept.push_back(x.shape()[d]);
  }
  perm.push_back(static_cast<int>(axis));
  Array y = transpose(x, perm);
  Array at = broadcast_to(arange(static_cast<int32_t>(count)), y.shape());
  const size_t last = kept.size();
  const auto part = [&](const Array& a, int64_t from, int64_t to) { return last_axis_part(a, kept, from, to); };
  // Pairs of candidates, halves at a time: the larger (smaller) wins, ties and NaN go to the
  // lower index (numpy: the first occurrence, the first NaN).
  for (int64_t n = count; n > 1;) {
    const int64_t half = n / 2;
    const Array a = part(y, 0, half), b = part(y, half, 2 * half);
    const Array ia = part(at, 0, half), ib = part(at, half, 2 * half);
    const Array earlier = ib < ia;
    Array pick = logical_or(is_max ? b > a : b < a, logical_and(equal(a, b), earlier));
    if (x.dtype() == DType::float64) {
      const Array nan_a = not_equal(a, a), nan_b = not_equal(b, b);
      pick = logical_or(logical_and(nan_b, logical_or(logical_not(nan_a), earlier)),
                        logical_and(logical_not(logical_or(nan_a, nan_b)), pick));
    }
    Array z = where(pick, b, a), iz = where(pick, ib, ia);
    if (n % 2 == 1) {
      z = concatenate({z, part(y, 2 * half, n)}, static_cast<int>(last));
      iz = concatenate({iz, part(at, 2 * half, n)}, static_cast<int>(last));
    }
    y = z;
    at = iz;
    n = half + n % 2;
  }
  return reshape(at, keepdims ? with_one : kept);
}

Array argsort64(const Array& x) {
  const int last = static_cast<int>(x.ndim()) - 1;
  if (shape_size(x.shape()) == 0) return argsort(zeros(x.shape(), DType::int32), last);
  // The two words of each element, (low, high), as int32 arrays of x's shape.
  const Array words = as_words(x);
  const auto word = [&](int64_t k) {
    std::vector<int64_t> start(words.ndim(), 0), stop(words.shape().begin(), words.shape().end());
    start.back() = k;
    stop.back() = k + 1;
    return reshape(slice(words, start, stop), x.shape());
  };
  Array low = word(0), high = word(1);
  if (x.dtype() == DType::float64) {
    // JAX's _float_to_int_for_sort, as the float32 kernel orders: the bits of numbers >= 0 as
    // they are, those of negative numbers with the 63 magnitude bits flipped (so that they
    // order as signed int64), -0.0 as 0.0 (equal: kept in order), every NaN after +inf, equal
    // to one another (numpy's NaN last).
    const Array nan = not_equal(x, x), zero = equal(x, 0.0f), neg = less(high, 0);
    high = where(nan, std::numeric_limits<int32_t>::max(),
                 where(zero, 0, where(neg, bitwise_xor(high, 0x7fffffff), high)));
    low = where(nan, -1, where(zero, 0, where(neg, bitwise_xor(low, -1), low)));
  }
  // LSD radix on two 32-bit digits with the stable 32-bit argsort: the low words as unsigned
  // (their sign bit flipped: the kernel compares int32), then the high words (signed) in that
  // order; equal keys keep their first order through both.
  const Array by_low = argsort(bitwise_xor(low, std::numeric_limits<int32_t>::min()), last);
  const Array by_high = argsort(take_along_axis(high, by_low, last), last);
  return take_along_axis(by_low, by_high, last);
}

Array matmul64(const Array& a, const Array& b) {
  // a [..., m, k, 1] * b [..., 1, k, n], summed over k: O(m k n) elements at once.
  const int64_t m = a.shape()[a.ndim() - 2], k = a.shape().back(), n = b.shape().back();
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < std::max(a.ndim(), b.ndim()); ++d)
    batch *= (a.ndim() > b.ndim() ? a : b).shape()[d];
  constexpr int64_t kMaxProducts = int64_t{1} << 26;
  if (batch * m * k * n > kMaxProducts)
    throw Error(
        "matmul: " + type_of(a) + " @ " + type_of(b) + " needs " +
        std::to_string(batch * m * k * n) + " products at once, past the " +
        std::to_string(kMaxProducts) +
        " the 64-bit matmul (a broadcast product and a sum: no 64-bit matmul kernel yet) takes; "
        "split the operands, or astype them to DType::float32 / DType::int32");
  Shape sa = a.shape(), sb = b.shape();
  sa.push_back(1);
  sb.insert(sb.end() - 2, 1);
  const Array products = multiply(reshape(a, sa), reshape(b, sb));
  std::vector<bool> reduced(products.ndim(), false);
  reduced[products.ndim() - 2] = true;
  return reduce64("matmul", kernels::ReduceOp::sum, products, reduced, false);
}

}  // namespace meshvk::detail

// int8, uint8, int64 and float64 in the graph layer: which ops refuse them, and how the ops whose
// kernels move 32-bit words (reductions, collectives that sum) handle the 64-bit dtypes instead.
#include <mutex>
#include <numeric>
#include <string>

#include "graph/array_impl.hpp"
#include "graph/dtype_support.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::detail {

void reject_64bit(const char* op, const Array& x, const std::string& instead) {
  if (!x.valid() || !is_64bit(x.dtype())) return;
  throw Error(std::string(op) + ": " + type_of(x) + " is not supported yet (its kernel moves 32-bit words); " +
              (instead.empty() ? std::string("astype(x, ") + (is_floating(x.dtype()) ? "DType::float32" : "DType::int32") +
                                     ") first if the values fit"
                               : instead));
}

void check_float64_op(const char* op, kernels::EwOp ew) {
  using kernels::EwOp;
  switch (ew) {
    case EwOp::input: case EwOp::constant: case EwOp::neg: case EwOp::abs: case EwOp::sign:
    case EwOp::sqrt: case EwOp::rsqrt: case EwOp::relu: case EwOp::square: case EwOp::reciprocal:
    case EwOp::logical_not: case EwOp::cast: case EwOp::add: case EwOp::sub: case EwOp::mul:
    case EwOp::div: case EwOp::maximum: case EwOp::minimum: case EwOp::eq: case EwOp::ne:
    case EwOp::lt: case EwOp::le: case EwOp::gt: case EwOp::ge: case EwOp::logical_and:
    case EwOp::logical_or: case EwOp::where:
      return;
    default:
      throw Error(std::string(op) +
                  ": float64 has no kernel for this op yet (the math library is float32 only); float64 "
                  "supports + - * /, comparisons, abs, sign, sqrt, rsqrt, square, reciprocal, "
                  "maximum, minimum, relu, where and astype; use astype(x, DType::float32) first");
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
  if (!words.valid() || words.dtype() != DType::int32 || words.ndim() == 0 || words.shape().back() != 2)
    throw Error("internal: from_words of an array that is not int32[..., 2]");
  // A trailing dimension split over the mesh would hold half an element per device.
  if (const NamedSharding* n = words.sharding().named(); n && n->num_shards(words.ndim() - 1) > 1)
    return from_words(device_put(words, NamedSharding(n->mesh(), PartitionSpec())), dtype);
  return reinterpreted(words, false, dtype);
}

Array reduce64(const char* op, kernels::ReduceOp kind, const Array& x, const std::vector<bool>& reduced,
               bool keepdims) {
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
    return kind == kernels::ReduceOp::sum ? add(a, b) : kind == kernels::ReduceOp::max ? maximum(a, b) : minimum(a, b);
  };
  const size_t last = kept.size();
  const auto part = [&](const Array& a, int64_t from, int64_t to) {
    std::vector<int64_t> start(last + 1, 0), stop(kept.begin(), kept.end());
    start[last] = from;
    stop.push_back(to);
    return slice(a, start, stop);
  };
  for (int64_t n = count; n > 1;) {
    const int64_t half = n / 2;
    Array z = combine(part(y, 0, half), part(y, half, 2 * half));
    if (n % 2 == 1) z = concatenate({z, part(y, 2 * half, n)}, static_cast<int>(last));
    y = z;
    n = half + n % 2;
  }
  return reshape(y, keepdims ? with_ones : kept);
}

}  // namespace meshvk::detail

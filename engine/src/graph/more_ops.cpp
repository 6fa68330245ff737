// More of jax.numpy, jax.lax and jax.random as compositions of meshvk's ops (issue 29, item 1):
// take_along_axis, sort, prod, top_k, gather / x[ids], at_set / at_add, bernoulli, categorical,
// truncated_normal and nn::dropout. Each runs under jit, grad and shard_map, and lays its result
// out as the ops it is made of do.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "meshvk/autodiff.hpp"
#include "graph/call_site.hpp"
#include "graph/shape_op_support.hpp"
#include "meshvk/error.hpp"
#include "meshvk/nn.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/random.hpp"

namespace meshvk {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

void require_valid(const char* op, std::initializer_list<const Array*> arrays) {
  for (const Array* a : arrays)
    if (!a->valid()) throw Error(std::string(op) + ": an operand is an empty meshvk::Array");
}


void require_int32_indices(const char* op, const char* what, const Array& indices) {
  if (indices.dtype() != DType::int32)
    throw Error(std::string(op) + ": " + what + " must be int32, got " +
                std::string(dtype_name(indices.dtype())) +
                (indices.dtype() == DType::bool_ ? " (boolean masks select a data-dependent number of "
                                                   "elements; use where)"
                                                 : ""));
}

void reject_uint32(const char* op, const Array& x) {
  if (x.dtype() == DType::uint32)
    throw Error(std::string(op) + ": uint32 arrays (random keys and bits) do not compute here; "
                "astype(int32) or astype(float32) first");
}

// The permutation that swaps `axis` and the last axis (its own inverse).
std::vector<int> swap_to_last(int axis, int ndim) {
  std::vector<int> perm(static_cast<size_t>(ndim));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(axis)], perm.back());
  return perm;
}

// Reverses the last axis (a gather with descending indices).
Array reverse_last(const Array& x) {
  const int64_t n = x.shape().back();
  return take(x, arange(static_cast<int32_t>(n - 1), -1, -1), -1);
}

// The product along `axis`, kept as a dimension of size 1: halves multiplied pairwise.
Array prod_along(Array r, int axis) {
  int64_t n = r.shape()[static_cast<size_t>(axis)];
  if (n == 0) {
    Shape s = r.shape();
    s[static_cast<size_t>(axis)] = 1;
    return ones(s, r.dtype());
  }
  const size_t nd = r.ndim();
  const auto part = [&](const Array& a, int64_t begin, int64_t end) {
    std::vector<int64_t> start(nd, 0), stop(a.shape().begin(), a.shape().end());
    start[static_cast<size_t>(axis)] = begin;
    stop[static_cast<size_t>(axis)] = end;
    return slice(a, start, stop);
  };
  while (n > 1) {
    const int64_t h = n / 2;
    Array p = part(r, 0, h) * part(r, h, 2 * h);
    if (n % 2) p = concatenate({p, part(r, 2 * h, n)}, axis);
    r = p;
    n = h + n % 2;
  }
  return r;
}

Array operand_array(const Operand& v, DType dtype) {
  const auto& o = v.get();
  Array a = std::holds_alternative<Array>(o)   ? std::get<Array>(o)
            : std::holds_alternative<float>(o) ? scalar(std::get<float>(o))
                                               : scalar(std::get<int32_t>(o));
  if (!a.valid()) throw Error("at_set / at_add: v is an empty meshvk::Array");
  return a.dtype() == dtype ? a : astype(a, dtype);
}

// What at_set and at_add share: x as (n, R), v as (M, R) and the flat indices with negatives
// counted from the end (the rest still out of range, to be dropped).
struct Scatter {
  int64_t n = 0, rows = 0, m = 0;
  Array x2, v2, idx;
};

Scatter scatter_parts(const char* op, const Array& x, const Array& ids, const Operand& v) {
  require_valid(op, {&x, &ids});
  if (x.ndim() == 0)
    throw Error(std::string(op) + ": x is 0-d (" + type_of(x) +
                "); give an array with an axis 0 to update");
  require_int32_indices(op, "ids", ids);
  reject_uint32(op, x);
  Scatter s;
  s.n = x.shape()[0];
  s.rows = 1;
  for (size_t d = 1; d < x.ndim(); ++d) s.rows *= x.shape()[d];
  s.m = ids.size();
  if (s.n > kInt32Max) throw Error(std::string(op) + ": axis 0 of " + type_of(x) + " is past int32 indices");
  Shape target = ids.shape();
  target.insert(target.end(), x.shape().begin() + 1, x.shape().end());
  const Array va = operand_array(v, x.dtype());
  Shape b;
  try {
    b = broadcast_shapes(va.shape(), target, op);
  } catch (const Error&) {
    b.clear();
  }
  if (b != target)
    throw Error(std::string(op) + ": v of shape " + shape_to_string(va.shape()) +
                " does not broadcast to ids.shape + x.shape[1:] = " + shape_to_string(target));
  s.x2 = reshape(x, Shape{s.n, s.rows});
  s.v2 = reshape(va.shape() == target ? va : broadcast_to(va, target), Shape{s.m, s.rows});
  const Array flat = reshape(ids, Shape{s.m});
  s.idx = where(flat < 0, flat + static_cast<int32_t>(s.n), flat);
  return s;
}

}  // namespace

Array prod(const Array& x, std::vector<int> axes, bool keepdims) {
  require_valid("prod", {&x});
  if (x.dtype() == DType::uint32)  // in int64, wrapped back modulo 2^32 (the low bits are the same)
    return astype(prod(astype(x, DType::int64), std::move(axes), keepdims), DType::uint32);
  const int nd = static_cast<int>(x.ndim());
  std::vector<bool> reduce(static_cast<size_t>(nd), axes.empty());
  for (const int a : axes) {
    const int ax = detail::normalize_axis(a, static_cast<size_t>(nd), "prod");
    if (reduce[static_cast<size_t>(ax)])
      throw Error("prod: axis " + std::to_string(a) + " is given twice");
    reduce[static_cast<size_t>(ax)] = true;
  }
  if (x.dtype() == DType::bfloat16 || x.dtype() == DType::float16)  // multiplied in float32, rounded once (as jnp.prod)
    return astype(prod(astype(x, DType::float32), std::move(axes), keepdims), x.dtype());
  // Narrow integers multiply in the default width, as jnp.prod (promote_integers) and sum do:
  // bool and int8 in int32; uint8 gives uint32, whose arithmetic meshvk lacks: multiplied in
  // int64, whose low 32 bits are the product modulo 2^32.
  if (x.dtype() == DType::uint8)
    return astype(prod(astype(x, DType::int64), std::move(axes), keepdims), DType::uint32);
  Array r = x.dtype() == DType::bool_ || x.dtype() == DType::int8 ? astype(x, DType::int32) : x;
  Shape kept;
  for (int d = 0; d < nd; ++d) {
    if (reduce[static_cast<size_t>(d)])
      r = prod_along(r, d);
    else
      kept.push_back(x.shape()[static_cast<size_t>(d)]);
  }
  return keepdims ? r : reshape(r, kept);
}

Array take_along_axis(const Array& x, const Array& indices, int axis) {
  require_valid("take_along_axis", {&x, &indices});
  require_int32_indices("take_along_axis", "indices", indices);
  if (x.ndim() != indices.ndim())
    throw Error("take_along_axis: indices has " + std::to_string(indices.ndim()) +
                " dimensions (shape " + shape_to_string(indices.shape()) + ") and x has " +
                std::to_string(x.ndim()) + " (shape " + shape_to_string(x.shape()) +
                "); give indices as many dimensions as x, as numpy requires");
  const int nd = static_cast<int>(x.ndim());
  const int a = detail::normalize_axis(axis, static_cast<size_t>(nd), "take_along_axis");
  const auto ua = static_cast<size_t>(a);
  // The other dimensions broadcast against each other.
  Shape xs = x.shape(), is = indices.shape();
  xs[ua] = 1;
  is[ua] = 1;
  Shape b;
  try {
    b = broadcast_shapes(xs, is, "take_along_axis");
  } catch (const Error&) {
    throw Error("take_along_axis: indices of shape " + shape_to_string(indices.shape()) +
                " do not broadcast against x of shape " + shape_to_string(x.shape()) +
                " outside axis " + std::to_string(axis));
  }
  Shape xb = b, ib = b;
  xb[ua] = x.shape()[ua];
  ib[ua] = indices.shape()[ua];
  const Array xx = xb == x.shape() ? x : broadcast_to(x, xb);
  const Array ii = ib == indices.shape() ? indices : broadcast_to(indices, ib);
  const std::vector<int> perm = swap_to_last(a, nd);
  const bool moved = a != nd - 1;
  const Array xt = moved ? transpose(xx, perm) : xx;
  const Array it = moved ? transpose(ii, perm) : ii;
  const int64_t n = xb[ua], m = ib[ua];
  const int64_t rows = shape_size(b);  // b has 1 at the axis
  if (rows * n > kInt32Max)
    throw Error("take_along_axis: x broadcast to " + shape_to_string(xb) +
                " has more elements than int32 indices reach");
  if (n == 0 && shape_size(ib) > 0)
    throw Error("take_along_axis: axis " + std::to_string(axis) + " of x (shape " +
                shape_to_string(x.shape()) + ") is empty; there is nothing to take");
  // Flat indices into the rows of xt: JAX's fill mode maps [-n, 0) to the end and sends the rest
  // past the end of the flattened array (filled).
  const auto n32 = static_cast<int32_t>(n);
  const Array idx = reshape(it, Shape{rows, m});
  const Array wrapped = where(idx < 0, idx + n32, idx);
  const Array base = arange(static_cast<int32_t>(rows)).reshape(Shape{rows, 1}) * n32;
  const Array flat_idx =
      where((wrapped >= 0) & (wrapped < n32), base + wrapped, static_cast<int32_t>(rows * n));
  const Array r = take(reshape(xt, Shape{rows * n}), flat_idx, 0);
  Shape rt = xb;
  if (moved) std::swap(rt[ua], rt.back());
  rt.back() = m;
  const Array out = moved ? transpose(reshape(r, rt), perm) : reshape(r, rt);
  // The gather leaves the result whole on every device; where x was split along other dimensions
  // the result is laid out as x there (each device keeps its own part of what it holds).
  const NamedSharding* xn = x.sharding().named();
  if (!xn || !x.committed() || x.sharding().is_fully_replicated()) return out;
  std::vector<SpecEntry> spec;
  for (int d = 0; d < nd; ++d)
    spec.push_back(d != a && d < static_cast<int>(xn->spec().size()) &&
                           x.shape()[static_cast<size_t>(d)] == out.shape()[static_cast<size_t>(d)]
                       ? xn->spec()[static_cast<size_t>(d)]
                       : SpecEntry());
  const Sharding layout = NamedSharding(xn->mesh(), PartitionSpec(spec).trimmed());
  return out.sharding().is_equivalent_to(layout, out.ndim()) ? out : device_put(out, layout);
}

Array sort(const Array& x, int axis) {
  require_valid("sort", {&x});
  if (x.ndim() == 0) return x;
  axis = detail::normalize_axis(axis, x.ndim(), "sort");  // an error names sort, not argsort
  return take_along_axis(x, argsort(x, axis), axis);
}

Array gather(const Array& x, const Array& ids, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  require_valid("gather", {&x, &ids});
  require_int32_indices("x[ids]", "ids", ids);
  if (x.ndim() == 0)
    throw Error("x[ids]: x is 0-d (" + type_of(x) + ") and has no axis 0 to index");
  const int64_t n = x.shape()[0];
  if (n > kInt32Max) throw Error("x[ids]: axis 0 of " + type_of(x) + " is past int32 indices");
  if (n == 0 && ids.size() > 0)
    throw Error("x[ids]: axis 0 of " + type_of(x) + " is empty: there is no element to index (JAX raises too)");
  const Array idx = where(ids < 0, ids + static_cast<int32_t>(n), ids);
  return take(x, idx, 0, TakeMode::clip);
}

Array Array::operator[](const Array& ids) const {
  if (!valid()) throw Error("x[ids]: use of an empty meshvk::Array (default-constructed or moved from)");
  if (!ids.valid()) throw Error("x[ids]: ids is an empty meshvk::Array");
  if (ids.dtype() == DType::bool_)
    throw Error("x[ids]: boolean mask indexing is not supported (the result's shape would depend "
                "on the mask's values, which jit cannot trace either); use where(mask, x, 0)");
  return gather(*this, ids);
}

Array at_set(const Array& x, const Array& ids, const Operand& v) {
  const Scatter s = scatter_parts("at_set", x, ids, v);
  if (s.m == 0 || s.n == 0) return x;
  if (s.m >= kInt32Max) throw Error("at_set: more ids than int32 counts");
  // last[j]: 1 + the position of the last id naming row j (0 when none does); out-of-range ids
  // match no row and are dropped.
  const Array hit = equal(reshape(s.idx, Shape{s.m, 1}), arange(static_cast<int32_t>(s.n)));
  const Array pos = reshape(arange(1, static_cast<int32_t>(s.m) + 1), Shape{s.m, 1});
  const Array last = max(where(hit, pos, 0), std::vector<int>{0});
  const Array rows_hit = reshape(last > 0, Shape{s.n, 1});
  const Array src = take(s.v2, last - 1, 0, TakeMode::clip);
  return reshape(where(rows_hit, src, s.x2), x.shape());
}

Array at_add(const Array& x, const Array& ids, const Operand& v) {
  if (x.valid() && x.dtype() == DType::bool_)
    throw Error("at_add: x is bool, which has no add; use at_set, or astype(int32) first");
  if (x.valid() && (x.dtype() == DType::bfloat16 || x.dtype() == DType::float16)) {
    // Added in float32, rounded once to x's dtype, which the result keeps (as jnp's .at[].add).
    const Array wide = at_add(astype(x, DType::float32), ids, astype(operand_array(v, x.dtype()), DType::float32));
    return astype(wide, x.dtype());
  }
  const Scatter s = scatter_parts("at_add", x, ids, v);
  if (s.m == 0 || s.n == 0) return x;
  const Array onehot = one_hot(s.idx, static_cast<int>(s.n), x.dtype());  // out of range: a zero row
  if (!is_floating(x.dtype()))
    return x + reshape(einsum("mn,mr->nr", onehot, s.v2), x.shape());
  // Finite values through the product; +inf / -inf counted per row beside them (NaN counts as
  // both), so a non-finite update does not turn the whole product NaN (0 * inf).
  const Array finite = isfinite(s.v2);
  const Array v0 = where(finite, s.v2, 0.0f);
  const Array pinf = astype(~finite & ~(s.v2 < 0.0f), DType::float32);
  const Array ninf = astype(~finite & ~(s.v2 > 0.0f), DType::float32);
  const Array sums = einsum("mn,mr->nr", onehot, concatenate({v0, pinf, ninf}, 1));
  const int64_t r = s.rows;
  const Array total = slice(sums, {0, 0}, {s.n, r});
  const Array p = slice(sums, {0, r}, {s.n, 2 * r});
  const Array q = slice(sums, {0, 2 * r}, {s.n, 3 * r});
  constexpr float inf = std::numeric_limits<float>::infinity();
  const Array update = where(p > 0.0f, where(q > 0.0f, std::numeric_limits<float>::quiet_NaN(), inf),
                             where(q > 0.0f, -inf, total));
  return x + reshape(update, x.shape());
}

namespace lax {

std::pair<Array, Array> top_k(const Array& x, int k) {
  require_valid("top_k", {&x});
  if (x.dtype() == DType::uint32) {  // ordered as int64, where every uint32 value is exact
    auto [values, indices] = top_k(astype(x, DType::int64), k);
    return {astype(values, DType::uint32), indices};
  }
  if (x.ndim() == 0) throw Error("top_k: x is 0-d; give an array with at least one axis");
  const int64_t n = x.shape().back();
  if (k < 0 || k > n)
    throw Error("top_k: k = " + std::to_string(k) + " is out of range for the last axis of " +
                type_of(x) + "; give k in [0, " + std::to_string(n) + "]");
  Shape out_shape = x.shape();
  out_shape.back() = k;
  if (k == 0 || n == 0) return {zeros(out_shape, x.dtype()), zeros(out_shape, DType::int32)};
  // A stable ascending sort of x reversed, read backwards: largest first, NaN (sorted last by
  // argsort) first, and equal elements lower index first.
  const Array order = reverse_last(argsort(reverse_last(x), -1));
  std::vector<int64_t> start(x.ndim(), 0), stop(x.shape().begin(), x.shape().end());
  stop.back() = k;
  const Array idx = slice(static_cast<int32_t>(n - 1) - order, start, stop);
  return {take_along_axis(x, idx, -1), idx};
}

}  // namespace lax

// --- jax.random ---

namespace {
Array uniform_for(const Array& key, const Shape& shape, const Sharding* sharding, float lo = 0.0f,
                  float hi = 1.0f) {
  return sharding ? uniform(key, shape, *sharding, lo, hi) : uniform(key, shape, lo, hi);
}

Array truncated_normal_impl(const Array& key, float lower, float upper, const Shape& shape,
                            const Sharding* sharding) {
  if (!(lower < upper))
    throw Error("truncated_normal: needs lower < upper; got lower=" + std::to_string(lower) +
                ", upper=" + std::to_string(upper));
  const float sqrt2 = 1.41421356237309504880f;
  const Array a = erf(scalar(lower / sqrt2)), b = erf(scalar(upper / sqrt2));
  const Array u = uniform_for(key, shape, sharding);
  // As jax.random.uniform(minval=a, maxval=b): u * (b - a) + a, no smaller than a.
  const Array p = maximum(u * (b - a) + a, a);
  const Array out = sqrt2 * erfinv(p);
  constexpr float inf = std::numeric_limits<float>::infinity();
  return clip(out, std::nextafter(lower, inf), std::nextafter(upper, -inf));
}

const Sharding* placed_like(const Array& x) { return x.committed() ? &x.sharding() : nullptr; }
}  // namespace

Array bernoulli(const Array& key, float p, Shape shape) { return uniform(key, std::move(shape)) < p; }

Array bernoulli(const Array& key, float p, Shape shape, const Sharding& sharding) {
  return uniform(key, std::move(shape), sharding) < p;
}

Array bernoulli(const Array& key, const Array& p, std::optional<Shape> shape) {
  require_valid("bernoulli", {&p});
  if (p.dtype() != DType::float32)
    throw Error("bernoulli: p must be float32 (probabilities), got " + std::string(dtype_name(p.dtype())));
  const Shape s = shape ? *shape : p.shape();
  if (shape) {
    Shape b;
    try {
      b = broadcast_shapes(p.shape(), s, "bernoulli");
    } catch (const Error&) {
      b.clear();
    }
    if (b != s)
      throw Error("bernoulli: p of shape " + shape_to_string(p.shape()) +
                  " does not broadcast to shape " + shape_to_string(s));
  }
  return uniform(key, s) < p;
}

Array categorical(const Array& key, const Array& logits, int axis) {
  require_valid("categorical", {&logits});
  if (logits.dtype() != DType::float32)
    throw Error("categorical: logits must be float32, got " + std::string(dtype_name(logits.dtype())));
  if (logits.ndim() == 0) throw Error("categorical: logits is 0-d; give at least one axis of categories");
  const int a = detail::normalize_axis(axis, logits.ndim(), "categorical");
  const Array u = uniform_for(key, logits.shape(), placed_like(logits),
                              std::numeric_limits<float>::min(), 1.0f);
  const Array gumbel = -log(-log(u));
  return argmax(gumbel + stop_gradient(logits), a);
}

Array truncated_normal(const Array& key, float lower, float upper, Shape shape) {
  return truncated_normal_impl(key, lower, upper, shape, nullptr);
}
Array truncated_normal(const Array& key, float lower, float upper, Shape shape, const Sharding& sharding) {
  return truncated_normal_impl(key, lower, upper, shape, &sharding);
}

namespace nn {

Array dropout(const Array& key, const Array& x, float rate) {
  require_valid("dropout", {&x});
  if (!(rate >= 0.0f && rate <= 1.0f))
    throw Error("dropout: rate must be in [0, 1] (the probability of dropping); got " +
                std::to_string(rate));
  if (!is_floating(x.dtype()))
    throw Error("dropout: x must be float32, bfloat16 or float16, got " + std::string(dtype_name(x.dtype())));
  if (rate == 0.0f) return x;
  if (rate == 1.0f) return zeros_like(x);
  const float keep = 1.0f - rate;
  const Sharding* at = placed_like(x);
  const Array mask = at ? bernoulli(key, keep, x.shape(), *at) : bernoulli(key, keep, x.shape());
  return where(mask, x / keep, 0.0f);
}

}  // namespace nn

}  // namespace meshvk

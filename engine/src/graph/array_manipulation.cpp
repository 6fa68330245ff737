// numpy's array manipulation routines (flip, tile, repeat, swapaxes, moveaxis, split, outer,
// diagonal, trace, diag, meshgrid) and lax.dot_general, composed of reshape, broadcast_to,
// transpose, slice, take and einsum: each runs under jit, grad and shard_map with those ops' rules.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/shape_op_support.hpp"
#include "graph/tape.hpp"
#include "sharding/checked_shape.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

namespace {

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Each axis normalized, once each; an Error naming op for one given twice.
std::vector<int> distinct_axes(const char* op, const std::vector<int>& axes, size_t rank) {
  std::vector<int> out;
  for (const int axis : axes) {
    const int a = detail::normalize_axis(axis, rank, op);
    if (std::find(out.begin(), out.end(), a) != out.end())
      throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is given twice; give each axis once");
    out.push_back(a);
  }
  return out;
}

// x as 1-D (ravel), an Error naming op where the layout cannot follow (explicit mode).
Array flattened(const char* op, const Array& x) {
  try {
    return reshape(x, Shape{x.size()});
  } catch (const Error& e) {
    throw Error(std::string(op) + " flattens " + type_of(x) + ": " + e.what());
  }
}

// x reversed along dimension a by a take of n-1, ..., 0 (no gradient recorded: flip records its own).
Array reversed(const Array& x, int a) {
  const int64_t n = x.shape()[static_cast<size_t>(a)];
  if (n <= 1) return x;
  if (n > std::numeric_limits<int32_t>::max())
    throw Error("flip: dimension " + std::to_string(a) + " has " + std::to_string(n) + " elements, past int32 indices");
  const Array idx = arange(static_cast<int32_t>(n - 1), -1, -1);
  return take(x, idx, a, TakeMode::clip);
}

}  // namespace

Array flip(const Array& x, std::vector<int> axes) {
  if (!x.valid()) throw Error("flip: x is an empty meshvk::Array");
  std::vector<int> dims;
  if (axes.empty()) {
    for (int d = 0; d < static_cast<int>(x.ndim()); ++d) dims.push_back(d);
  } else {
    dims = distinct_axes("flip", axes, static_cast<size_t>(x.ndim()));
  }
  Array y = detail::differentiable(x) ? stop_gradient(x) : x;
  for (const int a : dims) y = reversed(y, a);
  // The take gathers a split axis whole; the result goes back to x's layout (lax.rev keeps the
  // operand's sharding, and explicit mode's type with it).
  if (x.committed() && x.sharding().named() && !y.sharding().is_equivalent_to(x.sharding(), x.ndim()))
    y = device_put(y, x.sharding());
  if (!detail::differentiable(x)) return y;
  // The transpose of a reversal is the same reversal: no one-hot product, as take's rule makes.
  return detail::on_tape(y, {x}, [dims](const Array& ct) {
    Array r = ct;
    for (const int a : dims) r = reversed(r, a);
    return std::vector<Array>{r};
  });
}

Array tile(const Array& x, std::vector<int64_t> reps) {
  if (!x.valid()) throw Error("tile: x is an empty meshvk::Array");
  for (const int64_t r : reps)
    if (r < 0) throw Error("tile: reps " + list_text(reps) + " has a negative count; give counts >= 0");
  const size_t rank = std::max(reps.size(), static_cast<size_t>(x.ndim()));
  reps.insert(reps.begin(), rank - reps.size(), 1);
  Shape shape = x.shape();
  shape.insert(shape.begin(), rank - shape.size(), 1);
  // x as (1, d0, 1, d1, ...) broadcast to (r0, d0, r1, d1, ...), then merged pairwise.
  Shape spread, wide, out;
  for (size_t i = 0; i < rank; ++i) {
    spread.insert(spread.end(), {1, shape[i]});
    wide.insert(wide.end(), {reps[i], shape[i]});
    out.push_back(checked_mul(reps[i], shape[i], "tile", "a dimension"));
  }
  checked_size(out, "tile");
  try {
    return reshape(broadcast_to(reshape(x, spread), wide), out);
  } catch (const Error& e) {
    throw Error("tile of " + type_of(x) + " by " + list_text(reps) + ": " + e.what());
  }
}

Array repeat(const Array& x, int64_t repeats, std::optional<int> axis) {
  if (!x.valid()) throw Error("repeat: x is an empty meshvk::Array");
  if (repeats < 0) throw Error("repeat: repeats = " + std::to_string(repeats) + "; give a count >= 0");
  const Array v = axis ? x : flattened("repeat", x);
  const int a = detail::normalize_axis(axis.value_or(0), static_cast<size_t>(v.ndim()), "repeat");
  Shape spread = v.shape(), wide = v.shape(), out = v.shape();
  spread.insert(spread.begin() + a + 1, 1);
  wide.insert(wide.begin() + a + 1, repeats);
  out[static_cast<size_t>(a)] = checked_mul(out[static_cast<size_t>(a)], repeats, "repeat", "the axis");
  checked_size(out, "repeat");
  try {
    return reshape(broadcast_to(reshape(v, spread), wide), out);
  } catch (const Error& e) {
    throw Error("repeat of " + type_of(x) + ": " + e.what());
  }
}

Array repeat(const Array& x, std::vector<int64_t> repeats, std::optional<int> axis) {
  if (!x.valid()) throw Error("repeat: x is an empty meshvk::Array");
  if (repeats.size() == 1) return repeat(x, repeats[0], axis);
  const Array v = axis ? x : flattened("repeat", x);
  const int a = detail::normalize_axis(axis.value_or(0), static_cast<size_t>(v.ndim()), "repeat");
  const int64_t n = v.shape()[static_cast<size_t>(a)];
  if (static_cast<int64_t>(repeats.size()) != n)
    throw Error("repeat: " + std::to_string(repeats.size()) + " counts for an axis of " + std::to_string(n) +
                " elements; give one count per element, or a single count");
  std::vector<int32_t> idx;
  for (int64_t i = 0; i < n; ++i) {
    if (repeats[static_cast<size_t>(i)] < 0)
      throw Error("repeat: count " + std::to_string(repeats[static_cast<size_t>(i)]) + " of element " +
                  std::to_string(i) + " is negative; give counts >= 0");
    if (static_cast<int64_t>(idx.size()) + repeats[static_cast<size_t>(i)] > std::numeric_limits<int32_t>::max())
      throw Error("repeat: the counts add up past int32 indices");
    idx.insert(idx.end(), static_cast<size_t>(repeats[static_cast<size_t>(i)]), static_cast<int32_t>(i));
  }
  return take(v, array(std::span<const int32_t>(idx), Shape{static_cast<int64_t>(idx.size())}), a, TakeMode::clip);
}

Array swapaxes(const Array& x, int axis1, int axis2) {
  const size_t rank = static_cast<size_t>(x.ndim());
  const int a = detail::normalize_axis(axis1, rank, "swapaxes");
  const int b = detail::normalize_axis(axis2, rank, "swapaxes");
  std::vector<int> perm;
  for (int d = 0; d < static_cast<int>(x.ndim()); ++d) perm.push_back(d);
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  return transpose(x, perm);
}

Array moveaxis(const Array& x, std::vector<int> source, std::vector<int> destination) {
  if (source.size() != destination.size())
    throw Error("moveaxis: " + std::to_string(source.size()) + " source axes and " +
                std::to_string(destination.size()) + " destinations; give as many of each");
  const size_t rank = static_cast<size_t>(x.ndim());
  const std::vector<int> src = distinct_axes("moveaxis", source, rank);
  const std::vector<int> dst = distinct_axes("moveaxis", destination, rank);
  // numpy's construction: the axes not moved in order, then each moved one inserted at its place.
  std::vector<int> order;
  for (int d = 0; d < static_cast<int>(x.ndim()); ++d)
    if (std::find(src.begin(), src.end(), d) == src.end()) order.push_back(d);
  std::vector<std::pair<int, int>> moves;
  for (size_t i = 0; i < src.size(); ++i) moves.emplace_back(dst[i], src[i]);
  std::sort(moves.begin(), moves.end());
  for (const auto& [d, s] : moves) order.insert(order.begin() + d, s);
  return transpose(x, order);
}

Array moveaxis(const Array& x, int source, int destination) {
  return moveaxis(x, std::vector<int>{source}, std::vector<int>{destination});
}

namespace {

// x cut along `axis` at the boundaries 0 = b0 <= b1 <= ... <= bn = the axis' size.
std::vector<Array> pieces(const Array& x, int a, const std::vector<int64_t>& bounds) {
  std::vector<Array> out;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    std::vector<int64_t> start(static_cast<size_t>(x.ndim()), 0), stop(x.shape().begin(), x.shape().end());
    start[static_cast<size_t>(a)] = bounds[i];
    stop[static_cast<size_t>(a)] = bounds[i + 1];
    out.push_back(slice(x, start, stop));
  }
  return out;
}

std::vector<Array> sections_of(const char* op, const Array& x, int64_t sections, int axis, bool even) {
  if (!x.valid()) throw Error(std::string(op) + ": x is an empty meshvk::Array");
  const int a = detail::normalize_axis(axis, static_cast<size_t>(x.ndim()), op);
  const int64_t n = x.shape()[static_cast<size_t>(a)];
  if (sections <= 0) throw Error(std::string(op) + ": sections = " + std::to_string(sections) + "; give a count >= 1");
  if (even && n % sections != 0)
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " of size " + std::to_string(n) +
                " does not split into " + std::to_string(sections) +
                " equal sections; give a divisor of it, indices, or use array_split");
  std::vector<int64_t> bounds{0};
  const int64_t each = n / sections, extra = n % sections;
  for (int64_t i = 0; i < sections; ++i) bounds.push_back(bounds.back() + each + (i < extra ? 1 : 0));
  return pieces(x, a, bounds);
}

}  // namespace

std::vector<Array> split(const Array& x, int64_t sections, int axis) {
  return sections_of("split", x, sections, axis, true);
}

std::vector<Array> array_split(const Array& x, int64_t sections, int axis) {
  return sections_of("array_split", x, sections, axis, false);
}

std::vector<Array> split(const Array& x, std::vector<int64_t> indices, int axis) {
  if (!x.valid()) throw Error("split: x is an empty meshvk::Array");
  const int a = detail::normalize_axis(axis, static_cast<size_t>(x.ndim()), "split");
  const int64_t n = x.shape()[static_cast<size_t>(a)];
  // Python's slice bounds: negative from the end, clipped to [0, n]; a piece never runs backwards.
  std::vector<int64_t> bounds{0};
  for (int64_t i : indices) {
    if (i < 0) i += n;
    bounds.push_back(std::clamp<int64_t>(i, 0, n));
  }
  bounds.push_back(n);
  std::vector<Array> out;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const int64_t lo = bounds[i], hi = std::max(bounds[i], bounds[i + 1]);
    const std::vector<Array> one = pieces(x, a, {lo, hi});
    out.push_back(one.front());
  }
  return out;
}

Array outer(const Array& a, const Array& b) {
  if (!a.valid() || !b.valid()) throw Error("outer: an operand is an empty meshvk::Array");
  return reshape(flattened("outer", a), Shape{a.size(), 1}) * reshape(flattened("outer", b), Shape{1, b.size()});
}

namespace {
// The einsum letter of dimension d (a-z, then A-Z: 52 dimensions in all).
char letter(size_t d, const char* op) {
  if (d >= 52) throw Error(std::string(op) + ": more than 52 dimensions");
  return d < 26 ? static_cast<char>('a' + d) : static_cast<char>('A' + (d - 26));
}
}  // namespace

Array diagonal(const Array& x, int offset, int axis1, int axis2) {
  if (!x.valid()) throw Error("diagonal: x is an empty meshvk::Array");
  const size_t rank = x.ndim();
  if (rank < 2) throw Error("diagonal: x is " + type_of(x) + "; give an array of at least 2 dimensions");
  const int a = detail::normalize_axis(axis1, rank, "diagonal"), b = detail::normalize_axis(axis2, rank, "diagonal");
  if (a == b) throw Error("diagonal: axis1 and axis2 name the same dimension; give two different axes");
  // The other dimensions first, then the two moved last; the diagonal is a take of the
  // flattened matrices at i * cols + i + offset (or its mirror below the main one).
  std::vector<int> perm;
  for (int d = 0; d < static_cast<int>(rank); ++d)
    if (d != a && d != b) perm.push_back(d);
  perm.push_back(a);
  perm.push_back(b);
  const Array m = transpose(x, perm);
  const int64_t rows = x.shape()[static_cast<size_t>(a)], cols = x.shape()[static_cast<size_t>(b)];
  const int64_t n = std::max<int64_t>(0, offset >= 0 ? std::min(rows, cols - offset) : std::min(rows + offset, cols));
  if (rows * cols > std::numeric_limits<int32_t>::max()) throw Error("diagonal: the matrices are past int32 indices");
  std::vector<int32_t> idx;
  for (int64_t i = 0; i < n; ++i)
    idx.push_back(static_cast<int32_t>(offset >= 0 ? i * cols + i + offset : (i - offset) * cols + i));
  Shape flat(m.shape().begin(), m.shape().end() - 2);
  flat.push_back(rows * cols);
  return take(reshape(m, flat), array(std::span<const int32_t>(idx), Shape{n}), static_cast<int>(flat.size()) - 1,
              TakeMode::clip);
}

Array trace(const Array& x, int offset, int axis1, int axis2) {
  const Array d = diagonal(x, offset, axis1, axis2);
  return sum(d, {-1});
}

Array diag(const Array& x, int k) {
  if (!x.valid()) throw Error("diag: x is an empty meshvk::Array");
  if (x.ndim() == 2) return diagonal(x, k);
  if (x.ndim() != 1) throw Error("diag: x is " + type_of(x) + "; give a 1-D array (a diagonal) or a 2-D one (a matrix)");
  const int64_t n = x.shape()[0] + (k < 0 ? -k : k);
  if (x.size() == 0) return zeros(Shape{n, n}, x.dtype());  // no diagonal values: numpy's zeros
  // Row i's element on diagonal k is x[i] for k >= 0 (rows past x's length have none), x[i + k]
  // for k < 0: those values spread along the rows, kept where the band is.
  const Array on = eye(n, n, k, DType::bool_);
  std::vector<int32_t> src;
  for (int64_t i = 0; i < n; ++i) src.push_back(static_cast<int32_t>(std::clamp<int64_t>(k >= 0 ? i : i + k, 0, x.shape()[0] - 1)));
  const Array rows = take(x, array(std::span<const int32_t>(src), Shape{n}), 0, TakeMode::clip);
  return where(on, reshape(rows, Shape{n, 1}), zeros(Shape{}, x.dtype()));
}

std::vector<Array> meshgrid(const std::vector<Array>& xs, const std::string& indexing) {
  if (indexing != "xy" && indexing != "ij")
    throw Error("meshgrid: indexing = \"" + indexing + "\"; give \"xy\" or \"ij\"");
  Shape shape;
  for (const Array& x : xs) {
    if (!x.valid() || x.ndim() != 1) throw Error("meshgrid: every input must be a 1-D array");
    shape.push_back(x.shape()[0]);
  }
  const bool xy = indexing == "xy" && xs.size() >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Array> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    const size_t at = xy && i < 2 ? 1 - i : i;  // the axis input i varies along
    Shape along(xs.size(), 1);
    along[at] = xs[i].shape()[0];
    out.push_back(broadcast_to(reshape(xs[i], along), shape));
  }
  return out;
}

namespace lax {

Array dot_general(const Array& lhs, const Array& rhs, const DotDimensionNumbers& dims, std::optional<DType> preferred) {
  if (!lhs.valid() || !rhs.valid()) throw Error("dot_general: an operand is an empty meshvk::Array");
  if (dims.lhs_contracting.size() != dims.rhs_contracting.size() || dims.lhs_batch.size() != dims.rhs_batch.size())
    throw Error("dot_general: " + std::to_string(dims.lhs_contracting.size()) + " and " +
                std::to_string(dims.rhs_contracting.size()) + " contracting, " + std::to_string(dims.lhs_batch.size()) +
                " and " + std::to_string(dims.rhs_batch.size()) +
                " batch dimensions; give as many on each side (they pair up in order)");
  const std::vector<int> lc = distinct_axes("dot_general", dims.lhs_contracting, lhs.ndim());
  const std::vector<int> rc = distinct_axes("dot_general", dims.rhs_contracting, rhs.ndim());
  const std::vector<int> lb = distinct_axes("dot_general", dims.lhs_batch, lhs.ndim());
  const std::vector<int> rb = distinct_axes("dot_general", dims.rhs_batch, rhs.ndim());
  std::string ls(lhs.ndim(), '?'), rs(rhs.ndim(), '?'), out;
  size_t next = 0;
  auto pair_up = [&](const std::vector<int>& l, const std::vector<int>& r, const char* what, bool into_out) {
    for (size_t i = 0; i < l.size(); ++i) {
      const auto li = static_cast<size_t>(l[i]), ri = static_cast<size_t>(r[i]);
      if (ls[li] != '?' || rs[ri] != '?')
        throw Error("dot_general: a dimension is both contracting and batch; give each dimension one role");
      if (lhs.shape()[li] != rhs.shape()[ri])
        throw Error("dot_general: " + std::string(what) + " dimensions " + std::to_string(l[i]) + " of " + type_of(lhs) +
                    " and " + std::to_string(r[i]) + " of " + type_of(rhs) + " differ in size");
      ls[li] = rs[ri] = letter(next++, "dot_general");
      if (into_out) out += ls[li];
    }
  };
  pair_up(lb, rb, "batch", true);
  pair_up(lc, rc, "contracting", false);
  for (char& c : ls)
    if (c == '?') out += (c = letter(next++, "dot_general"));
  for (char& c : rs)
    if (c == '?') out += (c = letter(next++, "dot_general"));
  const std::string subscripts = ls + "," + rs + "->" + out;
  return preferred ? einsum(subscripts, std::vector<Array>{lhs, rhs}, *preferred) : einsum(subscripts, lhs, rhs);
}

}  // namespace lax

}  // namespace meshvk

// More of jax.numpy as compositions of meshvk's ops: each runs under jit, grad and shard_map,
// and lays its result out as the ops it is made of do.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "graph/shape_op_support.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

namespace {


// True where column - row <= k (tril) or >= k (triu), as an (n, m) bool array.
Array band(const char* op, int64_t n, int64_t m, int k, bool lower) {
  if (n > std::numeric_limits<int32_t>::max() || m > std::numeric_limits<int32_t>::max())
    throw Error(std::string(op) + ": " + std::to_string(n) + " x " + std::to_string(m) +
                " is past int32 indices");
  const Array rows = arange(static_cast<int32_t>(n)).reshape(Shape{n, 1});
  const Array cols = arange(static_cast<int32_t>(m)).reshape(Shape{1, m});
  const Array d = cols - rows;
  return lower ? d <= k : d >= k;
}

Array triangle(const char* op, const Array& x, int k, bool lower) {
  if (x.ndim() < 2)
    throw Error(std::string(op) + ": x has shape " + shape_to_string(x.shape()) +
                "; give an array of at least 2 dimensions (the last two are the matrix)");
  const int64_t n = x.shape()[x.ndim() - 2], m = x.shape()[x.ndim() - 1];
  // uint32 only moves data: select its int32 bits (astype between the two keeps the bits).
  if (x.dtype() == DType::uint32) return astype(triangle(op, astype(x, DType::int32), k, lower), DType::uint32);
  return where(band(op, n, m, k, lower), x, zeros(Shape{}, x.dtype()));
}

}  // namespace

Array clip(const Array& x, const std::optional<Operand>& lo, const std::optional<Operand>& hi) {
  Array r = x;
  if (lo) r = maximum(r, *lo);
  if (hi) r = minimum(r, *hi);
  return r;
}

Array tril(const Array& x, int k) { return triangle("tril", x, k, true); }
Array triu(const Array& x, int k) { return triangle("triu", x, k, false); }

Array eye(int64_t n, int64_t m, int k, DType dtype) {
  if (m < 0) m = n;
  if (n < 0) throw Error("eye: n = " + std::to_string(n) + "; give n >= 0");
  const Array lower = band("eye", n, m, k, true), upper = band("eye", n, m, k, false);
  return astype(lower & upper, dtype);
}

Array expand_dims(const Array& x, int axis) {
  const int ndim = x.ndim() + 1;
  const int a = detail::normalize_axis(axis, static_cast<size_t>(ndim), "expand_dims");
  Shape shape = x.shape();
  shape.insert(shape.begin() + a, 1);
  return reshape(x, shape);
}

Array squeeze(const Array& x, std::vector<int> axes) {
  const int ndim = x.ndim();
  std::vector<bool> drop(static_cast<size_t>(ndim), false);
  if (axes.empty()) {
    for (int d = 0; d < ndim; ++d) drop[static_cast<size_t>(d)] = x.shape()[static_cast<size_t>(d)] == 1;
  } else {
    for (const int axis : axes) {
      const int a = detail::normalize_axis(axis, static_cast<size_t>(ndim), "squeeze");
      if (drop[static_cast<size_t>(a)])
        throw Error("squeeze: axis " + std::to_string(axis) + " names dimension " + std::to_string(a) +
                    " a second time; give each axis once (numpy: duplicate value in 'axis')");
      if (x.shape()[static_cast<size_t>(a)] != 1)
        throw Error("squeeze: axis " + std::to_string(axis) + " of shape " +
                    shape_to_string(x.shape()) + " has size " +
                    std::to_string(x.shape()[static_cast<size_t>(a)]) +
                    "; only axes of size 1 can be squeezed");
      drop[static_cast<size_t>(a)] = true;
    }
  }
  Shape shape;
  for (int d = 0; d < ndim; ++d)
    if (!drop[static_cast<size_t>(d)]) shape.push_back(x.shape()[static_cast<size_t>(d)]);
  return reshape(x, shape);
}

namespace {
// Non-floats are never NaN or infinite: x compared with itself (a uint32 as its int32 bits, since
// uint32 only moves data), so that the result keeps x's shape and layout, as an elementwise op.
Array self_equal(const Array& x) {
  const Array v = x.dtype() == DType::uint32 ? astype(x, DType::int32) : x;
  return v == v;
}
}  // namespace

Array isnan(const Array& x) {
  if (!is_floating(x.dtype())) return ~self_equal(x);  // all false
  return x != x;
}
Array isinf(const Array& x) {
  if (!is_floating(x.dtype())) return ~self_equal(x);  // all false
  return abs(x) == std::numeric_limits<float>::infinity();
}
Array isfinite(const Array& x) {
  if (!is_floating(x.dtype())) return self_equal(x);  // all true
  return abs(x) < std::numeric_limits<float>::infinity();  // NaN compares false
}

namespace {
// uint32 is non-zero exactly where its int32 bits are.
Array nonzero(const Array& x) {
  if (x.dtype() == DType::bool_) return x;
  return (x.dtype() == DType::uint32 ? astype(x, DType::int32) : x) != 0;
}
}  // namespace

// Counts rather than max / min, so that an empty slice gives numpy's answer (any: false, all:
// true) instead of a reduction without identity.
Array any(const Array& x, std::vector<int> axes, bool keepdims) {
  return sum(astype(nonzero(x), DType::int32), std::move(axes), keepdims) > 0;
}
Array all(const Array& x, std::vector<int> axes, bool keepdims) {
  return sum(astype(~nonzero(x), DType::int32), std::move(axes), keepdims) == 0;
}

Array full_like(const Array& x, double value) {
  // Filled in x's layout where x is committed, as jax.lax.full_like keeps a committed array's
  // sharding (zeros_like makes an uncommitted array on the default device); a float is stored
  // as its bits, so -0.0 keeps its sign.
  if (x.dtype() == DType::float32)
    return x.committed() ? full(x.shape(), static_cast<float>(value), x.sharding())
                         : full(x.shape(), static_cast<float>(value));
  if (is_64bit(x.dtype())) {  // the exact double (or int64) value, which no 32-bit fill word holds
    if (x.dtype() == DType::int64 && !(value >= -0x1p63 && value < 0x1p63))
      throw Error("full_like: " + std::to_string(value) + " does not fit the array's int64");
    const int64_t as_int = x.dtype() == DType::int64 ? static_cast<int64_t>(value) : 0;
    const Array one = x.dtype() == DType::int64 ? array(std::span<const int64_t>(&as_int, 1), Shape{})
                                                : array(std::span<const double>(&value, 1), Shape{});
    const Array r = broadcast_to(one, x.shape());
    return x.committed() ? device_put(r, x.sharding()) : r;
  }
  if (is_floating(x.dtype())) {  // bfloat16 / float16: the value rounded to the format
    const float rounded = round_to(x.dtype(), static_cast<float>(value));
    return astype(x.committed() ? full(x.shape(), rounded, x.sharding()) : full(x.shape(), rounded), x.dtype());
  }
  const Array z = x.committed() ? zeros(x.shape(), DType::int32, x.sharding()) : zeros(x.shape(), DType::int32);
  if (x.dtype() == DType::bool_) return astype(z + (value != 0 ? 1 : 0), x.dtype());
  if (x.dtype() == DType::uint32) {
    // Any uint32 value, carried as its int32 bits (astype between the two keeps the bits).
    if (!(value > -1.0 && value < 4294967296.0))
      throw Error("full_like: " + std::to_string(value) +
                  " does not fit the array's uint32; give a value in [0, 4294967295]");
    const auto bits = static_cast<int32_t>(static_cast<uint32_t>(value));
    return astype(z + bits, x.dtype());
  }
  if (!(value > std::numeric_limits<int32_t>::min() - 1.0 && value < std::numeric_limits<int32_t>::max() + 1.0))
    throw Error("full_like: " + std::to_string(value) + " does not fit the array's " +
                std::string(dtype_name(x.dtype())) + "; give a value in int32's range");
  return astype(z + static_cast<int32_t>(value), x.dtype());
}

Array cumsum(const Array& x, int axis) {
  const int a = detail::normalize_axis(axis, x.ndim(), "cumsum");
  if (x.dtype() == DType::bfloat16 || x.dtype() == DType::float16)  // summed in float32, each result rounded once
    return astype(cumsum(astype(x, DType::float32), axis), x.dtype());
  Array r = x.dtype() == DType::bool_ ? astype(x, DType::int32) : x;
  const int64_t n = x.shape()[static_cast<size_t>(a)];
  // Hillis-Steele: after the step of shift s each element holds the sum of the 2s before it.
  for (int64_t s = 1; s < n; s *= 2) {
    std::vector<int64_t> start(static_cast<size_t>(x.ndim()), 0), stop(x.shape().begin(), x.shape().end());
    stop[static_cast<size_t>(a)] = n - s;
    Shape head = x.shape();
    head[static_cast<size_t>(a)] = s;
    const Array shifted = concatenate({zeros(head, r.dtype()), slice(r, start, stop)}, a);
    r = r + shifted;
  }
  return r;
}

Array cumprod(const Array& x, int axis) {
  if (!x.valid()) throw Error("cumprod: x is an empty meshvk::Array");
  const int a = detail::normalize_axis(axis, x.ndim(), "cumprod");
  if (x.dtype() == DType::uint32)
    throw Error("cumprod: uint32 arrays hold random bits and do not compute; convert first with astype(x, DType::int32)");
  if (x.dtype() == DType::bfloat16 || x.dtype() == DType::float16)  // multiplied in float32, each result rounded once
    return astype(cumprod(astype(x, DType::float32), axis), x.dtype());
  Array r = x.dtype() == DType::bool_ ? astype(x, DType::int32) : x;
  const int64_t n = x.shape()[static_cast<size_t>(a)];
  // Hillis-Steele, as cumsum: after the step of shift s each element holds the product of the 2s
  // elements ending at it (ones shifted in), every step an exact float32 multiplication.
  for (int64_t s = 1; s < n; s *= 2) {
    std::vector<int64_t> start(static_cast<size_t>(x.ndim()), 0), stop(x.shape().begin(), x.shape().end());
    stop[static_cast<size_t>(a)] = n - s;
    Shape head = x.shape();
    head[static_cast<size_t>(a)] = s;
    const Array shifted = concatenate({ones(head, r.dtype()), slice(r, start, stop)}, a);
    r = r * shifted;
  }
  return r;
}

}  // namespace meshvk

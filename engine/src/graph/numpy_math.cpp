// More of jax.numpy's math as compositions of meshvk's ops (log10, logaddexp, isclose, nan_to_num,
// linspace, searchsorted, bincount, linalg.norm): each runs under jit, grad and shard_map with
// the rules of the ops it is made of.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <variant>
#include <vector>

#include "graph/dtype_support.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/shape_op_support.hpp"
#include "graph/tape.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

namespace {

// JAX's to_inexact_dtype: floats stay, int64 becomes float64, other integers and bools float32.
DType inexact(DType t) {
  if (is_floating(t)) return t;
  return t == DType::int64 ? DType::float64 : DType::float32;
}

// The promoted inexact dtype of two operands (JAX's promote_args_inexact).
DType inexact_of(const Operand& a, const Operand& b) {
  return inexact(detail::ew::promote({detail::ew::type_of_operand(a), detail::ew::type_of_operand(b)}));
}

// An operand as an array of dtype t (a scalar as a 0-d array).
Array as_array(const Operand& o, DType t) {
  if (const auto* a = std::get_if<Array>(&o.get())) {
    if (!a->valid()) throw Error("use of an empty meshvk::Array");
    return astype(*a, t);
  }
  if (const auto* f = std::get_if<float>(&o.get())) return astype(scalar(*f), t);
  return astype(scalar(static_cast<float>(std::get<int32_t>(o.get()))), t);
}

using detail::constant_for;

double largest_finite(DType t) {
  switch (t) {
    case DType::float64: return std::numeric_limits<double>::max();
    case DType::float16: return 65504.0;
    case DType::bfloat16: return 3.3895313892515355e38;
    default: return std::numeric_limits<float>::max();
  }
}

// Whether p sorts before q in sort's order (NaN last).
Array sorts_before(const Array& p, const Array& q) {
  if (!is_floating(p.dtype()) && !is_floating(q.dtype())) return p < q;
  return (p < q) | (isnan(q) & ~isnan(p));
}

}  // namespace

Array log10(const Array& x) {
  if (!x.valid()) throw Error("log10: x is an empty meshvk::Array");
  const Array l = log(x);
  return l / constant_for(l.dtype(), 2.302585092994045684);
}

Array logaddexp(const Operand& a, const Operand& b) {
  const DType t = inexact_of(a, b);
  const Array x = as_array(a, t), y = as_array(b, t);
  const bool tracked = detail::differentiable(x) || detail::differentiable(y);
  const Array sx = tracked ? stop_gradient(x) : x, sy = tracked ? stop_gradient(y) : y;
  const Array delta = sx - sy;
  // Equal infinities give NaN for delta: their sum is the answer (inf, or -inf for two -inf).
  const Array out = where(isnan(delta), sx + sy, maximum(sx, sy) + log1p(exp(-abs(delta))));
  if (!tracked) return out;
  // JAX's rule: each operand's weight exp(operand - out), +inf taken as 0 on both sides.
  return detail::on_tape(out, {x, y}, [x, y, out](const Array& ct) {
    const float inf = std::numeric_limits<float>::infinity();
    const Array o = where(out == inf, 0.0f, out);
    auto weight = [&](const Array& v) {
      return detail::unbroadcast(ct * exp(where(v == inf, 0.0f, v) - o), v.shape());
    };
    return std::vector<Array>{weight(x), weight(y)};
  });
}

Array isclose(const Operand& a, const Operand& b, double rtol, double atol, bool equal_nan) {
  const DType t = inexact_of(a, b);
  const Array x = as_array(a, t), y = as_array(b, t);
  // JAX's isclose: the tolerance test, false where either side is infinite unless both are the
  // same infinity, false where either is NaN unless equal_nan and both are.
  Array out = abs(x - y) <= add(constant_for(t, atol), multiply(constant_for(t, rtol), abs(y)));
  out = (out & ~(isinf(x) | isinf(y))) | (isinf(x) & isinf(y) & (x == y));
  out = out & ~(isnan(x) | isnan(y));
  if (equal_nan) out = out | (isnan(x) & isnan(y));
  return out;
}

Array allclose(const Operand& a, const Operand& b, double rtol, double atol, bool equal_nan) {
  return all(isclose(a, b, rtol, atol, equal_nan));
}

Array nan_to_num(const Array& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  if (!x.valid()) throw Error("nan_to_num: x is an empty meshvk::Array");
  if (!is_floating(x.dtype())) return x;
  const DType t = x.dtype();
  const float inf = std::numeric_limits<float>::infinity();
  const double big = largest_finite(t);
  return where(isnan(x), constant_for(t, nan),
               where(x == inf, constant_for(t, posinf.value_or(big)),
                     where(x == -inf, constant_for(t, neginf.value_or(-big)), x)));
}

Array linspace(double start, double stop, int64_t num, bool endpoint, DType dtype) {
  detail::check_dtype("linspace", dtype);
  if (num < 0) throw Error("linspace: num = " + std::to_string(num) + "; give a count >= 0");
  checked_size(Shape{num}, "linspace");
  const auto budget = Runtime::current().memory_stats(0).bytes_limit;
  if (budget != 0 && static_cast<uint64_t>(num) > budget / dtype_size(dtype))
    throw Error("linspace: num = " + std::to_string(num) + " " + std::string(dtype_name(dtype)) +
                " values are more than device 0's budget of " + std::to_string(budget) + " bytes holds; give a smaller num");
  // The values are made on the host first: more than the machine's memory is an Error here, not
  // an allocation that fails (or that a sanitizer's allocator refuses outright).
  const uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  if (static_cast<uint64_t>(num) > ram / dtype_size(dtype))
    throw Error("linspace: num = " + std::to_string(num) + " " + std::string(dtype_name(dtype)) +
                " values are more than this machine's " + std::to_string(ram) + " bytes of memory hold; give a smaller num");
  // numpy's arithmetic, in double: i * step + start (i / div * delta where step underflows to
  // 0), the last value exactly stop when it is included; each rounded once to the dtype.
  const int64_t div = endpoint ? num - 1 : num;
  const double delta = stop - start;
  const double step = div > 0 ? delta / static_cast<double>(div) : std::numeric_limits<double>::quiet_NaN();
  auto value = [&](int64_t i) {
    if (endpoint && num > 1 && i == num - 1) return stop;
    const double y = static_cast<double>(i);
    const double scaled = div > 0 ? (step == 0 ? y / static_cast<double>(div) * delta : y * step) : y * delta;
    return scaled + start;
  };
  const Shape shape{num};
  auto made = [&](auto convert) {
    using T = decltype(convert(0.0));
    std::vector<T> out;
    try {
      out.reserve(static_cast<size_t>(num));
    } catch (const std::bad_alloc&) {
      throw Error("linspace: num = " + std::to_string(num) + " values do not fit in host memory; give a smaller num");
    }
    for (int64_t i = 0; i < num; ++i) out.push_back(convert(value(i)));
    return array(std::span<const T>(out), shape);
  };
  // Integer dtypes take the floor, as numpy 2.
  auto floor_to = [&](auto type_tag) {
    using T = decltype(type_tag);
    return [&](double d) {
      const double f = std::floor(d);
      if (!(f >= static_cast<double>(std::numeric_limits<T>::lowest()) && f <= static_cast<double>(std::numeric_limits<T>::max())))
        throw Error("linspace: value " + std::to_string(d) + " does not fit " + std::string(dtype_name(dtype)));
      return static_cast<T>(f);
    };
  };
  switch (dtype) {
    case DType::float64: return made([](double d) { return d; });
    case DType::float32: return made([](double d) { return static_cast<float>(d); });
    // From the double, one rounding to the 16-bit format (through float32, which holds every
    // value of both: a double rounding only where a value lies that close to a midpoint).
    case DType::bfloat16: return made([](double d) { return bfloat16(static_cast<float>(d)); });
    case DType::float16: return made([](double d) { return float16(static_cast<float>(d)); });
    case DType::int32: return made(floor_to(int32_t{}));
    case DType::int8: return made(floor_to(int8_t{}));
    case DType::uint8: return made(floor_to(uint8_t{}));
    case DType::int64: return made(floor_to(int64_t{}));
    case DType::uint32: return made(floor_to(uint32_t{}));
    case DType::bool_: return astype(made(floor_to(int32_t{})), DType::bool_);
  }
  throw Error("linspace: unknown dtype");
}

Array searchsorted(const Array& a, const Array& v, const std::string& side) {
  if (!a.valid() || !v.valid()) throw Error("searchsorted: an operand is an empty meshvk::Array");
  if (a.ndim() != 1)
    throw Error("searchsorted: a has shape " + shape_to_string(a.shape()) + "; give a sorted 1-D array");
  if (side != "left" && side != "right")
    throw Error("searchsorted: side = \"" + side + "\"; give \"left\" or \"right\"");
  Shape expanded = v.shape();
  expanded.push_back(1);
  const Array ve = reshape(v, expanded);
  // left: how many elements sort before v; right: how many v does not sort before.
  const Array before = side == "left" ? sorts_before(a, ve) : ~sorts_before(ve, a);
  return sum(astype(before, DType::int32), {-1});
}

Array bincount(const Array& x, std::optional<Array> weights, int64_t minlength, std::optional<int64_t> length) {
  if (!x.valid()) throw Error("bincount: x is an empty meshvk::Array");
  if (!is_integer(x.dtype()))
    throw Error("bincount: x is " + std::string(dtype_name(x.dtype())) +
                "; give an integer array (int8, uint8, int32, uint32 or int64)");
  if (x.ndim() != 1) throw Error("bincount: x has shape " + shape_to_string(x.shape()) + "; give a 1-D array");
  if (weights && (!weights->valid() || weights->shape() != x.shape()))
    throw Error("bincount: weights must have x's shape " + shape_to_string(x.shape()));
  if (minlength < 0) throw Error("bincount: minlength = " + std::to_string(minlength) + "; give a value >= 0");
  // int64 values past int32 clip to it: they land past every length that an int32 one-hot holds.
  const Array wide = x.dtype() == DType::uint32 ? astype(x, DType::int64) : x;
  const Array xi = wide.dtype() == DType::int64
                       ? astype(clip(wide, -1, std::numeric_limits<int32_t>::max()), DType::int32)
                       : astype(wide, DType::int32);
  int64_t n = 0;
  if (length) {
    n = *length;
    if (n < 0) throw Error("bincount: length = " + std::to_string(n) + "; give a value >= 0");
  } else {
    int64_t top = 0;
    try {
      top = x.size() == 0 ? 0 : static_cast<int64_t>(max(xi).to_host<int32_t>()[0]) + 1;
    } catch (const Error& e) {
      throw Error(std::string("bincount: without length the bins are max(x) + 1, read from the device, which ") +
                  "cannot happen here (under jit, as in JAX): give length (" + e.what() + ")");
    }
    n = std::max(minlength, top);
  }
  if (n > std::numeric_limits<int32_t>::max()) throw Error("bincount: length " + std::to_string(n) + " is past int32");
  // The counts come from an x.size() x length one-hot matrix: refuse one past 2^29 elements (2 GiB
  // of int32, one allocation of lavapipe's heap) here, naming it, rather than as a failed allocation.
  if (x.size() > 0 && n > (int64_t{1} << 29) / x.size())
    throw Error("bincount: " + std::to_string(n) + " bins for " + std::to_string(x.size()) +
                " values needs a one-hot matrix of " + std::to_string(x.size()) + " x " + std::to_string(n) +
                " elements, past 2^29; give a smaller length (values from it on are dropped)");
  const Array idx = maximum(xi, 0);  // negative values count as 0, as JAX's
  if (!weights) return sum(one_hot(idx, static_cast<int>(n), DType::int32), {0});
  const Array w = weights->dtype() == DType::bool_ ? astype(*weights, DType::int32) : *weights;
  return sum(one_hot(idx, static_cast<int>(n), w.dtype()) * reshape(w, Shape{w.size(), 1}), {0});
}

namespace linalg {

Array norm(const Array& x, std::optional<double> ord, std::vector<int> axes, bool keepdims) {
  if (!x.valid()) throw Error("norm: x is an empty meshvk::Array");
  const Array v = astype(x, inexact(x.dtype()));
  if (axes.empty() && !ord) return sqrt(sum(v * v, {}, keepdims));
  if (axes.empty()) {
    if (x.ndim() == 1) axes = {0};
    else if (x.ndim() == 2) axes = {0, 1};
    else
      throw Error("norm: ord is given for an array of shape " + shape_to_string(x.shape()) +
                  "; give axes (one for a vector norm, two for a matrix norm) or a 1-D or 2-D array");
  }
  for (int& a : axes) a = detail::normalize_axis(a, static_cast<size_t>(x.ndim()), "norm");
  const double inf = std::numeric_limits<double>::infinity();
  if (axes.size() == 1) {
    const double p = ord.value_or(2.0);
    if (p == 2.0) return sqrt(sum(v * v, axes, keepdims));
    if (p == inf) return max(abs(v), axes, keepdims);
    if (p == -inf) return min(abs(v), axes, keepdims);
    if (p == 0.0) return sum(astype(v != 0, v.dtype()), axes, keepdims);
    if (p == 1.0) return sum(abs(v), axes, keepdims);
    if (std::isnan(p)) throw Error("norm: ord is NaN; give a number, inf or -inf");
    return power(sum(power(abs(v), constant_for(v.dtype(), p)), axes, keepdims), constant_for(v.dtype(), 1.0 / p));
  }
  if (axes.size() != 2 || axes[0] == axes[1])
    throw Error("norm: " + std::to_string(axes.size()) +
                " axes; give one (a vector norm) or two different ones (a matrix norm)");
  const int rows = axes[0], cols = axes[1];
  Array r;
  if (!ord) {
    r = sqrt(sum(v * v, {rows, cols}, true));
  } else if (*ord == 1.0 || *ord == -1.0) {  // column sums of |x|
    const Array s = sum(abs(v), {rows}, true);
    r = *ord > 0 ? max(s, {cols}, true) : min(s, {cols}, true);
  } else if (*ord == inf || *ord == -inf) {  // row sums
    const Array s = sum(abs(v), {cols}, true);
    r = *ord > 0 ? max(s, {rows}, true) : min(s, {rows}, true);
  } else {
    throw Error("norm: matrix ord " + std::to_string(*ord) +
                " is not available (2, -2 and the nuclear norm need a singular value decomposition, "
                "which meshvk lacks); give ord none (Frobenius), 1, -1, inf or -inf");
  }
  return keepdims ? r : squeeze(r, {rows, cols});
}

}  // namespace linalg

}  // namespace meshvk

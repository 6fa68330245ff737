// The public elementwise operations (ops.hpp): each one's promotion (graph/elementwise_core.hpp
// builds and fuses the program) and its gradient rule.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <variant>
#include <vector>

#include "graph/dtype_support.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/tape.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

using kernels::EwOp;
using detail::ew::arithmetic;
using detail::ew::comparison;
using detail::ew::elementwise;
using detail::ew::OperandType;
using detail::ew::promote;
using detail::ew::type_of_operand;
using detail::ew::unary;

namespace {

using detail::on_tape;

// A cotangent in its primal's dtype, as JAX's (bfloat16 + float32 gives a float32 cotangent
// that the bfloat16 operand receives as bfloat16).
Array in_dtype_of(const Array& ct, const Array& primal) {
  return ct.valid() && ct.dtype() != primal.dtype() ? astype(ct, primal.dtype()) : ct;
}

// Records a unary op whose cotangent rule is ct -> rule(ct).
Array taped(const Array& y, const Array& x, std::function<Array(const Array&)> rule) {
  return on_tape(y, {x}, [rule, x](const Array& ct) { return std::vector<Array>{in_dtype_of(rule(ct), x)}; });
}

// ct * c for a constant of the rules (weak scalars are float32 values): for a float64 ct, as
// ct * hi + ct * lo with c = hi + lo to 2^-48 (float32's 2^-24 would show in float64
// gradients); other dtypes keep the one product.
Array times_constant(const Array& ct, double c) {
  const float hi = static_cast<float>(c);
  if (ct.dtype() != DType::float64) return ct * hi;
  return ct * hi + ct * static_cast<float>(c - static_cast<double>(hi));
}

const Array* array_of(const Operand& o) { return std::get_if<Array>(&o.get()); }

// Records a binary op: each array operand gets its rule's cotangent, summed over the dimensions
// broadcasting added.
Array taped(const Array& y, const Operand& a, const Operand& b, std::function<Array(const Array&)> rule_a,
            std::function<Array(const Array&)> rule_b) {
  if (!detail::taping()) return y;
  const Array* pa = array_of(a);
  const Array* pb = array_of(b);
  std::vector<Array> inputs{pa ? *pa : Array(), pb ? *pb : Array()};
  return on_tape(y, inputs, [inputs, rule_a, rule_b](const Array& ct) {
    std::vector<Array> out(2);
    const std::function<Array(const Array&)>* rules[] = {&rule_a, &rule_b};
    for (int k = 0; k < 2; ++k)
      if (inputs[k].valid() && is_floating(inputs[k].dtype()) && *rules[k])
        out[k] = in_dtype_of(detail::unbroadcast((*rules[k])(ct), inputs[k].shape()), inputs[k]);
    return out;
  });
}

// jax.numpy on two bool arrays (no scalar: a C++ bool converts to a weak int): add and
// maximum are logical or, multiply and minimum logical and, and the result stays bool, as numpy
// does; subtract and negative are TypeErrors there and Errors here.
bool both_bool(const Operand& a, const Operand& b) {
  const Array* pa = array_of(a);
  const Array* pb = array_of(b);
  return pa && pb && pa->valid() && pb->valid() && pa->dtype() == DType::bool_ &&
         pb->dtype() == DType::bool_;
}

}  // namespace

Array negative(const Array& x) {
  if (x.valid() && x.dtype() == DType::bool_)
    throw Error(
        "negative: not defined for bool arrays (numpy: the boolean negative, the `-` operator, is "
        "not supported); use ~x or logical_not(x) to flip booleans");
  return taped(unary("negative", EwOp::neg, x), x, [](const Array& ct) { return -ct; });
}
Array abs(const Array& x) {
  if (x.valid() && x.dtype() == DType::bool_) return x;  // jnp.abs leaves bools as they are
  return taped(unary("abs", EwOp::abs, x), x, [x](const Array& ct) { return ct * sign(x); });
}
Array sign(const Array& x) { return unary("sign", EwOp::sign, x); }
Array exp(const Array& x) {
  const Array y = unary("exp", EwOp::exp, x);
  return taped(y, x, [y](const Array& ct) { return ct * y; });
}
Array log(const Array& x) {
  return taped(unary("log", EwOp::log, x), x, [x](const Array& ct) { return ct / x; });
}
Array sqrt(const Array& x) {
  const Array y = unary("sqrt", EwOp::sqrt, x);
  return taped(y, x, [y](const Array& ct) { return ct * 0.5f / y; });
}
Array rsqrt(const Array& x) {
  const Array y = unary("rsqrt", EwOp::rsqrt, x);
  return taped(y, x, [x, y](const Array& ct) { return ct * -0.5f * y / x; });
}
Array sin(const Array& x) {
  return taped(unary("sin", EwOp::sin, x), x, [x](const Array& ct) { return ct * cos(x); });
}
Array cos(const Array& x) {
  return taped(unary("cos", EwOp::cos, x), x, [x](const Array& ct) { return -ct * sin(x); });
}
Array tan(const Array& x) {
  const Array y = unary("tan", EwOp::tan, x);
  return taped(y, x, [y](const Array& ct) { return ct * (1.0f + y * y); });
}
Array arcsin(const Array& x) {
  return taped(unary("arcsin", EwOp::asin, x), x, [x](const Array& ct) { return ct * rsqrt(1.0f - x * x); });
}
Array arccos(const Array& x) {
  return taped(unary("arccos", EwOp::acos, x), x, [x](const Array& ct) { return -ct * rsqrt(1.0f - x * x); });
}
Array arctan(const Array& x) {
  return taped(unary("arctan", EwOp::atan, x), x, [x](const Array& ct) { return ct / (1.0f + x * x); });
}
Array erf(const Array& x) {
  // d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
  return taped(unary("erf", EwOp::erf, x), x, [x](const Array& ct) { return times_constant(ct, 1.1283791670955126) * exp(-(x * x)); });
}
Array erfinv(const Array& x) {
  // d/dx erfinv(x) = sqrt(pi)/2 exp(erfinv(x)^2)
  const Array y = unary("erfinv", EwOp::erfinv, x);
  return taped(y, x, [y](const Array& ct) { return times_constant(ct, 0.88622692545275801) * exp(y * y); });
}
Array tanh(const Array& x) {
  const Array y = unary("tanh", EwOp::tanh, x);
  return taped(y, x, [y](const Array& ct) { return ct * (1.0f - y * y); });
}
Array sigmoid(const Array& x) {
  const Array y = unary("sigmoid", EwOp::sigmoid, x);
  return taped(y, x, [y](const Array& ct) { return ct * y * (1.0f - y); });
}
Array expm1(const Array& x) {
  const Array y = unary("expm1", EwOp::expm1, x);
  return taped(y, x, [y](const Array& ct) { return ct * (y + 1.0f); });
}
Array log1p(const Array& x) {
  return taped(unary("log1p", EwOp::log1p, x), x, [x](const Array& ct) { return ct / (x + 1.0f); });
}
Array sinh(const Array& x) {
  return taped(unary("sinh", EwOp::sinh, x), x, [x](const Array& ct) { return ct * cosh(x); });
}
Array cosh(const Array& x) {
  return taped(unary("cosh", EwOp::cosh, x), x, [x](const Array& ct) { return ct * sinh(x); });
}
Array exp2(const Array& x) {
  const Array y = unary("exp2", EwOp::exp2, x);
  return taped(y, x, [y](const Array& ct) { return times_constant(ct * y, 0.69314718055994531); });
}
Array log2(const Array& x) {
  return taped(unary("log2", EwOp::log2, x), x, [x](const Array& ct) {
    return x.dtype() == DType::float64 ? times_constant(ct / x, 1.4426950408889634) : ct / (x * 0.6931471805599453f);
  });
}
Array asinh(const Array& x) {
  return taped(unary("asinh", EwOp::asinh, x), x, [x](const Array& ct) { return ct * rsqrt(x * x + 1.0f); });
}
Array acosh(const Array& x) {
  return taped(unary("acosh", EwOp::acosh, x), x, [x](const Array& ct) { return ct * rsqrt(x * x - 1.0f); });
}
Array atanh(const Array& x) {
  return taped(unary("atanh", EwOp::atanh, x), x, [x](const Array& ct) { return ct / (1.0f - x * x); });
}
Array relu(const Array& x) {
  return taped(unary("relu", EwOp::relu, x), x, [x](const Array& ct) { return where(x > 0.0f, ct, 0.0f); });
}
Array square(const Array& x) {
  return taped(unary("square", EwOp::square, x), x, [x](const Array& ct) { return ct * 2.0f * x; });
}
Array reciprocal(const Array& x) {
  const Array y = unary("reciprocal", EwOp::reciprocal, x);
  return taped(y, x, [y](const Array& ct) { return -ct * y * y; });
}
namespace {
// jnp.floor, ceil, trunc and round return integers and bools unchanged (no float copy), and
// their gradients are zero (no rule recorded), as JAX's.
Array rounded(const char* op, EwOp ew, const Array& x) {
  if (x.valid() && !is_floating(x.dtype())) return x;
  return unary(op, ew, x);
}
}  // namespace
Array floor(const Array& x) { return rounded("floor", EwOp::floor, x); }
Array ceil(const Array& x) { return rounded("ceil", EwOp::ceil, x); }
Array trunc(const Array& x) { return rounded("trunc", EwOp::trunc, x); }
Array rint(const Array& x) { return rounded("rint", EwOp::round_even, x); }
Array round(const Array& x, int decimals) {
  if (decimals == 0 || !x.valid()) return rounded("round", EwOp::round_even, x);
  const DType t = x.dtype();
  if (t == DType::bool_ || (!is_floating(t) && decimals > 0)) return x;
  if (!is_floating(t)) {
    // Integers to a multiple of 10^-decimals, halves to the even multiple (numpy's rule).
    if (t == DType::uint32) return astype(round(astype(x, DType::int64), decimals), t);  // exact in int64
    const int digits = -decimals;
    const int max_digits = t == DType::int64 ? 18 : t == DType::int32 ? 9 : 2;
    if (digits > max_digits) return zeros_like(x);  // every |x| is below half the factor
    int64_t f = 1;
    for (int i = 0; i < digits; ++i) f *= 10;
    const DType wide = t == DType::int64 ? DType::int64 : DType::int32;
    const Array xi = astype(x, wide);
    const Array factor = full_like(xi, static_cast<double>(f));
    const Array q = floor_divide(xi, factor);
    const Array r = xi - q * factor;  // in [0, f)
    const Array up = (r * 2 > factor) | ((r * 2 == factor) & (remainder(q, 2) != 0));
    return astype((q + astype(up, wide)) * factor, t);
  }
  // numpy's rule: rint(x * 10^d) / 10^d, or for d < 0 rint(x / 10^-d) * 10^-d, so that the
  // factor is exact (float16 through float32, as JAX's).
  const int max_exponent = t == DType::float64 ? 308 : 38;
  if (decimals > max_exponent || decimals < -max_exponent)
    throw Error("round: decimals = " + std::to_string(decimals) + " puts 10^" + std::to_string(std::abs(decimals)) +
                " past " + std::string(dtype_name(t)) + "'s range; give |decimals| <= " + std::to_string(max_exponent));
  const bool via32 = t == DType::float16 || t == DType::bfloat16;
  const Array v = via32 ? astype(x, DType::float32) : x;
  const Array factor = full_like(v, std::pow(10.0, std::abs(decimals)));
  const Array r = decimals > 0 ? unary("round", EwOp::round_even, v * factor) / factor
                               : unary("round", EwOp::round_even, v / factor) * factor;
  return via32 ? astype(r, t) : r;
}
Array logical_not(const Array& x) { return elementwise("logical_not", EwOp::logical_not, {x}, DType::bool_, DType::bool_); }
Array astype(const Array& x, DType dtype) {
  detail::check_dtype("astype", dtype);
  if (x.dtype() == dtype) return x;
  const Array y = elementwise("astype", EwOp::cast, {x}, x.dtype(), dtype);
  // Between floating dtypes the cotangent converts back (ints and bools carry none).
  if (!is_floating(x.dtype()) || !is_floating(dtype)) return y;
  return taped(y, x, [](const Array& ct) { return ct; });
}

Array detail::convert_untaped(const Array& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return elementwise("astype", EwOp::cast, {x}, x.dtype(), dtype);
}

// True division and arctan2: the operands' floating type, float32 for integers (float64 for
// int64, as JAX's to_inexact_dtype).
static DType float_result(const Operand& a, const Operand& b) {
  const DType t = promote({type_of_operand(a), type_of_operand(b)});
  return is_floating(t) ? t : t == DType::int64 ? DType::float64 : DType::float32;
}

Array add(const Operand& a, const Operand& b) {
  if (both_bool(a, b)) return logical_or(a, b);
  const auto id = [](const Array& ct) { return ct; };
  return taped(arithmetic("add", EwOp::add, a, b), a, b, id, id);
}
Array subtract(const Operand& a, const Operand& b) {
  if (both_bool(a, b))
    throw Error(
        "subtract: not defined for two bool arrays (numpy: the boolean subtract, the `-` operator, "
        "is not supported); use x ^ y or logical_xor(x, y), or astype(int32) first for integer "
        "differences");
  return taped(arithmetic("subtract", EwOp::sub, a, b), a, b, [](const Array& ct) { return ct; },
               [](const Array& ct) { return -ct; });
}
Array multiply(const Operand& a, const Operand& b) {
  if (both_bool(a, b)) return logical_and(a, b);
  return taped(arithmetic("multiply", EwOp::mul, a, b), a, b, [b](const Array& ct) { return multiply(ct, b); },
               [a](const Array& ct) { return multiply(ct, a); });
}
Array arctan2(const Operand& a, const Operand& b) {
  // d atan2(a, b) = (b da - a db) / (a^2 + b^2)
  const DType t = float_result(a, b);
  return taped(elementwise("arctan2", EwOp::atan2, {a, b}, t, t), a, b,
               [a, b](const Array& ct) { return multiply(ct, b) / add(multiply(a, a), multiply(b, b)); },
               [a, b](const Array& ct) { return negative(multiply(ct, a)) / add(multiply(a, a), multiply(b, b)); });
}
Array divide(const Operand& a, const Operand& b) {
  const DType t = float_result(a, b);
  return taped(elementwise("divide", EwOp::div, {a, b}, t, t), a, b,
               [b](const Array& ct) { return divide(ct, b); },
               [a, b](const Array& ct) { return negative(multiply(ct, a)) / multiply(b, b); });
}
Array floor_divide(const Operand& a, const Operand& b) { return arithmetic("floor_divide", EwOp::floordiv, a, b); }
Array remainder(const Operand& a, const Operand& b) {
  return taped(arithmetic("remainder", EwOp::mod, a, b), a, b, [](const Array& ct) { return ct; },
               [a, b](const Array& ct) { return negative(ct) * floor_divide(a, b); });
}
Array power(const Operand& a, const Operand& b) {
  // As XLA does: a constant exponent of 2, 0.5, -0.5 or -1 becomes the exact operation.
  if (const auto* x = std::get_if<Array>(&a.get())) {
    if (const auto* e = std::get_if<float>(&b.get())) {
      const Array f = is_floating(x->dtype()) ? *x : astype(*x, DType::float32);
      if (*e == 2.0f) return square(f);
      if (*e == -1.0f) return reciprocal(f);
      // pow's values where sqrt's differ (C and numpy: pow(-inf, 0.5) = inf, pow(-0, 0.5) = +0,
      // pow(-inf, -0.5) = 0, pow(-0, -0.5) = +inf; sqrt(-inf) is NaN, sqrt(-0) -0), with pow's
      // gradient e * x^(e - 1) (the selections' own would be NaN or -inf at 0, JAX's is not).
      if (*e == 0.5f || *e == -0.5f) {
        constexpr float inf = std::numeric_limits<float>::infinity();
        const float exponent = *e;
        Array y;
        {
          const detail::TapeIsolation untaped({});
          y = exponent > 0 ? where(equal(f, -inf), inf, add(sqrt(f), 0.0f))
                           : where(equal(f, -inf), 0.0f, where(equal(f, 0.0f), inf, rsqrt(f)));
        }
        return taped(y, f, [f, exponent](const Array& ct) { return ct * (exponent * power(f, exponent - 1.0f)); });
      }
    }
  }
  const Array y = arithmetic("power", EwOp::pow, a, b);
  // As JAX's: d/da is 0 where b is 0 (not 0 * a^-1, NaN at a = 0), d/db reads log(1) where a is 0
  // (not y * log(0), NaN where y is 0).
  return taped(y, a, b,
               [a, b](const Array& ct) { return ct * where(equal(b, 0.0f), 0.0f, multiply(b, power(a, subtract(b, 1.0f)))); },
               [a, y](const Array& ct) {
                 // log(a) in the result's dtype: a weak scalar base of a float64 power is a float64.
                 return ct * y * log(astype(where(equal(a, 0.0f), 1.0f, add(a, 0.0f)), y.dtype()));
               });
}
// Ties share the cotangent equally, as in JAX.
Array maximum(const Operand& a, const Operand& b) {
  if (both_bool(a, b)) return logical_or(a, b);
  return taped(arithmetic("maximum", EwOp::maximum, a, b), a, b,
               [a, b](const Array& ct) { return where(greater(a, b), ct, where(equal(a, b), ct * 0.5f, 0.0f)); },
               [a, b](const Array& ct) { return where(less(a, b), ct, where(equal(a, b), ct * 0.5f, 0.0f)); });
}
Array minimum(const Operand& a, const Operand& b) {
  if (both_bool(a, b)) return logical_and(a, b);
  return taped(arithmetic("minimum", EwOp::minimum, a, b), a, b,
               [a, b](const Array& ct) { return where(less(a, b), ct, where(equal(a, b), ct * 0.5f, 0.0f)); },
               [a, b](const Array& ct) { return where(greater(a, b), ct, where(equal(a, b), ct * 0.5f, 0.0f)); });
}
Array equal(const Operand& a, const Operand& b) { return comparison("equal", EwOp::eq, a, b); }
Array not_equal(const Operand& a, const Operand& b) { return comparison("not_equal", EwOp::ne, a, b); }
Array less(const Operand& a, const Operand& b) { return comparison("less", EwOp::lt, a, b); }
Array less_equal(const Operand& a, const Operand& b) { return comparison("less_equal", EwOp::le, a, b); }
Array greater(const Operand& a, const Operand& b) { return comparison("greater", EwOp::gt, a, b); }
Array greater_equal(const Operand& a, const Operand& b) { return comparison("greater_equal", EwOp::ge, a, b); }
Array logical_and(const Operand& a, const Operand& b) {
  return elementwise("logical_and", EwOp::logical_and, {a, b}, DType::bool_, DType::bool_);
}
Array logical_or(const Operand& a, const Operand& b) {
  return elementwise("logical_or", EwOp::logical_or, {a, b}, DType::bool_, DType::bool_);
}
Array logical_xor(const Operand& a, const Operand& b) {
  return elementwise("logical_xor", EwOp::ne, {a, b}, DType::bool_, DType::bool_);
}

namespace {

// numpy's bitwise ops: logical on two bools, bitwise on integers, a TypeError on floats.
Array bitwise(const char* op, EwOp ew, EwOp on_bools, const Operand& a, const Operand& b) {
  const OperandType ta = type_of_operand(a), tb = type_of_operand(b);
  if (is_floating(ta.dtype) || is_floating(tb.dtype))
    throw Error(std::string(op) + ": not defined for " +
                std::string(dtype_name(is_floating(ta.dtype) ? ta.dtype : tb.dtype)) +
                " operands (numpy and JAX raise a TypeError too); "
                "use int32 or bool operands (astype first), or logical_and / logical_or / "
                "logical_xor for truth values");
  if (ta.dtype == DType::bool_ && tb.dtype == DType::bool_)
    return elementwise(op, on_bools, {a, b}, DType::bool_, DType::bool_);
  const DType t = promote({ta, tb});  // int8 & int8 is int8, int64 | 1 is int64
  return elementwise(op, ew, {a, b}, t, t);
}

}  // namespace

Array bitwise_and(const Operand& a, const Operand& b) {
  return bitwise("bitwise_and", EwOp::bitwise_and, EwOp::logical_and, a, b);
}
Array bitwise_or(const Operand& a, const Operand& b) {
  return bitwise("bitwise_or", EwOp::bitwise_or, EwOp::logical_or, a, b);
}
Array bitwise_xor(const Operand& a, const Operand& b) {
  return bitwise("bitwise_xor", EwOp::bitwise_xor, EwOp::ne, a, b);
}
Array bitwise_not(const Array& x) {
  if (x.valid() && x.dtype() == DType::bool_) return logical_not(x);
  return bitwise("bitwise_not", EwOp::bitwise_xor, EwOp::ne, x, -1);  // ~x == x ^ -1 (all bits set)
}

Array where(const Operand& condition, const Operand& x, const Operand& y) {
  const DType t =
      both_bool(x, y) ? DType::bool_ : promote({type_of_operand(x), type_of_operand(y)});
  const Array r = elementwise("where", EwOp::where, {condition, x, y}, t, t);
  return taped(r, x, y, [condition](const Array& ct) { return where(condition, ct, 0.0f); },
               [condition](const Array& ct) { return where(condition, 0.0f, ct); });
}

}  // namespace meshvk

// The math library's trigonometric and error functions (engine/src/kernels/mathlib: sin, cos,
// tan, arcsin, arccos, arctan, arctan2, erf, erfinv) beyond the shared dense-sample and
// bit-identity tests of test_mathlib.cpp: C's special values and signs of zero, huge arguments,
// atan2 over a grid of pairs and at quotients near powers of two (both variants' host copies
// within 1 ulp, the float64 one nearly correctly rounded; kernels bit-identical to the copy of the
// variant the runtime picks), and the gradients.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "mathlib_check.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace host = meshvk::mathlib::host;
using mathlib_check::atan2_error_ulps;
using mathlib_check::hex;
using mathlib_check::same_bits;
using mathlib_check::ulp_distance;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Pairs (y, x) for atan2: every step-th bit pattern of each against a set of x, plus the specials.
std::vector<std::pair<float, float>> atan2_pairs(uint32_t step) {
  std::vector<float> xs = {0.0f,   -0.0f,   kInf,  -kInf,  kNaN,   1.0f, -1.0f,
                           1e-45f, -1e-45f, 3e38f, -3e38f, 1e-30f, -7.5f};
  std::vector<std::pair<float, float>> pairs;
  for (uint64_t u = 0; u < (1ull << 32); u += step) {
    const float y = std::bit_cast<float>(static_cast<uint32_t>(u));
    for (const float x : xs) pairs.push_back({y, x});
    pairs.push_back(
        {y, std::bit_cast<float>(static_cast<uint32_t>(u * 2654435761u))});  // scattered x
  }
  for (const float y : xs)
    for (const float x : xs) pairs.push_back({y, x});
  return pairs;
}

// arctan2's two variants (engine/src/kernels/mathlib/atan2.inc, atan2_64.inc): float-float, and
// float64 for adapters with shaderFloat64 unless MESHVK_MATHLIB_FLOAT64=0.
struct Atan2Variant {
  const char* name;
  float (*f)(float, float);
  long double bound;  // the largest error allowed, in ulps of the correctly rounded result
};
// The float64 one rounds a double within about 2^-50 once: correctly rounded but where the exact
// value lies within 2^-20 ulp of a midpoint.
const Atan2Variant kAtan2Variants[] = {{"float-float", host::mvk_atan2, 1.0L},
                                       {"float64", host::mvk_atan2_64, 0.5L + 0x1p-20L}};

// The host copy whose bits the current runtime's arctan2 kernels compute.
float (*atan2_host())(float, float) {
  auto& rt = *mv::Runtime::current().state();
  return rt.mathlib_float64(rt.device().adapter()) ? host::mvk_atan2_64 : host::mvk_atan2;
}

// The number of pairs whose kernel result differs from want's bits; prints the first few.
int atan2_device_differences(const std::vector<std::pair<float, float>>& pairs,
                             float (*want)(float, float)) {
  std::vector<float> ys, xs;
  for (const auto& [y, x] : pairs) ys.push_back(y), xs.push_back(x);
  const auto got = mv::arctan2(host_array(ys), host_array(xs)).to_host<float>();
  EXPECT_EQ(got.size(), ys.size());
  const mathlib_check::HostFlushesAsAdapter as_adapter;
  int bad = 0;
  for (size_t i = 0; i < std::min(got.size(), ys.size()); ++i)
    if (!as_adapter.same_as_host(got[i], [&] { return want(ys[i], xs[i]); }) && ++bad <= 5)
      ADD_FAILURE() << "arctan2(" << hex(ys[i]) << ", " << hex(xs[i]) << "): device " << hex(got[i])
                    << ", host " << hex(want(ys[i], xs[i]));
  return bad;
}

}  // namespace

// C99 Annex F / numpy: the signs of zero and the values at the edges, bit for bit.
TEST(MathlibTrig, SpecialValuesAsLibm) {
  struct Case {
    const char* name;
    float (*f)(float);
    float x, want;
  };
  const float pi = 3.14159274f, pio2 = 1.57079637f;
  const Case cases[] = {
      {"sin", host::mvk_sin, 0.0f, 0.0f},       {"sin", host::mvk_sin, -0.0f, -0.0f},
      {"sin", host::mvk_sin, kInf, kNaN},       {"sin", host::mvk_sin, -kInf, kNaN},
      {"cos", host::mvk_cos, -0.0f, 1.0f},      {"cos", host::mvk_cos, kInf, kNaN},
      {"tan", host::mvk_tan, -0.0f, -0.0f},     {"tan", host::mvk_tan, -kInf, kNaN},
      {"arcsin", host::mvk_asin, -0.0f, -0.0f}, {"arcsin", host::mvk_asin, 1.0f, pio2},
      {"arcsin", host::mvk_asin, -1.0f, -pio2}, {"arcsin", host::mvk_asin, 1.0000001f, kNaN},
      {"arccos", host::mvk_acos, 1.0f, 0.0f},   {"arccos", host::mvk_acos, -1.0f, pi},
      {"arccos", host::mvk_acos, 0.0f, pio2},   {"arccos", host::mvk_acos, -kInf, kNaN},
      {"arctan", host::mvk_atan, -0.0f, -0.0f}, {"arctan", host::mvk_atan, kInf, pio2},
      {"arctan", host::mvk_atan, -kInf, -pio2}, {"erf", host::mvk_erf, -0.0f, -0.0f},
      {"erf", host::mvk_erf, kInf, 1.0f},       {"erf", host::mvk_erf, -kInf, -1.0f},
      {"erf", host::mvk_erf, 1e-45f, 1e-45f},   {"erfinv", host::mvk_erfinv, -0.0f, -0.0f},
      {"erfinv", host::mvk_erfinv, 1.0f, kInf}, {"erfinv", host::mvk_erfinv, -1.0f, -kInf},
      {"erfinv", host::mvk_erfinv, 1.5f, kNaN}, {"erfinv", host::mvk_erfinv, -kInf, kNaN},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(same_bits(c.f(c.x), c.want))
        << c.name << "(" << hex(c.x) << ") = " << hex(c.f(c.x)) << ", want " << hex(c.want);
    EXPECT_TRUE(std::isnan(c.f(kNaN))) << c.name << "(NaN)";
  }
  for (const Atan2Variant& v : kAtan2Variants)
    for (const float y : {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, 1e-45f, -3e38f, kNaN})
      for (const float x : {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, 1e-45f, -3e38f, kNaN})
        EXPECT_TRUE(
            same_bits(v.f(y, x), static_cast<float>(std::atan2(static_cast<long double>(y),
                                                               static_cast<long double>(x)))))
            << v.name << " atan2(" << hex(y) << ", " << hex(x) << ") = " << hex(v.f(y, x));
}

// sin and cos of the largest floats and of those closest to a multiple of pi/2 (the reduction
// keeps 2/pi to 224 bits), against long double.
TEST(MathlibTrig, HugeArgumentsWithinOneUlp) {
  for (const float x : {3.40282347e38f, -3.40282347e38f, 1e30f, 8.5e37f, 16777216.0f, 1.0e22f,
                        std::bit_cast<float>(0x5922aa80u), std::bit_cast<float>(0x6a1976f1u),
                        std::bit_cast<float>(0x4b9b8d23u), 102965.109f, 6.2831855f, 1.5707964f}) {
    EXPECT_LE(
        ulp_distance(host::mvk_sin(x), static_cast<float>(std::sin(static_cast<long double>(x)))),
        1u)
        << hex(x);
    EXPECT_LE(
        ulp_distance(host::mvk_cos(x), static_cast<float>(std::cos(static_cast<long double>(x)))),
        1u)
        << hex(x);
    EXPECT_LE(
        ulp_distance(host::mvk_tan(x), static_cast<float>(std::tan(static_cast<long double>(x)))),
        1u)
        << hex(x);
  }
}

TEST(MathlibTrig, Atan2HostWithinOneUlp) {
  const auto pairs = atan2_pairs(65537);
  for (const Atan2Variant& v : kAtan2Variants) {
    uint64_t worst = 0;
    long double worst_error = 0;
    std::pair<float, float> at{}, error_at{};
    for (const auto& [y, x] : pairs) {
      const float want =
          static_cast<float>(std::atan2(static_cast<long double>(y), static_cast<long double>(x)));
      const uint64_t d = ulp_distance(v.f(y, x), want);
      if (d > worst) worst = d, at = {y, x};
      const long double e = atan2_error_ulps(v.f(y, x), y, x);
      if (e > worst_error) worst_error = e, error_at = {y, x};
    }
    EXPECT_LE(worst, 1u) << v.name << " atan2(" << hex(at.first) << ", " << hex(at.second) << ")";
    EXPECT_LE(worst_error, v.bound)
        << v.name << " atan2(" << hex(error_at.first) << ", " << hex(error_at.second) << ")";
    std::cout << "mathlib arctan2 (" << v.name << "): max " << worst << " ulp, max error "
              << static_cast<double>(worst_error) << " ulp\n";
  }
}

// Quotients near powers of two: every result within 1 ulp (less than one ulp from the exact
// value), the example correctly rounded, and the kernels bit-identical to the host copy.
TEST(MathlibTrig, Atan2NearPowersOfTwoWithinOneUlp) {
  const auto pairs = mathlib_check::atan2_near_power_pairs(400000, 31);
  for (const Atan2Variant& v : kAtan2Variants) {
    EXPECT_TRUE(same_bits(v.f(0x1.000002p+0f, 0x1.fffffep+6f), 0x1.fffd5cp-8f))
        << v.name << " " << hex(v.f(0x1.000002p+0f, 0x1.fffffep+6f));
    long double worst = 0;
    std::pair<float, float> at{};
    int over = 0;
    for (const auto& [y, x] : pairs) {
      const long double e = atan2_error_ulps(v.f(y, x), y, x);
      if (e >= 1) ++over;
      if (e > worst) worst = e, at = {y, x};
    }
    EXPECT_LT(worst, 1.0L) << v.name << ": " << over << " of " << pairs.size()
                           << " pairs 1 ulp or more off";
    EXPECT_LE(worst, v.bound) << v.name << " atan2(" << hex(at.first) << ", " << hex(at.second)
                              << ") = " << hex(v.f(at.first, at.second));
    std::cout << "mathlib arctan2 (" << v.name << ") near powers of two: max error "
              << static_cast<double>(worst) << " ulp\n";
  }
  // The kernels: the default variant (float64 on lavapipe), then the float-float one. The two
  // differ on some of these pairs (where float-float is not correctly rounded), so each check
  // also tells which variant ran.
  int variants_differ = 0;
  for (const auto& [y, x] : pairs)
    variants_differ += same_bits(host::mvk_atan2(y, x), host::mvk_atan2_64(y, x)) ? 0 : 1;
  EXPECT_GT(variants_differ, 0);
  EXPECT_EQ(atan2_device_differences(pairs, atan2_host()), 0);
  const ScopedEnv off("MESHVK_MATHLIB_FLOAT64", "0");
  mv::Runtime rt;
  ASSERT_FALSE(rt.state()->mathlib_float64(rt.state()->device().adapter()));
  EXPECT_EQ(atan2_device_differences(pairs, host::mvk_atan2), 0);
}

TEST(MathlibTrig, Atan2DeviceBitIdenticalToHost) {
  const auto pairs = atan2_pairs(1048573);
  const auto want = atan2_host();
  EXPECT_EQ(atan2_device_differences(pairs, want), 0);
  // A broadcast scalar operand takes the strided kernel: the same bits there.
  std::vector<float> ys;
  for (const auto& [y, x] : pairs) ys.push_back(y);
  const auto row = mv::arctan2(host_array(ys), -2.5f).to_host<float>();
  const mathlib_check::HostFlushesAsAdapter as_adapter;
  for (size_t i = 0; i < ys.size(); ++i)
    ASSERT_TRUE(as_adapter.same_as_host(row[i], [&] { return want(ys[i], -2.5f); })) << hex(ys[i]);
}

// The gradients (jax.grad of each op) at a few points, against the closed forms in long double.
TEST(MathlibTrig, Gradients) {
  const std::vector<float> x = {-0.9f, -0.3f, 0.0f, 0.2f, 0.7f};
  const auto xs = host_array(x);
  struct Case {
    const char* name;
    std::function<mv::Array(const mv::Array&)> f;
    std::function<long double(long double)> d;
  };
  const Case cases[] = {
      {"tan", [](const mv::Array& a) { return mv::tan(a); },
       [](long double v) { return 1 / (std::cos(v) * std::cos(v)); }},
      {"arcsin", [](const mv::Array& a) { return mv::arcsin(a); },
       [](long double v) { return 1 / std::sqrt(1 - v * v); }},
      {"arccos", [](const mv::Array& a) { return mv::arccos(a); },
       [](long double v) { return -1 / std::sqrt(1 - v * v); }},
      {"arctan", [](const mv::Array& a) { return mv::arctan(a); },
       [](long double v) { return 1 / (1 + v * v); }},
      {"erf", [](const mv::Array& a) { return mv::erf(a); },
       [](long double v) { return 1.128379167095512574L * std::exp(-v * v); }},
      {"erfinv", [](const mv::Array& a) { return mv::erfinv(a); },
       [](long double v) {
         const long double y = mathlib_check::ref_erfinv(v);
         return 0.886226925452758014L * std::exp(y * y);
       }},
  };
  for (const Case& c : cases) {
    const auto g =
        mv::grad([&](const mv::Array& a) { return mv::sum(c.f(a)); })(xs).to_host<float>();
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(g[i], static_cast<float>(c.d(x[i])), 1e-5f * std::max(1.0f, std::fabs(g[i])))
          << c.name << "'(" << x[i] << ")";
  }
  const auto y = host_array({1.0f, -2.0f, 0.5f, 3.0f, -0.25f});
  const auto gy =
      mv::grad([&](const mv::Array& a) { return mv::sum(mv::arctan2(a, xs + 1.5f)); })(y)
          .to_host<float>();
  const auto gx =
      mv::grad([&](const mv::Array& b) { return mv::sum(mv::arctan2(y, b)); })(xs + 1.5f)
          .to_host<float>();
  const std::vector<float> yv = y.to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    const float b = x[i] + 1.5f, a = yv[i];
    EXPECT_NEAR(gy[i], b / (a * a + b * b), 1e-5f) << i;
    EXPECT_NEAR(gx[i], -a / (a * a + b * b), 1e-5f) << i;
  }
}

// jax.lax's spellings are the same ops.
TEST(MathlibTrig, LaxNames) {
  const auto x = host_array({-0.5f, 0.25f, 0.75f});
  const auto bits = [](const mv::Array& a) { return a.to_host<float>(); };
  EXPECT_EQ(bits(mv::asin(x)), bits(mv::arcsin(x)));
  EXPECT_EQ(bits(mv::acos(x)), bits(mv::arccos(x)));
  EXPECT_EQ(bits(mv::atan(x)), bits(mv::arctan(x)));
  EXPECT_EQ(bits(mv::erf_inv(x)), bits(mv::erfinv(x)));
  EXPECT_EQ(bits(mv::atan2(x, 2.0f)), bits(mv::arctan2(x, 2.0f)));
}

// MESHVK_FAST_MATH=1 swaps in the driver's built-ins where GLSL has one (tan, asin, acos, atan,
// atan(y, x): lavapipe's asin is 2e-4 off, hence the loose bound); erf and erfinv have none, so
// they stay the library's, bit for bit.
TEST(MathlibTrig, FastMathKeepsTheLibraryWhereGlslHasNoBuiltin) {
  const std::vector<float> xs = {-3.0f, -0.7f, -1e-3f, 0.0f, 0.3f, 0.9f, 2.5f};
  const std::vector<float> us = {-0.99f, -0.5f, -1e-3f, 0.0f, 0.3f, 0.75f, 0.999f};
  const ScopedEnv on("MESHVK_FAST_MATH", "1");
  mv::Runtime rt;
  ASSERT_TRUE(rt.state()->fast_math());
  const auto e = mv::erf(host_array(xs)).to_host<float>();
  const auto ei = mv::erfinv(host_array(us)).to_host<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(same_bits(e[i], host::mvk_erf(xs[i]))) << "erf(" << xs[i] << ")";
    EXPECT_TRUE(same_bits(ei[i], host::mvk_erfinv(us[i]))) << "erfinv(" << us[i] << ")";
  }
  const auto t = mv::tan(host_array(xs)).to_host<float>();
  const auto a = mv::arcsin(host_array(us)).to_host<float>();
  const auto b = mv::arccos(host_array(us)).to_host<float>();
  const auto c = mv::arctan(host_array(xs)).to_host<float>();
  const auto d = mv::arctan2(host_array(xs), host_array(us)).to_host<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(t[i], std::tan(xs[i]), 2e-3f * std::max(1.0f, std::fabs(std::tan(xs[i])))) << xs[i];
    EXPECT_NEAR(a[i], std::asin(us[i]), 2e-3f) << us[i];
    EXPECT_NEAR(b[i], std::acos(us[i]), 2e-3f) << us[i];
    EXPECT_NEAR(c[i], std::atan(xs[i]), 2e-3f) << xs[i];
    if (us[i] != 0.0f) {
      EXPECT_NEAR(d[i], std::atan2(xs[i], us[i]), 2e-3f) << xs[i] << ", " << us[i];
    }
  }
}

// arctan's reduction point k = round(8x): at 8x = 0.49999997 a rounding t + 0.5 gave k = 1 and an
// inexact x - 1/8 (1.27 ulp off, 0x1.ff55bcp-5); the correctly rounded result is exact here.
TEST(MathlibTrig, ArctanReductionBoundary) {
  EXPECT_TRUE(same_bits(host::mvk_atan(0x1.fffffep-5f), 0x1.ff55bap-5f))
      << hex(host::mvk_atan(0x1.fffffep-5f));
  EXPECT_TRUE(
      same_bits(mv::arctan(host_array({0x1.fffffep-5f})).to_host<float>()[0], 0x1.ff55bap-5f));
}

// The math library's float64 variants of sin, cos and tan (engine/src/kernels/mathlib/trig64.inc,
// sin64.inc, cos64.inc, tan64.inc), which kernels run on adapters with shaderFloat64: the host
// copy within an ulp of long double libm and nearly always correctly rounded, C's special values,
// and the kernels bit-identical to the host copy of the variant the runtime picks, float64 by
// default on lavapipe and float-float under MESHVK_MATHLIB_FLOAT64=0.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <sstream>

#include "mathlib_check.hpp"
#include "mathlib_variants.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace host = meshvk::mathlib::host;
using mathlib_check::hex;
using mathlib_check::same_bits;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Every step-th bit pattern, the specials, the floats around the edges of the |x| < 2^-12
// shortcut and of the reduction's 2/pi words (exponents where the window slides), and the floats
// closest to multiples of pi/2 that test_mathlib_trig names.
std::vector<float> sample(uint32_t step) {
  std::vector<float> xs;
  for (uint64_t u = 0; u < (1ull << 32); u += step)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (const float s : {0.0f, -0.0f, kInf, -kInf, kNaN, 1e-45f, -1e-45f, 1.17549435e-38f,
                        3.40282347e38f, -3.40282347e38f, std::bit_cast<float>(0x5922aa80u),
                        std::bit_cast<float>(0x6a1976f1u), std::bit_cast<float>(0x4b9b8d23u),
                        102965.109f, 6.2831855f, 1.5707964f, 3.14159274f, 4.71238899f})
    xs.push_back(s);
  for (const float p : {2.44140625e-4f, 1.0f, 8.0f, 2048.0f, 8388608.0f, 2.14748365e9f, 9.2e18f}) {
    float up = p, down = p;
    for (int i = 0; i < 512; ++i) {
      up = std::nextafter(up, kInf);
      down = std::nextafter(down, 0.0f);
      xs.push_back(up);
      xs.push_back(-down);
    }
  }
  return xs;
}

struct Variant {
  const char* name;
  float (*f64)(float);
  float (*ff)(float);
  long double (*reference)(long double);
};

const Variant kVariants[] = {
    {"sin", host::mvk_sin64, host::mvk_sin, [](long double x) { return std::sin(x); }},
    {"cos", host::mvk_cos64, host::mvk_cos, [](long double x) { return std::cos(x); }},
    {"tan", host::mvk_tan64, host::mvk_tan, [](long double x) { return std::tan(x); }},
};

mv::Array (*public_op(const std::string& name))(const mv::Array&) {
  return name == "sin" ? mv::sin : name == "cos" ? mv::cos : mv::tan;
}

// The error of f64(x) against long double libm, in ulps of the correctly rounded result.
long double error_ulps(const Variant& v, float x) {
  const long double exact = v.reference(static_cast<long double>(x));
  return std::fabs(static_cast<long double>(v.f64(x)) - exact) / mathlib_variants::ulp_of(static_cast<float>(exact));
}

}  // namespace

// One rounding of a double accurate to about 2^-50: within 0.5 + 2^-20 ulp of the exact value,
// so correctly rounded but for inputs whose value lies that close to a rounding boundary (1 in
// 44M on every 97th float; the all-2^32 sweep is in README.md). The float-float variant, for
// comparison, is 0.54 ulp off at worst.
TEST(MathlibFloat64, HostCopyNearlyCorrectlyRounded) {
  const std::vector<float> xs = sample(4093);
  for (const Variant& v : kVariants) {
    const mathlib_variants::Rounding r = mathlib_variants::rounding_of(v.name, v.f64, v.reference, xs);
    EXPECT_LE(r.worst, 0.5L + 0x1p-20L) << v.name << "(" << hex(r.worst_x) << ") = " << hex(v.f64(r.worst_x));
    EXPECT_LE(r.not_rounded, 2) << v.name;
  }
}

// C99 Annex F / numpy: NaN for NaN and +-inf, the sign of zero, x for tiny x (subnormals too),
// and symmetry bit for bit: sin and tan odd, cos even.
TEST(MathlibFloat64, SpecialValuesAndSymmetry) {
  for (const Variant& v : kVariants) {
    EXPECT_TRUE(std::isnan(v.f64(kNaN))) << v.name;
    EXPECT_TRUE(std::isnan(v.f64(kInf))) << v.name;
    EXPECT_TRUE(std::isnan(v.f64(-kInf))) << v.name;
  }
  EXPECT_TRUE(same_bits(host::mvk_sin64(-0.0f), -0.0f));
  EXPECT_TRUE(same_bits(host::mvk_sin64(0.0f), 0.0f));
  EXPECT_TRUE(same_bits(host::mvk_tan64(-0.0f), -0.0f));
  EXPECT_TRUE(same_bits(host::mvk_cos64(-0.0f), 1.0f));
  for (const float x : {1e-45f, -1e-45f, 1e-40f, 1.17549435e-38f, 2.4414062e-4f, -2.4414062e-4f}) {
    EXPECT_TRUE(same_bits(host::mvk_sin64(x), x)) << hex(x);
    EXPECT_TRUE(same_bits(host::mvk_tan64(x), x)) << hex(x);
    EXPECT_TRUE(same_bits(host::mvk_cos64(x), 1.0f)) << hex(x);
  }
  for (uint64_t u = 0; u < 0x7f800000u; u += 65521) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_TRUE(same_bits(host::mvk_sin64(-x), -host::mvk_sin64(x))) << hex(x);
    ASSERT_TRUE(same_bits(host::mvk_tan64(-x), -host::mvk_tan64(x))) << hex(x);
    ASSERT_TRUE(same_bits(host::mvk_cos64(-x), host::mvk_cos64(x))) << hex(x);
  }
}

// The default runtime on an adapter with shaderFloat64 (lavapipe has it) runs the float64
// variants, in both kinds of elementwise kernel, bit for bit as the host copy.
TEST(MathlibFloat64, DeviceBitIdenticalToHostFloat64Copy) {
  SKIP_UNDER_FAST_MATH();
  const ScopedEnv unset("MESHVK_MATHLIB_FLOAT64", nullptr);  // the default, whatever the caller set
  mv::Runtime runtime;
  auto& rt = *runtime.state();
  if (!rt.device().adapter().float64) GTEST_SKIP() << "the adapter has no shaderFloat64";
  ASSERT_TRUE(rt.mathlib_float64(rt.device().adapter()));
  const std::vector<float> xs = sample(8191);
  for (const Variant& v : kVariants)
    EXPECT_EQ(mathlib_variants::device_differences(v.name, public_op(v.name), xs, v.f64), 0) << v.name << " of " << xs.size();
}

// MESHVK_MATHLIB_FLOAT64=0 keeps the float-float variants (the ones adapters without
// shaderFloat64 run), bit for bit as their host copy.
TEST(MathlibFloat64, SwitchOffRunsTheFloatFloatVariants) {
  SKIP_UNDER_FAST_MATH();
  const ScopedEnv off("MESHVK_MATHLIB_FLOAT64", "0");
  mv::Runtime rt;
  ASSERT_FALSE(rt.state()->mathlib_float64(rt.state()->device().adapter()));
  const std::vector<float> xs = sample(8191);
  for (const Variant& v : kVariants)
    EXPECT_EQ(mathlib_variants::device_differences(v.name, public_op(v.name), xs, v.ff), 0) << v.name << " of " << xs.size();
}

TEST(MathlibFloat64, SwitchIsParsedStrictlyAndOnRequiresTheFeature) {
  {
    const ScopedEnv bad("MESHVK_MATHLIB_FLOAT64", "yes");
    EXPECT_NE(message_of([] {
                mv::Runtime rt;
              }).find("MESHVK_MATHLIB_FLOAT64=yes is not a switch; give 0 or 1"),
              std::string::npos);
  }
  const ScopedEnv on("MESHVK_MATHLIB_FLOAT64", "1");
  auto& current = *mv::Runtime::current().state();
  if (current.device().adapter().float64) {
    mv::Runtime rt;
    EXPECT_TRUE(rt.state()->mathlib_float64(rt.state()->device().adapter()));
  } else {
    EXPECT_NE(message_of([] { mv::Runtime rt; }).find("has no shaderFloat64"), std::string::npos);
  }
}

// The floats closest to multiples of pi/2 and the largest ones: the reduction keeps them exact.
// And cos at the first-order midpoints 1 - (2t + 1) 2^-25 = 1 - x^2 / 2 (x = s 2^-12, s odd),
// where only x^4 / 24 decides the rounding.
TEST(MathlibFloat64, HugeNearMultiplesOfPiOver2AndHardCases) {
  for (const float x : {3.40282347e38f, -3.40282347e38f, 1e30f, 8.5e37f, 16777216.0f, 1.0e22f,
                        std::bit_cast<float>(0x5922aa80u), std::bit_cast<float>(0x6a1976f1u),
                        std::bit_cast<float>(0x4b9b8d23u), 102965.109f, 6.2831855f, 1.5707964f,
                        0x1.f9cbe2p+7f, 0x1p-12f, 0x3p-12f, 0x5p-12f, 0x7p-12f})
    for (const Variant& v : kVariants)
      EXPECT_LE(error_ulps(v, x), 0.5L + 0x1p-20L)
          << v.name << "(" << hex(x) << ") = " << hex(v.f64(x));
  EXPECT_TRUE(same_bits(host::mvk_cos64(0x1p-12f), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_cos64(0x3p-12f), static_cast<float>(std::cos(0x3p-12L))));
}

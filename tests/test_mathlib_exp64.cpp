// The math library's float64 variants of exp, tanh and the logistic function
// (engine/src/kernels/mathlib/exp64.inc, tanh64.inc, logistic64.inc), which kernels run on
// adapters with shaderFloat64: the host copy nearly always correctly rounded against long double
// libm, C's and numpy's special values, and the kernels bit-identical to the host copy of the
// variant the runtime picks (float64 by default on lavapipe, float-float under
// MESHVK_MATHLIB_FLOAT64=0).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

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

using mathlib_variants::Variant;

const Variant kVariants[] = {
    {"exp", host::mvk_exp64, host::mvk_exp, [](long double x) { return std::exp(x); }, mv::exp},
    {"tanh", host::mvk_tanh64, host::mvk_tanh, [](long double x) { return std::tanh(x); },
     mv::tanh},
    {"sigmoid", host::mvk_logistic64, host::mvk_logistic, mathlib_check::ref_logistic, mv::sigmoid},
};

// Every step-th bit pattern, the specials, and the floats around the edges: exp's overflow and
// underflow, tanh's x and 1 shortcuts, the clamps, the reduction's k steps near +-ln2/2.
std::vector<float> sample(uint32_t step) {
  return mathlib_variants::sample(
      step,
      {0.0f, -0.0f, kInf, -kInf, kNaN, 1e-45f, -1e-45f, 1.17549435e-38f, 3.40282347e38f,
       -3.40282347e38f, 88.7228317f, 88.7228394f, -87.3365479f, -103.972084f, -104.0f},
      {1.22070312e-4f, 0.34657359f, 1.0f, 9.0f, 10.0f, 17.0f, 87.3365479f, 88.7228317f, 103.972084f,
       104.0f, 110.0f});
}

}  // namespace

TEST(MathlibExp64, HostCopyNearlyCorrectlyRounded) {
  mathlib_variants::expect_host_copies_nearly_correctly_rounded(kVariants, sample(4093));
}

TEST(MathlibExp64, SpecialValuesAndSymmetry) {
  for (const Variant& v : kVariants) EXPECT_TRUE(std::isnan(v.f64(kNaN))) << v.name;
  EXPECT_TRUE(same_bits(host::mvk_exp64(kInf), kInf));
  EXPECT_TRUE(same_bits(host::mvk_exp64(-kInf), 0.0f));
  EXPECT_TRUE(same_bits(host::mvk_exp64(0.0f), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_exp64(-0.0f), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_exp64(88.7228394f), kInf));
  EXPECT_TRUE(std::isfinite(host::mvk_exp64(88.7228317f)));
  EXPECT_TRUE(same_bits(host::mvk_exp64(-103.278931f), 1e-45f));  // the smallest subnormal
  EXPECT_TRUE(same_bits(host::mvk_exp64(-104.0f), 0.0f));
  // Subnormal results, rounded once (from the double, not twice).
  for (const float x : {-87.3365479f, -90.0f, -100.5f, -103.2f, -103.97207f})
    EXPECT_TRUE(
        same_bits(host::mvk_exp64(x), static_cast<float>(std::exp(static_cast<long double>(x)))))
        << hex(x);
  EXPECT_TRUE(same_bits(host::mvk_tanh64(kInf), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_tanh64(-kInf), -1.0f));
  EXPECT_TRUE(same_bits(host::mvk_logistic64(kInf), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_logistic64(-kInf), 0.0f));
  EXPECT_TRUE(same_bits(host::mvk_logistic64(0.0f), 0.5f));
  EXPECT_TRUE(same_bits(host::mvk_logistic64(-0.0f), 0.5f));
  for (const float x : {0.0f, 1e-45f, 1e-40f, 1.17549435e-38f, 1e-5f, 1.2e-4f}) {
    EXPECT_TRUE(same_bits(host::mvk_tanh64(x), x)) << hex(x);
    EXPECT_TRUE(same_bits(host::mvk_tanh64(-x), -x)) << hex(x);
  }
  // tanh odd, bit for bit; logistic(-x) = 1 - logistic(x) where both are exact enough to say.
  for (uint64_t u = 0; u < 0x7f800000u; u += 65521) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_TRUE(same_bits(host::mvk_tanh64(-x), -host::mvk_tanh64(x))) << hex(x);
  }
}

TEST(MathlibExp64, DeviceBitIdenticalToHostFloat64Copy) {
  SKIP_UNDER_FAST_MATH();
  mathlib_variants::expect_kernels_run_float64_copies(kVariants, sample(8191));
}

TEST(MathlibExp64, SwitchOffRunsTheFloatFloatVariants) {
  SKIP_UNDER_FAST_MATH();
  mathlib_variants::expect_switch_off_runs_float_float(kVariants, sample(8191));
}

// mvk_div64 (the division every GPU takes) against IEEE division on the host, 16M random pairs
// over every exponent, subnormals included: the host copy is the kernels' code, and the kernels'
// bits are the host copy's (test_numerics_edge checks the device).
TEST(MathlibExp64, Div64HostCopyIsIeeeDivision) {
  const mathlib_check::HostFlushesAsAdapter host_as_lavapipe(false);
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  int bad = 0;
  for (int i = 0; i < (1 << 24); ++i) {
    const float a = std::bit_cast<float>(bits(rng)), b = std::bit_cast<float>(bits(rng));
    const float want = a / b, got = host::mvk_div64(a, b);
    if (std::isnan(want) ? std::isnan(got)
                         : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want))
      continue;
    if (++bad <= 10)
      ADD_FAILURE() << std::hexfloat << a << " / " << b << ": " << got << ", IEEE " << want;
  }
  EXPECT_EQ(bad, 0);
}

// The math library's float64 variants of log, log2, log1p and erf
// (engine/src/kernels/mathlib/log64.inc, log2_64.inc, log1p64.inc, erf64.inc), which kernels run
// on adapters with shaderFloat64 (the cross-entropy's log and the exact GELU's erf): the host copy
// nearly always correctly rounded against long double libm, C's and numpy's special values, and
// the kernels bit-identical to the host copy of the variant the runtime picks (float64 by default
// on lavapipe, float-float under MESHVK_MATHLIB_FLOAT64=0).
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
    {"log", host::mvk_log64, host::mvk_log, [](long double x) { return std::log(x); }, mv::log},
    {"log2", host::mvk_log2_64, host::mvk_log2, [](long double x) { return std::log2(x); },
     mv::log2},
    {"log1p", host::mvk_log1p64, host::mvk_log1p, [](long double x) { return std::log1p(x); },
     mv::log1p},
    {"erf", host::mvk_erf64, host::mvk_erf, [](long double x) { return std::erf(x); }, mv::erf},
};

// Every step-th bit pattern, the specials, and the floats around the edges: log's reduction
// switching k at sqrt(2) (times powers of two), 1 (results near 0), the subnormals and FLT_MAX;
// erf's intervals (1, 2, 3), the clamp at 4 and the last float whose erf is below 1 (3.9155);
// log1p's x shortcut (2^-29), its k steps (1 + x at sqrt(2) and sqrt(2) / 2), -1 and 2^53.
std::vector<float> sample(uint32_t step) {
  return mathlib_variants::sample(
      step,
      {0.0f, -0.0f, kInf, -kInf, kNaN, 1e-45f, -1e-45f, 1.17549435e-38f, 1.17549421e-38f,
       3.40282347e38f, -3.40282347e38f},
      {1.0f, 0.707106769f, 1.41421354f, 2.82842708f, 5.96046448e-8f, 1e-40f, 3.40282347e38f, 1e-3f,
       2.0f, 3.0f, 3.9155f, 4.0f, 1.86264515e-9f, 0.41421354f, 0.29289323f, 9.00719925e15f});
}

}  // namespace

TEST(MathlibLog64, HostCopyNearlyCorrectlyRounded) {
  mathlib_variants::expect_host_copies_nearly_correctly_rounded(kVariants, sample(4093));
}

TEST(MathlibLog64, SpecialValuesAndSymmetry) {
  for (const Variant& v : kVariants) EXPECT_TRUE(std::isnan(v.f64(kNaN))) << v.name;
  for (const auto f : {host::mvk_log64, host::mvk_log2_64}) {
    EXPECT_TRUE(same_bits(f(0.0f), -kInf));
    EXPECT_TRUE(same_bits(f(-0.0f), -kInf));
    EXPECT_TRUE(same_bits(f(kInf), kInf));
    EXPECT_TRUE(std::isnan(f(-kInf)));
    EXPECT_TRUE(std::isnan(f(-1.0f)));
    EXPECT_TRUE(std::isnan(f(-1e-45f)));
    EXPECT_TRUE(same_bits(f(1.0f), 0.0f));
  }
  // log2 of a power of two is its exponent exactly, subnormals included.
  for (int k = -149; k < 128; ++k)
    ASSERT_TRUE(same_bits(host::mvk_log2_64(std::ldexp(1.0f, k)), static_cast<float>(k))) << k;
  EXPECT_TRUE(same_bits(host::mvk_log64(1e-45f), -103.278931f));
  EXPECT_TRUE(same_bits(host::mvk_log1p64(-1.0f), -kInf));
  EXPECT_TRUE(std::isnan(host::mvk_log1p64(-1.00000012f)));
  EXPECT_TRUE(std::isnan(host::mvk_log1p64(-kInf)));
  EXPECT_TRUE(same_bits(host::mvk_log1p64(kInf), kInf));
  for (const float x : {0.0f, 1e-45f, 1e-40f, 1.17549435e-38f, 1e-20f, 1.8e-9f}) {
    EXPECT_TRUE(same_bits(host::mvk_log1p64(x), x)) << hex(x);
    EXPECT_TRUE(same_bits(host::mvk_log1p64(-x), -x)) << hex(x);
  }
  EXPECT_TRUE(same_bits(host::mvk_erf64(kInf), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_erf64(-kInf), -1.0f));
  EXPECT_TRUE(same_bits(host::mvk_erf64(4.0f), 1.0f));
  EXPECT_TRUE(same_bits(host::mvk_erf64(0.0f), 0.0f));
  EXPECT_TRUE(same_bits(host::mvk_erf64(-0.0f), -0.0f));
  // Tiny and subnormal x: x 2/sqrt(pi), rounded once.
  for (const float x : {1e-45f, 3e-45f, 1e-40f, 1.17549435e-38f, 1e-30f, 1e-10f})
    EXPECT_TRUE(
        same_bits(host::mvk_erf64(x), static_cast<float>(std::erf(static_cast<long double>(x)))))
        << hex(x);
  // erf odd, bit for bit.
  for (uint64_t u = 0; u < 0x7f800000u; u += 65521) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_TRUE(same_bits(host::mvk_erf64(-x), -host::mvk_erf64(x))) << hex(x);
  }
}

TEST(MathlibLog64, DeviceBitIdenticalToHostFloat64Copy) {
  SKIP_UNDER_FAST_MATH();
  mathlib_variants::expect_kernels_run_float64_copies(kVariants, sample(8191));
}

TEST(MathlibLog64, SwitchOffRunsTheFloatFloatVariants) {
  SKIP_UNDER_FAST_MATH();
  mathlib_variants::expect_switch_off_runs_float_float(kVariants, sample(8191));
}

namespace {

// The training step's activations and losses as nn:: writes them, composed on the host with
// either variant's copy, one float rounding per op (the kernels mark every value precise).
struct Composed {
  const char* name;
  mv::Array (*device)(const mv::Array& x, const mv::Array& y);
  float (*host)(float x, float y, bool float64);
};

float pick(bool float64, float (*f64)(float), float (*ff)(float), float x) {
  return float64 ? f64(x) : ff(x);
}

const Composed kComposed[] = {
    {"gelu (erf)", [](const mv::Array& x, const mv::Array&) { return mv::nn::gelu(x, false); },
     [](float x, float, bool f64) {
       const float half_x = 0.5f * x;
       return half_x * (1.0f + pick(f64, host::mvk_erf64, host::mvk_erf, x * 0.70710678f));
     }},
    {"gelu (tanh)", [](const mv::Array& x, const mv::Array&) { return mv::nn::gelu(x, true); },
     [](float x, float, bool f64) {
       const float half_x = 0.5f * x;
       const float cube = 0.044715f * x * x * x;
       const float inner = 0.7978845608028654f * (x + cube);
       return half_x * (1.0f + pick(f64, host::mvk_tanh64, host::mvk_tanh, inner));
     }},
    {"silu", [](const mv::Array& x, const mv::Array&) { return mv::nn::silu(x); },
     [](float x, float, bool f64) {
       return x * pick(f64, host::mvk_logistic64, host::mvk_logistic, x);
     }},
    // log_softmax's last step and softmax's numerator: shifted - log(sum), exp(x - max).
    {"x - log(y)", [](const mv::Array& x, const mv::Array& y) { return x - mv::log(y); },
     [](float x, float y, bool f64) { return x - pick(f64, host::mvk_log64, host::mvk_log, y); }},
    {"exp(x - y)", [](const mv::Array& x, const mv::Array& y) { return mv::exp(x - y); },
     [](float x, float y, bool f64) { return pick(f64, host::mvk_exp64, host::mvk_exp, x - y); }},
};

}  // namespace

// The GPT step's elementwise math (softmax's exp, log_softmax's log, GELU in both forms, the
// logistic function) fused into one kernel with the arithmetic around it, eager and under jit:
// the float64 variants by default, the float-float ones under MESHVK_MATHLIB_FLOAT64=0, bit for
// bit as the host composes them (so each form tells the two apart on these inputs).
TEST(MathlibLog64, FusedTrainingOpsRunTheVariantTheAdapterPicks) {
  SKIP_UNDER_FAST_MATH();
  std::vector<float> xs, ys;
  for (int i = 0; i < (1 << 16); ++i) {
    xs.push_back(-6.0f + 12.0f * static_cast<float>(i) / (1 << 16));
    ys.push_back(std::ldexp(1.0f + static_cast<float>(i % 997) / 997.0f, i % 40 - 20));
  }
  for (const char* setting : {static_cast<const char*>(nullptr), "0"}) {
    const ScopedEnv env("MESHVK_MATHLIB_FLOAT64", setting);
    mv::Runtime runtime;
    auto& rt = *runtime.state();
    const bool float64 = rt.mathlib_float64(rt.device().adapter());
    if (setting == nullptr && !float64) GTEST_SKIP() << "the adapter has no shaderFloat64";
    const mv::Array x = host_array(xs), y = host_array(ys);
    for (const Composed& c : kComposed) {
      const auto eager = c.device(x, y).to_host<float>();
      const auto jitted =
          mv::jit([&c](const mv::Array& a, const mv::Array& b) { return c.device(a, b); })(x, y)
              .to_host<float>();
      int bad = 0, variants_differ = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const float want = c.host(xs[i], ys[i], float64);
        if (!same_bits(want, c.host(xs[i], ys[i], !float64))) ++variants_differ;
        if ((!same_bits(eager[i], want) || !same_bits(jitted[i], want)) && ++bad <= 3)
          ADD_FAILURE() << c.name << " at " << hex(xs[i]) << ", " << hex(ys[i]) << ": eager "
                        << hex(eager[i]) << ", jit " << hex(jitted[i]) << ", host " << hex(want);
      }
      EXPECT_EQ(bad, 0) << c.name << (float64 ? " (float64)" : " (float-float)");
      EXPECT_GT(variants_differ, 0) << c.name;
    }
  }
}

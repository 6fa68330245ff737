// meshvk's math library (engine/src/kernels/mathlib): every function within 1 ulp of the
// correctly rounded result on a dense sample of all float32 inputs (host copy against long double
// libm), and the kernels' GLSL copy bit-identical to the host copy on lavapipe. The full 2^32
// sweep is `./meshvk.sh exhaustive` (tools/mathlib_exhaustive.cpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>

#include "mathlib_check.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mathlib_check::hex;
using mathlib_check::ulp_distance;

namespace {

// Every `step`-th bit pattern (NaNs included), the specials, and the 2^12 floats on either side
// of the points where functions change behaviour (0, +-1, +-2, overflow and underflow edges).
std::vector<float> sample(uint32_t step) {
  std::vector<float> xs;
  for (uint64_t u = 0; u < (1ull << 32); u += step)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  const float inf = std::numeric_limits<float>::infinity();
  for (const float s :
       {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1.0f, -1.0f,
        std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
        std::numeric_limits<float>::min(), -std::numeric_limits<float>::min(),
        std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    xs.push_back(s);
  for (const float p :
       {0.0f,       1.0f,      -1.0f,   2.0f,  -2.0f,      0.5f,        -0.5f,     88.7228f,
        -87.3365f,  -103.972f, 9.0f,    -9.0f, 0.3465736f, -0.3465736f, 0.693147f, 1.414214f,
        0.7071068f, 128.0f,    -150.0f, 1e-4f, -1e-4f,     4.0f,        1e38f}) {
    float up = p, down = p;
    for (int i = 0; i < 4096; ++i) {
      up = std::nextafter(up, inf);
      down = std::nextafter(down, -inf);
      xs.push_back(up);
      xs.push_back(down);
    }
  }
  return xs;
}

// The public op of each library function, by name (nullptr where meshvk has none).
mv::Array (*public_op(const std::string& name))(const mv::Array&) {
  static const std::pair<const char*, mv::Array (*)(const mv::Array&)> ops[] = {
      {"exp", mv::exp},     {"expm1", mv::expm1}, {"exp2", mv::exp2},      {"log", mv::log},
      {"log2", mv::log2},   {"log1p", mv::log1p}, {"sqrt", mv::sqrt},      {"rsqrt", mv::rsqrt},
      {"asinh", mv::asinh}, {"acosh", mv::acosh}, {"atanh", mv::atanh},    {"tanh", mv::tanh},
      {"sinh", mv::sinh},   {"cosh", mv::cosh},   {"sigmoid", mv::sigmoid},
      {"sin", mv::sin},     {"cos", mv::cos},     {"tan", mv::tan},        {"arcsin", mv::arcsin},
      {"arccos", mv::arccos}, {"arctan", mv::arctan}, {"erf", mv::erf},    {"erfinv", mv::erfinv}};
  for (const auto& [n, f] : ops)
    if (name == n) return f;
  return nullptr;
}

}  // namespace

TEST(Mathlib, HostCopyWithinOneUlpOnADenseSample) {
  const std::vector<float> xs = sample(2039);
  for (const auto& f : mathlib_check::unary_functions()) {
    uint64_t worst = 0;
    float worst_x = 0;
    for (const float x : xs) {
      const uint64_t d = ulp_distance(f.host(x), mathlib_check::reference(f, x));
      if (d > worst) worst = d, worst_x = x;
    }
    EXPECT_LE(worst, 1u) << f.name << "(" << hex(worst_x) << ") = " << hex(f.host(worst_x))
                         << ", correctly rounded " << hex(mathlib_check::reference(f, worst_x));
    std::cout << "mathlib " << f.name << ": max " << worst << " ulp over " << xs.size()
              << " inputs\n";
  }
  // The float64 variants (sin, cos, tan): tests/test_mathlib_float64.cpp.
}

// The kernels compute the same bits as the host copy: same source, IEEE fma/add/mul, `precise`.
#define SKIP_UNDER_FAST_MATH()                                                              \
  if (const char* fast = std::getenv("MESHVK_FAST_MATH"); fast && std::string(fast) == "1") \
  GTEST_SKIP() << "MESHVK_FAST_MATH=1 replaces the library with the driver's built-ins"

// sin, cos and tan: the host copy of the variant the adapter runs (float64 on lavapipe).
TEST(Mathlib, DeviceCopyBitIdenticalToHostCopy) {
  SKIP_UNDER_FAST_MATH();
  const std::vector<float> xs = sample(16411);
  auto& rt = *mv::Runtime::current().state();
  const bool float64 = rt.mathlib_float64(rt.device().adapter());
  for (const auto& f : mathlib_check::unary_functions()) {
    const auto op = public_op(f.name);
    ASSERT_NE(op, nullptr) << f.name << " has no public op";
    const std::vector<float> got = op(host_array(xs)).to_host<float>();
    ASSERT_EQ(got.size(), xs.size());
    const auto host = f.host_for(float64);
    const mathlib_check::HostFlushesAsAdapter as_adapter;
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = host(xs[i]);
      if (as_adapter.same_as_host(got[i], want)) continue;
      if (++bad <= 5)
        ADD_FAILURE() << f.name << "(" << hex(xs[i]) << "): device " << hex(got[i]) << ", host "
                      << hex(want);
    }
    EXPECT_EQ(bad, 0) << f.name << ": " << bad << " of " << xs.size() << " differ";
  }
}

// MESHVK_FAST_MATH=1 keeps the driver's built-ins: on lavapipe its exp is a few ulp off, so some
// results differ from the library's (which the test above pins to the host copy).
TEST(Mathlib, FastMathSwitchUsesTheDriversBuiltins) {
  const std::vector<float> xs = sample(1u << 20);
  std::vector<float> fast;
  {
    const ScopedEnv on("MESHVK_FAST_MATH", "1");
    mv::Runtime rt;
    ASSERT_TRUE(rt.state()->fast_math());
    fast = mv::exp(host_array(xs)).to_host<float>();
  }
  int differ = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float lib = mathlib_check::host::mvk_exp(xs[i]);
    if (!std::isnan(lib) && std::bit_cast<uint32_t>(fast[i]) != std::bit_cast<uint32_t>(lib))
      ++differ;
  }
  EXPECT_GT(differ, 0) << "MESHVK_FAST_MATH=1 gave the library's bits for every exp";
}

TEST(Mathlib, FastMathSwitchIsParsedStrictly) {
  const ScopedEnv bad("MESHVK_FAST_MATH", "yes");
  EXPECT_NE(
      message_of([] { mv::Runtime rt; }).find("MESHVK_FAST_MATH=yes is not a switch; give 0 or 1"),
      std::string::npos);
}

// The new ops' gradients (jax.grad of expm1, log1p, sinh, cosh, exp2, log2, asinh, acosh, atanh)
// at a few points.
TEST(Mathlib, NewOpsHaveGradients) {
  const std::vector<float> xs = {-2.0f, -0.5f, 0.25f, 1.5f};
  const auto grad_of = [&](mv::Array (*f)(const mv::Array&)) {
    return mv::grad([f](const mv::Array& x) { return f(x).sum(); })(host_array(xs))
        .to_host<float>();
  };
  const auto ge = grad_of(mv::expm1), gl = grad_of(mv::log1p), gs = grad_of(mv::sinh),
             gc = grad_of(mv::cosh);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(ge[i], std::exp(xs[i]), 1e-5f * std::exp(xs[i]));
    EXPECT_NEAR(gl[i], 1.0f / (1.0f + xs[i]), 1e-5f);
    EXPECT_NEAR(gs[i], std::cosh(xs[i]), 1e-5f * std::cosh(xs[i]));
    EXPECT_NEAR(gc[i], std::sinh(xs[i]), 1e-5f * std::cosh(xs[i]));
  }
  const auto g2 = grad_of(mv::exp2), gl2 = grad_of(mv::log2), gas = grad_of(mv::asinh),
             gat = grad_of(mv::atanh);
  const std::vector<float> big = {1.5f, 2.0f, 3.0f, 10.0f};
  const auto gac = mv::grad([](const mv::Array& x) { return mv::acosh(x).sum(); })(host_array(big))
                       .to_host<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i];
    EXPECT_NEAR(g2[i], std::exp2(x) * std::log(2.0f), 1e-5f);
    EXPECT_NEAR(gl2[i], 1.0f / (x * std::log(2.0f)), 1e-5f);
    EXPECT_NEAR(gas[i], 1.0f / std::sqrt(x * x + 1.0f), 1e-5f);
    EXPECT_NEAR(gat[i], 1.0f / (1.0f - x * x), 1e-5f);
    EXPECT_NEAR(gac[i], 1.0f / std::sqrt(big[i] * big[i] - 1.0f), 1e-5f);
  }
}

// pow (binary, so sampled rather than swept): host copy within 1 ulp of long double powl, with
// C's special cases, and the kernels bit-identical to it.
TEST(Mathlib, PowWithinOneUlpAndBitIdenticalOnDevice) {
  SKIP_UNDER_FAST_MATH();
  std::vector<float> xs, ys;
  mathlib_check::pow_pairs(1u << 20, 17, xs, ys);
  uint64_t worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(
        std::pow(static_cast<long double>(xs[i]), static_cast<long double>(ys[i])));
    const uint64_t d = ulp_distance(mathlib_check::host::mvk_pow(xs[i], ys[i]), want);
    if (d > worst) worst = d, worst_i = i;
  }
  EXPECT_LE(worst, 1u) << "pow(" << hex(xs[worst_i]) << ", " << hex(ys[worst_i]) << ")";
  std::cout << "mathlib pow: max " << worst << " ulp over " << xs.size() << " pairs\n";
  const std::vector<float> got = mv::power(host_array(xs), host_array(ys)).to_host<float>();
  const mathlib_check::HostFlushesAsAdapter as_adapter;
  int bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = mathlib_check::host::mvk_pow(xs[i], ys[i]);
    if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want) ||
        (std::isnan(got[i]) && std::isnan(want)))
      continue;
    if (++bad <= 5)
      ADD_FAILURE() << "pow(" << hex(xs[i]) << ", " << hex(ys[i]) << "): device " << hex(got[i])
                    << ", host " << hex(want);
  }
  EXPECT_EQ(bad, 0) << bad << " of " << xs.size() << " pairs differ";
}

// A fused chain computes as numpy does, one rounding per op: the generated kernel marks every
// value `precise`, so no driver contracts x * y + z into an fma (which would round once).
TEST(Mathlib, FusedMultiplyAddChainsRoundEachOp) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<float> xs(1 << 16), ys(xs.size()), zs(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = d(rng), ys[i] = d(rng), zs[i] = d(rng);
  const auto got = (host_array(xs) * host_array(ys) + host_array(zs)).to_host<float>();
  int fused = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    volatile float p = xs[i] * ys[i];
    const float want = p + zs[i];
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want)) ++fused;
  }
  EXPECT_EQ(fused, 0) << "of " << xs.size() << " x * y + z, " << fused
                      << " were rounded once (contracted)";
}

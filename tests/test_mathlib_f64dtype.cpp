// The float64 dtype's transcendental functions (engine/src/kernels/mathlib/f64/): the host copy
// within 1 ulp of long double libm on 100k sampled inputs per function (uniform over each
// function's interesting range, scaled down towards 0, and random bit patterns) and on the
// special values and thresholds, with C99's and numpy's results for zeros, infinities, NaN and
// overflow; pow's special cases as numpy's; the device bit for bit as the host copy, sharded
// over 8 devices and at sizes that are not multiples of 4; gradients of float64 functions
// through the autodiff rules those ops build.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/mathlib/host.hpp"
#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "typed_arrays.hpp"

namespace mv = meshvk;
namespace host = meshvk::mathlib::host;
using mv::P;
using typed_arrays::arr;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMax = std::numeric_limits<double>::max();
constexpr double kMinNormal = 0x1p-1022;
constexpr double kMinSub = 0x1p-1074;

std::string hex(double x) {
  char s[64];
  std::snprintf(s, sizeof s, "%a", x);
  return s;
}

bool same_bits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b) || (std::isnan(a) && std::isnan(b));
}

long double ref_logistic(long double x) { return 1.0L / (1.0L + std::exp(-x)); }

// erfinv by Newton in long double from the double result: on erf below 0.5, on erfc above (1 - y
// is exact there, and erfl near 1 would cancel).
long double ref_erfinv(long double y) {
  if (std::isnan(y) || std::fabs(y) > 1) return std::numeric_limits<long double>::quiet_NaN();
  if (std::fabs(y) == 1) return std::copysign(std::numeric_limits<long double>::infinity(), y);
  const long double a = std::fabs(y);
  long double x = host::mvk_erfinv_f64(static_cast<double>(a));
  for (int i = 0; i < 4; ++i) {
    const long double d = 2 / std::sqrt(3.14159265358979323846264338327950288L) * std::exp(-x * x);
    if (d == 0) break;
    x -= (a <= 0.5L ? std::erf(x) - a : (1 - a) - std::erfc(x)) / d;
  }
  return std::copysign(x, y);
}

struct Fn {
  const char* name;
  double (*host)(double);
  long double (*ref)(long double);
  mv::Array (*op)(const mv::Array&);
  double lo, hi;  // the range sampled uniformly
};

const Fn kFns[] = {
    {"exp", host::mvk_exp_f64, [](long double x) { return std::exp(x); }, mv::exp, -750, 720},
    {"exp2", host::mvk_exp2_f64, [](long double x) { return std::exp2(x); }, mv::exp2, -1080, 1030},
    {"expm1", host::mvk_expm1_f64, [](long double x) { return std::expm1(x); }, mv::expm1, -50, 720},
    {"log", host::mvk_log_f64, [](long double x) { return std::log(x); }, mv::log, 0, 4},
    {"log1p", host::mvk_log1p_f64, [](long double x) { return std::log1p(x); }, mv::log1p, -1, 4},
    {"log2", host::mvk_log2_f64, [](long double x) { return std::log2(x); }, mv::log2, 0, 4},
    {"tanh", host::mvk_tanh_f64, [](long double x) { return std::tanh(x); }, mv::tanh, -25, 25},
    {"sigmoid", host::mvk_logistic_f64, ref_logistic, mv::sigmoid, -760, 50},
    {"sinh", host::mvk_sinh_f64, [](long double x) { return std::sinh(x); }, mv::sinh, -720, 720},
    {"cosh", host::mvk_cosh_f64, [](long double x) { return std::cosh(x); }, mv::cosh, -720, 720},
    {"sin", host::mvk_sin_f64, [](long double x) { return std::sin(x); }, mv::sin, -10, 10},
    {"cos", host::mvk_cos_f64, [](long double x) { return std::cos(x); }, mv::cos, -10, 10},
    {"tan", host::mvk_tan_f64, [](long double x) { return std::tan(x); }, mv::tan, -10, 10},
    {"erf", host::mvk_erf_f64, [](long double x) { return std::erf(x); }, mv::erf, -7, 7},
    {"erfinv", host::mvk_erfinv_f64, ref_erfinv, mv::erfinv, -1, 1},
    {"arctan", host::mvk_atan_f64, [](long double x) { return std::atan(x); }, mv::arctan, -10, 10},
    {"arcsin", host::mvk_asin_f64, [](long double x) { return std::asin(x); }, mv::arcsin, -1, 1},
    {"arccos", host::mvk_acos_f64, [](long double x) { return std::acos(x); }, mv::arccos, -1, 1},
    {"asinh", host::mvk_asinh_f64, [](long double x) { return std::asinh(x); }, mv::asinh, -10, 10},
    {"acosh", host::mvk_acosh_f64, [](long double x) { return std::acosh(x); }, mv::acosh, 1, 10},
    {"atanh", host::mvk_atanh_f64, [](long double x) { return std::atanh(x); }, mv::atanh, -1, 1},
};

// Special values, the ends of the ranges (overflow and underflow thresholds, the clamps and
// branch points of the implementations), and arguments near multiples of pi/2.
std::vector<double> specials() {
  std::vector<double> v = {0.0, -0.0, kInf, -kInf, kNaN, -kNaN, kMinSub, -kMinSub, 3 * kMinSub,
                           kMinNormal, -kMinNormal, kMax, -kMax, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-300,
                           709.782712893384, 709.7827128933840, 710.4758600739439, -745.1332191019411,
                           -745.1332191019412, -708.3964185322641, 1023.0, 1024.0, -1022.0, -1074.0,
                           -1075.0, -1076.0, 0x1p-28, 0x1p-54, -0x1p-54, 40.0, -40.0, 20.0, 37.5, 2.5,
                           6.0, 5.9, 0x1p20, -0x1p20, 1e22, 1e300, -1e300, 3.141592653589793,
                           1.5707963267948966, 6.283185307179586, 0x1.921fb54442d18p+1023,
                           6381956970095103.0 * 0x1p797, 5.319372648326541e+255, 1e-10, -0.9999999999999999};
  // Neighbours of the branch points.
  for (const double p : {709.782712893384, 40.0, 20.0, 2.0, 6.0, 0x1p20, 0x1p-28, 1.0, -1.0, 0.0})
    for (double up = p, down = p; const int i : {1, 2, 3}) {
      (void)i;
      up = std::nextafter(up, kInf);
      down = std::nextafter(down, -kInf);
      v.push_back(up);
      v.push_back(down);
    }
  return v;
}

// n inputs for `f`: a third uniform over its range, a third of those scaled by 2^-10 .. 2^-50,
// a third random bit patterns (every magnitude, both signs), then the specials.
std::vector<double> sample(const Fn& f, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(f.lo, f.hi);
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) {
    double x = u(rng);
    if (i % 3 == 1) x = std::ldexp(x, -10 - static_cast<int>(rng() % 41));
    if (i % 3 == 2) x = std::bit_cast<double>(rng());
    v.push_back(x);
  }
  for (const double s : specials()) v.push_back(s);
  return v;
}

// |y - ref| in ulps of the double nearest ref (2^-1074 for subnormal results); 0 when both are
// NaN, or both the same infinity (or ref overflows the double range to y's infinity); a large
// number for a wrong NaN, infinity or zero sign.
long double error_ulps(double y, long double ref) {
  if (std::isnan(ref) || std::isnan(y)) return std::isnan(ref) && std::isnan(y) ? 0 : 1e9L;
  const double r = static_cast<double>(ref);
  if (std::isinf(r) || std::isinf(y)) return y == r ? 0 : 1e9L;
  if (ref == 0 && y == 0) return std::signbit(y) == std::signbit(r) ? 0 : 1e9L;
  int e = 0;
  std::frexp(r == 0 ? kMinNormal : r, &e);
  return std::fabs(static_cast<long double>(y) - ref) / std::ldexp(1.0L, std::max(e - 53, -1074));
}

std::vector<double> device_values(mv::Array (*op)(const mv::Array&), const std::vector<double>& xs,
                                  bool sharded) {
  if (!sharded) return op(arr(xs)).to_host<double>();
  // 8 devices, an odd count each: the sample padded to 8 * odd with 1.0.
  std::vector<double> padded = xs;
  while (padded.size() % 8 != 0 || (padded.size() / 8) % 2 == 0) padded.push_back(1.0);
  const mv::Array x = mv::device_put(std::span<const double>(padded), {static_cast<int64_t>(padded.size())},
                                     mv::NamedSharding(mv::make_mesh({8}, {"x"}), P("x")));
  std::vector<double> out = mv::jit([op](const mv::Array& a) { return op(a); })(x).to_host<double>();
  out.resize(xs.size());
  return out;
}

}  // namespace

// Within 1 ulp of long double libm (the worst measured: 0.97 ulp, atanh; 0.83 log1p and asinh;
// the others below 0.8), and the right NaN, infinity or signed zero for every special.
TEST(MathlibF64Dtype, HostCopyWithinOneUlp) {
  for (const Fn& f : kFns) {
    const std::vector<double> xs = sample(f, 100000, 7);
    long double worst = 0;
    double worst_x = 0;
    for (const double x : xs) {
      const long double e = error_ulps(f.host(x), f.ref(x));
      if (e > worst) {
        worst = e;
        worst_x = x;
      }
    }
    EXPECT_LE(worst, 1.0L) << f.name << "(" << hex(worst_x) << ") = " << hex(f.host(worst_x));
    std::printf("%-8s max %.3Lf ulp at %s\n", f.name, worst, hex(worst_x).c_str());  // README's table
  }
}

// The exact cases numpy users rely on come out exact, and the special values are C99's.
TEST(MathlibF64Dtype, ExactResultsAndSpecials) {
  EXPECT_TRUE(same_bits(host::mvk_exp_f64(0.0), 1.0));
  EXPECT_TRUE(same_bits(host::mvk_exp_f64(-kInf), 0.0));
  EXPECT_TRUE(same_bits(host::mvk_exp_f64(709.79), kInf));
  EXPECT_TRUE(same_bits(host::mvk_exp_f64(-745.14), 0.0));
  EXPECT_TRUE(same_bits(host::mvk_exp_f64(-745.13), kMinSub));
  for (int k = -1074; k <= 1023; ++k) ASSERT_TRUE(same_bits(host::mvk_exp2_f64(k), std::ldexp(1.0, k))) << k;
  for (int k = -1074; k <= 1023; ++k) ASSERT_TRUE(same_bits(host::mvk_log2_f64(std::ldexp(1.0, k)), k)) << k;
  EXPECT_TRUE(same_bits(host::mvk_log_f64(1.0), 0.0));
  EXPECT_TRUE(same_bits(host::mvk_log_f64(0.0), -kInf));
  EXPECT_TRUE(same_bits(host::mvk_log_f64(-0.0), -kInf));
  EXPECT_TRUE(std::isnan(host::mvk_log_f64(-1.0)));
  EXPECT_TRUE(same_bits(host::mvk_log_f64(kInf), kInf));
  EXPECT_TRUE(same_bits(host::mvk_log1p_f64(-1.0), -kInf));
  EXPECT_TRUE(std::isnan(host::mvk_log1p_f64(-2.0)));
  EXPECT_TRUE(same_bits(host::mvk_expm1_f64(-kInf), -1.0));
  for (const auto fn : {host::mvk_expm1_f64, host::mvk_log1p_f64, host::mvk_tanh_f64, host::mvk_sinh_f64,
                        host::mvk_sin_f64, host::mvk_tan_f64, host::mvk_atan_f64, host::mvk_asin_f64,
                        host::mvk_asinh_f64, host::mvk_atanh_f64})
    for (const double x : {0.0, -0.0, kMinSub, -kMinSub, 1e-310, -1e-310})
      EXPECT_TRUE(same_bits(fn(x), x)) << hex(x);
  EXPECT_TRUE(same_bits(host::mvk_acos_f64(1.0), 0.0));
  EXPECT_TRUE(same_bits(host::mvk_acos_f64(-1.0), M_PI));
  EXPECT_TRUE(same_bits(host::mvk_acos_f64(-0.0), M_PI_2));
  EXPECT_TRUE(same_bits(host::mvk_asin_f64(-1.0), -M_PI_2));
  EXPECT_TRUE(std::isnan(host::mvk_asin_f64(1.0000000000000002)));
  EXPECT_TRUE(std::isnan(host::mvk_acos_f64(-kInf)));
  EXPECT_TRUE(same_bits(host::mvk_atan_f64(-kInf), -M_PI_2));
  EXPECT_TRUE(same_bits(host::mvk_atanh_f64(-1.0), -kInf));
  EXPECT_TRUE(std::isnan(host::mvk_atanh_f64(1.5)));
  EXPECT_TRUE(same_bits(host::mvk_acosh_f64(1.0), 0.0));
  EXPECT_TRUE(std::isnan(host::mvk_acosh_f64(0.5)));
  EXPECT_TRUE(same_bits(host::mvk_acosh_f64(kInf), kInf));
  EXPECT_TRUE(same_bits(host::mvk_asinh_f64(-kInf), -kInf));
  EXPECT_TRUE(same_bits(host::mvk_cos_f64(-0.0), 1.0));
  EXPECT_TRUE(same_bits(host::mvk_cosh_f64(-0.0), 1.0));
  EXPECT_TRUE(same_bits(host::mvk_logistic_f64(0.0), 0.5));
  EXPECT_TRUE(same_bits(host::mvk_logistic_f64(-kInf), 0.0));
  EXPECT_TRUE(same_bits(host::mvk_logistic_f64(kInf), 1.0));
  EXPECT_TRUE(same_bits(host::mvk_tanh_f64(-kInf), -1.0));
  EXPECT_TRUE(same_bits(host::mvk_erf_f64(-kInf), -1.0));
  EXPECT_TRUE(same_bits(host::mvk_sinh_f64(-kInf), -kInf));
  EXPECT_TRUE(same_bits(host::mvk_cosh_f64(-kInf), kInf));
  EXPECT_TRUE(same_bits(host::mvk_cosh_f64(-710.476), kInf));
  for (const auto fn : {host::mvk_sin_f64, host::mvk_cos_f64, host::mvk_tan_f64})
    for (const double x : {kInf, -kInf, kNaN}) EXPECT_TRUE(std::isnan(fn(x)));
  // Odd and even functions bit for bit, huge arguments included.
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) {
    const double x = std::fabs(std::bit_cast<double>(rng()));
    if (!std::isfinite(x)) continue;
    ASSERT_TRUE(same_bits(host::mvk_sin_f64(-x), -host::mvk_sin_f64(x))) << hex(x);
    ASSERT_TRUE(same_bits(host::mvk_tan_f64(-x), -host::mvk_tan_f64(x))) << hex(x);
    ASSERT_TRUE(same_bits(host::mvk_cos_f64(-x), host::mvk_cos_f64(x))) << hex(x);
  }
}

// pow within 1 ulp of powl on sampled pairs (|y log x| up to the overflow threshold), exact for
// exact results, and C99's / numpy's special cases bit for bit as the host's std::pow.
TEST(MathlibF64Dtype, PowAccurateAndNumpySpecialCases) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  long double worst = 0;
  double wx = 0, wy = 0;
  for (int i = 0; i < 100000; ++i) {
    double x = std::exp(-30 + 60 * u(rng)), y = -40 + 80 * u(rng);
    if (i % 3 == 0) {
      x = 0.5 + 1.5 * u(rng);
      y = -1000 + 2000 * u(rng);
    }
    if (i % 3 == 1) x = std::bit_cast<double>(rng() >> 1), y = -2 + 4 * u(rng);
    if (i % 5 == 0) x = -x, y = std::round(y);
    const long double e = error_ulps(host::mvk_pow_f64(x, y), std::pow(static_cast<long double>(x), static_cast<long double>(y)));
    if (e > worst) worst = e, wx = x, wy = y;
  }
  EXPECT_LE(worst, 1.0L) << "pow(" << hex(wx) << ", " << hex(wy) << ")";
  std::printf("power    max %.3Lf ulp at (%s, %s)\n", worst, hex(wx).c_str(), hex(wy).c_str());
  // Exact results exact: integer powers below 2^53, powers of 2 either way.
  for (int b = 2; b <= 10; ++b)
    for (int k = -20; k <= 20; ++k) {
      const bool exact = (k >= 0 && k * std::log2(b) < 53) || (b & (b - 1)) == 0;
      if (exact) {
        ASSERT_TRUE(same_bits(host::mvk_pow_f64(b, k), std::pow(static_cast<double>(b), k))) << b << "^" << k;
      }
    }
  EXPECT_TRUE(same_bits(host::mvk_pow_f64(9.0, 0.5), 3.0));
  EXPECT_TRUE(same_bits(host::mvk_pow_f64(-8.0, 1.0 / 3.0), kNaN));
  const std::vector<double> vals = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, kInf, -kInf, kNaN,
                                    0x1p53, -0x1p53, 0x1p53 + 2, 1e300, -1e300, kMinSub, -kMinSub};
  for (const double x : vals)
    for (const double y : vals)
      EXPECT_TRUE(same_bits(host::mvk_pow_f64(x, y), std::pow(x, y)))
          << "pow(" << hex(x) << ", " << hex(y) << ") = " << hex(host::mvk_pow_f64(x, y)) << ", C: " << hex(std::pow(x, y));
}

// arctan2 within 1 ulp of atan2l on sampled pairs (every magnitude, quotients near 2^+-60), and
// C99's / numpy's values for every pair of specials bit for bit as the host's std::atan2.
TEST(MathlibF64Dtype, Arctan2AccurateAndC99SpecialCases) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> u(-3, 3);
  long double worst = 0;
  double wy = 0, wx = 0;
  for (int i = 0; i < 100000; ++i) {
    double y = u(rng), x = u(rng);
    if (i % 3 == 1) y = std::bit_cast<double>(rng()), x = std::bit_cast<double>(rng());
    if (i % 3 == 2) y = std::ldexp(y, static_cast<int>(rng() % 130) - 65);
    const long double e = error_ulps(host::mvk_atan2_f64(y, x), std::atan2(static_cast<long double>(y), static_cast<long double>(x)));
    if (e > worst) worst = e, wy = y, wx = x;
  }
  EXPECT_LE(worst, 1.0L) << "arctan2(" << hex(wy) << ", " << hex(wx) << ")";
  std::printf("arctan2  max %.3Lf ulp at (%s, %s)\n", worst, hex(wy).c_str(), hex(wx).c_str());
  const std::vector<double> vals = {0.0, -0.0, 1.0, -1.0, 2.5, -2.5, kInf, -kInf, kNaN, kMinSub, -kMinSub, kMax, -kMax};
  for (const double y : vals)
    for (const double x : vals)
      EXPECT_TRUE(same_bits(host::mvk_atan2_f64(y, x), std::atan2(y, x)))
          << "arctan2(" << hex(y) << ", " << hex(x) << ") = " << hex(host::mvk_atan2_f64(y, x)) << ", C: " << hex(std::atan2(y, x));
  std::vector<double> ys, xs;
  for (const double y : vals)
    for (const double x : vals) ys.push_back(y), xs.push_back(x);
  for (int i = 0; i < 1001; ++i) ys.push_back(u(rng)), xs.push_back(std::ldexp(u(rng), static_cast<int>(rng() % 140) - 70));
  const std::vector<double> got = mv::arctan2(arr(ys), arr(xs)).to_host<double>();
  for (size_t i = 0; i < ys.size(); ++i)
    ASSERT_TRUE(same_bits(got[i], host::mvk_atan2_f64(ys[i], xs[i]))) << "arctan2(" << hex(ys[i]) << ", " << hex(xs[i]) << ")";
}

// The kernels: every sampled input bit for bit as the host copy, on one device at sizes 1, 3 and
// 1001 and sharded over 8 devices (an odd count each) under jit.
TEST(MathlibF64Dtype, DeviceBitIdenticalToHostCopy) {
  for (const Fn& f : kFns) {
    const std::vector<double> xs = sample(f, 30000, 5);
    for (const size_t n : {size_t{1}, size_t{3}, size_t{1001}}) {
      const std::vector<double> part(xs.end() - static_cast<std::ptrdiff_t>(n), xs.end());
      const std::vector<double> got = device_values(f.op, part, false);
      ASSERT_EQ(got.size(), n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits(got[i], f.host(part[i]))) << f.name << "(" << hex(part[i]) << ") = " << hex(got[i])
                                                       << ", host " << hex(f.host(part[i]));
    }
    const std::vector<double> got = device_values(f.op, xs, true);
    int differences = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      if (!same_bits(got[i], f.host(xs[i])) && differences++ < 5)
        ADD_FAILURE() << f.name << "(" << hex(xs[i]) << ") = " << hex(got[i]) << ", host " << hex(f.host(xs[i]));
    EXPECT_EQ(differences, 0) << f.name;
  }
}

TEST(MathlibF64Dtype, DevicePowBitIdenticalWithScalarsAndBroadcasts) {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> xs, ys;
  for (int i = 0; i < 1001; ++i) {
    xs.push_back(i % 7 == 0 ? std::round(u(rng)) : std::exp(u(rng)) * (i % 5 == 0 ? -1 : 1));
    ys.push_back(i % 3 == 0 ? std::round(4 * u(rng)) : 20 * u(rng));
  }
  const std::vector<double> specials = {0.0, -0.0, 1.0, -1.0, kInf, -kInf, kNaN, -2.0, 0.5};
  for (const double a : specials)
    for (const double b : specials) xs.push_back(a), ys.push_back(b);
  const std::vector<double> got = mv::power(arr(xs), arr(ys)).to_host<double>();
  for (size_t i = 0; i < xs.size(); ++i)
    ASSERT_TRUE(same_bits(got[i], host::mvk_pow_f64(xs[i], ys[i]))) << "pow(" << hex(xs[i]) << ", " << hex(ys[i]) << ")";
  // A weak scalar exponent (float32-valued) and a broadcast row.
  const std::vector<double> cubes = mv::power(arr(xs), 3.0f).to_host<double>();
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_TRUE(same_bits(cubes[i], host::mvk_pow_f64(xs[i], 3.0)));
  const std::vector<double> row = mv::power(arr(std::vector<double>{2.0, 10.0, -3.0}, {3, 1}),
                                            arr(std::vector<double>{-2.0, 0.5, 3.0, 10.0}, {1, 4}))
                                      .to_host<double>();
  const std::vector<double> want = {0.25, std::sqrt(2.0), 8.0, 1024.0, 0.01, std::sqrt(10.0), 1000.0, 1e10,
                                    1.0 / 9.0, kNaN, -27.0, 59049.0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(row[i], want[i])) << i << ": " << hex(row[i]);
}

// Several library functions fused into one kernel (their helper files included once), float32
// and float64 ones side by side, under jit: each node as its host copy.
TEST(MathlibF64Dtype, FusedChainsMixingFunctionsAndDtypes) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> xs(1003);
  for (double& x : xs) x = u(rng);
  const auto f = mv::jit([](const mv::Array& x) {
    const mv::Array a = mv::tanh(mv::exp(x) * 0.5f) + mv::sin(x * 3.0f);
    const mv::Array b = mv::power(mv::abs(x) + 1.0f, mv::erf(x)) - mv::log1p(mv::abs(x));
    const mv::Array c = mv::astype(mv::exp(mv::astype(x, mv::DType::float32)), mv::DType::float64);
    return mv::arctan2(a, b) + mv::erfinv(x * 0.45f) + c;
  });
  const std::vector<double> got = f(arr(xs)).to_host<double>();
  ASSERT_EQ(got.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double a = host::mvk_tanh_f64(host::mvk_exp_f64(x) * 0.5) + host::mvk_sin_f64(x * 3.0);
    const double b = host::mvk_pow_f64(std::fabs(x) + 1.0, host::mvk_erf_f64(x)) - host::mvk_log1p_f64(std::fabs(x));
    const float x32 = static_cast<float>(x);
    const double c = static_cast<double>(host::mvk_exp64(x32));  // the float32 exp lavapipe runs
    const double want = host::mvk_atan2_f64(a, b) + host::mvk_erfinv_f64(x * static_cast<double>(0.45f)) + c;  // weak scalars are float32 values
    ASSERT_TRUE(same_bits(got[i], want)) << "x = " << hex(x) << ": " << hex(got[i]) << ", host " << hex(want);
  }
}

// Gradients of float64 functions through the ops' backward rules: as the closed forms in double,
// and as central differences of the float64 forward pass.
TEST(MathlibF64Dtype, GradientsThroughAutodiff) {
  std::vector<double> xs;
  for (int i = 0; i < 37; ++i) xs.push_back(-1.8 + 0.1 * i + 0.0123);
  struct Case {
    const char* name;
    mv::Array (*op)(const mv::Array&);
    double (*value)(double);
    double (*derivative)(double);
    double tolerance;  // relative
  };
  const Case cases[] = {
      {"tanh", mv::tanh, [](double x) { return std::tanh(x); }, [](double x) { return 1 - std::tanh(x) * std::tanh(x); }, 1e-14},
      {"sigmoid", mv::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); },
       [](double x) { const double s = 1 / (1 + std::exp(-x)); return s * (1 - s); }, 1e-14},
      {"exp", mv::exp, [](double x) { return std::exp(x); }, [](double x) { return std::exp(x); }, 1e-15},
      {"sin", mv::sin, [](double x) { return std::sin(x); }, [](double x) { return std::cos(x); }, 1e-14},
      {"cos", mv::cos, [](double x) { return std::cos(x); }, [](double x) { return -std::sin(x); }, 1e-14},
      {"expm1", mv::expm1, [](double x) { return std::expm1(x); }, [](double x) { return std::exp(x); }, 1e-15},
      {"sinh", mv::sinh, [](double x) { return std::sinh(x); }, [](double x) { return std::cosh(x); }, 1e-15},
      {"erf", mv::erf, [](double x) { return std::erf(x); },
       [](double x) { return 2 / std::sqrt(M_PI) * std::exp(-x * x); }, 1e-14},
  };
  for (const Case& c : cases) {
    const std::vector<double> g =
        mv::grad([&c](const mv::Array& x) { return mv::sum(c.op(x)); })(arr(xs)).to_host<double>();
    ASSERT_EQ(g.size(), xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_NEAR(g[i], c.derivative(xs[i]), c.tolerance * (1 + std::fabs(c.derivative(xs[i])))) << c.name << " at " << xs[i];
      const double h = 1e-6;
      const double fd = (c.value(xs[i] + h) - c.value(xs[i] - h)) / (2 * h);
      EXPECT_NEAR(g[i], fd, 1e-8 * (1 + std::fabs(fd))) << c.name << " at " << xs[i];
    }
  }
  // erfinv inside (-1, 1): sqrt(pi)/2 exp(erfinv(y)^2), its constant to 2^-48.
  std::vector<double> us;
  for (int i = 0; i < 37; ++i) us.push_back(-0.9 + 0.05 * i + 0.0037);
  const auto gi = mv::grad([](const mv::Array& y) { return mv::sum(mv::erfinv(y)); })(arr(us)).to_host<double>();
  for (size_t i = 0; i < us.size(); ++i) {
    const double x = host::mvk_erfinv_f64(us[i]);
    const double want = std::sqrt(M_PI) / 2 * std::exp(x * x);
    EXPECT_NEAR(gi[i], want, 1e-14 * want) << "erfinv at " << us[i];
  }
  // log and log1p on positive inputs, pow in both operands.
  std::vector<double> pos;
  for (const double x : xs) pos.push_back(x + 2.0);
  const auto gl = mv::grad([](const mv::Array& x) { return mv::sum(mv::log(x) + mv::log1p(x)); })(arr(pos)).to_host<double>();
  for (size_t i = 0; i < pos.size(); ++i) EXPECT_NEAR(gl[i], 1 / pos[i] + 1 / (1 + pos[i]), 1e-15) << pos[i];
  const mv::Array ys = arr(std::vector<double>(pos.size(), 2.5));
  const auto gp = mv::grad([&ys](const mv::Array& x) { return mv::sum(mv::power(x, ys)); })(arr(pos)).to_host<double>();
  const auto gy = mv::grad([&pos](const mv::Array& y) { return mv::sum(mv::power(arr(pos), y)); })(ys).to_host<double>();
  for (size_t i = 0; i < pos.size(); ++i) {
    EXPECT_NEAR(gp[i], 2.5 * std::pow(pos[i], 1.5), 1e-14 * std::pow(pos[i], 1.5)) << pos[i];
    EXPECT_NEAR(gy[i], std::pow(pos[i], 2.5) * std::log(pos[i]), 1e-13 * (1 + std::pow(pos[i], 2.5))) << pos[i];
  }
}

// numpy's // and % (npy_divmod) on float64, worked on the host with C's exact fmod: the remainder
// takes the divisor's sign, the quotient is floored and snapped, zeros and infinities as numpy.
TEST(MathlibF64Dtype, FloorDivideAndRemainderAsNumpy) {
  const auto divmod = [](double a, double b) {
    double mod = std::fmod(a, b);
    if (b == 0) return std::pair<double, double>{a / b, mod};
    double div = (a - mod) / b;
    if (mod != 0) {
      if ((b < 0) != (mod < 0)) {
        mod += b;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, b);
    }
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, a / b);
    }
    return std::pair<double, double>{floordiv, mod};
  };
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<double> u(-100, 100);
  std::vector<double> as, bs;
  const std::vector<double> vals = {0.0, -0.0, 1.0, -1.0, 0.1, -0.3, 7.5, kInf, -kInf, kNaN, kMinSub, -kMinSub, kMax, 1e300, -1e-300};
  for (const double a : vals)
    for (const double b : vals) as.push_back(a), bs.push_back(b);
  for (int i = 0; i < 3001; ++i) {
    as.push_back(i % 3 == 0 ? std::bit_cast<double>(rng()) : u(rng));
    bs.push_back(i % 3 == 0 ? std::bit_cast<double>(rng()) : i % 3 == 1 ? std::round(u(rng) / 10) : u(rng) / 7);
  }
  const std::vector<double> q = mv::floor_divide(arr(as), arr(bs)).to_host<double>();
  const std::vector<double> r = mv::remainder(arr(as), arr(bs)).to_host<double>();
  for (size_t i = 0; i < as.size(); ++i) {
    const auto [fq, fr] = divmod(as[i], bs[i]);
    ASSERT_TRUE(same_bits(q[i], fq)) << hex(as[i]) << " // " << hex(bs[i]) << " = " << hex(q[i]) << ", numpy " << hex(fq);
    ASSERT_TRUE(same_bits(r[i], fr)) << hex(as[i]) << " % " << hex(bs[i]) << " = " << hex(r[i]) << ", numpy " << hex(fr);
  }
  // A weak scalar divisor.
  EXPECT_EQ(mv::remainder(arr(std::vector<double>{-7.5, 7.5, 1e17}), 2.0f).to_host<double>(), (std::vector<double>{0.5, 1.5, 0.0}));
}

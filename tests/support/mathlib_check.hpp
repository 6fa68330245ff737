#pragma once
// Checking the math library (engine/src/kernels/mathlib): each function's host copy against a
// long double libm reference, in ulps. Shared by tests/test_mathlib.cpp (a dense sample),
// tests/test_mathlib_trig.cpp (atan2's pairs) and tests/exhaustive/mathlib_exhaustive.cpp (all
// 2^32 inputs; atan2 sampled).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/mathlib/host.hpp"
#include "meshvk/array.hpp"
#include "meshvk/ops.hpp"
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace mathlib_check {


namespace host = meshvk::mathlib::host;

struct UnaryFunction {
  const char* name;                       // as meshvk names it ("exp")
  float (*host)(float);                   // the library's host copy
  long double (*reference)(long double);  // libm in long double, rounded to float afterwards
  // The float64 variant's host copy (exp, log, erf, sin, ...), which kernels on adapters with
  // shaderFloat64 run unless MESHVK_MATHLIB_FLOAT64=0; null where there is none.
  float (*host_float64)(float) = nullptr;
  // The host copy a kernel's bits match: the float64 variant's where the runtime uses it.
  using Host = float (*)(float);
  Host host_for(bool float64) const { return float64 && host_float64 ? host_float64 : host; }
};

inline long double ref_logistic(long double x) {
  return 1.0L / (1.0L + std::exp(-x));
}

// erfinv has no libm function: Newton's iteration on erf in long double from the library's own
// result (within an ulp, so three steps reach long double precision whatever its error), with
// the residual taken from erfc where erf is close to 1.
inline long double ref_erfinv(long double x) {
  if (std::isnan(x) || x < -1 || x > 1) return std::numeric_limits<long double>::quiet_NaN();
  if (x == 0 || x == 1 || x == -1) return x == 0 ? x : x * std::numeric_limits<long double>::infinity();
  const long double ax = std::fabs(x);
  long double y = std::fabs(static_cast<long double>(host::mvk_erfinv(static_cast<float>(ax))));
  if (!std::isfinite(y) || y == 0) y = ax * 0.886226925452758014L;
  for (int i = 0; i < 4; ++i) {
    const long double r = ax < 0.5L ? std::erf(y) - ax : (1.0L - ax) - std::erfc(y);
    y -= r / (1.128379167095512574L * std::exp(-y * y));
  }
  return x < 0 ? -y : y;
}

// Every unary function of the library with its reference.
inline std::vector<UnaryFunction> unary_functions() {
  return {
      {"exp", host::mvk_exp, [](long double x) { return std::exp(x); }, host::mvk_exp64},
      {"sin", host::mvk_sin, [](long double x) { return std::sin(x); }, host::mvk_sin64},
      {"cos", host::mvk_cos, [](long double x) { return std::cos(x); }, host::mvk_cos64},
      {"tan", host::mvk_tan, [](long double x) { return std::tan(x); }, host::mvk_tan64},
      {"arcsin", host::mvk_asin, [](long double x) { return std::asin(x); }},
      {"arccos", host::mvk_acos, [](long double x) { return std::acos(x); }},
      {"arctan", host::mvk_atan, [](long double x) { return std::atan(x); }},
      {"erf", host::mvk_erf, [](long double x) { return std::erf(x); }, host::mvk_erf64},
      {"erfinv", host::mvk_erfinv, ref_erfinv},
      {"expm1", host::mvk_expm1, [](long double x) { return std::expm1(x); }},
      {"log", host::mvk_log, [](long double x) { return std::log(x); }, host::mvk_log64},
      {"exp2", host::mvk_exp2, [](long double x) { return std::exp2(x); }},
      {"log2", host::mvk_log2, [](long double x) { return std::log2(x); }, host::mvk_log2_64},
      {"log1p", host::mvk_log1p, [](long double x) { return std::log1p(x); },
       host::mvk_log1p64},
      {"sqrt", host::mvk_sqrt, [](long double x) { return std::sqrt(x); }},
      {"rsqrt", host::mvk_rsqrt, [](long double x) { return 1.0L / std::sqrt(x); }},
      {"asinh", host::mvk_asinh, [](long double x) { return std::asinh(x); }},
      {"acosh", host::mvk_acosh, [](long double x) { return std::acosh(x); }},
      {"atanh", host::mvk_atanh, [](long double x) { return std::atanh(x); }},
      {"tanh", host::mvk_tanh, [](long double x) { return std::tanh(x); }, host::mvk_tanh64},
      {"sigmoid", host::mvk_logistic, ref_logistic, host::mvk_logistic64},
      {"sinh", host::mvk_sinh, [](long double x) { return std::sinh(x); }},
      {"cosh", host::mvk_cosh, [](long double x) { return std::cosh(x); }},
  };
}

// (x, y) pairs for pow: random bit patterns, integer and moderate exponents, bases near 1 with
// large exponents (results near overflow and underflow), and every pair of special values.
inline void pow_pairs(size_t n, uint32_t seed, std::vector<float>& xs, std::vector<float>& ys) {
  std::mt19937 rng(seed);
  const auto uniform = [&](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };
  for (size_t i = 0; i < n; ++i) {
    float x = std::bit_cast<float>(static_cast<uint32_t>(rng())), y = 0;
    switch (i % 5) {
      case 0:
        y = std::bit_cast<float>(static_cast<uint32_t>(rng()));
        break;
      case 1:
        y = static_cast<float>(static_cast<int>(rng() % 401) - 200);
        break;
      case 2:
        y = uniform(-200, 200);
        break;
      case 3:
        x = uniform(0, 4), y = uniform(-300, 300);
        break;
      default:
        x = uniform(0.999f, 1.001f), y = uniform(-1e6f, 1e6f);
        break;
    }
    xs.push_back(x);
    ys.push_back(y);
  }
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f,  -0.0f,       inf,          -inf,   nan,     1.0f,  -1.0f,
                            0.5f,  -0.5f,       2.0f,         -2.0f,  3.0f,    -3.0f, 2.5f,
                            -2.5f, 16777216.0f, -16777217.0f, 1e-45f, -1e-45f, 3e38f, -3e38f};
  for (const float a : specials)
    for (const float b : specials) {
      xs.push_back(a);
      ys.push_back(b);
    }
}

// One (y, x) pair for atan2 from rng, of kind % 4: 0 random bit patterns (NaNs and infinities
// too); 1 a moderate quotient (x random, y = x u, u uniform in [-64, 64]); 2 a log-uniform
// quotient (y = x m 2^k, m in [1, 2), k in [-30, 30]); 3 a quotient within 4 ulp of a power of
// two (y = x 2^k, k in [-40, 40], then y or x moved by up to 4 ulp), where atan(|y / x|) falls
// just below a power of two and its ulp halves. Signs random (all four quadrants).
inline std::pair<float, float> atan2_pair(std::mt19937_64& rng, unsigned kind) {
  const auto bits = [&] { return std::bit_cast<float>(static_cast<uint32_t>(rng())); };
  const auto finite = [&] {  // a random finite nonzero float >= 0
    for (;;)
      if (const float x = std::fabs(bits()); std::isfinite(x) && x != 0.0f) return x;
  };
  float y = 0, x = 0;
  switch (kind % 4) {
    case 0:
      return {bits(), bits()};
    case 1:
      x = finite();
      y = x * std::uniform_real_distribution<float>(-64.0f, 64.0f)(rng);
      break;
    case 2:
      do {
        x = finite();
        y = std::ldexp(x * std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                       static_cast<int>(rng() % 61) - 30);
      } while (!std::isfinite(y) || y == 0.0f);
      break;
    default: {
      do {
        x = finite();
        y = std::ldexp(x, static_cast<int>(rng() % 81) - 40);
      } while (!std::isfinite(y) || y == 0.0f);
      const int d = static_cast<int>(rng() % 9) - 4;
      float& moved = (rng() & 1) != 0 ? y : x;
      for (int i = 0; i < std::abs(d); ++i)
        moved = std::nextafter(moved, d > 0 ? std::numeric_limits<float>::infinity() : 0.0f);
    }
  }
  const uint64_t signs = rng();
  return {(signs & 1) != 0 ? -y : y, (signs & 2) != 0 ? -x : x};
}

// n pairs (y, x) of kind 3 above (quotients near powers of two), the example
// atan2(0x1.000002p+0, 0x1.fffffep+6) first in its four quadrants.
inline std::vector<std::pair<float, float>> atan2_near_power_pairs(size_t n, uint64_t seed) {
  std::vector<std::pair<float, float>> pairs;
  for (const float sy : {1.0f, -1.0f})
    for (const float sx : {1.0f, -1.0f})
      pairs.push_back({sy * 0x1.000002p+0f, sx * 0x1.fffffep+6f});
  std::mt19937_64 rng(seed);
  while (pairs.size() < n) pairs.push_back(atan2_pair(rng, 3));
  return pairs;
}

// The error of r against the exact atan2(y, x) (long double libm), in ulps of the correctly
// rounded result: a fraction, so that a double rounding of the reference near a midpoint
// cannot misjudge it (0 for NaN against NaN, infinite for a NaN against a number).
inline long double atan2_error_ulps(float r, float y, float x) {
  const long double exact = std::atan2(static_cast<long double>(y), static_cast<long double>(x));
  if (std::isnan(exact) || std::isnan(r))
    return std::isnan(exact) && std::isnan(r) ? 0 : std::numeric_limits<long double>::infinity();
  int e = 0;
  std::frexp(static_cast<float>(exact), &e);
  return std::fabs(static_cast<long double>(r) - exact) / std::ldexp(1.0L, std::max(e - 24, -149));
}

// A float for messages: its value in hex and its bits ("0x1.8p+0 (0x3fc00000)").
inline std::string hex(float x) {
  std::ostringstream s;
  s << std::hexfloat << x << " (0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
  return s.str();
}

// Bit-for-bit equality of two results, any NaN matching any NaN (the kernels and the host copy
// may differ in a NaN's payload).
inline bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// An adapter that flushes float32 subnormals (NVIDIA's, which has no
// shaderDenormPreserveFloat32) does so, read and written, in every operation; x86's SSE does the same with FTZ and DAZ set. While one of
// these lives on an x86 host, the host copy computes as such an adapter does, so the device
// results still match it bit for bit (subnormal results come out 0, subnormal operands count
// as 0). Off for adapters that keep subnormals (lavapipe): nothing changes.
class HostFlushesAsAdapter {
 public:
  // The current runtime's adapter, as a kernel shows it (the properties do not: lavapipe keeps
  // subnormals without advertising shaderDenormPreserveFloat32): 2^-126 * 0.5 is 0 there or not.
  HostFlushesAsAdapter() : HostFlushesAsAdapter(device_flushes_subnormals()) {}
  // Flushing on or off, whatever the adapter does.
  explicit HostFlushesAsAdapter(bool flush) : flush_(flush) {
#if defined(__SSE__) || defined(__x86_64__)
    saved_ = _mm_getcsr();
    _mm_setcsr(flush_ ? saved_ | 0x8040u : saved_ & ~0x8040u);  // FTZ (bit 15) and DAZ (bit 6)
#endif
  }
  ~HostFlushesAsAdapter() {
#if defined(__SSE__) || defined(__x86_64__)
    _mm_setcsr(saved_);
#endif
  }
  static bool device_flushes_subnormals() {
    const std::vector<float> smallest_normal{0x1p-126f};
    return (meshvk::array(std::span<const float>(smallest_normal), meshvk::Shape{1}) * 0.5f)
               .to_host<float>()[0] == 0.0f;
  }
  HostFlushesAsAdapter(const HostFlushesAsAdapter&) = delete;
  HostFlushesAsAdapter& operator=(const HostFlushesAsAdapter&) = delete;
  bool flushes() const {
    return flush_;
  }
  // Whether `got` is the host copy's value `want` as this adapter gives it. One that flushes
  // flushes what its arithmetic makes, a float64 variant's last step, float(double), included
  // (NVIDIA's conversion alone would keep it: the kernels flush it, mvk_narrow64), but may keep
  // a subnormal that a function passes through untouched (tanh(x) = x for tiny x) or not, as the
  // driver's compiler turns a select into arithmetic or not; SSE keeps those under FTZ. So there
  // a subnormal on either side counts as the zero of its sign.
  bool same_as_host(float got, float want) const {
    return flush_ ? same_bits(flushed(got), flushed(want)) : same_bits(got, want);
  }
  template <class F>
  bool same_as_host(float got, F host) const {
    return same_as_host(got, static_cast<float>(host()));
  }
  float flushed(float v) const {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    if (!flush_ || (bits & 0x7f800000u) != 0) return v;
    return std::bit_cast<float>(bits & 0x80000000u);
  }

 private:
  bool flush_;
  unsigned saved_ = 0;
};

// Floats in the order of their values as integers, so that ulp distance is a difference.
inline int64_t ordered(float f) {
  const int32_t i = std::bit_cast<int32_t>(f);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
}

// The distance in ulps between two results; NaN matches only NaN.
inline uint64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<uint64_t>::max();
  const int64_t d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

// The correctly rounded result as far as long double tells (64-bit significand, so a double
// rounding is possible only within 2^-40 ulp of a tie).
inline float reference(const UnaryFunction& f, float x) {
  return static_cast<float>(f.reference(static_cast<long double>(x)));
}

}  // namespace mathlib_check

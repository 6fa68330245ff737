#pragma once
// Checks shared by the tests of the math library's float64 variants (test_mathlib_float64.cpp:
// sin, cos, tan; test_mathlib_exp64.cpp: exp, tanh, logistic; test_mathlib_log64.cpp: log, log2,
// erf): how close a host copy is to a long double reference, and whether the kernels give the
// host copy's bits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mathlib_check.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mathlib_variants {

#define SKIP_UNDER_FAST_MATH()                                                              \
  if (const char* fast = std::getenv("MESHVK_FAST_MATH"); fast && std::string(fast) == "1") \
  GTEST_SKIP() << "MESHVK_FAST_MATH=1 replaces the library with the driver's built-ins"

// One float64 variant under test: its host copies (float64 and float-float), the long double
// reference and the public op whose kernels call it.
struct Variant {
  const char* name;
  float (*f64)(float);
  float (*ff)(float);
  long double (*reference)(long double);
  meshvk::Array (*op)(const meshvk::Array&);
};

// Size of an ulp of the float f's binade (the subnormal ulp below).
inline long double ulp_of(float f) {
  int e = 0;
  std::frexp(std::fabs(f), &e);
  return std::ldexp(1.0L, std::max(e - 24, -149));
}

// The largest error of f over xs in ulps of the correctly rounded result, where it is, and how
// many results are not correctly rounded; a NaN reference wants a NaN, an infinite one its bits.
struct Rounding {
  long double worst = 0;
  float worst_x = 0;
  int not_rounded = 0;
};
inline Rounding rounding_of(const char* name, float (*f)(float),
                            long double (*reference)(long double), const std::vector<float>& xs) {
  using mathlib_check::hex;
  using mathlib_check::same_bits;
  Rounding r;
  for (const float x : xs) {
    const float y = f(x);
    const long double exact = reference(static_cast<long double>(x));
    if (std::isnan(exact)) {
      EXPECT_TRUE(std::isnan(y)) << name << "(" << hex(x) << ") = " << hex(y);
      continue;
    }
    const float rounded = static_cast<float>(exact);
    if (!same_bits(y, rounded)) ++r.not_rounded;
    if (std::isinf(rounded)) {
      EXPECT_TRUE(same_bits(y, rounded)) << name << "(" << hex(x) << ") = " << hex(y);
      continue;
    }
    const long double e = std::fabs(static_cast<long double>(y) - exact) / ulp_of(rounded);
    if (e > r.worst) r.worst = e, r.worst_x = x;
  }
  std::cout << "mathlib " << name << " (float64): max " << static_cast<double>(r.worst) << " ulp, "
            << r.not_rounded << " of " << xs.size() << " not correctly rounded\n";
  return r;
}

// The number of xs whose kernel result (the vector kernel, and the strided one that a broadcast
// operand makes) differs from `want`'s bits; prints the first few.
inline int device_differences(const char* name, meshvk::Array (*op)(const meshvk::Array&),
                              const std::vector<float>& xs, float (*want)(float)) {
  using mathlib_check::hex;
  using mathlib_check::same_bits;
  const auto got = op(host_array(xs)).to_host<float>();
  // (n, 4) plus a broadcast row of +0: the strided kernel, f(x) + 0.
  const int64_t rows = static_cast<int64_t>(xs.size() / 4);
  const std::vector<float> head(xs.begin(), xs.begin() + rows * 4);
  const meshvk::Array x2 = meshvk::array(std::span<const float>(head), meshvk::Shape{rows, 4});
  const auto strided = (op(x2) + host_array({0.0f, 0.0f, 0.0f, 0.0f})).to_host<float>();
  const mathlib_check::HostFlushesAsAdapter as_adapter;
  int bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float expected = want(xs[i]);
    const bool ok = as_adapter.same_as_host(got[i], expected) &&
                    (i >= head.size() || as_adapter.same_as_host(strided[i], expected + 0.0f));
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << name << "(" << hex(xs[i]) << "): device " << hex(got[i])
                    << (i < head.size() ? ", strided " + hex(strided[i]) : "") << ", host "
                    << hex(expected);
  }
  return bad;
}

// One rounding of a double accurate to about 2^-50: within 0.5 + 2^-20 ulp of the exact value,
// so correctly rounded but for values that close to a rounding boundary (the float-float
// variants these replace are up to 1 ulp off: README's table); at most 2 of `xs` not.
inline void expect_host_copies_nearly_correctly_rounded(std::span<const Variant> variants,
                                                        const std::vector<float>& xs) {
  using mathlib_check::hex;
  for (const Variant& v : variants) {
    const Rounding r = rounding_of(v.name, v.f64, v.reference, xs);
    EXPECT_LE(r.worst, 0.5L + 0x1p-20L)
        << v.name << "(" << hex(r.worst_x) << ") = " << hex(v.f64(r.worst_x));
    EXPECT_LE(r.not_rounded, 2) << v.name;
  }
}

// Every step-th bit pattern, the `specials`, and the 256 floats on each side of each of the
// `edges` and of their negatives.
inline std::vector<float> sample(uint32_t step, std::initializer_list<float> specials,
                                 std::initializer_list<float> edges) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> xs;
  for (uint64_t u = 0; u < (1ull << 32); u += step)
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (const float s : specials) xs.push_back(s);
  for (const float p : edges) {
    float up = p, down = p;
    for (int i = 0; i < 256; ++i) {
      up = std::nextafter(up, kInf);
      down = std::nextafter(down, 0.0f);
      for (const float v : {up, down, -up, -down}) xs.push_back(v);
    }
  }
  return xs;
}

// The default runtime on an adapter with shaderFloat64 (lavapipe has it) runs the float64
// variants, in both kinds of elementwise kernel, bit for bit as the host copy.
inline void expect_kernels_run_float64_copies(std::span<const Variant> variants,
                                              const std::vector<float>& xs) {
  const ScopedEnv unset("MESHVK_MATHLIB_FLOAT64", nullptr);
  meshvk::Runtime runtime;
  auto& rt = *runtime.state();
  if (!rt.device().adapter().float64) GTEST_SKIP() << "the adapter has no shaderFloat64";
  ASSERT_TRUE(rt.mathlib_float64(rt.device().adapter()));
  for (const Variant& v : variants)
    EXPECT_EQ(device_differences(v.name, v.op, xs, v.f64), 0) << v.name << " of " << xs.size();
}

// MESHVK_MATHLIB_FLOAT64=0 keeps the float-float variants, bit for bit as their host copy.
inline void expect_switch_off_runs_float_float(std::span<const Variant> variants,
                                               const std::vector<float>& xs) {
  const ScopedEnv off("MESHVK_MATHLIB_FLOAT64", "0");
  meshvk::Runtime rt;
  ASSERT_FALSE(rt.state()->mathlib_float64(rt.state()->device().adapter()));
  for (const Variant& v : variants)
    EXPECT_EQ(device_differences(v.name, v.op, xs, v.ff), 0) << v.name << " of " << xs.size();
}

}  // namespace mathlib_variants

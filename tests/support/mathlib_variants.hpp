#pragma once
// Checks shared by the tests of the math library's float64 variants (test_mathlib_float64.cpp:
// sin, cos, tan; test_mathlib_exp64.cpp: exp, tanh, logistic; test_mathlib_log64.cpp: log, log2,
// erf): how close a host copy is to a long double reference, and whether the kernels give the
// host copy's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "mathlib_check.hpp"
#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mathlib_variants {

#define SKIP_UNDER_FAST_MATH()                                                              \
  if (const char* fast = std::getenv("MESHVK_FAST_MATH"); fast && std::string(fast) == "1") \
  GTEST_SKIP() << "MESHVK_FAST_MATH=1 replaces the library with the driver's built-ins"

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

}  // namespace mathlib_variants

#pragma once
// Comparing device values with expected host values, and small patterned test data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "meshvk/meshvk.hpp"

// Every element of `got` within tol (relative above 1, absolute below) of `want`.
inline void expect_close(const meshvk::Array& got, const std::vector<float>& want, float tol = 1e-5f) {
  const auto v = got.to_host<float>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
}

// n values offset + scale * k for k in -5..5, in a pattern that repeats every 11.
inline std::vector<float> patterned_values(int64_t n, float scale, float offset = 0.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = offset + scale * static_cast<float>((i * 37) % 11 - 5);
  return v;
}

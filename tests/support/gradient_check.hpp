#pragma once
// Gradients against central differences, for the tests of ops built from other ops.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

// d/dx_i of sum(f(x) * w), w random of f's output shape, by grad and by central differences.
inline void expect_gradient(const std::function<meshvk::Array(const meshvk::Array&)>& f,
                            const std::vector<float>& x, const char* what) {
  const meshvk::Shape out = f(host_array(x)).shape();
  int64_t n = 1;
  for (const int64_t d : out) n *= d;
  const meshvk::Array w = host_array(random_floats(static_cast<size_t>(n), 99), out);
  const auto loss = [&](const meshvk::Array& a) { return meshvk::sum(f(a) * w); };
  const auto g = meshvk::grad(loss)(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    auto up = x, down = x;
    const float h = 1e-2f;
    up[i] += h;
    down[i] -= h;
    const double numeric = (static_cast<double>(loss(host_array(up)).to_host<float>()[0]) -
                            loss(host_array(down)).to_host<float>()[0]) /
                           (2.0 * h);
    EXPECT_NEAR(g[i], numeric, 2e-3 * (1.0 + std::abs(numeric))) << what << " at " << i;
  }
}

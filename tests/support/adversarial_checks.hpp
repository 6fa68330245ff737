#pragma once
// Helpers of the outside tester's suites (test_control_flow_adversarial.cpp,
// test_transforms_adversarial.cpp): values against host loops, gradients against central
// differences of a host function.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace adversarial {
using meshvk::Array;
namespace mv = meshvk;

using ::expect_close;  // value_checks.hpp
inline std::vector<float> values(int64_t n, float scale, float offset = 0.f) {
  return patterned_values(n, scale, offset);
}

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Central differences of a scalar function of a flat vector.
inline std::vector<float> numeric_grad(const std::function<float(const std::vector<float>&)>& f, std::vector<float> x,
                                float h = 1e-2f) {
  std::vector<float> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = static_cast<float>((up - down) / (2.0 * h));
  }
  return g;
}

inline void expect_grad_close(const Array& got, const std::vector<float>& want, float tol = 3e-3f) {
  const auto v = got.to_host<float>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], tol * (1.f + std::fabs(want[i]))) << "at " << i;
}

inline float scalar_of(const Array& a) { return a.to_host<float>().at(0); }


}  // namespace adversarial

// The order in which matmul sums along k (engine/src/kernels/matmul.cpp): C[i][j] is 0 + S_0 +
// S_1 + ... in turn, S_q = ((p_4q + p_4q+1) + p_4q+2) + p_4q+3 with p_k = A[i][k] * B[k][j], each
// product and sum rounded to float32 and nothing fused. Every kernel and block shape must give
// these bits exactly, so results do not depend on which kernel an adapter picks or on
// MESHVK_MATMUL_KERNEL / MESHVK_MATMUL_BLOCK (issue 17), and one device prints the tutorial's
// layer as XLA's 8 devices do (tests/test_tutorial_digits.cpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;

namespace {

// float32 product and sum, each rounded once: the double product of two floats is exact, and
// neither the conversion nor a float + float can be contracted into an fma by the host compiler.
float mul(float a, float b) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
}

// C = A @ B (m x k times k x n, row-major) in meshvk's order, or, with `blocks` false, in the
// plain sequential order (which the test data must tell apart from it).
std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int m,
                               int n, int k, bool blocks) {
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int k0 = 0; k0 < k; k0 += 4) {
        // Terms past k are the kernels' zero padding: 0 * 0.
        auto p = [&](int kk) {
          return kk < k ? mul(a[size_t(i) * k + kk], b[size_t(kk) * n + j]) : 0.0f;
        };
        if (blocks) {
          acc = acc + (((p(k0) + p(k0 + 1)) + p(k0 + 2)) + p(k0 + 3));
        } else {
          for (int t = 0; t < 4 && k0 + t < k; ++t) acc = acc + p(k0 + t);
        }
      }
      c[size_t(i) * n + j] = acc;
    }
  return c;
}

// Values over 17 binades, so that the order of the sums shows in the last bits.
std::vector<float> spread_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

struct Case {
  int m, n, k;
  bool trans_a = false, trans_b = false;  // operands stored transposed (repacked / strided)
};

// The kernel settings every case runs under: the blocked kernel with its default block and with
// shapes that take 2 and 3 vec4s of k per iteration (the latter with a remainder loop, without
// subgroup shuffles), and the tiled kernel.
struct Setting {
  const char* kernel;
  const char* block;  // MESHVK_MATMUL_BLOCK, or null
};
// The tests switch the variables while lavapipe's threads run (and read the environment). Adding
// a variable may move glibc's environ array under a reader (a crash seen under ASan); replacing
// an existing one's value does not. So both exist, empty (= the default), before any thread
// does, and a setting without a block shape sets it empty rather than unsetting it.
const bool matmul_variables_exist = [] {
  setenv("MESHVK_MATMUL_KERNEL", "", 0);
  setenv("MESHVK_MATMUL_BLOCK", "", 0);
  return true;
}();

const Setting kSettings[] = {
    {"blocked", ""}, {"blocked", "8x1x2"}, {"blocked", "16x2x3noshuffle"}, {"tiled", ""}};

std::string describe(const Case& c, const Setting& s) {
  return std::string(s.kernel) + (*s.block ? std::string(" block ") + s.block : "") + " m " +
         std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
         (c.trans_a ? " A^T" : "") + (c.trans_b ? " B^T" : "");
}

// Row-major m x n values stored transposed: the n x m array whose transpose they are.
std::vector<float> transposed(const std::vector<float>& v, int m, int n) {
  std::vector<float> t(v.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) t[size_t(j) * m + i] = v[size_t(i) * n + j];
  return t;
}

}  // namespace

TEST(MatmulOrder, EveryKernelAndBlockShapeSumsInBlocksOfFour) {
  const Case cases[] = {{1, 4, 32},
                        {5, 7, 3},
                        {9, 33, 17},
                        {20, 64, 130},
                        {64, 128, 64},
                        {3, 5, 1},
                        {17, 12, 23, true, true},
                        {8, 40, 36, false, true}};
  int orders_differ = 0;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const auto a = spread_floats(size_t(c.m) * c.k, seed++);
    const auto b = spread_floats(size_t(c.k) * c.n, seed++);
    const auto want = host_matmul(a, b, c.m, c.n, c.k, true);
    const auto sequential = host_matmul(a, b, c.m, c.n, c.k, false);
    for (size_t e = 0; e < want.size(); ++e) orders_differ += want[e] != sequential[e];
    const mv::Array aa = c.trans_a ? host_array(transposed(a, c.m, c.k), {c.k, c.m}).transpose()
                                   : host_array(a, {c.m, c.k});
    const mv::Array bb = c.trans_b ? host_array(transposed(b, c.k, c.n), {c.n, c.k}).transpose()
                                   : host_array(b, {c.k, c.n});
    for (const Setting& s : kSettings) {
      const ScopedEnv kernel("MESHVK_MATMUL_KERNEL", s.kernel);
      const ScopedEnv block("MESHVK_MATMUL_BLOCK", s.block);
      const auto got = mv::matmul(aa, bb).to_host<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t e = 0; e < want.size(); ++e)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[e]), std::bit_cast<uint32_t>(want[e]))
            << describe(c, s) << ": C[" << e / c.n << "][" << e % c.n << "] = " << got[e]
            << ", want " << want[e] << " (the sequential order gives " << sequential[e] << ")";
    }
  }
  // The data tells the two orders apart, so a kernel summing in turn would fail above.
  EXPECT_GT(orders_differ, 100);
}

// The settings above are read at every call, even of a shape that ran before: a name no kernel
// has is an error there, so the loop above really ran each kernel (not one cached choice).
TEST(MatmulOrder, KernelSettingIsReadAtEveryCall) {
  const mv::Array a = host_array({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(mv::matmul(a, a).to_host<float>(), (std::vector<float>{7, 10, 15, 22}));
  const ScopedEnv kernel("MESHVK_MATMUL_KERNEL", "fastest");
  EXPECT_NE(message_of([&] {
              (void)mv::matmul(a, a).to_host<float>();
            }).find("MESHVK_MATMUL_KERNEL=fastest"),
            std::string::npos);
}

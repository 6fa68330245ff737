// jax.nn.dot_product_attention (grouped-query heads, bias, mask, causal, scale, unbatched) against
// a direct double-precision loop, eager, under jit, sharded and through grad; and jax.nn's other
// activations at their kinks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::DType;
using mv::P;

namespace {

std::vector<float> pseudo_random(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  return v;
}

// softmax(q k^T * scale + bias, masked) v for q [B,T,N,H], k/v [B,S,K,H], in double.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int B,
                              int T, int S, int N, int K, int H, double scale, bool causal,
                              const std::vector<float>* bias_nts, const std::vector<bool>* mask_ts) {
  std::vector<double> out(static_cast<size_t>(B * T * N * H), 0.0);
  const int G = N / K;
  for (int b = 0; b < B; ++b)
    for (int n = 0; n < N; ++n)
      for (int t = 0; t < T; ++t) {
        std::vector<double> logit(static_cast<size_t>(S));
        for (int s = 0; s < S; ++s) {
          double d = 0;
          for (int h = 0; h < H; ++h)
            d += static_cast<double>(q[static_cast<size_t>(((b * T + t) * N + n) * H + h)]) *
                 k[static_cast<size_t>(((b * S + s) * K + n / G) * H + h)];
          d *= scale;
          if (bias_nts) d += (*bias_nts)[static_cast<size_t>((n * T + t) * S + s)];
          const bool keep = (!causal || s <= t) && (!mask_ts || (*mask_ts)[static_cast<size_t>(t * S + s)]);
          logit[static_cast<size_t>(s)] = keep ? d : -0.7 * std::numeric_limits<float>::max();
        }
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (const double l : logit) m = std::max(m, l);
        for (double& l : logit) z += (l = std::exp(l - m));
        for (int s = 0; s < S; ++s)
          for (int h = 0; h < H; ++h)
            out[static_cast<size_t>(((b * T + t) * N + n) * H + h)] +=
                logit[static_cast<size_t>(s)] / z * v[static_cast<size_t>(((b * S + s) * K + n / G) * H + h)];
      }
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

}  // namespace

TEST(NnAttention, GroupedHeadsBiasMaskCausalAsTheDefinition) {
  const int B = 2, T = 5, S = 7, N = 6, K = 2, H = 3;  // odd lengths, 3 query heads per kv head
  const auto q = pseudo_random(B * T * N * H, 1), k = pseudo_random(B * S * K * H, 2), v = pseudo_random(B * S * K * H, 3);
  const mv::Array aq = mv::array(q, {B, T, N, H}), ak = mv::array(k, {B, S, K, H}), av = mv::array(v, {B, S, K, H});
  expect_near(mv::nn::dot_product_attention(aq, ak, av).to_host<float>(),
              reference(q, k, v, B, T, S, N, K, H, 1.0 / std::sqrt(3.0), false, nullptr, nullptr), 2e-6, "plain");
  // Causal with a scale, a [N, T, S] bias and a [T, S] mask (row 0 masked whole: uniform weights).
  const auto bias = pseudo_random(N * T * S, 4);
  std::vector<bool> keep(static_cast<size_t>(T * S));
  std::vector<float> keep_f;
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < S; ++s) {
      keep[static_cast<size_t>(t * S + s)] = t != 0 && (s + t) % 3 != 0;
      keep_f.push_back(keep[static_cast<size_t>(t * S + s)] ? 1.0f : 0.0f);
    }
  const mv::Array mask = mv::array(keep_f, {T, S}) > 0.0f;
  const auto want = reference(q, k, v, B, T, S, N, K, H, 0.5, true, &bias, &keep);
  const mv::Array got = mv::nn::dot_product_attention(aq, ak, av, mv::array(bias, {N, T, S}), mask, 0.5f, true);
  expect_near(got.to_host<float>(), want, 2e-6, "causal, bias, mask");
  // Under jit, with the batch split over the mesh, and unbatched.
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"b", "x"});
  const mv::Array sq = mv::device_put(aq, mv::NamedSharding(mesh, P("b")));
  const auto attend = mv::jit([&](const mv::Array& a, const mv::Array& kk, const mv::Array& vv) {
    return mv::nn::dot_product_attention(a, kk, vv, mv::array(bias, {N, T, S}), mask, 0.5f, true);
  });
  expect_near(attend(sq, ak, av).to_host<float>(), want, 2e-6, "jit, sharded");
  const std::vector<float> first(q.begin(), q.begin() + T * N * H), k0(k.begin(), k.begin() + S * K * H),
      v0(v.begin(), v.begin() + S * K * H);
  expect_near(mv::nn::dot_product_attention(mv::array(first, {T, N, H}), mv::array(k0, {S, K, H}), mv::array(v0, {S, K, H}))
                  .to_host<float>(),
              reference(first, k0, v0, 1, T, S, N, K, H, 1.0 / std::sqrt(3.0), false, nullptr, nullptr), 2e-6, "unbatched");
  // Gradients flow to all three (checked against central differences of the float64 form).
  const auto loss = [](const mv::Array& a, const mv::Array& kk, const mv::Array& vv) {
    return mv::sum(mv::square(mv::nn::dot_product_attention(a, kk, vv, std::nullopt, std::nullopt, std::nullopt, true)));
  };
  const std::vector<mv::Array> g = mv::grad(loss, std::vector<int>{0, 1, 2})(mv::astype(aq, DType::float64),
                                                                        mv::astype(ak, DType::float64), mv::astype(av, DType::float64));
  for (int which = 0; which < 3; ++which) {
    const std::vector<double> gd = g[static_cast<size_t>(which)].to_host<double>();
    for (const size_t i : {size_t{0}, size_t{7}, size_t{29}}) {
      std::vector<mv::Array> plus{mv::astype(aq, DType::float64), mv::astype(ak, DType::float64), mv::astype(av, DType::float64)};
      std::vector<mv::Array> minus = plus;
      std::vector<double> base = plus[static_cast<size_t>(which)].to_host<double>();
      const double eps = 1e-6;
      std::vector<double> up = base, down = base;
      up[i] += eps;
      down[i] -= eps;
      const mv::Shape shape = plus[static_cast<size_t>(which)].shape();
      plus[static_cast<size_t>(which)] = mv::array(std::span<const double>(up), shape);
      minus[static_cast<size_t>(which)] = mv::array(std::span<const double>(down), shape);
      const double fd = (loss(plus[0], plus[1], plus[2]).to_host<double>()[0] -
                         loss(minus[0], minus[1], minus[2]).to_host<double>()[0]) / (2 * eps);
      EXPECT_NEAR(gd[i], fd, 1e-6 * std::max(1.0, std::fabs(fd))) << "argument " << which << " element " << i;
    }
  }
  EXPECT_THROW(mv::nn::dot_product_attention(aq, mv::array(k, {B, S, K, H}).reshape({B, S, 1, K * H}), av), mv::Error);
  EXPECT_THROW(mv::nn::dot_product_attention(aq, ak, av, std::nullopt, mv::ones({T, S})), mv::Error);
  expect_runtime_usable();
}

TEST(NnAttention, ActivationsAsJax) {
  const float inf = std::numeric_limits<float>::infinity();
  const mv::Array x = mv::array({-3.0f, -1.0f, 0.0f, 0.5f, 1.0f, 6.0f, 7.0f, -inf, inf});
  auto host = [](const mv::Array& a) { return a.to_host<float>(); };
  const std::vector<float> hx = host(x);
  const std::vector<float> leaky = host(mv::nn::leaky_relu(x)), elu = host(mv::nn::elu(x)), celu = host(mv::nn::celu(x, 2.0f)),
                           selu = host(mv::nn::selu(x)), ls = host(mv::nn::log_sigmoid(x)), r6 = host(mv::nn::relu6(x)),
                           ht = host(mv::nn::hard_tanh(x)), ss = host(mv::nn::soft_sign(x));
  for (size_t i = 0; i < hx.size(); ++i) {
    const double v = hx[i];
    EXPECT_FLOAT_EQ(leaky[i], static_cast<float>(v >= 0 ? v : 0.01 * v)) << v;
    if (std::isfinite(v)) {
      EXPECT_NEAR(elu[i], v > 0 ? v : std::expm1(v), 1e-6) << v;
      EXPECT_NEAR(celu[i], std::max(v, 0.0) + 2.0 * std::expm1(std::min(v, 0.0) / 2.0), 1e-6) << v;
      EXPECT_NEAR(selu[i], 1.0507009873554805 * (v > 0 ? v : 1.6732632423543772 * std::expm1(v)), 1e-5) << v;
      EXPECT_NEAR(ls[i], -std::log1p(std::exp(-v)), 1e-6) << v;
      EXPECT_NEAR(ss[i], v / (std::fabs(v) + 1), 1e-7) << v;
    }
    EXPECT_EQ(r6[i], static_cast<float>(std::min(std::max(v, 0.0), 6.0))) << v;
    EXPECT_EQ(ht[i], static_cast<float>(std::min(std::max(v, -1.0), 1.0))) << v;
  }
  EXPECT_EQ(elu[7], -1.0f);
  EXPECT_EQ(ls[7], -inf);
  // JAX's gradients at the kinks: relu6 0 at 0 and 6, hard_tanh 1 at +-1, leaky_relu 1 at 0.
  const mv::Array kinks = mv::array({0.0f, 6.0f, 1.0f, -1.0f});
  EXPECT_EQ(mv::grad([](const mv::Array& a) { return mv::sum(mv::nn::relu6(a)); })(kinks).to_host<float>(),
            (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(mv::grad([](const mv::Array& a) { return mv::sum(mv::nn::hard_tanh(a)); })(kinks).to_host<float>(),
            (std::vector<float>{1, 0, 1, 1}));
  EXPECT_EQ(mv::grad([](const mv::Array& a) { return mv::sum(mv::nn::leaky_relu(a)); })(kinks).to_host<float>(),
            (std::vector<float>{1, 1, 1, 0.01f}));
  // elu's gradient stays finite where expm1 of the untaken side would overflow.
  EXPECT_EQ(mv::grad([](const mv::Array& a) { return mv::sum(mv::nn::elu(a)); })(mv::array({100.0f})).to_host<float>()[0], 1.0f);
  // glu and standardize.
  const mv::Array gx = mv::array({1.0f, 2.0f, 0.0f, -1.0f}, {1, 4});
  const std::vector<float> glu = host(mv::nn::glu(gx));
  EXPECT_NEAR(glu[0], 1.0f / (1.0f + std::exp(0.0f)), 1e-7f);
  EXPECT_NEAR(glu[1], 2.0f / (1.0f + std::exp(1.0f)), 1e-7f);
  EXPECT_THROW(mv::nn::glu(mv::ones({3})), mv::Error);
  const std::vector<float> st = host(mv::nn::standardize(mv::array({1.0f, 2.0f, 3.0f, 4.0f})));
  const double var = 1.25;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(st[static_cast<size_t>(i)], (i + 1 - 2.5) / std::sqrt(var + 1e-5), 1e-5);
  expect_runtime_usable();
}

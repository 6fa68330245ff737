// jax.nn's activations and norms and more of jax.numpy (issue 29, item 1, in part): values
// against a double-precision host reference, dtypes and shapes as JAX gives them, gradients by
// finite differences, and the sharding each keeps under jit.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

// d/dx_i of sum(f(x) * w) by central differences, against grad.
void expect_gradient(const std::function<Array(const Array&)>& f, const std::vector<float>& x,
                     const char* what) {
  const mv::Shape out = f(host_array(x)).shape();
  int64_t n = 1;
  for (const int64_t d : out) n *= d;
  const Array w = host_array(random_floats(static_cast<size_t>(n), 99), out);
  const auto loss = [&](const Array& a) { return mv::sum(f(a) * w); };
  const auto g = mv::grad(loss)(host_array(x)).to_host<float>();
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

TEST(JaxTransforms, StopGradientTreatsItsValueAsAConstant) {
  const auto x = random_floats(5, 21);
  // d/dx sum(x * stop_gradient(x)) = stop_gradient(x) = x, not 2x.
  const auto f = [](const Array& v) { return mv::sum(v * mv::stop_gradient(v)); };
  const auto g = mv::grad(f)(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(g[i], x[i]) << i;
  // Of a pending elementwise value, under jit, and with lax's spelling: the same.
  const auto h = [](const Array& v) {
    return mv::sum(mv::square(v) * mv::lax::stop_gradient(2.0f * v + 1.0f));
  };
  const auto jg = mv::jit([&](const Array& v) { return mv::grad(h)(v); })(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(jg[i], 2 * x[i] * (2 * x[i] + 1)) << i;
  // The value itself is x's.
  EXPECT_EQ(mv::stop_gradient(host_array(x)).to_host<float>(), x);
  expect_error([] { (void)mv::stop_gradient(Array()); }, "empty meshvk::Array");
}

TEST(JaxNn, SoftmaxAndLogsumexpMatchTheHost) {
  const auto x = random_floats(3 * 7, 1, -5.0f, 5.0f);
  const Array a = host_array(x, {3, 7});
  std::vector<double> soft(x.size()), lse(3);
  for (int r = 0; r < 3; ++r) {
    double m = -1e300, s = 0;
    for (int c = 0; c < 7; ++c) m = std::max(m, static_cast<double>(x[r * 7 + c]));
    for (int c = 0; c < 7; ++c) s += std::exp(x[r * 7 + c] - m);
    for (int c = 0; c < 7; ++c) soft[r * 7 + c] = std::exp(x[r * 7 + c] - m) / s;
    lse[r] = m + std::log(s);
  }
  expect_near_all(mv::nn::softmax(a).to_host<float>(), soft, 1e-6, "softmax");
  const Array l = mv::nn::logsumexp(a, {1});
  EXPECT_EQ(l.shape(), (mv::Shape{3}));
  expect_near_all(l.to_host<float>(), lse, 1e-6, "logsumexp");
  EXPECT_EQ(mv::nn::logsumexp(a, {1}, true).shape(), (mv::Shape{3, 1}));
  EXPECT_EQ(mv::nn::logsumexp(a).shape(), (mv::Shape{}));
  // Large logits do not overflow; a row of -inf gives -inf, as jax.nn.logsumexp.
  const auto big = mv::nn::logsumexp(host_array({1000.f, 1000.f, -kInf, -kInf}, {2, 2}), {1})
                       .to_host<float>();
  EXPECT_NEAR(big[0], 1000.0 + std::log(2.0), 1e-3);
  EXPECT_EQ(big[1], -kInf);
  const auto s = mv::nn::softmax(host_array({1000.f, 1000.f}, {2})).to_host<float>();
  EXPECT_EQ(s[0], 0.5f);
  expect_gradient([](const Array& v) { return mv::nn::softmax(v.reshape(2, 3)); },
                  random_floats(6, 3), "softmax");
  expect_gradient([](const Array& v) { return mv::nn::logsumexp(v.reshape(2, 3), {1}); },
                  random_floats(6, 4), "logsumexp");
}

TEST(JaxNn, ActivationsMatchTheHost) {
  const auto x = random_floats(37, 2, -6.0f, 6.0f);
  const Array a = host_array(x);
  std::vector<double> tanh_gelu, erf_gelu, silu, softplus, relu;
  for (const float f : x) {
    const double v = f;
    tanh_gelu.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    erf_gelu.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    silu.push_back(v / (1 + std::exp(-v)));
    softplus.push_back(std::log1p(std::exp(v)));
    relu.push_back(std::max(v, 0.0));
  }
  expect_near_all(mv::nn::gelu(a).to_host<float>(), tanh_gelu, 2e-6, "gelu (tanh)");
  expect_near_all(mv::nn::gelu(a, false).to_host<float>(), erf_gelu, 2e-6, "gelu (erf)");
  expect_near_all(mv::nn::silu(a).to_host<float>(), silu, 2e-6, "silu");
  expect_near_all(mv::nn::swish(a).to_host<float>(), silu, 2e-6, "swish");
  expect_near_all(mv::nn::softplus(a).to_host<float>(), softplus, 2e-6, "softplus");
  expect_near_all(mv::nn::relu(a).to_host<float>(), relu, 0, "relu");
  // softplus of large arguments stays finite and exact.
  EXPECT_EQ(mv::nn::softplus(host_array({100.f})).to_host<float>()[0], 100.f);
  const auto g = random_floats(9, 5, -3.0f, 3.0f);
  expect_gradient([](const Array& v) { return mv::nn::gelu(v); }, g, "gelu (tanh)");
  expect_gradient([](const Array& v) { return mv::nn::gelu(v, false); }, g, "gelu (erf)");
  expect_gradient([](const Array& v) { return mv::nn::silu(v); }, g, "silu");
  expect_gradient([](const Array& v) { return mv::nn::softplus(v); }, g, "softplus");
}

TEST(JaxNn, LayerNormAndRmsNormAsFlax) {
  const auto x = random_floats(4 * 6, 7, -2.0f, 2.0f);
  const auto scale = random_floats(6, 8, 0.5f, 1.5f), bias = random_floats(6, 9);
  std::vector<double> ln, rms;
  for (int r = 0; r < 4; ++r) {
    double m = 0, ms = 0;
    for (int c = 0; c < 6; ++c) m += x[r * 6 + c] / 6.0;
    double v = 0;
    for (int c = 0; c < 6; ++c) {
      v += (x[r * 6 + c] - m) * (x[r * 6 + c] - m) / 6.0;
      ms += static_cast<double>(x[r * 6 + c]) * x[r * 6 + c] / 6.0;
    }
    for (int c = 0; c < 6; ++c) {
      ln.push_back((x[r * 6 + c] - m) / std::sqrt(v + 1e-5) * scale[c] + bias[c]);
      rms.push_back(x[r * 6 + c] / std::sqrt(ms + 1e-6) * scale[c]);
    }
  }
  const Array a = host_array(x, {4, 6});
  expect_near_all(mv::nn::layer_norm(a, host_array(scale), host_array(bias), 1e-5f).to_host<float>(),
                  ln, 1e-5, "layer_norm");
  expect_near_all(mv::nn::rms_norm(a, host_array(scale)).to_host<float>(), rms, 1e-5, "rms_norm");
  expect_error([&] { (void)mv::nn::layer_norm(a, host_array(bias, {6}).reshape(2, 3), host_array(bias)); },
               "one value per element of x's last axis (6)");
  expect_gradient(
      [&](const Array& v) {
        return mv::nn::layer_norm(v.reshape(2, 6), host_array(scale), host_array(bias));
      },
      random_floats(12, 10), "layer_norm");
}

TEST(JaxNn, ShardedUnderJitTheyKeepTheBatchSharding) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = random_floats(16 * 5, 11);
  const Array a = mv::device_put(host_array(x, {16, 5}), mv::NamedSharding(mesh, P("x", mv::None)));
  const auto f = mv::jit([](const Array& v) {
    return mv::nn::gelu(mv::nn::softmax(v)) + mv::nn::logsumexp(v, {1}, true);
  });
  const Array y = f(a);
  EXPECT_EQ(y.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x", mv::None))));
  const auto want = (mv::nn::gelu(mv::nn::softmax(host_array(x, {16, 5}))) +
                     mv::nn::logsumexp(host_array(x, {16, 5}), {1}, true))
                        .to_host<float>();
  const auto got = y.to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
}

TEST(JaxNumpy, TrilTriuEye) {
  const auto x = random_floats(2 * 3 * 4, 12);
  const Array a = host_array(x, {2, 3, 4});
  for (const int k : {-1, 0, 2}) {
    const auto lo = mv::tril(a, k).to_host<float>(), up = mv::triu(a, k).to_host<float>();
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) {
          const size_t at = static_cast<size_t>((b * 3 + i) * 4 + j);
          EXPECT_EQ(lo[at], j - i <= k ? x[at] : 0.0f) << k << " " << at;
          EXPECT_EQ(up[at], j - i >= k ? x[at] : 0.0f) << k << " " << at;
        }
  }
  const Array ints = mv::tril(mv::ones({3, 3}, mv::DType::int32));
  EXPECT_EQ(ints.dtype(), mv::DType::int32);
  EXPECT_EQ(ints.to_host<int32_t>(), (std::vector<int32_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  const Array e = mv::eye(3, 4, 1);
  EXPECT_EQ(e.shape(), (mv::Shape{3, 4}));
  EXPECT_EQ(e.to_host<float>(), (std::vector<float>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(mv::eye(2, -1, 0, mv::DType::int32).to_host<int32_t>(), (std::vector<int32_t>{1, 0, 0, 1}));
  expect_error([] { (void)mv::tril(mv::ones({3})); }, "at least 2 dimensions");
}

TEST(JaxNumpy, ClipExpandSqueeze) {
  const Array a = host_array({-3.f, -0.5f, 0.25f, 4.f});
  EXPECT_EQ(mv::clip(a, -1.0f, 1.0f).to_host<float>(), (std::vector<float>{-1, -0.5f, 0.25f, 1}));
  EXPECT_EQ(mv::clip(a, std::nullopt, 0.0f).to_host<float>(), (std::vector<float>{-3, -0.5f, 0, 0}));
  const Array i = mv::clip(mv::arange(6), 1, 3);
  EXPECT_EQ(i.dtype(), mv::DType::int32);
  EXPECT_EQ(i.to_host<int32_t>(), (std::vector<int32_t>{1, 1, 2, 3, 3, 3}));
  EXPECT_EQ(mv::expand_dims(mv::ones({2, 3}), 0).shape(), (mv::Shape{1, 2, 3}));
  EXPECT_EQ(mv::expand_dims(mv::ones({2, 3}), -1).shape(), (mv::Shape{2, 3, 1}));
  EXPECT_EQ(mv::expand_dims(mv::ones({2, 3}), 1).shape(), (mv::Shape{2, 1, 3}));
  EXPECT_EQ(mv::squeeze(mv::ones({1, 2, 1, 3})).shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(mv::squeeze(mv::ones({1, 2, 1, 3}), {-2}).shape(), (mv::Shape{1, 2, 3}));
  expect_error([] { (void)mv::squeeze(mv::ones({1, 2}), {1}); }, "only axes of size 1");
  expect_error([] { (void)mv::expand_dims(mv::ones({2}), 3); }, "out of range");
}

TEST(JaxNumpy, IsnanIsinfIsfiniteAnyAll) {
  const Array a = host_array({1.f, kNaN, kInf, -kInf, 0.f});
  using B = std::vector<bool>;
  const auto as_bools = [](const Array& b) {
    EXPECT_EQ(b.dtype(), mv::DType::bool_);
    B out;
    for (const int32_t v : mv::astype(b, mv::DType::int32).to_host<int32_t>()) out.push_back(v != 0);
    return out;
  };
  EXPECT_EQ(as_bools(mv::isnan(a)), (B{false, true, false, false, false}));
  EXPECT_EQ(as_bools(mv::isinf(a)), (B{false, false, true, true, false}));
  EXPECT_EQ(as_bools(mv::isfinite(a)), (B{true, false, false, false, true}));
  EXPECT_EQ(as_bools(mv::isfinite(mv::arange(3))), (B{true, true, true}));
  EXPECT_EQ(as_bools(mv::isnan(mv::arange(3))), (B{false, false, false}));
  const Array m = host_array({0.f, 0.f, 1.f, 2.f, 0.f, 3.f}, {2, 3});
  EXPECT_EQ(as_bools(mv::any(m, {1})), (B{true, true}));
  EXPECT_EQ(as_bools(mv::all(m, {1})), (B{false, false}));
  EXPECT_EQ(as_bools(mv::all(m, {0})), (B{false, false, true}));
  EXPECT_EQ(as_bools(mv::any(m)), (B{true}));
  EXPECT_EQ(mv::any(m, {1}, true).shape(), (mv::Shape{2, 1}));
  // Empty: numpy's any is false and all is true.
  EXPECT_EQ(as_bools(mv::any(mv::zeros({0}))), (B{false}));
  EXPECT_EQ(as_bools(mv::all(mv::zeros({0}))), (B{true}));
  EXPECT_EQ(as_bools(mv::all(mv::zeros({2, 0}), {1})), (B{true, true}));
}

TEST(JaxNumpy, FullLikeAndCumsum) {
  const Array f = mv::full_like(mv::ones({2, 2}), 2.5);
  EXPECT_EQ(f.to_host<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f, 2.5f}));
  const Array i = mv::full_like(mv::arange(3), 7);
  EXPECT_EQ(i.dtype(), mv::DType::int32);
  EXPECT_EQ(i.to_host<int32_t>(), (std::vector<int32_t>{7, 7, 7}));
  // Odd lengths, int exact; float close; along a middle axis.
  for (const int n : {1, 2, 7, 33}) {
    std::vector<int32_t> want(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) want[static_cast<size_t>(k)] = (k + 1) * k / 2;
    EXPECT_EQ(mv::cumsum(mv::arange(n), 0).to_host<int32_t>(), want) << n;
  }
  const auto x = random_floats(3 * 5 * 2, 13);
  const auto got = mv::cumsum(host_array(x, {3, 5, 2}), 1).to_host<float>();
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 2; ++c) {
      double s = 0;
      for (int b = 0; b < 5; ++b) {
        s += x[static_cast<size_t>((a * 5 + b) * 2 + c)];
        EXPECT_NEAR(got[static_cast<size_t>((a * 5 + b) * 2 + c)], s, 1e-6);
      }
    }
  expect_gradient([](const Array& v) { return mv::cumsum(v, 0); }, random_floats(5, 14), "cumsum");
  // Sharded along the summed axis, under jit: the same values.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto y = random_floats(16 * 3, 15);
  const Array ys = mv::device_put(host_array(y, {16, 3}), mv::NamedSharding(mesh, P("x")));
  const auto sharded = mv::jit([](const Array& v) { return mv::cumsum(v, 0); })(ys).to_host<float>();
  EXPECT_EQ(sharded, mv::cumsum(host_array(y, {16, 3}), 0).to_host<float>());
}

}  // namespace

namespace {

// JAX 0.7 renamed use_mesh to set_mesh; both spellings give a context for bare specs.
TEST(JaxSpellings, SetMeshIsUseMeshsNewName) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  {
    mv::set_mesh guard(mesh);
    ASSERT_TRUE(mv::get_abstract_mesh().has_value());
    const Array x = mv::device_put(mv::arange(16.f), P("x"));
    EXPECT_EQ(x.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x"))));
  }
  EXPECT_FALSE(mv::get_abstract_mesh().has_value());
}

}  // namespace

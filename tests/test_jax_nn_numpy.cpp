// jax.nn's activations and norms and more of jax.numpy (issue 29, item 1, in part): values
// against a double-precision host reference, dtypes and shapes as JAX gives them, gradients by
// finite differences, and the sharding each keeps under jit.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "gradient_check.hpp"
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
  // log_softmax: x - logsumexp(x) along the axis, without overflow at large logits.
  std::vector<double> log_soft(x.size());
  for (size_t i = 0; i < x.size(); ++i) log_soft[i] = x[i] - lse[i / 7];
  const Array ls = mv::nn::log_softmax(a);
  EXPECT_EQ(ls.shape(), a.shape());
  EXPECT_EQ(ls.dtype(), mv::DType::float32);
  expect_near_all(ls.to_host<float>(), log_soft, 1e-5, "log_softmax");
  const auto big_ls = mv::nn::log_softmax(host_array({1000.f, 1000.f, 0.f, -kInf}, {2, 2})).to_host<float>();
  EXPECT_NEAR(big_ls[0], -std::log(2.0), 1e-6);
  EXPECT_EQ(big_ls[2], 0.f);
  EXPECT_EQ(big_ls[3], -kInf);
  expect_gradient([](const Array& v) { return mv::nn::log_softmax(v.reshape(2, 3)); },
                  random_floats(6, 5), "log_softmax");
  expect_gradient([](const Array& v) { return mv::nn::log_softmax(v.reshape(3, 2), 0); },
                  random_floats(6, 6), "log_softmax axis 0");
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
    return mv::nn::gelu(mv::nn::softmax(v)) + mv::nn::logsumexp(v, {1}, true) +
           mv::nn::log_softmax(v);
  });
  const Array y = f(a);
  EXPECT_EQ(y.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x", mv::None))));
  const auto want = (mv::nn::gelu(mv::nn::softmax(host_array(x, {16, 5}))) +
                     mv::nn::logsumexp(host_array(x, {16, 5}), {1}, true) +
                     mv::nn::log_softmax(host_array(x, {16, 5})))
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

// Adversarial review: odd shapes, dtypes, non-finite values, shardings and errors, each against
// what jax.numpy / jax.nn give.
namespace {

std::vector<int32_t> ints_of(const Array& a) { return mv::astype(a, mv::DType::int32).to_host<int32_t>(); }

TEST(JaxReview, CumsumOddLengthsAndDtypes) {
  for (const int n : {0, 1, 5}) {
    const Array c = mv::cumsum(mv::ones({n}, mv::DType::int32), 0);
    EXPECT_EQ(c.shape(), (mv::Shape{n}));
    std::vector<int32_t> want(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) want[static_cast<size_t>(k)] = k + 1;
    EXPECT_EQ(c.to_host<int32_t>(), want) << n;
  }
  {
    const int n = 1000003;
    const auto c = mv::cumsum(mv::ones({n}, mv::DType::int32), -1).to_host<int32_t>();
    ASSERT_EQ(c.size(), static_cast<size_t>(n));
    EXPECT_EQ(c[0], 1);
    EXPECT_EQ(c[12345], 12346);
    EXPECT_EQ(c[static_cast<size_t>(n - 1)], n);
  }
  // An empty axis elsewhere, a size-1 axis summed.
  EXPECT_EQ(mv::cumsum(mv::zeros({0, 3}), 1).shape(), (mv::Shape{0, 3}));
  EXPECT_EQ(mv::cumsum(mv::ones({4, 1}), 1).to_host<float>(), (std::vector<float>{1, 1, 1, 1}));
  // jnp.cumsum of bool is int32 (numpy's default int), of uint32 stays uint32.
  const Array b = mv::cumsum(mv::arange(5) > 1, 0);
  EXPECT_EQ(b.dtype(), mv::DType::int32);
  EXPECT_EQ(b.to_host<int32_t>(), (std::vector<int32_t>{0, 0, 1, 2, 3}));
  // uint32 is for data movement in meshvk (random keys and bits): its sum is an Error.
  EXPECT_EQ(mv::cumsum(mv::astype(mv::arange(4), mv::DType::uint32), 0).to_host<uint32_t>(),
            (std::vector<uint32_t>{0, 1, 3, 6}));
  expect_error([] { (void)mv::cumsum(mv::ones({3}), 1); }, "out of range");
  expect_error([] { (void)mv::cumsum(mv::ones({}), 0); }, "out of range");
}

TEST(JaxReview, CumsumShardedAlongItsAxisUnderJit) {
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto x = random_floats(8 * 6, 31);
  const Array host = host_array(x, {8, 6});
  const Array a = mv::device_put(host, mv::NamedSharding(mesh, P("x", "y")));
  for (const int axis : {0, 1, -1}) {
    const auto got = mv::jit([axis](const Array& v) { return mv::cumsum(v, axis); })(a).to_host<float>();
    const auto want = mv::cumsum(host, axis).to_host<float>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << axis << " " << i;
  }
  // Eagerly too, and its gradient under jit.
  const auto eager = mv::cumsum(a, 0).to_host<float>();
  const auto want0 = mv::cumsum(host, 0).to_host<float>();
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(eager[i], want0[i], 1e-5) << i;
  const Array w = host_array(random_floats(8 * 6, 43), {8, 6});
  const auto loss = [w](const Array& v) { return mv::sum(mv::cumsum(v, 1) * w); };
  const auto gs = mv::jit([&](const Array& v) { return mv::grad(loss)(v); })(a).to_host<float>();
  const auto gh = mv::grad(loss)(host).to_host<float>();
  for (size_t i = 0; i < gs.size(); ++i) EXPECT_NEAR(gs[i], gh[i], 1e-5) << i;
  // One element per device along the summed axis.
  const auto mesh8 = mv::make_mesh({8}, {"x"});
  const Array o = mv::device_put(mv::arange(8), mv::NamedSharding(mesh8, P("x")));
  EXPECT_EQ(mv::jit([](const Array& v) { return mv::cumsum(v, 0); })(o).to_host<int32_t>(),
            (std::vector<int32_t>{0, 1, 3, 6, 10, 15, 21, 28}));
}

TEST(JaxReview, ClipPromotesAndPropagatesNaN) {
  // jnp.clip(int array, 1.5, 3.5) is float32, as jnp.maximum of an int array and a float.
  const Array c = mv::clip(mv::arange(6), 1.5f, 3.5f);
  EXPECT_EQ(c.dtype(), mv::DType::float32);
  EXPECT_EQ(c.to_host<float>(), (std::vector<float>{1.5f, 1.5f, 2, 3, 3.5f, 3.5f}));
  // NaN stays NaN (lax.max / lax.min propagate it).
  const auto n = mv::clip(host_array({kNaN, 2.f, -kInf}), 0.0f, 1.0f).to_host<float>();
  EXPECT_TRUE(std::isnan(n[0]));
  EXPECT_EQ(n[1], 1.f);
  EXPECT_EQ(n[2], 0.f);
  // Array bounds broadcast.
  EXPECT_EQ(mv::clip(host_array({-2.f, 0.f, 2.f}), host_array({-1.f}), host_array({1.f, 1.f, 0.5f})).to_host<float>(),
            (std::vector<float>{-1, 0, 0.5f}));
  EXPECT_EQ(mv::clip(mv::zeros({0, 2}), 0.f, 1.f).shape(), (mv::Shape{0, 2}));
  expect_gradient([](const Array& v) { return mv::clip(v, -0.5f, 0.5f); }, {-0.9f, -0.3f, 0.1f, 0.7f}, "clip");
}

TEST(JaxReview, EyeTrilTriuOddShapes) {
  EXPECT_EQ(mv::eye(0).shape(), (mv::Shape{0, 0}));
  EXPECT_EQ(mv::eye(3, 0).shape(), (mv::Shape{3, 0}));
  EXPECT_EQ(mv::eye(1).to_host<float>(), (std::vector<float>{1}));
  EXPECT_EQ(mv::eye(2, 3, 5).to_host<float>(), (std::vector<float>(6, 0.f)));
  EXPECT_EQ(mv::eye(2, 3, -5).to_host<float>(), (std::vector<float>(6, 0.f)));
  const Array b = mv::eye(2, 2, 0, mv::DType::bool_);
  EXPECT_EQ(b.dtype(), mv::DType::bool_);
  EXPECT_EQ(ints_of(b), (std::vector<int32_t>{1, 0, 0, 1}));
  const Array u = mv::eye(2, 2, -1, mv::DType::uint32);
  EXPECT_EQ(u.dtype(), mv::DType::uint32);
  EXPECT_EQ(ints_of(u), (std::vector<int32_t>{0, 0, 1, 0}));
  expect_error([] { (void)mv::eye(-1); }, "n >= 0");
  EXPECT_EQ(mv::tril(mv::zeros({0, 3})).shape(), (mv::Shape{0, 3}));
  EXPECT_EQ(mv::triu(mv::zeros({2, 0, 0})).shape(), (mv::Shape{2, 0, 0}));
  EXPECT_EQ(mv::tril(mv::ones({1, 1}), -1).to_host<float>(), (std::vector<float>{0}));
  const Array tb = mv::triu(mv::ones({2, 2}, mv::DType::bool_));
  EXPECT_EQ(tb.dtype(), mv::DType::bool_);
  EXPECT_EQ(ints_of(tb), (std::vector<int32_t>{1, 1, 0, 1}));
  // uint32 (data movement only in meshvk) is selected by its bits, as jnp.tril of uint32.
  const Array tu = mv::tril(mv::astype(host_array({1.f, 2.f, 3.f, 4.f}, {2, 2}), mv::DType::int32).astype(mv::DType::uint32));
  EXPECT_EQ(tu.dtype(), mv::DType::uint32);
  EXPECT_EQ(ints_of(tu), (std::vector<int32_t>{1, 0, 3, 4}));
  // NaN below the diagonal is zeroed (a select, not a multiply by 0).
  EXPECT_EQ(mv::triu(host_array({1.f, 2.f, kNaN, 4.f}, {2, 2})).to_host<float>(), (std::vector<float>{1, 2, 0, 4}));
  // The matrix axes sharded, under jit.
  const auto mesh42 = mv::make_mesh({4, 2}, {"x", "y"});
  const auto mx = random_floats(8 * 4, 44);
  const Array ma = mv::device_put(host_array(mx, {8, 4}), mv::NamedSharding(mesh42, P("x", "y")));
  EXPECT_EQ(mv::jit([](const Array& v) { return mv::triu(v, -2); })(ma).to_host<float>(),
            mv::triu(host_array(mx, {8, 4}), -2).to_host<float>());
  // Sharded batch under jit keeps its sharding.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = random_floats(8 * 3 * 3, 32);
  const Array a = mv::device_put(host_array(x, {8, 3, 3}), mv::NamedSharding(mesh, P("x")));
  const Array t = mv::jit([](const Array& v) { return mv::tril(v); })(a);
  EXPECT_EQ(t.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x"))));
  EXPECT_EQ(t.to_host<float>(), mv::tril(host_array(x, {8, 3, 3})).to_host<float>());
  expect_gradient([](const Array& v) { return mv::triu(v.reshape(2, 3), 1); }, random_floats(6, 33), "triu");
}

TEST(JaxReview, ExpandDimsSqueezeEdges) {
  EXPECT_EQ(mv::expand_dims(mv::ones({}), 0).shape(), (mv::Shape{1}));
  EXPECT_EQ(mv::expand_dims(mv::ones({}), -1).shape(), (mv::Shape{1}));
  EXPECT_EQ(mv::expand_dims(mv::zeros({0}), 0).shape(), (mv::Shape{1, 0}));
  EXPECT_EQ(mv::squeeze(mv::ones({1, 1})).shape(), (mv::Shape{}));
  EXPECT_EQ(mv::squeeze(mv::zeros({1, 0})).shape(), (mv::Shape{0}));
  expect_error([] { (void)mv::squeeze(mv::zeros({0}), {0}); }, "only axes of size 1");
  expect_error([] { (void)mv::squeeze(mv::ones({1}), {1}); }, "out of range");
  expect_error([] { (void)mv::expand_dims(mv::ones({2}), -3); }, "out of range");
}

TEST(JaxReview, PredicatesOnEveryDtypeAndEmpty) {
  const Array b = mv::arange(3) > 0;
  EXPECT_EQ(ints_of(mv::isnan(b)), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(ints_of(mv::isinf(b)), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(ints_of(mv::isfinite(b)), (std::vector<int32_t>{1, 1, 1}));
  const Array u = mv::astype(mv::arange(3), mv::DType::uint32);
  EXPECT_EQ(ints_of(mv::isinf(u)), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(mv::isnan(mv::zeros({0})).shape(), (mv::Shape{0}));
  // NaN is non-zero: any and all are true.
  EXPECT_EQ(ints_of(mv::any(host_array({0.f, kNaN}))), (std::vector<int32_t>{1}));
  EXPECT_EQ(ints_of(mv::all(host_array({kNaN, -0.f}))), (std::vector<int32_t>{0}));
  EXPECT_EQ(ints_of(mv::all(host_array({kNaN, 1.f}))), (std::vector<int32_t>{1}));
  EXPECT_EQ(ints_of(mv::any(u, {-1})), (std::vector<int32_t>{1}));
  EXPECT_EQ(ints_of(mv::all(u)), (std::vector<int32_t>{0}));
  EXPECT_EQ(ints_of(mv::all(b, {0}, true)), (std::vector<int32_t>{0}));
  EXPECT_EQ(mv::all(b, {0}, true).shape(), (mv::Shape{1}));
  // Sharded along the reduced axis, under jit.
  const auto mesh = mv::make_mesh({8}, {"x"});
  std::vector<float> v(16, 1.f);
  v[13] = 0.f;
  const Array s = mv::device_put(host_array(v, {16}), mv::NamedSharding(mesh, P("x")));
  EXPECT_EQ(ints_of(mv::jit([](const Array& a) { return mv::all(a); })(s)), (std::vector<int32_t>{0}));
  EXPECT_EQ(ints_of(mv::jit([](const Array& a) { return mv::any(a == 0.f); })(s)), (std::vector<int32_t>{1}));
  // Elementwise predicates keep the layout of every dtype's operand.
  const Array si = mv::astype(s, mv::DType::int32), su = mv::astype(si, mv::DType::uint32);
  EXPECT_EQ(mv::isnan(si).sharding(), s.sharding());
  EXPECT_EQ(mv::isfinite(su).sharding(), s.sharding());
  EXPECT_EQ(mv::isinf(s).sharding(), s.sharding());
  EXPECT_EQ(ints_of(mv::isfinite(su)), std::vector<int32_t>(16, 1));
}

TEST(JaxReview, FullLikeDtypes) {
  const Array b = mv::ones({3}, mv::DType::bool_);
  const Array f0 = mv::full_like(b, 0), f1 = mv::full_like(b, 0.5);
  EXPECT_EQ(f0.dtype(), mv::DType::bool_);
  EXPECT_EQ(ints_of(f0), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(ints_of(f1), (std::vector<int32_t>{1, 1, 1}));  // bool(0.5) is True
  // A uint32 array takes values past int32's range, as jnp.full_like(uint32, 3e9).
  const Array u = mv::full_like(mv::zeros({2}, mv::DType::uint32), 3000000000.0);
  EXPECT_EQ(u.dtype(), mv::DType::uint32);
  EXPECT_EQ(u.to_host<uint32_t>(), (std::vector<uint32_t>{3000000000u, 3000000000u}));
  // -0.0 keeps its sign; inf and NaN pass through.
  EXPECT_TRUE(std::signbit(mv::full_like(mv::ones({1}), -0.0).to_host<float>()[0]));
  EXPECT_EQ(mv::full_like(mv::ones({1}), INFINITY).to_host<float>()[0], kInf);
  EXPECT_EQ(mv::full_like(mv::zeros({0, 2}), 1.0).shape(), (mv::Shape{0, 2}));
  expect_error([] { (void)mv::full_like(mv::arange(2), NAN); }, "full_like");
  // Sharding kept.
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const Array s = mv::device_put(mv::zeros({8, 4}), mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(mv::full_like(s, 3.0).sharding(), s.sharding());
  EXPECT_EQ(mv::full_like(s, 3.0).to_host<float>(), std::vector<float>(32, 3.f));
  EXPECT_EQ(mv::full_like(mv::astype(s, mv::DType::int32), 5).sharding(), s.sharding());
  const Array j = mv::jit([](const Array& v) { return mv::full_like(v, 2.0) * v; })(s);
  EXPECT_EQ(j.sharding(), s.sharding());
  EXPECT_EQ(j.to_host<float>(), std::vector<float>(32, 0.f));
  const Array m = mv::shard_map([](const Array& v) { return mv::full_like(v, 2.0) + v; }, mesh, {P("x", "y")}, P("x", "y"))(s);
  EXPECT_EQ(m.to_host<float>(), std::vector<float>(32, 2.f));
}

TEST(JaxReview, SoftmaxEdges) {
  // Ints are promoted to float, as jax.nn.softmax.
  const Array i = mv::nn::softmax(mv::arange(2));
  EXPECT_EQ(i.dtype(), mv::DType::float32);
  expect_near_all(i.to_host<float>(), {1 / (1 + std::exp(1.0)), std::exp(1.0) / (1 + std::exp(1.0))}, 1e-6, "int softmax");
  // -inf entries get 0; one element gives 1; +inf gives NaN (as JAX).
  EXPECT_EQ(mv::nn::softmax(host_array({-kInf, 0.f})).to_host<float>(), (std::vector<float>{0, 1}));
  EXPECT_EQ(mv::nn::softmax(host_array({-3.f}, {1, 1}), 0).to_host<float>(), (std::vector<float>{1}));
  const auto p = mv::nn::softmax(host_array({kInf, 1.f})).to_host<float>();
  EXPECT_TRUE(std::isnan(p[0]));
  // Empty axes: JAX's max has initial -inf there, so an empty softmax is an empty result.
  EXPECT_EQ(mv::nn::softmax(mv::zeros({2, 0})).shape(), (mv::Shape{2, 0}));
  EXPECT_EQ(mv::nn::softmax(mv::zeros({0, 3})).shape(), (mv::Shape{0, 3}));
  expect_error([] { (void)mv::nn::softmax(mv::ones({2, 3}), 2); }, "softmax: axis 2 is out of range");
  expect_error([] { (void)mv::nn::logsumexp(mv::ones({2, 3}), {-3}); }, "logsumexp: axis -3 is out of range");
  expect_error([] { (void)mv::nn::logsumexp(mv::ones({2, 3}), {1, -1}); }, "logsumexp: axis -1 is named twice");
  expect_gradient([](const Array& v) { return mv::nn::softmax(v.reshape(3, 2), 0); }, random_floats(6, 34), "softmax axis 0");
  // Sharded along the softmax axis, under jit.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = random_floats(3 * 16, 35, -4.f, 4.f);
  const Array a = mv::device_put(host_array(x, {3, 16}), mv::NamedSharding(mesh, P(mv::None, "x")));
  const auto got = mv::jit([](const Array& v) { return mv::nn::softmax(v, -1); })(a).to_host<float>();
  const auto want = mv::nn::softmax(host_array(x, {3, 16})).to_host<float>();
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
}

TEST(JaxReview, LogsumexpEdges) {
  // JAX's max takes initial -inf: an empty slice is log(0) = -inf.
  const Array e = mv::nn::logsumexp(mv::zeros({0}));
  EXPECT_EQ(e.shape(), (mv::Shape{}));
  EXPECT_EQ(e.to_host<float>(), (std::vector<float>{-kInf}));
  EXPECT_EQ(mv::nn::logsumexp(mv::zeros({2, 0}), {1}).to_host<float>(), (std::vector<float>{-kInf, -kInf}));
  const auto v = mv::nn::logsumexp(host_array({kInf, 0.f, -kInf, -kInf, kNaN, 0.f, kInf, -kInf}, {4, 2}), {-1})
                     .to_host<float>();
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], kInf);
  const Array i = mv::nn::logsumexp(mv::arange(3));
  EXPECT_EQ(i.dtype(), mv::DType::float32);
  EXPECT_NEAR(i.to_host<float>()[0], std::log(1 + std::exp(1.0) + std::exp(2.0)), 1e-5);
  // Several and negative axes.
  const auto x = random_floats(2 * 3 * 4, 36);
  const Array a = host_array(x, {2, 3, 4});
  const Array l = mv::nn::logsumexp(a, {0, -1});
  EXPECT_EQ(l.shape(), (mv::Shape{3}));
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int p = 0; p < 2; ++p)
      for (int q = 0; q < 4; ++q) s += std::exp(static_cast<double>(x[static_cast<size_t>((p * 3 + j) * 4 + q)]));
    EXPECT_NEAR(l.to_host<float>()[static_cast<size_t>(j)], std::log(s), 1e-5) << j;
  }
  // The gradient of a row with -inf entries is softmax: 0 there.
  const auto g = mv::grad([](const Array& w) { return mv::nn::logsumexp(w); })(host_array({0.f, -kInf, 0.f})).to_host<float>();
  EXPECT_EQ(g, (std::vector<float>{0.5f, 0.f, 0.5f}));
  // Sharded along the reduced axis, under jit.
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto y = random_floats(4 * 8, 37, -3.f, 3.f);
  const Array s = mv::device_put(host_array(y, {4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto got = mv::jit([](const Array& w) { return mv::nn::logsumexp(w, {1}); })(s).to_host<float>();
  const auto want = mv::nn::logsumexp(host_array(y, {4, 8}), {1}).to_host<float>();
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
}

TEST(JaxReview, ActivationsAtExtremes) {
  const Array big = host_array({100.f, -100.f, 1e30f, -1e30f, 0.f});
  const auto tg = mv::nn::gelu(big).to_host<float>();
  const auto eg = mv::nn::gelu(big, false).to_host<float>();
  const auto si = mv::nn::silu(big).to_host<float>();
  const auto sp = mv::nn::softplus(big).to_host<float>();
  const std::vector<float> pos_part{100.f, 0.f, 1e30f, 0.f, 0.f};
  for (size_t k = 0; k < pos_part.size(); ++k) {
    EXPECT_EQ(tg[k], pos_part[k]) << "gelu tanh " << k;
    EXPECT_EQ(eg[k], pos_part[k]) << "gelu erf " << k;
    EXPECT_NEAR(si[k], pos_part[k], 1e-30) << "silu " << k;
  }
  EXPECT_EQ(sp[0], 100.f);
  EXPECT_NEAR(sp[1], 0.f, 1e-30);
  EXPECT_EQ(sp[2], 1e30f);
  EXPECT_EQ(sp[3], 0.f);
  EXPECT_NEAR(sp[4], std::log(2.0), 1e-7);
  // softplus of a moderately negative x is exp(x), to float32 precision.
  const auto small = mv::nn::softplus(host_array({-20.f, -50.f})).to_host<float>();
  EXPECT_NEAR(small[0], std::exp(-20.0), 1e-6 * std::exp(-20.0));
  EXPECT_NEAR(small[1], std::exp(-50.0), 1e-6 * std::exp(-50.0));
  const auto inf = host_array({kInf, -kInf});
  EXPECT_EQ(mv::nn::softplus(inf).to_host<float>(), (std::vector<float>{kInf, 0.f}));
  EXPECT_EQ(mv::nn::relu(inf).to_host<float>(), (std::vector<float>{kInf, 0.f}));
  EXPECT_EQ(mv::nn::gelu(inf).to_host<float>()[0], kInf);
  EXPECT_EQ(mv::nn::silu(inf).to_host<float>()[0], kInf);
  EXPECT_TRUE(std::isnan(mv::nn::softplus(host_array({kNaN})).to_host<float>()[0]));
  EXPECT_TRUE(std::isnan(mv::nn::relu(host_array({kNaN})).to_host<float>()[0]));
  // Gradients: relu'(0) = 0 and softplus'(0) = 1/2 as JAX; finite at the extremes.
  const auto gr = mv::grad([](const Array& v) { return mv::sum(mv::nn::relu(v)); })(host_array({0.f})).to_host<float>();
  EXPECT_EQ(gr[0], 0.f);
  const auto gs = mv::grad([](const Array& v) { return mv::sum(mv::nn::softplus(v)); })(host_array({0.f, 100.f, -100.f})).to_host<float>();
  EXPECT_NEAR(gs[0], 0.5f, 1e-6);
  EXPECT_EQ(gs[1], 1.f);
  EXPECT_NEAR(gs[2], 0.f, 1e-30);
  const auto gg = mv::grad([](const Array& v) { return mv::sum(mv::nn::gelu(v)); })(host_array({100.f, -100.f})).to_host<float>();
  EXPECT_EQ(gg[0], 1.f);
  EXPECT_EQ(gg[1], 0.f);
  const auto gsi = mv::grad([](const Array& v) { return mv::sum(mv::nn::silu(v)); })(host_array({100.f, -100.f})).to_host<float>();
  EXPECT_NEAR(gsi[0], 1.f, 1e-6);
  EXPECT_NEAR(gsi[1], 0.f, 1e-6);
  // Ints promote to float as jax.nn's.
  EXPECT_EQ(mv::nn::gelu(mv::arange(3)).dtype(), mv::DType::float32);
  EXPECT_EQ(mv::nn::softplus(mv::arange(3)).dtype(), mv::DType::float32);
  // Bools too (jnp.logaddexp(x, 0) promotes them to float32).
  const Array sb = mv::nn::softplus(mv::arange(2) > 0);
  EXPECT_EQ(sb.dtype(), mv::DType::float32);
  expect_near_all(sb.to_host<float>(), {std::log(2.0), std::log1p(std::exp(1.0))}, 1e-6, "softplus bool");
}

TEST(JaxReview, NormsOnConstantRowsAndShardedFeatures) {
  const Array scale = host_array({1.f, 2.f, 3.f, 4.f}), bias = host_array({0.5f, 0.f, -0.5f, 1.f});
  const Array c = host_array({3.f, 3.f, 3.f, 3.f, 1e4f, 1e4f, 1e4f, 1e4f}, {2, 4});
  EXPECT_EQ(mv::nn::layer_norm(c, scale, bias).to_host<float>(),
            (std::vector<float>{0.5f, 0.f, -0.5f, 1.f, 0.5f, 0.f, -0.5f, 1.f}));
  EXPECT_EQ(mv::nn::rms_norm(mv::zeros({1, 4}), scale).to_host<float>(), (std::vector<float>(4, 0.f)));
  // A last axis of one element: layer_norm gives bias.
  EXPECT_EQ(mv::nn::layer_norm(host_array({7.f, -2.f}, {2, 1}), host_array({2.f}), host_array({0.25f})).to_host<float>(),
            (std::vector<float>{0.25f, 0.25f}));
  // Large offset, small spread: still normalised.
  const auto off = mv::nn::layer_norm(host_array({1000.f, 1001.f}, {1, 2}), host_array({1.f, 1.f}),
                                      host_array({0.f, 0.f}), 1e-6f).to_host<float>();
  EXPECT_NEAR(off[0], -1.0, 1e-3);
  EXPECT_NEAR(off[1], 1.0, 1e-3);
  expect_error([] { (void)mv::nn::layer_norm(mv::ones({}), mv::ones({1}), mv::ones({1})); }, "layer_norm");
  expect_error([] { (void)mv::nn::rms_norm(mv::ones({2, 3}), mv::ones({2})); }, "rms_norm");
  // Empty rows or features: empty results, no error.
  EXPECT_EQ(mv::nn::layer_norm(mv::zeros({0, 4}), scale, bias).shape(), (mv::Shape{0, 4}));
  EXPECT_EQ(mv::nn::rms_norm(mv::zeros({2, 0}), mv::zeros({0})).shape(), (mv::Shape{2, 0}));
  EXPECT_EQ(mv::nn::gelu(mv::zeros({0})).shape(), (mv::Shape{0}));
  // Features sharded over a 4x2 mesh, under jit.
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto x = random_floats(4 * 8, 38);
  const auto sc = random_floats(8, 39, 0.5f, 1.5f), bi = random_floats(8, 40);
  const Array a = mv::device_put(host_array(x, {4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto f = [&](const Array& v) { return mv::nn::layer_norm(v, host_array(sc), host_array(bi)) + mv::nn::rms_norm(v, host_array(sc)); };
  const Array y = mv::jit(f)(a);
  const auto want = f(host_array(x, {4, 8})).to_host<float>();
  const auto got = y.to_host<float>();
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5) << k;
  // Gradients with respect to scale and x.
  expect_gradient([&](const Array& s) { return mv::nn::layer_norm(host_array(x, {4, 8}), s, host_array(bi)); }, sc, "layer_norm scale");
  expect_gradient([&](const Array& v) { return mv::nn::rms_norm(v.reshape(2, 4), host_array({1.f, 2.f, 3.f, 4.f})); },
                  random_floats(8, 41), "rms_norm");
}

TEST(JaxReview, StopGradientUnderShardMapAndJit) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = random_floats(16, 42);
  const Array a = mv::device_put(host_array(x), mv::NamedSharding(mesh, P("x")));
  const auto f = [&](const Array& v) {
    return mv::sum(mv::shard_map([](const Array& w) { return w * mv::stop_gradient(w); }, mesh, {P("x")}, P("x"))(v));
  };
  const auto g = mv::jit([&](const Array& v) { return mv::grad(f)(v); })(a).to_host<float>();
  for (size_t k = 0; k < x.size(); ++k) EXPECT_FLOAT_EQ(g[k], x[k]) << k;
  // stop_gradient keeps the sharding, and of an int or empty array is the same array.
  EXPECT_EQ(mv::stop_gradient(a).sharding(), a.sharding());
  EXPECT_EQ(mv::stop_gradient(mv::arange(3)).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(mv::stop_gradient(mv::zeros({0, 2})).shape(), (mv::Shape{0, 2}));
  // Only stop_gradient'ed: the gradient is 0.
  const auto z = mv::grad([](const Array& v) { return mv::sum(mv::stop_gradient(v) * 3.f); })(host_array(x)).to_host<float>();
  EXPECT_EQ(z, std::vector<float>(x.size(), 0.f));
}

}  // namespace

namespace {

// grad of grad (was silently zero): every op is recorded on each active tape that tracks an
// input, so the inner backward pass is differentiated by the outer grad.
TEST(JaxTransforms, GradOfGrad) {
  const auto x = random_floats(4, 31, 0.5f, 2.0f);
  // d/dx sum(d/dx sum(x^3)) = d/dx sum(3 x^2) = 6x.
  const auto inner = [](const Array& v) { return mv::sum(v * v * v); };
  const auto outer = [&](const Array& v) { return mv::sum(mv::grad(inner)(v)); };
  const auto g2 = mv::grad(outer)(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(g2[i], 6 * x[i], 1e-5 * (1 + 6 * x[i])) << i;
  // Through intermediates: d2/dx2 sin(x)^2 = 2 cos(2x); and a third order: d3/dx3 x^4 = 24 x.
  const auto s = [](const Array& v) { const Array y = mv::sin(v); return mv::sum(y * y); };
  const auto s2 = [&](const Array& v) { return mv::sum(mv::grad(s)(v)); };
  const auto h = mv::grad(s2)(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(h[i], 2 * std::cos(2 * x[i]), 1e-5) << i;
  const auto q = [](const Array& v) { return mv::sum(mv::square(mv::square(v))); };
  const auto q1 = [&](const Array& v) { return mv::sum(mv::grad(q)(v)); };
  const auto q2 = [&](const Array& v) { return mv::sum(mv::grad(q1)(v)); };
  const auto t = mv::grad(q2)(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(t[i], 24 * x[i], 1e-4 * (1 + 24 * x[i])) << i;
  // Under jit, the same.
  const auto j = mv::jit([&](const Array& v) { return mv::grad(outer)(v); })(host_array(x)).to_host<float>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(j[i], 6 * x[i], 1e-5 * (1 + 6 * x[i])) << i;
}

}  // namespace

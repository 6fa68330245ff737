// vjp, jvp, checkpoint (remat), custom_vjp and vmap against grad, finite differences and
// host loops; remat's lower peak memory; vmap's in_axes / out_axes, nesting, jit and grad.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradient_check.hpp"
#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

Array layer(const Array& x, const Array& w) { return mv::tanh(mv::matmul(x, w)); }

}  // namespace

TEST(Vjp, CotangentsEqualGradOfTheWeightedSum) {
  const Array x = host_array(patterned_values(6, 0.2f), {2, 3});
  const Array w = host_array(patterned_values(12, 0.1f), {3, 4});
  const Array ct = host_array(patterned_values(8, 0.3f, 0.1f), {2, 4});
  auto [out, f_vjp] = mv::vjp(layer, x, w);
  expect_close(out, layer(x, w).to_host<float>());
  auto [gx, gw] = f_vjp(ct);
  auto weighted = [&](const Array& a, const Array& b) { return (layer(a, b) * ct).sum(); };
  expect_close(gx, mv::grad(weighted, 0)(x, w).to_host<float>());
  expect_close(gw, mv::grad(weighted, 1)(x, w).to_host<float>());
  auto [gx2, gw2] = f_vjp(ct * 2.f);  // again: the recorded backward pass
  expect_close(gx2, (gx * 2.f).to_host<float>());
}

TEST(Vjp, PytreesInAndOut) {
  mv::Params p{{"w", host_array(patterned_values(6, 0.1f), {3, 2})}, {"b", host_array(patterned_values(2, 0.1f), {2})}};
  const Array x = host_array(patterned_values(6, 0.2f), {2, 3});
  auto f = [&](const mv::Params& q) { return std::make_pair(mv::matmul(x, q.at("w")) + q.at("b"), q.at("b") * 3.f); };
  auto [out, f_vjp] = mv::vjp(f, p);
  auto [g] = f_vjp(std::make_pair(mv::ones({2, 2}), mv::ones({2})));
  const auto gb = g.at("b").to_host<float>();
  EXPECT_FLOAT_EQ(gb[0], 2.f + 3.f);
  expect_close(g.at("w"), mv::matmul(x.T(), mv::ones({2, 2})).to_host<float>());
}

TEST(Jvp, MatchesFiniteDifferences) {
  const std::vector<float> xv = patterned_values(6, 0.2f), tv = patterned_values(6, 0.3f, 0.05f);
  const Array w = host_array(patterned_values(12, 0.1f), {3, 4});
  auto f = [&](const Array& x) { return mv::sin(layer(x, w)) * x.sum(); };
  auto [out, tangent] = mv::jvp(f, host_array(xv, {2, 3}), host_array(tv, {2, 3}));
  expect_close(out, f(host_array(xv, {2, 3})).to_host<float>());
  const float h = 1e-2f;
  std::vector<float> up = xv, down = xv;
  for (size_t i = 0; i < xv.size(); ++i) {
    up[i] += h * tv[i];
    down[i] -= h * tv[i];
  }
  const auto fu = f(host_array(up, {2, 3})).to_host<float>(), fd = f(host_array(down, {2, 3})).to_host<float>();
  const auto jt = tangent.to_host<float>();
  for (size_t i = 0; i < jt.size(); ++i) EXPECT_NEAR(jt[i], (fu[i] - fd[i]) / (2 * h), 2e-3f) << i;
  // Two arguments, as a tuple.
  auto [o2, t2] = mv::jvp([](const Array& a, const Array& b) { return a * b; },
                          std::make_tuple(mv::scalar(3.f), mv::scalar(4.f)), std::make_tuple(mv::scalar(1.f), mv::scalar(0.f)));
  expect_close(t2, {4.f});
}

TEST(Checkpoint, SameGradientsAndLessMemoryKeptForTheBackwardPass) {
  const int layers = 6;
  const int64_t n = 256;
  std::vector<Array> ws;
  for (int i = 0; i < layers; ++i) ws.push_back(host_array(random_floats(n * n, 10 + i, -0.05f, 0.05f), {n, n}));
  const Array x = host_array(random_floats(n * n, 3), {n, n});
  auto block = [](const Array& h, const Array& w) { return mv::tanh(mv::matmul(mv::tanh(mv::matmul(h, w)), w)) * 1.5f; };
  auto remat_block = mv::checkpoint(block);
  auto& rt = mv::Runtime::current();
  // What the forward pass leaves in memory for the backward pass: the tape's intermediates.
  auto kept_and_grad = [&](bool remat) {
    uint64_t kept = 0;
    rt.synchronize();
    const uint64_t before = rt.memory_stats(0).bytes_in_use;
    auto g = mv::grad([&](const std::vector<Array>& w) {
      Array h = x;
      for (int i = 0; i < layers; ++i) h = remat ? remat_block(h, w[i]) : block(h, w[i]);
      const Array loss = (h * h).mean();
      (void)loss.to_host<float>();  // run it: then what is held is what the tape keeps
      rt.synchronize();
      kept = rt.memory_stats(0).bytes_in_use - before;
      return loss;
    })(ws);
    return std::make_pair(kept, g[0].to_host<float>());
  };
  const auto [plain_kept, plain] = kept_and_grad(false);
  const auto [remat_kept, remat] = kept_and_grad(true);
  for (size_t i = 0; i < plain.size(); ++i) ASSERT_NEAR(remat[i], plain[i], 1e-6f + 1e-5f * std::fabs(plain[i])) << i;
  // Each plain block keeps 4 intermediates of 256 KiB; a checkpointed one its output only.
  EXPECT_LT(remat_kept * 2, plain_kept) << "kept with checkpoint " << remat_kept << ", without " << plain_kept;
}

TEST(CustomVjp, UsesTheRuleUnderGradAndFOutside) {
  // A clipped gradient: identity forward, cotangent clipped to [-1, 1] backward.
  auto clip_grad = mv::custom_vjp([](const Array& x) { return x * 1.f; },
                                  [](const Array& x) { return std::make_pair(x * 1.f, std::nullopt); },
                                  [](std::nullopt_t, const Array& ct) { return std::make_tuple(mv::clip(ct, -1.f, 1.f)); });
  const Array x = host_array({0.5f, -2.f, 3.f});
  expect_close(clip_grad(x), {0.5f, -2.f, 3.f});
  const Array g = mv::grad([&](const Array& v) { return (clip_grad(v) * host_array({5.f, 0.5f, -3.f})).sum(); })(x);
  expect_close(g, {1.f, 0.5f, -1.f});
  // A rule using residuals: log(1 + exp(x)) with a stable derivative sigmoid(x) computed in fwd.
  auto softplus = mv::custom_vjp(
      [](const Array& v) { return mv::log1p(mv::exp(v)); },
      [](const Array& v) { return std::make_pair(mv::log1p(mv::exp(v)), 1.f / (1.f + mv::exp(-v))); },
      [](const Array& s, const Array& ct) { return std::make_tuple(ct * s); });
  const Array gs = mv::grad([&](const Array& v) { return softplus(v).sum(); })(x);
  expect_close(gs, {1.f / (1.f + std::exp(-0.5f)), 1.f / (1.f + std::exp(2.f)), 1.f / (1.f + std::exp(-3.f))});
}

TEST(Vmap, MapsAxesLikeAHostLoop) {
  const Array xs = host_array(patterned_values(4 * 3, 0.2f), {4, 3});
  const Array w = host_array(patterned_values(3 * 2, 0.1f), {3, 2});
  // One vector at a time against a shared matrix (in_axes 0, nullopt).
  const Array out = mv::vmap([](const Array& x, const Array& m) { return mv::matmul(x, m); }, {0, std::nullopt})(xs, w);
  expect_close(out, mv::matmul(xs, w).to_host<float>());
  // in_axes 1 and out_axes 1.
  const Array cols = mv::vmap([](const Array& c) { return c * c.sum(); }, {1}, 1)(xs);
  std::vector<float> want = xs.to_host<float>();
  const auto host = xs.to_host<float>();
  for (int j = 0; j < 3; ++j) {
    float s = 0;
    for (int i = 0; i < 4; ++i) s += host[i * 3 + j];
    for (int i = 0; i < 4; ++i) want[i * 3 + j] = host[i * 3 + j] * s;
  }
  expect_close(cols, want);
  // Nested: an outer product as vmap of vmap.
  const Array a = host_array({1.f, 2.f, 3.f}), b = host_array({10.f, 20.f});
  const Array outer = mv::vmap([&](const Array& ai) { return mv::vmap([&](const Array& bj) { return ai * bj; })(b); })(a);
  expect_close(outer, {10.f, 20.f, 20.f, 40.f, 30.f, 60.f});
}

TEST(Vmap, UnderJitAndGradOnShardedInputs) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Array xs = mv::device_put(host_array(patterned_values(8 * 4, 0.2f), {8, 4}), mv::NamedSharding(mesh, P("x")));
  const Array w = mv::device_put(host_array(patterned_values(4 * 4, 0.1f), {4, 4}), mv::NamedSharding(mesh, P()));
  auto per_example = [](const Array& x, const Array& m) { return (layer(mv::reshape(x, {1, 4}), m) * 2.f).sum(); };
  auto f = mv::jit([&](const Array& x, const Array& m) {
    return mv::grad([&](const Array& mm) { return mv::vmap(per_example, {0, std::nullopt})(x, mm).sum(); })(m);
  });
  const Array g = f(xs, w);
  const Array want = mv::grad([&](const Array& mm) {
    return (layer(xs, mm) * 2.f).sum();
  })(w);
  expect_close(g, want.to_host<float>(), 1e-5f);
  expect_close(f(xs, w), want.to_host<float>(), 1e-5f);
  EXPECT_EQ(f.traces(), 1u);
}

// Outputs stay split along the mapped axis as the input was, as JAX's batched outputs (they came
// back replicated: every device held the whole batch); inner dimensions keep their own layout;
// also in explicit mode, under jit and with out_axes.
TEST(Vmap, OutputsKeepTheMappedAxisSharding) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const Array xs = mv::device_put(mv::arange(32.f).reshape({8, 4}), mv::NamedSharding(mesh, P("x")));
  const Array doubled = mv::vmap([](const Array& v) { return v * 2.f; })(xs);
  EXPECT_TRUE(doubled.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("x")), 2)) << doubled.sharding().to_string();
  expect_close(doubled, (mv::arange(32.f) * 2.f).to_host<float>());
  const Array sums = mv::jit([](const Array& v) { return mv::vmap([](const Array& r) { return r.sum(); })(v); })(xs);
  EXPECT_TRUE(sums.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("x")), 1)) << sums.sharding().to_string();
  const Array moved = mv::vmap([](const Array& v) { return v + 1.f; }, {0}, 1)(xs);
  EXPECT_TRUE(moved.sharding().is_equivalent_to(mv::NamedSharding(mesh, P(mv::None, "x")), 2))
      << moved.sharding().to_string();
  const auto explicit_mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const Array e = mv::device_put(mv::arange(24.f).reshape({4, 6}), mv::NamedSharding(explicit_mesh, P("X")));
  EXPECT_EQ(mv::type_of(mv::vmap([](const Array& v) { return v * 3.f; })(e)), "float32[4@X,6]");
  // Mapped over an axis that is not split: the outputs as they come.
  const Array rows = mv::device_put(mv::arange(16.f).reshape({8, 2}), mv::NamedSharding(mesh, P("x")));
  const Array joined = mv::vmap([](const Array& v) { return mv::concatenate({v, v, v}); }, {1})(rows);
  EXPECT_EQ(joined.shape(), (mv::Shape{2, 24}));
  EXPECT_FALSE(joined.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("x")), 2));
}

TEST(Transforms, ErrorsNameWhatWasWrong) {
  auto msg = [](const std::function<void()>& f) { return message_of(f); };
  EXPECT_NE(msg([] { (void)mv::vmap([](const Array& a) { return a; }, {0, 0})(mv::ones({2})); }).find("2 in_axes for 1"), std::string::npos);
  EXPECT_NE(msg([] { (void)mv::vmap([](const Array& a, const Array& b) { return a + b; })(mv::ones({2}), mv::ones({3})); })
                .find("different sizes"),
            std::string::npos);
  EXPECT_NE(msg([] { (void)mv::vmap([](const Array& a) { return a; }, {3})(mv::ones({2})); }).find("out of range"), std::string::npos);
  EXPECT_NE(msg([] { (void)mv::jvp([](const Array& a) { return a; }, mv::ones({2}), mv::ones({3})); }).find("primal's shape"),
            std::string::npos);
  expect_runtime_usable();
}

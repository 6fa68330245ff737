// An outside tester's suite for control_flow.hpp, transforms.hpp and tree.hpp, written against
// the README ("Transforms and control flow") and the headers as a JAX user reads them: odd sizes
// (L mod 4 != 0), length 0 and 1, reverse, int and bool carries, carries that change sharding,
// sharded xs, nesting (scan in scan, in vmap in grad in jit, in shard_map), while_loop inside a
// scan body, cond with pytrees, vjp twice, jvp with int inputs, checkpoint with closures,
// custom_vjp with pytrees, vmap's axes, empty inputs, long loops, threads, exceptions, and the
// error messages. Values against host loops or the same computation unrolled; gradients against
// finite differences.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"
#include "adversarial_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

struct AdvLayer {
  Array w, b;
};
MESHVK_REGISTER_PYTREE(AdvLayer, &AdvLayer::w, &AdvLayer::b);

using namespace adversarial;

// ---- scan: sizes, lengths, direction ----

TEST(AdvVmap, GradOfVmapWhoseFunctionRunsAWhileLoop) {
  // vmap's scan body, replayed by the unrolled backward pass after vmap's call returned.
  auto f = [](const Array& row) {
    const Array k = mv::lax::while_loop([](const Array& i) { return i < 2; }, [](const Array& i) { return i + 1; },
                                        mv::scalar(int32_t{0}));
    return (mv::sin(row) * k.astype(mv::DType::float32)).sum();
  };
  auto loss = [&](const Array& x) { return mv::vmap(f)(x).sum(); };
  const auto hx = values(3 * 4, 0.2f);
  const Array g = mv::grad(loss)(host_array(hx, {3, 4}));
  std::vector<float> want;
  for (float v : hx) want.push_back(2.f * std::cos(v));
  expect_close(g, want, 1e-5f);
  // vjp, its function called after every temporary of the forward pass is gone.
  auto [out, back] = mv::vjp([&](const Array& x) { return mv::vmap(f)(x); }, host_array(hx, {3, 4}));
  std::vector<float> s(out.to_host<float>().size());
  const auto got = std::get<0>(back(mv::ones({3})));
  expect_close(got, want, 1e-5f);
}

// ---- cond ----

TEST(AdvVjp, CalledTwiceAndLinear) {
  const auto hw = values(6, 0.2f, 0.1f);
  auto f = [](const Array& w) {
    auto [c, ys] = mv::lax::scan([&](const Array& c, const Array& x) { return std::make_pair(mv::tanh(c + x * w.sum()), c * x); },
                                 mv::zeros({2}), mv::reshape(w, {3, 2}));
    return std::make_pair(c, ys);
  };
  const Array w = host_array(hw);
  auto [out, back] = mv::vjp(f, w);
  const Array ct1c = host_array({1.f, 0.f}), ct1y = host_array(values(6, 0.3f), {3, 2});
  const Array ct2c = host_array({-0.5f, 2.f}), ct2y = host_array(values(6, 0.1f, 0.2f), {3, 2});
  const Array g1 = std::get<0>(back(std::make_pair(ct1c, ct1y)));
  const Array g2 = std::get<0>(back(std::make_pair(ct2c, ct2y)));
  const Array g1again = std::get<0>(back(std::make_pair(ct1c, ct1y)));
  const Array g12 = std::get<0>(back(std::make_pair(ct1c + ct2c, ct1y + ct2y)));
  expect_close(g1again, g1.to_host<float>(), 1e-6f);
  expect_close(g12, (g1 + g2).to_host<float>(), 1e-5f);
  // Against grad of the weighted sum.
  const Array want = mv::grad([&](const Array& v) {
    auto [c, ys] = f(v);
    return (c * ct2c).sum() + (ys * ct2y).sum();
  })(w);
  expect_close(g2, want.to_host<float>(), 1e-5f);
  // Wrong cotangent shape: named.
  const std::string m = message_of([&] { (void)back(std::make_pair(mv::ones({3}), ct1y)); });
  EXPECT_TRUE(contains(m, "cotangent")) << m;
}

TEST(AdvJvp, IntInputsGetNoTangentAndIntOutputsZero) {
  auto f = [](const Array& x, const Array& n) {
    return std::make_pair(x * n.astype(mv::DType::float32) + mv::sin(x), n * 2);
  };
  const Array x = host_array({0.5f, -1.f, 2.f});
  const Array n = host_array({1.f, 2.f, 3.f}).astype(mv::DType::int32);
  const Array tx = host_array({1.f, 0.5f, -2.f});
  auto [out, tan] = mv::jvp(f, std::make_tuple(x, n), std::make_tuple(tx, mv::zeros_like(n)));
  std::vector<float> want;
  const std::vector<float> hx = {0.5f, -1.f, 2.f}, hn = {1.f, 2.f, 3.f}, ht = {1.f, 0.5f, -2.f};
  for (int i = 0; i < 3; ++i) want.push_back((hn[i] + std::cos(hx[i])) * ht[i]);
  expect_close(tan.first, want, 1e-5f);
  EXPECT_EQ(out.second.to_host<int32_t>(), (std::vector<int32_t>{2, 4, 6}));
  EXPECT_EQ(tan.second.to_host<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
  // A function of one int argument only.
  auto [o2, t2] = mv::jvp([](const Array& k) { return k.astype(mv::DType::float32) * 2.f; }, n, mv::zeros_like(n));
  expect_close(t2, {0.f, 0.f, 0.f});
  // jvp through a loop: fori_loop(0, 2, c * c, v) is v^4, its jvp 4 v^3 t.
  auto [o4, t4] = mv::jvp(
      [](const Array& v) { return mv::lax::fori_loop(0, 2, [](const Array&, const Array& c) { return c * c; }, v); },
      host_array({1.f, -0.5f}), host_array({1.f, 2.f}));
  expect_close(o4, {1.f, 0.0625f}, 1e-6f);
  expect_close(t4, {4.f, -1.f}, 1e-5f);
  expect_runtime_usable();
}

TEST(AdvJvp, JvpThroughAScan) {
  auto g = [](const Array& v) {
    return mv::lax::scan([](const Array& c, const Array& e) { return std::make_pair(c * mv::cos(e) + e, c); }, mv::scalar(1.f),
                         v).first;
  };
  const std::vector<float> hv = {0.2f, 0.4f, -0.3f};
  auto [o3, t3] = mv::jvp(g, host_array(hv), host_array({1.f, 1.f, 1.f}));
  std::vector<float> up = hv, down = hv;
  for (auto& v : up) v += 1e-2f;
  for (auto& v : down) v -= 1e-2f;
  const float numeric = (scalar_of(g(host_array(up))) - scalar_of(g(host_array(down)))) / 2e-2f;
  EXPECT_NEAR(scalar_of(t3), numeric, 3e-3f);
}

// ---- checkpoint / custom_vjp ----

TEST(AdvCheckpoint, ClosuresGetGradientsAndValuesMatchUncheckpointed) {
  const auto hw = values(9, 0.2f, 0.05f);
  const auto hx = values(6, 0.3f);
  auto loss_of = [](const Array& w, const Array& x, bool remat) {
    auto block = [w](const Array& h) { return mv::tanh(mv::matmul(h, w)); };  // w closed over, by value
    auto cp = mv::checkpoint(block);
    Array h = x;
    for (int i = 0; i < 3; ++i) h = remat ? cp(h) : block(h);
    return h.sum();
  };
  const Array x = host_array(hx, {2, 3});
  const Array w = host_array(hw, {3, 3});
  const Array gw = mv::grad([&](const Array& v) { return loss_of(v, x, true); })(w);
  const Array gw_plain = mv::grad([&](const Array& v) { return loss_of(v, x, false); })(w);
  expect_close(gw, gw_plain.to_host<float>(), 1e-5f);
  const Array gx = mv::grad([&](const Array& v) { return loss_of(w, v, true); })(x);
  const Array gx_plain = mv::grad([&](const Array& v) { return loss_of(w, v, false); })(x);
  expect_close(gx, gx_plain.to_host<float>(), 1e-5f);
  expect_grad_close(gw, numeric_grad([&](const std::vector<float>& v) {
                      return scalar_of(loss_of(host_array(v, {3, 3}), x, true));
                    },
                                     hw));
  // Under jit, and a checkpointed function that runs a scan.
  auto jg = mv::jit([&](const Array& v) { return mv::grad([&](const Array& u) { return loss_of(u, x, true); })(v); });
  expect_close(jg(w), gw_plain.to_host<float>(), 1e-5f);
  auto scanned = mv::checkpoint([](const Array& v) {
    return mv::lax::scan([](const Array& c, const Array& e) { return std::make_pair(mv::sin(c + e), c); }, mv::scalar(0.f), v).first;
  });
  const std::vector<float> hv = {0.1f, 0.5f, -0.2f, 0.3f, 0.7f};
  expect_grad_close(mv::grad(scanned)(host_array(hv)),
                    numeric_grad([&](const std::vector<float>& v) { return scalar_of(scanned(host_array(v))); }, hv));
}

TEST(AdvCustomVjp, PytreeArgumentsAndParams) {
  using PA = std::pair<Array, Array>;
  // f(p, s) = p.first * p.second + sum(s["k"]); the rule scales what it gets by 10 for p.first.
  auto f = mv::custom_vjp(
      [](const PA& p, const mv::Params& s) { return p.first * p.second + s.at("k").sum(); },
      [](const PA& p, const mv::Params& s) {
        return std::make_pair(p.first * p.second + s.at("k").sum(), std::make_pair(p.first, p.second));
      },
      [](const PA& res, const Array& ct) {
        return std::make_tuple(PA(ct * res.second * 10.f, ct * res.first), mv::Params{{"k", mv::ones({2}) * ct.sum()}});
      });
  const PA p(host_array({1.f, 2.f}), host_array({3.f, 4.f}));
  const mv::Params s{{"k", host_array({0.5f, 0.5f})}};
  expect_close(f(p, s), {4.f, 9.f});
  const auto [gp, gs] = mv::vjp(f, p, s).second(mv::ones({2}));
  expect_close(gp.first, {30.f, 40.f});
  expect_close(gp.second, {1.f, 2.f});
  expect_close(gs.at("k"), {2.f, 2.f});
  // Under grad of a composite, inside jit.
  auto jg = mv::jit([&](const Array& a) {
    return mv::grad([&](const Array& v) { return (f(PA(v, p.second), s) * 2.f).sum(); })(a);
  });
  expect_close(jg(p.first), {60.f, 80.f});
}

TEST(AdvCustomVjp, BwdThatThrowsLeavesTheRuntimeUsable) {
  auto f = mv::custom_vjp([](const Array& x) { return x * 2.f; },
                          [](const Array& x) { return std::make_pair(x * 2.f, std::nullopt); },
                          [](std::nullopt_t, const Array&) -> std::tuple<Array> {
                            throw mv::Error("bwd gave up");
                          });
  // Through vjp: g++ 12 crashes (internal compiler error) on grad of this f called inside
  // message_of's lambda.
  auto [out, f_vjp] = mv::vjp([&](const Array& v) { return f(v); }, mv::ones({3}));
  const std::string m = message_of([&] { (void)f_vjp(mv::ones({3})); });
  EXPECT_TRUE(contains(m, "bwd gave up")) << m;
  expect_runtime_usable();
}

// ---- vmap axes ----

TEST(AdvVmap, NegativeAxesNulloptPytreesAndOutAxes) {
  const int64_t a = 3, b = 5;  // neither a multiple of 4
  const auto hx = values(a * b, 0.2f);
  const Array x = host_array(hx, {a, b});
  const Array w = host_array({2.f, -1.f, 0.5f});
  // in_axes -1: map over the 5 columns (each column has 3 entries), w unmapped.
  const Array cols = mv::vmap([](const Array& c, const Array& v) { return c * v; }, {-1, std::nullopt})(x, w);
  ASSERT_EQ(cols.shape(), (mv::Shape{b, a}));
  std::vector<float> want;
  for (int64_t j = 0; j < b; ++j)
    for (int64_t i = 0; i < a; ++i)
      want.push_back(hx[static_cast<size_t>(i * b + j)] * std::vector<float>{2.f, -1.f, 0.5f}[static_cast<size_t>(i)]);
  expect_close(cols, want);
  // out_axes -1 and 1 put the mapped axis last: the result is x * w[:, None] laid out as x.
  const Array back = mv::vmap([](const Array& c, const Array& v) { return c * v; }, {-1, std::nullopt}, -1)(x, w);
  ASSERT_EQ(back.shape(), (mv::Shape{a, b}));
  expect_close(back, (x * mv::reshape(w, {a, 1})).to_host<float>());
  const Array back1 = mv::vmap([](const Array& c, const Array& v) { return c * v; }, {1, std::nullopt}, 1)(x, w);
  expect_close(back1, (x * mv::reshape(w, {a, 1})).to_host<float>());
  // A pytree argument: its axis applies to every leaf.
  using PA = std::pair<Array, Array>;
  const Array y = host_array(values(b * 2, 0.1f), {b, 2});
  const Array pt = mv::vmap([](const PA& p) { return p.first.sum() + p.second.sum(); }, {std::optional<int>(0)})(
      PA(mv::transpose(x, {1, 0}), y));
  ASSERT_EQ(pt.shape(), (mv::Shape{b}));
  expect_close(pt, (mv::transpose(x, {1, 0}).sum(1) + y.sum(1)).to_host<float>(), 1e-5f);
  // A registered struct argument mapped on axis 0, and a pytree output.
  const AdvLayer layers{host_array(values(a * 4, 0.1f), {a, 2, 2}), host_array(values(a * 2, 0.3f), {a, 2})};
  const auto outs = mv::vmap([](const AdvLayer& l, const Array& v) {
    return std::make_pair(mv::matmul(v, l.w) + l.b, l.b.sum());
  }, {0, std::nullopt})(layers, host_array({1.f, 2.f}));
  ASSERT_EQ(outs.first.shape(), (mv::Shape{a, 2}));
  ASSERT_EQ(outs.second.shape(), (mv::Shape{a}));
  for (int64_t i = 0; i < a; ++i)
    expect_close(outs.first[i], (mv::matmul(host_array({1.f, 2.f}), layers.w[i]) + layers.b[i]).to_host<float>());
}

TEST(AdvVmap, EmptyMappedAxisAndZeroSizeSlices) {
  const Array none = mv::vmap([](const Array& r) { return r * 2.f + 1.f; })(mv::zeros({0, 3}));
  EXPECT_EQ(none.shape(), (mv::Shape{0, 3}));
  const Array none_t = mv::vmap([](const Array& r) { return r.sum(); }, {1})(mv::zeros({3, 0}));
  EXPECT_EQ(none_t.shape(), (mv::Shape{0}));
  const Array empty_rows = mv::vmap([](const Array& r) { return r * 2.f; })(mv::zeros({4, 0}));
  EXPECT_EQ(empty_rows.shape(), (mv::Shape{4, 0}));
  const Array sums = mv::vmap([](const Array& r) { return r.sum(); })(mv::zeros({4, 0}));
  expect_close(sums, {0.f, 0.f, 0.f, 0.f});
  // A scan whose slices are empty, and a zero-size carry.
  auto [c, ys] = mv::lax::scan([](const Array& c, const Array& x) { return std::make_pair(c + x.sum(), x * 2.f); },
                               mv::scalar(1.f), mv::zeros({3, 0}));
  expect_close(c, {1.f});
  EXPECT_EQ(ys.shape(), (mv::Shape{3, 0}));
  auto [c2, ys2] = mv::lax::scan([](const Array& c, const Array& x) { return std::make_pair(c * x, x); }, mv::zeros({0}),
                                 mv::zeros({2, 0}));
  EXPECT_EQ(c2.shape(), (mv::Shape{0}));
  EXPECT_EQ(ys2.shape(), (mv::Shape{2, 0}));
}

// ---- long loops, threads, exceptions ----

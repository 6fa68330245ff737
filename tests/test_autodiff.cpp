// Reverse-mode autodiff: every op's gradient against central finite differences, sharded
// gradients against single-device ones, jit(value_and_grad), and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

// Checks d/dx sum(f(x) * w) against central differences at x.
void check_gradient(const char* name, const std::function<Array(const Array&)>& f, const std::vector<float>& x0,
                    mv::Shape shape, float tol = 2e-2f) {
  const auto probe = f(host_array(x0, shape));
  const auto w = host_array(random_floats(probe.size(), 99), probe.shape());
  auto loss = [&](const Array& x) { return mv::sum(f(x) * w); };
  const auto g = mv::grad(loss)(host_array(x0, shape)).to_host<float>();
  ASSERT_EQ(g.size(), x0.size()) << name;
  const float eps = 1e-2f;
  for (size_t i = 0; i < x0.size(); ++i) {
    auto xp = x0, xm = x0;
    xp[i] += eps;
    xm[i] -= eps;
    const float fd = (loss(host_array(xp, shape)).to_host<float>()[0] - loss(host_array(xm, shape)).to_host<float>()[0]) / (2 * eps);
    EXPECT_NEAR(g[i], fd, tol * std::max(1.0f, std::fabs(fd))) << name << " element " << i;
  }
}

}  // namespace

TEST(Autodiff, ElementwiseOpsMatchFiniteDifferences) {
  const auto x = random_floats(6, 1, -1.5f, 1.5f);
  const auto pos = random_floats(6, 2, 0.5f, 2.0f);
  const mv::Shape s{2, 3};
  check_gradient("negative", [](const Array& a) { return -a; }, x, s);
  check_gradient("abs", [](const Array& a) { return mv::abs(a); }, pos, s);
  check_gradient("exp", [](const Array& a) { return mv::exp(a); }, x, s);
  check_gradient("log", [](const Array& a) { return mv::log(a); }, pos, s);
  check_gradient("sqrt", [](const Array& a) { return mv::sqrt(a); }, pos, s);
  check_gradient("rsqrt", [](const Array& a) { return mv::rsqrt(a); }, pos, s);
  check_gradient("sin", [](const Array& a) { return mv::sin(a); }, x, s);
  check_gradient("cos", [](const Array& a) { return mv::cos(a); }, x, s);
  check_gradient("tanh", [](const Array& a) { return mv::tanh(a); }, x, s);
  check_gradient("sigmoid", [](const Array& a) { return mv::sigmoid(a); }, x, s);
  check_gradient("relu", [](const Array& a) { return mv::relu(a); }, pos, s);
  check_gradient("square", [](const Array& a) { return mv::square(a); }, x, s);
  check_gradient("reciprocal", [](const Array& a) { return mv::reciprocal(a); }, pos, s);
  check_gradient("chain", [](const Array& a) { return 2 * mv::sin(a) + 1; }, x, s);
  const auto b = host_array(random_floats(3, 3, 0.5f, 1.5f), {3});  // broadcast against the rows
  check_gradient("add", [&](const Array& a) { return a + b; }, x, s);
  check_gradient("subtract", [&](const Array& a) { return b - a; }, x, s);
  check_gradient("multiply", [&](const Array& a) { return a * b * a; }, x, s);
  check_gradient("divide", [&](const Array& a) { return b / (a + 3.0f); }, x, s);
  check_gradient("power", [&](const Array& a) { return mv::power(a, b); }, pos, s);
  check_gradient("power base", [&](const Array& a) { return mv::power(b, a); }, x, s);
  check_gradient("maximum", [&](const Array& a) { return mv::maximum(a, b - 1.0f); }, x, s);
  check_gradient("minimum", [&](const Array& a) { return mv::minimum(a, 0.2f); }, x, s);
  check_gradient("where", [&](const Array& a) { return mv::where(a > 0.0f, a * a, -a); }, x, s);
  // Gradients flow to a broadcast operand too.
  check_gradient("bias", [&](const Array& a) { return host_array(random_floats(6, 4), s) * mv::reshape(a, {2, 3}); }, x, s);
}

TEST(Autodiff, ReductionsLinalgAndShapeOps) {
  const auto x = random_floats(12, 5);
  const mv::Shape s{3, 4};
  check_gradient("sum", [](const Array& a) { return mv::sum(a, {1}); }, x, s);
  check_gradient("sum all", [](const Array& a) { return mv::sum(a); }, x, s);
  check_gradient("mean", [](const Array& a) { return mv::mean(a, {0}, true); }, x, s);
  check_gradient("max", [](const Array& a) { return mv::max(a, {1}); }, x, s);
  check_gradient("min", [](const Array& a) { return mv::min(a); }, x, s);
  const auto w = host_array(random_floats(20, 6), {4, 5});
  check_gradient("matmul lhs", [&](const Array& a) { return mv::matmul(a, w); }, x, s);
  check_gradient("matmul rhs", [&](const Array& a) { return mv::matmul(mv::transpose(w), mv::reshape(a, {4, 3})); }, x, s);
  check_gradient("matvec", [&](const Array& a) { return mv::matmul(a, mv::arange(4.f)); }, x, s);
  check_gradient("batched", [&](const Array& a) { return mv::matmul(mv::reshape(a, {3, 2, 2}), host_array(random_floats(12, 7), {3, 2, 2})); }, x, s);
  check_gradient("einsum bf,df->bd", [&](const Array& a) { return mv::einsum("bf,df->bd", a, host_array(random_floats(8, 8), {2, 4})); }, x, s);
  check_gradient("reshape", [](const Array& a) { return mv::reshape(a, {2, 6}) * mv::arange(6.f); }, x, s);
  check_gradient("transpose", [](const Array& a) { return mv::transpose(a) * mv::arange(3.f); }, x, s);
  check_gradient("broadcast_to", [](const Array& a) { return mv::broadcast_to(a, {2, 3, 4}) * mv::arange(4.f); }, x, s);
  check_gradient("slice", [](const Array& a) { return mv::slice(a, {1, 1}, {3, 3}); }, x, s);
  check_gradient("strided slice", [](const Array& a) { return mv::slice(a, {0, 1}, {3, 4}, {2, 2}); }, x, s);
  check_gradient("concatenate", [](const Array& a) { return mv::concatenate({a, a * 2}, 1); }, x, s);
  check_gradient("pad", [](const Array& a) { return mv::pad(a, {{1, 0}, {0, 2}}); }, x, s);
  check_gradient("roll", [](const Array& a) { return mv::roll(a, 1, 1) * mv::arange(4.f); }, x, s);
  check_gradient("take", [](const Array& a) { return mv::take(a, mv::array({2, 0, 2}), 1); }, x, s);
  check_gradient("update", [](const Array& a) { return mv::dynamic_update_slice(a, mv::ones({1, 2}), {1, 1}); }, x, s);
  check_gradient("cross entropy", [](const Array& a) {
    const auto logp = a - mv::log(mv::sum(mv::exp(a - mv::max(a, {1}, true)), {1}, true)) - mv::max(a, {1}, true);
    return -mv::sum(logp * mv::one_hot(mv::array({1, 3, 0}), 4), {1});
  }, x, s);
}

TEST(Autodiff, ShardedGradientsEqualSingleDevice) {
  const auto vx = random_floats(64 * 16, 10), vw = random_floats(16 * 8, 11), vy = random_floats(64 * 8, 12);
  auto loss = [](const Array& w, const Array& x, const Array& y) { return mv::mean(mv::square(mv::relu(mv::matmul(x, w)) - y)); };
  const auto [l0, g0] = mv::value_and_grad(loss)(host_array(vw, {16, 8}), host_array(vx, {64, 16}), host_array(vy, {64, 8}));
  const auto ref = g0.to_host<float>();
  const auto check = [&](const mv::Mesh& mesh, mv::PartitionSpec wspec, mv::PartitionSpec xspec, mv::PartitionSpec yspec) {
    const auto w = mv::device_put(host_array(vw, {16, 8}), mv::NamedSharding(mesh, wspec));
    const auto [l, g] = mv::value_and_grad(loss)(w, mv::device_put(host_array(vx, {64, 16}), mv::NamedSharding(mesh, xspec)),
                                                 mv::device_put(host_array(vy, {64, 8}), mv::NamedSharding(mesh, yspec)));
    EXPECT_NEAR(l.to_host<float>()[0], l0.to_host<float>()[0], 1e-5f * std::fabs(l0.to_host<float>()[0]));
    EXPECT_TRUE(g.sharding().is_equivalent_to(w.sharding(), 2)) << g.sharding().to_string();
    const auto v = g.to_host<float>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(v[i], ref[i], 1e-5f);
  };
  check(mv::make_mesh({8}, {"batch"}), P(), P("batch"), P("batch"));                              // data parallel
  check(mv::make_mesh({4, 2}, {"batch", "model"}), P(mv::None, "model"), P("batch"), P("batch", "model"));  // data + tensor
  check(mv::make_mesh({8}, {"model"}), P(mv::None, "model"), P(), P(mv::None, "model"));          // tensor parallel
}

TEST(Autodiff, ThroughShardMapAndCollectives) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto vx = random_floats(32, 13), vw = random_floats(32 * 4, 14);
  const auto w = host_array(vw, {32, 4});
  auto manual = [&](const Array& x) {
    return mv::sum(mv::sigmoid(mv::shard_map([](const Array& x, const Array& w) { return mv::psum(mv::matmul(x, w), "x"); },
                                             mesh, {P("x"), P("x")}, P())(x, w)));
  };
  auto global = [&](const Array& x) { return mv::sum(mv::sigmoid(mv::matmul(x, w))); };
  const auto g1 = mv::grad(manual)(host_array(vx, {32})).to_host<float>();
  const auto g2 = mv::grad(global)(host_array(vx, {32})).to_host<float>();
  for (size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(g1[i], g2[i], 1e-5f);
  // all_gather's transpose is psum_scatter; ppermute's is the inverse permutation.
  auto gathered = [&](const Array& x) {
    return mv::sum(mv::shard_map([](const Array& v) { return mv::all_gather(v, "x", 0, true) * mv::arange(32.f); }, mesh,
                                 {P("x")}, P("x"))(x));
  };
  const auto gg = mv::grad(gathered)(host_array(vx, {32})).to_host<float>();
  for (int i = 0; i < 32; ++i) ASSERT_NEAR(gg[i], 8.f * i, 1e-4f);
  auto shifted = [&](const Array& x) {
    std::vector<std::pair<int, int>> ring;
    for (int i = 0; i < 8; ++i) ring.push_back({i, (i + 1) % 8});
    return mv::sum(mv::shard_map([&](const Array& v) { return mv::ppermute(v, "x", ring); }, mesh, {P("x")}, P("x"))(x) *
                   mv::arange(32.f));
  };
  const auto gs = mv::grad(shifted)(host_array(vx, {32})).to_host<float>();
  for (int i = 0; i < 32; ++i) ASSERT_NEAR(gs[i], float((i + 4) % 32), 1e-4f);
}

TEST(Autodiff, PmaxAndPbroadcastMatchFiniteDifferences) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto vx = random_floats(16, 21);
  const mv::Shape s{16};
  check_gradient("pmax", [&](const Array& a) {
    return mv::shard_map([](const Array& v) { return mv::pmax(v, "x") * v; }, mesh, {P("x")}, P("x"))(a);
  }, vx, s);
  check_gradient("pbroadcast", [&](const Array& a) {
    return mv::shard_map([](const Array& v) { return mv::pbroadcast(v, "x", 3) * v; }, mesh, {P("x")}, P("x"))(a);
  }, vx, s);
}

TEST(Autodiff, JitOfValueAndGradShowsTheGradientAllReduce) {
  const auto mesh = mv::make_mesh({8}, {"batch"});
  auto loss = [](const Array& w, const Array& x) { return mv::mean(mv::square(mv::matmul(x, w))); };
  const auto step = mv::jit([&](const Array& w, const Array& x) {
    auto [l, g] = mv::value_and_grad(loss)(w, x);
    return std::vector<Array>{l, w - 0.1f * g};
  });
  const auto w = mv::device_put(host_array(random_floats(16 * 4, 15), {16, 4}), mv::NamedSharding(mesh, P()));
  const auto x = mv::device_put(host_array(random_floats(64 * 16, 16), {64, 16}), mv::NamedSharding(mesh, P("batch")));
  const std::string text = step.program_text(w, x);
  EXPECT_NE(text.find("all-reduce(sum) over ('batch',)"), std::string::npos) << text;
  auto out = step(w, x);
  const float l1 = out[0].to_host<float>()[0];
  out = step(out[1], x);
  EXPECT_LT(out[0].to_host<float>()[0], l1);
  EXPECT_TRUE(out[1].sharding().is_fully_replicated());
}

TEST(Autodiff, ClearErrors) {
  EXPECT_THROW(mv::grad([](const Array& x) { return x * 2; })(mv::arange(3.f)), mv::Error);  // not a scalar
  EXPECT_THROW(mv::grad([](const Array& x) { return mv::sum(x); }, 2)(mv::arange(3.f)), mv::Error);
  EXPECT_THROW(mv::grad([](const Array& x) { return mv::sum(mv::astype(x, mv::DType::float32)); })(mv::arange(3)), mv::Error);
  EXPECT_EQ(mv::grad([](const Array& x) { return mv::sum(x * x); })(mv::arange(3.f)).to_host<float>(),
            (std::vector<float>{0, 2, 4}));
  const auto [v, g] = mv::value_and_grad_params([](const mv::Params& p) { return mv::sum(p.at("a") * p.at("b")); },
                                                {{"a", mv::arange(3.f)}, {"b", mv::full({3}, 2.f)}});
  EXPECT_EQ(v.to_host<float>()[0], 6.f);
  EXPECT_EQ(g.at("a").to_host<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(g.at("b").to_host<float>(), (std::vector<float>{0, 1, 2}));
  // Optimizers given gradients or state missing a parameter say which, and change nothing.
  const mv::Params params{{"a", mv::arange(3.f)}, {"b", mv::full({3}, 2.f)}};
  const mv::Params partial{{"a", mv::ones({3})}};
  EXPECT_THROW(mv::nn::sgd(params, partial, 0.1f), mv::Error);
  auto state = mv::nn::adam_init(partial);
  try {
    mv::nn::adam(params, params, state, 0.1f);
    ADD_FAILURE() << "adam took a state without 'b'";
  } catch (const mv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(state.count.to_host<int32_t>(), std::vector<int32_t>{0});
  EXPECT_EQ(state.m.at("a").to_host<float>(), (std::vector<float>{0, 0, 0}));
}

TEST(Training, LayersLossesAndOptimizersKeepShardings) {
  const auto mesh = mv::make_mesh({4, 2}, {"batch", "model"});
  mv::Params p = mv::nn::init_mlp({16, 32, 32, 4}, 0);
  // torch's default init: uniform in +-1/sqrt(fan_in).
  const auto w0 = p.at("layers.0.weight").to_host<float>();
  EXPECT_EQ(p.at("layers.0.weight").shape(), (mv::Shape{32, 16}));
  for (const float v : w0) ASSERT_LE(std::fabs(v), 0.25f);
  p.at("layers.1.weight") = mv::device_put(p.at("layers.1.weight"), mv::NamedSharding(mesh, P("model")));
  p.at("layers.1.bias") = mv::device_put(p.at("layers.1.bias"), mv::NamedSharding(mesh, P("model")));
  p.at("layers.2.weight") = mv::device_put(p.at("layers.2.weight"), mv::NamedSharding(mesh, P(mv::None, "model")));
  const auto x = mv::device_put(mv::normal(mv::random_key(1), {64, 16}), mv::NamedSharding(mesh, P("batch")));
  const auto labels = mv::device_put(mv::array(std::vector<int32_t>(64, 1)), mv::NamedSharding(mesh, P("batch")));
  auto loss = [&](const mv::Params& q) { return mv::nn::softmax_cross_entropy(mv::nn::mlp(q, x), labels); };
  auto state = mv::nn::adam_init(p);
  float first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    auto [l, g] = mv::value_and_grad_params(loss, p);
    for (const auto& [name, grad] : g) EXPECT_TRUE(grad.sharding().is_equivalent_to(p.at(name).sharding(), grad.ndim())) << name;
    const auto next = mv::nn::adam(p, g, state, 1e-2f);
    for (const auto& [name, value] : next)
      EXPECT_TRUE(value.sharding().is_equivalent_to(p.at(name).sharding(), value.ndim())) << name;
    p = next;
    (i == 0 ? first : last) = l.to_host<float>()[0];
  }
  EXPECT_LT(last, first);
  const auto sgd = mv::nn::sgd(p, mv::value_and_grad_params(loss, p).second, 0.1f);
  EXPECT_TRUE(sgd.at("layers.2.weight").sharding().is_equivalent_to(mv::NamedSharding(mesh, P(mv::None, "model")), 2));
}

TEST(Autodiff, ReplicatedResultsOfCollectivesPassTheirCotangentOnce) {
  // pbroadcast to a replicated output: the source's value reaches the loss once.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto g = mv::grad([&](const Array& a) {
    return mv::sum(mv::shard_map([](const Array& v) { return mv::pbroadcast(v, "x", 2); }, mesh, {P("x")}, P())(a) * 3.0f);
  })(mv::arange(8.f)).to_host<float>();
  EXPECT_EQ(g, (std::vector<float>{0, 0, 3, 0, 0, 0, 0, 0}));
}

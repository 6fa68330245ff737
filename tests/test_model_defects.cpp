// What a JAX user writing a GPT ran into: zeros_like / ones_like / adam_init of a committed
// array lost its sharding (and a jitted step traced twice), a spec with trailing Nones keyed a
// second trace, Adam could not run under jit (its step count lived on the host), and
// out_shardings refused structured results.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

std::vector<float> iota_values(int n, float start, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + step * static_cast<float>(i);
  return v;
}

// Relative closeness, for optimizer states that differ only by float rounding.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i])))
        << what << "[" << i << "]";
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const std::string& what) {
  expect_close(got, std::vector<double>(want.begin(), want.end()), rel, what);
}

// Sharding equality (==, so P('a') and P('a', None) are equal), printed as JAX prints them.
::testing::AssertionResult same_sharding(const mv::Sharding& got, const mv::Sharding& want) {
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got.to_string() << " is not " << want.to_string();
}

}  // namespace

// ---- 1. zeros_like / ones_like / adam_init keep a committed input's sharding.

TEST(ModelDefects, LikeConstructorsKeepACommittedSharding) {
  const auto mesh = mv::make_mesh({4, 2}, {"data", "model"});
  const mv::NamedSharding sharding(mesh, P("data", "model"));
  const Array x = mv::device_put(mv::arange(32.f).reshape({8, 4}), sharding);
  const Array zeros = mv::zeros_like(x), ones = mv::ones_like(x);
  for (const Array& made : {zeros, ones}) {
    EXPECT_TRUE(same_sharding(made.sharding(), x.sharding()));
    EXPECT_TRUE(made.committed());
    EXPECT_EQ(made.dtype(), mv::DType::float32);
    EXPECT_EQ(made.shape(), x.shape());
  }
  EXPECT_EQ(zeros.to_host<float>(), std::vector<float>(32, 0.f));
  EXPECT_EQ(ones.to_host<float>(), std::vector<float>(32, 1.f));

  // int32, and a committed single device.
  const Array i = mv::device_put(mv::arange(8), mv::NamedSharding(mesh, P("data")));
  EXPECT_EQ(mv::ones_like(i).dtype(), mv::DType::int32);
  EXPECT_TRUE(same_sharding(mv::ones_like(i).sharding(), i.sharding()));
  EXPECT_EQ(mv::ones_like(i).to_host<int32_t>(), std::vector<int32_t>(8, 1));
  const Array on3 = mv::device_put(mv::arange(4.f), mv::SingleDeviceSharding(3));
  EXPECT_TRUE(same_sharding(mv::zeros_like(on3).sharding(), on3.sharding()));
  EXPECT_TRUE(mv::zeros_like(on3).committed());

  // An uncommitted input gives an uncommitted result, free to move, as in JAX.
  const Array free = mv::zeros_like(mv::arange(4.f));
  EXPECT_FALSE(free.committed());
  EXPECT_EQ(free.to_host<float>(), std::vector<float>(4, 0.f));
}

TEST(ModelDefects, LikeConstructorsUnderJitAreMadeOnEveryDevice) {
  const auto mesh = mv::make_mesh({4, 2}, {"data", "model"});
  const mv::NamedSharding sharding(mesh, P("data", "model"));
  const auto f = mv::jit(
      [](const Array& x) { return std::make_pair(mv::zeros_like(x), mv::ones_like(x) * x); });
  for (int call = 0; call < 2; ++call) {
    const Array x =
        mv::device_put(mv::arange(32.f).reshape({8, 4}) + static_cast<float>(call), sharding);
    const auto [zeros, product] = f(x);
    EXPECT_TRUE(same_sharding(zeros.sharding(), x.sharding()));
    EXPECT_TRUE(same_sharding(product.sharding(), x.sharding()));
    EXPECT_EQ(zeros.to_host<float>(), std::vector<float>(32, 0.f));
    EXPECT_EQ(product.to_host<float>(), x.to_host<float>());
  }
  EXPECT_EQ(f.traces(), 1u);
  // Filled where they are used: nothing was made on device 0 and copied to the others.
  const std::string text =
      f.program_text(mv::device_put(mv::arange(32.f).reshape({8, 4}), sharding));
  EXPECT_EQ(text.find("reshard"), std::string::npos) << text;
}

TEST(ModelDefects, LikeConstructorsInsideShardMapAreLocal) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  mv::Shape local;
  const auto body = mv::shard_map(
      [&](const Array& v) {
        local = mv::zeros_like(v).shape();
        return mv::zeros_like(v) + 2.f * mv::ones_like(v) + v;
      },
      mesh, {P("x")}, P("x"));
  const Array r = body(mv::device_put(mv::arange(16.f), mv::NamedSharding(mesh, P("x"))));
  EXPECT_EQ(local, (mv::Shape{2}));
  EXPECT_EQ(r.to_host<float>(), iota_values(16, 2.f, 1.f));
}

TEST(ModelDefects, AJittedStepOnStateFromZerosLikeTracesOnce) {
  const auto mesh = mv::make_mesh({4, 2}, {"data", "model"});
  mv::Params p{{"w", mv::device_put(mv::normal(mv::random_key(0), {8, 4}),
                                    mv::NamedSharding(mesh, P(mv::None, "model")))},
               {"b", mv::device_put(mv::zeros({4}), mv::NamedSharding(mesh, P("model")))}};
  const Array x =
      mv::device_put(mv::normal(mv::random_key(1), {16, 8}), mv::NamedSharding(mesh, P("data")));
  const auto state = mv::nn::adam_init(p);
  for (const auto& [name, value] : p) {
    EXPECT_TRUE(same_sharding(state.m.at(name).sharding(), value.sharding())) << name;
    EXPECT_TRUE(same_sharding(state.v.at(name).sharding(), value.sharding())) << name;
  }
  // Momentum kept in a Params made by zeros_like: the first call's state must already be laid out
  // as every later call's (the results') is.
  mv::Params momentum;
  for (const auto& [name, value] : p) momentum.emplace(name, mv::zeros_like(value));
  const auto loss = [](const mv::Params& q, const Array& in) {
    return mv::mean(mv::square(mv::matmul(in, q.at("w")) + q.at("b")));
  };
  const auto step = mv::jit([&](const mv::Params& q, const mv::Params& m, const Array& in) {
    const mv::Params g = mv::grad(loss)(q, in);
    mv::Params next_m, next_q;
    for (const auto& [name, value] : q) {
      next_m.emplace(name, 0.9f * m.at(name) + g.at(name));
      next_q.emplace(name, value - 0.1f * next_m.at(name));
    }
    return std::make_pair(next_q, next_m);
  });
  for (int i = 0; i < 3; ++i) std::tie(p, momentum) = step(p, momentum, x);
  EXPECT_EQ(step.traces(), 1u);
}

// ---- 2. P('model', None) and P('model') key one trace.

TEST(ModelDefects, TrailingNonesKeyOneTrace) {
  const auto mesh = mv::make_mesh({2, 4}, {"model", "data"});
  const auto f = mv::jit([](const Array& x) { return x * 2.f + 1.f; });
  const Array a = mv::device_put(mv::arange(32.f).reshape({8, 4}),
                                 mv::NamedSharding(mesh, P("model", mv::None)));
  const Array b =
      mv::device_put(mv::arange(32.f).reshape({8, 4}) + 1.f, mv::NamedSharding(mesh, P("model")));
  ASSERT_TRUE(same_sharding(a.sharding(), b.sharding()));
  const Array ra = f(a), rb = f(b);
  EXPECT_EQ(f.traces(), 1u);
  EXPECT_EQ(f.function().cache_size(), 1u);
  EXPECT_EQ(ra.to_host<float>(), iota_values(32, 1.f, 2.f));
  EXPECT_EQ(rb.to_host<float>(), iota_values(32, 3.f, 2.f));
  EXPECT_TRUE(same_sharding(rb.sharding(), b.sharding()));
  // Structured arguments too.
  const auto g = mv::jit([](const mv::Params& q) { return q.at("w") - 1.f; });
  g(mv::Params{{"w", a}});
  EXPECT_EQ(g(mv::Params{{"w", b}}).to_host<float>(), iota_values(32, 0.f, 1.f));
  EXPECT_EQ(g.traces(), 1u);
  // P(None) and P() alike.
  const auto h = mv::jit([](const Array& x) { return -x; });
  h(mv::device_put(mv::arange(8.f), mv::NamedSharding(mesh, P(mv::None))));
  h(mv::device_put(mv::arange(8.f), mv::NamedSharding(mesh, P())));
  EXPECT_EQ(h.traces(), 1u);
}

// ---- 3. Adam under jit: the step count is a device scalar in the state.

namespace {

// optax.adam on the host, in double.
struct HostAdam {
  std::vector<double> p, m, v;
  int t = 0;
  void step(const std::vector<float>& g, double lr, double b1 = 0.9, double b2 = 0.999,
            double eps = 1e-8) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
};

// The gradients of step k: away from 0, changing sign and size from step to step.
std::vector<float> step_grads(int k, int n, float scale) {
  std::vector<float> g(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    g[static_cast<size_t>(i)] = scale * (0.5f + 0.1f * static_cast<float>((i * 7 + k * 3) % 11)) *
                                ((i + k) % 3 ? 1.f : -1.f);
  return g;
}

}  // namespace

TEST(ModelDefects, AdamUnderJitMatchesEagerAndTheHost) {
  const auto mesh = mv::make_mesh({4, 2}, {"data", "model"});
  const mv::NamedSharding w_sharding(mesh, P(mv::None, "model")), b_sharding(mesh, P("model"));
  const std::vector<float> w0 = iota_values(32, -1.f, 0.0625f), b0 = iota_values(4, 0.5f, -0.25f);
  const mv::Params p0{{"w", mv::device_put(w0, {8, 4}, w_sharding)},
                      {"b", mv::device_put(b0, {4}, b_sharding)}};
  const float lr = 0.01f;
  const auto step =
      mv::jit([lr](const mv::Params& p, const mv::Params& g, const mv::nn::AdamState& s) {
        mv::nn::AdamState state = s;
        const mv::Params next = mv::nn::adam(p, g, state, lr);
        return std::make_pair(next, state);
      });
  mv::Params jp = p0, ep = p0;
  mv::nn::AdamState js = mv::nn::adam_init(p0), es = mv::nn::adam_init(p0);
  EXPECT_EQ(js.count.dtype(), mv::DType::int32);
  EXPECT_EQ(js.count.shape(), mv::Shape{});
  EXPECT_EQ(js.count.to_host<int32_t>(), std::vector<int32_t>{0});
  EXPECT_TRUE(same_sharding(js.count.sharding(), mv::NamedSharding(mesh, P())));  // with its params
  HostAdam hw{{w0.begin(), w0.end()}, std::vector<double>(32), std::vector<double>(32)};
  HostAdam hb{{b0.begin(), b0.end()}, std::vector<double>(4), std::vector<double>(4)};
  for (int k = 0; k < 5; ++k) {
    const std::vector<float> gw = step_grads(k, 32, 1.f), gb = step_grads(k, 4, 0.01f);
    const mv::Params g{{"w", mv::device_put(gw, {8, 4}, w_sharding)},
                       {"b", mv::device_put(gb, {4}, b_sharding)}};
    std::tie(jp, js) = step(jp, g, js);
    ep = mv::nn::adam(ep, g, es, lr);
    hw.step(gw, lr);
    hb.step(gb, lr);
    EXPECT_EQ(js.count.to_host<int32_t>(), std::vector<int32_t>{k + 1});
  }
  EXPECT_EQ(step.traces(), 1u);
  EXPECT_EQ(es.count.to_host<int32_t>(), std::vector<int32_t>{5});
  for (const char* name : {"w", "b"}) {
    EXPECT_TRUE(same_sharding(jp.at(name).sharding(), p0.at(name).sharding())) << name;
    EXPECT_TRUE(same_sharding(js.m.at(name).sharding(), p0.at(name).sharding())) << name;
    expect_close(jp.at(name).to_host<float>(), ep.at(name).to_host<float>(), 1e-6,
                 std::string("jit vs eager ") + name);
    expect_close(js.m.at(name).to_host<float>(), es.m.at(name).to_host<float>(), 1e-6,
                 std::string("m ") + name);
    expect_close(js.v.at(name).to_host<float>(), es.v.at(name).to_host<float>(), 1e-6,
                 std::string("v ") + name);
  }
  expect_close(jp.at("w").to_host<float>(), hw.p, 1e-6, "jit vs host w");
  expect_close(jp.at("b").to_host<float>(), hb.p, 1e-6, "jit vs host b");
}

TEST(ModelDefects, AJittedAdamTrainingStepTracesOnce) {
  const auto mesh = mv::make_mesh({4, 2}, {"data", "model"});
  mv::Params p{{"w", mv::device_put(mv::normal(mv::random_key(0), {8, 4}),
                                    mv::NamedSharding(mesh, P("model", mv::None)))},
               {"b", mv::device_put(mv::zeros({4}), mv::NamedSharding(mesh, P("model")))}};
  const Array x =
      mv::device_put(mv::normal(mv::random_key(1), {16, 8}), mv::NamedSharding(mesh, P("data")));
  const auto loss = [](const mv::Params& q, const Array& in) {
    return mv::mean(mv::square(mv::matmul(in, q.at("w")) + q.at("b") - 1.f));
  };
  const auto step = mv::jit([&](const mv::Params& q, const mv::nn::AdamState& s, const Array& in) {
    auto [l, g] = mv::value_and_grad(loss)(q, in);
    mv::nn::AdamState state = s;
    const mv::Params next = mv::nn::adam(q, g, state, 0.05f);
    return std::make_tuple(l, next, state);
  });
  mv::Params ep = p;
  mv::nn::AdamState state = mv::nn::adam_init(p), eager = mv::nn::adam_init(p);
  std::vector<float> losses;
  for (int i = 0; i < 5; ++i) {
    auto [l, next, s] = step(p, state, x);
    p = next;
    state = s;
    losses.push_back(l.to_host<float>()[0]);
    ep = mv::nn::adam(ep, mv::grad(loss)(ep, x), eager, 0.05f);
  }
  EXPECT_EQ(step.traces(), 1u);
  EXPECT_EQ(state.count.to_host<int32_t>(), std::vector<int32_t>{5});
  EXPECT_LT(losses.back(), losses.front());
  for (const char* name : {"w", "b"})
    expect_close(p.at(name).to_host<float>(), ep.at(name).to_host<float>(), 1e-5, name);
}

TEST(ModelDefects, AdamChecksItsCount) {
  const mv::Params p{{"w", mv::ones({2})}};
  mv::nn::AdamState state = mv::nn::adam_init(p);
  EXPECT_FALSE(state.count.committed());  // with uncommitted params, free to move as they are
  mv::nn::AdamState bad = state;
  bad.count = mv::zeros({2}, mv::DType::int32);
  expect_error([&] { mv::nn::adam(p, p, bad, 0.1f); }, "state.count is int32[2]");
  bad.count = mv::scalar(1.f);
  expect_error([&] { mv::nn::adam(p, p, bad, 0.1f); }, "state.count is float32[]");
  bad.count = Array();
  expect_error([&] { mv::nn::adam(p, p, bad, 0.1f); }, "state.count is empty");
  // The count stops at 2^31 - 1 (optax's safe_int32_increment) rather than wrapping.
  state.count = mv::scalar(std::numeric_limits<int32_t>::max());
  mv::nn::adam(p, p, state, 0.1f);
  EXPECT_EQ(state.count.to_host<int32_t>(),
            std::vector<int32_t>{std::numeric_limits<int32_t>::max()});
}

// ---- 4. out_shardings for pair, tuple and Params results.

TEST(ModelDefects, OutShardingsForStructuredResults) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding rows(mesh, P("x")), cols(mesh, P(mv::None, "y")), replicated(mesh, P());
  const Array a =
      mv::device_put(mv::arange(32.f).reshape({8, 4}), mv::NamedSharding(mesh, P("x", "y")));

  // A pair: one sharding per element.
  const auto pair = mv::jit([](const Array& x) { return std::make_pair(x * 2.f, x + 1.f); },
                            {.out_shardings = {rows, cols}});
  for (int call = 0; call < 2; ++call) {
    const auto [twice, plus] = pair(a);
    EXPECT_TRUE(same_sharding(twice.sharding(), rows));
    EXPECT_TRUE(same_sharding(plus.sharding(), cols));
    EXPECT_EQ(twice.to_host<float>(), iota_values(32, 0.f, 2.f));
    EXPECT_EQ(plus.to_host<float>(), iota_values(32, 1.f, 1.f));
  }
  EXPECT_EQ(pair.traces(), 1u);

  // A tuple with Params inside: a list and a dict by name, nullopt following the data.
  const auto tuple = mv::jit(
      [](const Array& x) {
        return std::make_tuple(mv::sum(x), mv::Params{{"w", x - 1.f}, {"b", x * x}}, x);
      },
      {.out_shardings = {replicated, mv::ShardingTree::dict({{"w", cols}, {"b", std::nullopt}}),
                         rows}});
  const auto [total, params, same] = tuple(a);
  EXPECT_TRUE(same_sharding(total.sharding(), replicated));
  EXPECT_TRUE(same_sharding(params.at("w").sharding(), cols));
  EXPECT_TRUE(same_sharding(params.at("b").sharding(), a.sharding()));
  EXPECT_TRUE(same_sharding(same.sharding(), rows));
  EXPECT_EQ(total.to_host<float>()[0], 496.f);
  EXPECT_EQ(params.at("w").to_host<float>(), iota_values(32, -1.f, 1.f));

  // Params results: a dict by name, or one sharding for every leaf (JAX's prefix rule).
  const auto make = [](const Array& x) { return mv::Params{{"w", x * 3.f}, {"b", x.sum(0)}}; };
  const auto by_name =
      mv::jit(make, {.out_shardings = {mv::ShardingTree::dict(
                         {{"w", replicated}, {"b", mv::NamedSharding(mesh, P("y"))}})}});
  const mv::Params named = by_name(a);
  EXPECT_TRUE(same_sharding(named.at("w").sharding(), replicated));
  EXPECT_TRUE(
      same_sharding(named.at("b").sharding(), mv::Sharding(mv::NamedSharding(mesh, P("y")))));
  EXPECT_EQ(named.at("w").to_host<float>(), iota_values(32, 0.f, 3.f));
  EXPECT_EQ(named.at("b").to_host<float>(), (std::vector<float>{112, 120, 128, 136}));
  const auto all = mv::jit(make, {.out_shardings = {replicated}});
  for (const auto& [name, value] : all(a))
    EXPECT_TRUE(same_sharding(value.sharding(), replicated)) << name;
  // A pair of Params and a nested list.
  const auto nested =
      mv::jit([&](const Array& x) { return std::make_pair(make(x), std::make_tuple(x, x)); },
              {.out_shardings = {replicated, mv::ShardingTree::list({rows, cols})}});
  const auto [np, nt] = nested(a);
  EXPECT_TRUE(same_sharding(np.at("b").sharding(), replicated));
  EXPECT_TRUE(same_sharding(std::get<1>(nt).sharding(), cols));
  // AdamState: a list {m, v, count}, or one for all.
  const auto adam_state = mv::jit([](const mv::Params& q) { return mv::nn::adam_init(q); },
                                  {.out_shardings = {replicated}});
  const mv::nn::AdamState s = adam_state(mv::Params{{"w", a}});
  EXPECT_TRUE(same_sharding(s.m.at("w").sharding(), replicated));
  EXPECT_TRUE(same_sharding(s.count.sharding(), replicated));
}

TEST(ModelDefects, OutShardingTreesThatDoNotFitTheResultAreErrors) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const mv::NamedSharding rows(mesh, P("x"));
  const Array a = mv::device_put(mv::arange(8.f), rows);
  const auto three = mv::jit([](const Array& x) { return std::make_tuple(x, x, x); },
                             {.out_shardings = {rows, rows}});
  expect_error([&] { three(a); }, "a list of 2 entries but the result there is a std::tuple of 3");
  const auto params = [](const Array& x) { return mv::Params{{"w", x}, {"b", x}}; };
  const auto missing = mv::jit(params, {.out_shardings = {mv::ShardingTree::dict({{"w", rows}})}});
  expect_error([&] { missing(a); }, "no entry 'b'");
  const auto extra = mv::jit(
      params, {.out_shardings = {mv::ShardingTree::dict({{"w", rows}, {"b", rows}, {"c", rows}})}});
  expect_error([&] { extra(a); }, "'c', which the result lacks");
  const auto list_for_params =
      mv::jit(params, {.out_shardings = {mv::ShardingTree::list({rows, rows})}});
  expect_error([&] { list_for_params(a); }, "the result there is Params");
  const auto dict_for_array =
      mv::jit([](const Array& x) { return std::make_pair(x, x); },
              {.out_shardings = {mv::ShardingTree::dict({{"w", rows}}), rows}});
  expect_error([&] { dict_for_array(a); }, "out_shardings for the result[0]");
  expect_runtime_usable();
}

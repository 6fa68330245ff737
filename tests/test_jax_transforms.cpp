// The spellings a JAX user tries first for transforms: value_and_grad / grad with one argnum, a
// vector of argnums, has_aux and Params arguments; jit with static arguments and Params; the mesh
// context (use_mesh) with bare PartitionSpecs; addressable_shards. On the 8-device runtime, with
// sharded inputs, values checked against hand derivatives and host loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

void expect_close(const Array& got, const std::vector<float>& want, float tol = 1e-5f) {
  const auto v = got.to_host<float>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
}

float scalar_of(const Array& x) {
  return x.to_host<float>().at(0);
}

}  // namespace

// ---- value_and_grad / grad ------------------------------------------------------------------

TEST(JaxGrad, OneArgnumGivesOneGradient) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto vx = random_floats(8 * 4, 1), vy = random_floats(8 * 4, 2);
  const Array x = mv::device_put(host_array(vx, {8, 4}), mv::NamedSharding(mesh, P("x", "y")));
  const Array y = host_array(vy, {8, 4});
  const auto f = [](const Array& a, const Array& b) { return mv::sum(a * a * b); };
  // d/da sum(a^2 b) = 2ab, d/db = a^2.
  std::vector<float> dx, dy;
  float value = 0;
  for (size_t i = 0; i < vx.size(); ++i) {
    dx.push_back(2 * vx[i] * vy[i]);
    dy.push_back(vx[i] * vx[i]);
    value += vx[i] * vx[i] * vy[i];
  }
  const auto [v, g] = mv::value_and_grad(f)(x, y);
  static_assert(std::is_same_v<std::decay_t<decltype(g)>, Array>, "one argnum: one Array, as JAX");
  EXPECT_NEAR(scalar_of(v), value, 1e-4f);
  expect_close(g, dx);
  EXPECT_TRUE(g.sharding().is_equivalent_to(x.sharding(), 2)) << g.sharding().to_string();
  const auto [v1, g1] = mv::value_and_grad(f, 1)(x, y);
  expect_close(g1, dy);
  const Array g_only = mv::grad(f, 1)(x, y);
  expect_close(g_only, dy);
  // A vector of argnums gives a vector, in that order.
  const auto [v2, gs] = mv::value_and_grad(f, std::vector<int>{1, 0})(x, y);
  static_assert(std::is_same_v<std::decay_t<decltype(gs)>, std::vector<Array>>);
  ASSERT_EQ(gs.size(), 2u);
  expect_close(gs[0], dy);
  expect_close(gs[1], dx);
  EXPECT_EQ(mv::grad(f, std::vector<int>{0, 1})(x, y).size(), 2u);
}

TEST(JaxGrad, HasAuxReturnsTheAuxAlongside) {
  const auto vx = random_floats(16, 3);
  const Array x =
      mv::device_put(host_array(vx, {16}), mv::NamedSharding(mv::make_mesh({8}, {"d"}), P("d")));
  // f returns (loss, aux) with an aux of any type: here the prediction and a count.
  const auto f = [](const Array& a) {
    return std::make_pair(mv::sum(mv::sin(a)), std::make_pair(mv::cos(a), 7));
  };
  const auto [value_aux, g] = mv::value_and_grad(f, mv::has_aux)(x);
  const auto& [value, aux] = value_aux;
  float want = 0;
  std::vector<float> cosines;
  for (const float v : vx) {
    want += std::sin(v);
    cosines.push_back(std::cos(v));
  }
  EXPECT_NEAR(scalar_of(value), want, 1e-4f);
  expect_close(aux.first, cosines);
  EXPECT_EQ(aux.second, 7);
  expect_close(g, cosines);  // d/da sum(sin a) = cos a
  // jax.grad(f, has_aux=True) gives (grad, aux).
  const auto [g2, aux2] = mv::grad(f, 0, mv::has_aux)(x);
  expect_close(g2, cosines);
  expect_close(aux2.first, cosines);
  // With a vector of argnums.
  const auto h = [](const Array& a, const Array& b) {
    return std::make_pair(mv::sum(a * b), a + b);
  };
  const auto [gs, aux3] = mv::grad(h, std::vector<int>{0, 1}, mv::has_aux)(x, 2 * x);
  expect_close(gs[0], (2 * x).to_host<float>());
  expect_close(gs[1], vx);
  expect_close(aux3, (3 * x).to_host<float>());
}

TEST(JaxGrad, ParamsArgumentsGetParamsGradients) {
  const auto mesh = mv::make_mesh({8}, {"batch"});
  const auto vx = random_floats(16 * 4, 4), vw = random_floats(4 * 3, 5);
  const Array x = mv::device_put(host_array(vx, {16, 4}), mv::NamedSharding(mesh, P("batch")));
  const mv::Params params{{"w", host_array(vw, {4, 3})}, {"b", mv::zeros({3})}};
  // loss(params, x, scale) = scale * sum(x @ w + b): d/dw[k, j] = scale * sum_i x[i, k],
  // d/db[j] = scale * 16. A float argument passes through.
  const auto loss = [](const mv::Params& p, const Array& in, float scale) {
    return scale * mv::sum(mv::matmul(in, p.at("w")) + p.at("b"));
  };
  const auto [v, g] = mv::value_and_grad(loss)(params, x, 0.5f);
  static_assert(std::is_same_v<std::decay_t<decltype(g)>, mv::Params>);
  ASSERT_EQ(g.size(), 2u);
  std::vector<float> dw;
  for (int k = 0; k < 4; ++k) {
    float col = 0;
    for (int i = 0; i < 16; ++i) col += vx[static_cast<size_t>(i * 4 + k)];
    for (int j = 0; j < 3; ++j) dw.push_back(0.5f * col);
  }
  expect_close(g.at("w"), dw, 1e-4f);
  expect_close(g.at("b"), std::vector<float>(3, 8.f));
  // A Params argument mixed with an Array argument asked for together: a variant per argnum.
  const auto gs = mv::grad(loss, std::vector<int>{0, 1})(params, x, 1.0f);
  ASSERT_EQ(gs.size(), 2u);
  EXPECT_EQ(std::get<mv::Params>(gs[0]).size(), 2u);
  EXPECT_EQ(std::get<Array>(gs[1]).shape(), (mv::Shape{16, 4}));
}

TEST(JaxGrad, BadArgnumsAndDtypesAreErrors) {
  const auto f = [](const Array& a, float s) { return s * mv::sum(a); };
  EXPECT_NE(
      message_of([&] { mv::grad(f, 2)(mv::arange(3.f), 1.0f); }).find("valid argnums are 0..1"),
      std::string::npos);
  EXPECT_NE(message_of([&] {
              mv::grad(f, 1)(mv::arange(3.f), 1.0f);
            }).find("neither an Array nor Params"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              mv::grad([](const Array& a) { return mv::sum(a); })(mv::arange(3));
            }).find("argument 0 is int32[3]"),
            std::string::npos);
  const mv::Params p{{"n", mv::arange(3)}};
  EXPECT_NE(message_of([&] {
              mv::grad([](const mv::Params& q) { return mv::sum(q.at("n")); })(p);
            }).find("argument 0['n'] is int32[3]"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              mv::grad([](const Array& a) { return a * 2; })(mv::arange(3.f));
            }).find("scalar to differentiate"),
            std::string::npos);
  // Still usable after.
  expect_close(mv::grad(f)(mv::arange(3.f), 2.0f), {2, 2, 2});
}

// ---- addressable_shards -------------------------------------------------------------------------

TEST(JaxShards, AddressableShardsAreTheDevicesPieces) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Array x =
      mv::device_put(mv::arange(64.f).reshape({8, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto shards = x.addressable_shards();
  const auto map = x.sharding().devices_indices_map(x.shape());
  ASSERT_EQ(shards.size(), 8u);
  for (size_t i = 0; i < shards.size(); ++i) {
    const mv::Shard& s = shards[i];
    EXPECT_EQ(s.device, map[i].device);
    EXPECT_EQ(s.index, map[i].index);
    EXPECT_EQ(s.replica_id, 0);
    // shard.data is a single-device array on that device holding x[index].
    ASSERT_NE(s.data.sharding().single(), nullptr);
    EXPECT_EQ(s.data.sharding().single()->device(), s.device);
    EXPECT_EQ(s.data.shape(), (mv::Shape{4, 2}));
    std::vector<float> want;
    for (int64_t r = s.index[0].start; r < s.index[0].stop; ++r)
      for (int64_t c = s.index[1].start; c < s.index[1].stop; ++c)
        want.push_back(static_cast<float>(r * 8 + c));
    EXPECT_EQ(s.data.to_host<float>(), want) << "device " << s.device;
    // And usable in ops, on its own device.
    EXPECT_EQ(mv::sum(s.data).sharding().device_ids(), std::vector<int>{s.device});
  }
  EXPECT_EQ(mv::index_to_string(shards[5].index), "[4:8, 2:4]");
  // Replicated along 'y': four copies of each half, replica ids 0..3.
  const Array r = mv::device_put(mv::arange(8).reshape({2, 4}), mv::NamedSharding(mesh, P("x")));
  const auto rs = r.addressable_shards();
  ASSERT_EQ(rs.size(), 8u);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].replica_id, static_cast<int>(i % 4));
    EXPECT_EQ(rs[i].data.to_host<int32_t>(),
              i < 4 ? (std::vector<int32_t>{0, 1, 2, 3}) : (std::vector<int32_t>{4, 5, 6, 7}));
  }
  // An uncommitted array on one device: one shard, the whole array.
  const auto one = mv::arange(3.f).addressable_shards();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].device, 0);
  EXPECT_EQ(one[0].index, (mv::Index{{0, 3}}));
  EXPECT_EQ(one[0].data.to_host<float>(), (std::vector<float>{0, 1, 2}));
  // A pending elementwise result is computed first.
  const auto pending = (x * 2).addressable_shards();
  EXPECT_EQ(pending[1].data.to_host<float>(), (std::vector<float>{4, 6, 20, 22, 36, 38, 52, 54}));
  EXPECT_THROW(Array().addressable_shards(), mv::Error);
}

// ---- jit with static arguments and Params -------------------------------------------------------

TEST(JaxJit, StaticArgumentsKeyTheCacheAndRetrace) {
  const auto mesh = mv::make_mesh({8}, {"d"});
  const Array x = mv::device_put(mv::arange(16.f), mv::NamedSharding(mesh, P("d")));
  int bodies = 0;  // how many times the body ran: once per trace
  const auto f = mv::jit(
      [&bodies](const Array& a, int power, bool negate, const std::string& op) {
        ++bodies;
        Array r = a;
        for (int i = 1; i < power; ++i) r = r * a;
        if (op == "sum") r = mv::sum(r);
        return negate ? -r : r;
      },
      {.static_argnums = {1, 2, 3}});
  const auto values = [](const Array& r) { return r.to_host<float>(); };
  EXPECT_EQ(values(f(x, 2, false, "none"))[3], 9.f);
  EXPECT_EQ(f.traces(), 1u);
  EXPECT_EQ(values(f(2 * x, 2, false, "none"))[3], 36.f);  // same statics: a replay
  EXPECT_EQ(f.traces(), 1u);
  EXPECT_EQ(bodies, 1);
  EXPECT_EQ(values(f(x, 3, false, "none"))[3], 27.f);  // a new int: retrace
  EXPECT_EQ(f.traces(), 2u);
  EXPECT_EQ(values(f(x, 3, true, "none"))[3], -27.f);  // a new bool: retrace
  EXPECT_EQ(f.traces(), 3u);
  EXPECT_EQ(values(f(x, 1, false, "sum"))[0], 120.f);  // a new string: retrace, another shape
  EXPECT_EQ(f.traces(), 4u);
  EXPECT_EQ(values(f(x, 3, true, "none"))[3], -27.f);  // seen before: replay
  EXPECT_EQ(f.traces(), 4u);
  EXPECT_EQ(f.cache_size(), 4u);
  EXPECT_EQ(bodies, 4);
  // A string literal works as a static argument too, and without static_argnums statics are
  // found by their types.
  const auto g = mv::jit([](const Array& a, const char* how, float scale) {
    return std::string(how) == "twice" ? a * (2 * scale) : a * scale;
  });
  EXPECT_EQ(values(g(x, "twice", 1.5f))[1], 3.f);
  EXPECT_EQ(values(g(x, "once", 1.5f))[1], 1.5f);
  EXPECT_EQ(values(g(x, "once", 1.5f))[2], 3.f);
  EXPECT_EQ(g.traces(), 2u);
}

TEST(JaxJit, StaticArgnumsThatDoNotMatchAreErrors) {
  const Array x = mv::arange(4.f);
  const auto f = mv::jit([](const Array& a, int k) { return a * k; }, {.static_argnums = {0}});
  EXPECT_NE(message_of([&] { f(x, 2); }).find("static_argnums has 0, but argument 0 is an Array"),
            std::string::npos);
  const auto g = mv::jit([](const Array& a, int k) { return a * k; }, {.static_argnums = {}});
  EXPECT_EQ(g(x, 3).to_host<float>()[1], 3.f);
  const auto h =
      mv::jit([](const Array& a, int k, int m) { return a * k * m; }, {.static_argnums = {1}});
  EXPECT_NE(message_of([&] { h(x, 2, 3); }).find("argument 2 is a static value"),
            std::string::npos);
  const auto k = mv::jit([](const Array& a) { return a; }, {.static_argnums = {3}});
  EXPECT_NE(message_of([&] { k(x); }).find("called with 1 arguments"), std::string::npos);
}

TEST(JaxJit, ParamsInAndOut) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto vw = random_floats(8 * 4, 40), vx = random_floats(16 * 8, 41);
  mv::Params params{
      {"w", mv::device_put(host_array(vw, {8, 4}), mv::NamedSharding(mesh, P(mv::None, "y")))},
      {"b", mv::device_put(mv::zeros({4}), mv::NamedSharding(mesh, P()))}};
  const Array x = mv::device_put(host_array(vx, {16, 8}), mv::NamedSharding(mesh, P("x")));
  // An SGD step as JAX writes it: jit(step)(params, x, lr) -> (loss, new params).
  const auto loss = [](const mv::Params& p, const Array& in) {
    return mv::mean(mv::square(mv::matmul(in, p.at("w")) + p.at("b")));
  };
  const auto step = mv::jit([&](const mv::Params& p, const Array& in, float lr) {
    const auto [l, g] = mv::value_and_grad(loss)(p, in);
    return std::make_pair(l, mv::nn::sgd(p, g, lr));
  });
  const auto [l0, p1] = step(params, x, 0.1f);
  static_assert(std::is_same_v<std::decay_t<decltype(p1)>, mv::Params>);
  ASSERT_EQ(p1.size(), 2u);
  // Against the same step eagerly.
  const auto [l_eager, g_eager] = mv::value_and_grad(loss)(params, x);
  EXPECT_NEAR(scalar_of(l0), scalar_of(l_eager), 1e-5f);
  expect_close(p1.at("w"), (params.at("w") - 0.1f * g_eager.at("w")).to_host<float>());
  expect_close(p1.at("b"), (params.at("b") - 0.1f * g_eager.at("b")).to_host<float>());
  EXPECT_TRUE(p1.at("w").sharding().is_equivalent_to(params.at("w").sharding(), 2))
      << p1.at("w").sharding().to_string();
  // The next steps replay: the loss goes down, one trace.
  const auto [l1, p2] = step(p1, x, 0.1f);
  const auto [l2, p3] = step(p2, x, 0.1f);
  EXPECT_LT(scalar_of(l2), scalar_of(l1));
  EXPECT_LT(scalar_of(l1), scalar_of(l0));
  EXPECT_EQ(step.traces(), 1u);
  // New parameter names are a new structure: a new trace.
  mv::Params more = p3;
  more.emplace("unused", mv::zeros({2}));
  const auto [l3, p4] = step(more, x, 0.1f);
  EXPECT_EQ(p4.size(), 3u);
  EXPECT_EQ(step.traces(), 2u);
  // Params results with a vector and a tuple.
  const auto split = mv::jit([](const Array& a) {
    return std::make_tuple(mv::Params{{"twice", 2 * a}, {"neg", -a}},
                           std::vector<Array>{a + 1, a + 2});
  });
  const auto [named, listed] = split(mv::arange(3.f));
  EXPECT_EQ(named.at("twice").to_host<float>(), (std::vector<float>{0, 2, 4}));
  EXPECT_EQ(named.at("neg").to_host<float>(), (std::vector<float>{-0.f, -1, -2}));
  EXPECT_EQ(listed[1].to_host<float>(), (std::vector<float>{2, 3, 4}));
  // in_shardings: one per non-static argument, applied to every Array of a Params.
  const auto placed = mv::jit([](const mv::Params& p, int k) { return p.at("w") * k; },
                              {.in_shardings = {mv::NamedSharding(mesh, P("x"))}});
  EXPECT_EQ(placed(params, 2).sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x"))));
  const auto wrong = mv::jit([](const mv::Params& p, int k) { return p.at("w") * k; },
                             {.in_shardings = {std::nullopt, std::nullopt}});
  EXPECT_NE(message_of([&] {
              wrong(params, 2);
            }).find("2 in_shardings for a function with 1 non-static arguments"),
            std::string::npos);
  EXPECT_THROW(wrong(params, 2), mv::Error);  // again: the failed entry was not kept
  EXPECT_EQ(wrong.traces(), 0u);
}

TEST(JaxJit, ProgramTextAndStructureFollowTheArguments) {
  const auto mesh = mv::make_mesh({8}, {"d"});
  const Array x = mv::device_put(mv::arange(16.f), mv::NamedSharding(mesh, P("d")));
  const auto f = mv::jit([](const mv::Params& p, int k) { return mv::sum(p.at("a") * k); });
  const std::string text = f.program_text(mv::Params{{"a", x}}, 3);
  EXPECT_NE(text.find("all-reduce"), std::string::npos) << text;
  EXPECT_EQ(f.lower(mv::Params{{"a", x}}, 3).as_text(), text);
  EXPECT_EQ(f.traces(), 1u);
  EXPECT_EQ(f(mv::Params{{"a", x}}, 3).to_host<float>()[0], 360.f);
  EXPECT_EQ(f.traces(), 1u);
  // A result whose structure depends on the argument's shape: one Array per row.
  const auto rows = mv::jit([](const Array& a, bool twice) {
    std::vector<Array> out;
    for (int64_t i = 0; i < a.shape()[0]; ++i) out.push_back(twice ? a[i] * 2 : a[i]);
    return out;
  });
  EXPECT_EQ(rows(mv::arange(6.f).reshape({3, 2}), true).size(), 3u);
  const auto four = rows(mv::arange(8.f).reshape({4, 2}), true);
  ASSERT_EQ(four.size(), 4u);
  EXPECT_EQ(four[3].to_host<float>(), (std::vector<float>{12, 14}));
}

// ---- use_mesh ----------------------------------------------------------------------------------

TEST(JaxMeshContext, BareSpecsUseTheContextMesh) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Array x = mv::arange(32.f).reshape({4, 8});
  EXPECT_FALSE(mv::get_abstract_mesh().has_value());
  {
    const mv::use_mesh guard(mesh);
    ASSERT_TRUE(mv::get_abstract_mesh().has_value());
    EXPECT_EQ(*mv::get_abstract_mesh(), mesh);
    const Array xs = mv::device_put(x, P("x", "y"));
    EXPECT_EQ(xs.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x", "y"))));
    EXPECT_EQ(xs.to_host<float>(), x.to_host<float>());
    // Under jit: with_sharding_constraint with a bare spec lays the value out on the context mesh.
    const auto f = mv::jit(
        [](const Array& a) { return mv::with_sharding_constraint(a * 2, P(mv::None, "y")); });
    const Array r = f(xs);
    EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P(mv::None, "y"))));
    EXPECT_EQ(r.to_host<float>(), (x * 2).to_host<float>());
    EXPECT_NE(f.program_text(xs).find("with_sharding_constraint"), std::string::npos)
        << f.program_text(xs);
    // Nested: the inner mesh wins until its guard goes.
    const auto other = mv::make_mesh({8}, {"d"});
    {
      const mv::use_mesh inner(other);
      EXPECT_EQ(mv::device_put(mv::arange(8), P("d")).sharding(),
                mv::Sharding(mv::NamedSharding(other, P("d"))));
    }
    // The same jit under another context mesh (same axes, devices in reverse) is traced again:
    // its bare spec means that mesh there.
    const mv::Mesh reversed({2, 4}, {"x", "y"}, {}, {7, 6, 5, 4, 3, 2, 1, 0});
    {
      const mv::use_mesh inner(reversed);
      const Array r2 = f(xs);
      EXPECT_EQ(r2.sharding(), mv::Sharding(mv::NamedSharding(reversed, P(mv::None, "y"))));
      EXPECT_EQ(r2.to_host<float>(), (x * 2).to_host<float>());
      EXPECT_EQ(f.traces(), 2u);
    }
    EXPECT_EQ(f(xs).sharding(), mv::Sharding(mv::NamedSharding(mesh, P(mv::None, "y"))));
    EXPECT_EQ(f.traces(), 2u);
    EXPECT_EQ(*mv::get_abstract_mesh(), mesh);
  }
  EXPECT_FALSE(mv::get_abstract_mesh().has_value());
}

TEST(JaxMeshContext, EachThreadHasItsOwnAndABareSpecWithoutOneIsAnError) {
  const auto mesh = mv::make_mesh({8}, {"d"});
  const Array x = mv::arange(8.f);
  const std::string outside = message_of([&] { mv::device_put(x, P("d")); });
  EXPECT_NE(outside.find("use_mesh"), std::string::npos) << outside;
  EXPECT_NE(outside.find("PartitionSpec('d',)"), std::string::npos) << outside;
  EXPECT_NE(message_of([&] { mv::with_sharding_constraint(x, P("d")); }).find("use_mesh"),
            std::string::npos);
  const mv::use_mesh guard(mesh);
  bool other_thread_saw_mesh = true;
  std::string other_thread_error;
  std::thread t([&] {
    other_thread_saw_mesh = mv::get_abstract_mesh().has_value();
    other_thread_error = message_of([&] { mv::device_put(x, P("d")); });
  });
  t.join();
  EXPECT_FALSE(other_thread_saw_mesh);
  EXPECT_NE(other_thread_error.find("use_mesh"), std::string::npos) << other_thread_error;
  EXPECT_EQ(mv::device_put(x, P("d")).sharding().device_ids().size(), 8u);
  // reshard of a single-device array takes the context mesh too.
  EXPECT_EQ(mv::reshard(x, P("d")).sharding(), mv::Sharding(mv::NamedSharding(mesh, P("d"))));
  // An axis the context mesh lacks is the usual NamedSharding error.
  EXPECT_THROW(mv::device_put(x, P("nope")), mv::Error);
}

// The README's snippet of JAX spellings, as written there.
TEST(JaxSpellings, ReadmeSnippetRuns) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const Array a = mv::ones({2, 3}), b = mv::ones({3, 4}), c = mv::ones({4, 5});
  std::ostringstream out;
  mv::use_mesh guard(mesh);                  // with jax.sharding.use_mesh(mesh):
  auto keys = mv::split(mv::random_key(0));  // uint32[2,2]; keys[0], keys[1]
  mv::Params params{{"w", mv::device_put(mv::normal(keys[0], {8, 4}), P())}};
  auto x = mv::device_put(mv::normal(keys[1], {16, 8}), P("x"));  // a bare spec under use_mesh
  auto loss = [](const mv::Params& p, const mv::Array& x) {
    return mv::mean(mv::square(mv::matmul(x, p.at("w"))));
  };
  auto step = mv::jit([&](const mv::Params& p, const mv::Array& x, float lr) {  // lr is static
    auto [l, g] = mv::value_and_grad(loss)(p, x);  // g is Params, like p
    return std::make_pair(l, mv::nn::sgd(p, g, lr));
  });
  auto [l, new_params] = step(params, x, 0.1f);
  auto adam_step =
      mv::jit([&](const mv::Params& p, const mv::nn::AdamState& s, const mv::Array& x) {
        mv::nn::AdamState next = s;  // adam updates the state it is given
        auto q = mv::nn::adam(p, mv::grad(loss)(p, x), next, 1e-3f);
        return std::make_pair(q, next);  // the state goes in and comes back
      });
  auto [p1, s1] = adam_step(params, mv::nn::adam_init(params), x);  // s1.count: int32 1
  EXPECT_EQ(s1.count.to_host<int32_t>(), std::vector<int32_t>{1});
  EXPECT_EQ(adam_step(p1, s1, x).second.count.to_host<int32_t>(), std::vector<int32_t>{2});
  EXPECT_EQ(adam_step.traces(), 1u);
  auto y = mv::einsum("ij,jk,kl", a, b, c);  // implicit output, greedy pair order
  for (const mv::Shard& s : x.addressable_shards()) out << s.device << " " << s.data << "\n";
  EXPECT_LT(scalar_of(step(new_params, x, 0.1f).first), scalar_of(l));
  EXPECT_EQ(y.to_host<float>(), std::vector<float>(10, 12.f));
  EXPECT_EQ(x.addressable_shards().size(), 8u);
  EXPECT_EQ(out.str().rfind("7 [[", 0) == std::string::npos, true);  // device 0 first
  EXPECT_NE(out.str().find("\n7 [["), std::string::npos) << out.str();
}

TEST(JaxJit, ComposesWithGradAndHasAux) {
  const auto mesh = mv::make_mesh({8}, {"d"});
  const auto v = random_floats(16, 50);
  const Array x = mv::device_put(host_array(v, {16}), mv::NamedSharding(mesh, P("d")));
  // jit(value_and_grad(f, has_aux)): a nested pair comes back as it was returned.
  const auto f = [](const Array& a) { return std::make_pair(mv::sum(a * a), mv::max(a)); };
  const auto step = mv::jit(mv::value_and_grad(f, mv::has_aux));
  const auto [value_aux, g] = step(x);
  float want = 0, biggest = v[0];
  std::vector<float> twice;
  for (const float e : v) {
    want += e * e;
    biggest = std::max(biggest, e);
    twice.push_back(2 * e);
  }
  EXPECT_NEAR(scalar_of(value_aux.first), want, 1e-4f);
  EXPECT_EQ(scalar_of(value_aux.second), biggest);
  expect_close(g, twice);
  step(x);
  EXPECT_EQ(step.traces(), 1u);
  // grad of a jitted function with a static argument: the jit runs inline under the tape.
  const auto scaled =
      mv::jit([](const Array& a, int k) { return mv::sum(a * static_cast<float>(k)); });
  expect_close(mv::grad([&](const Array& a) { return scaled(a, 3); })(x),
               std::vector<float>(16, 3.f));
}

// A training loop as a JAX user writes it, with a parameter left uncommitted (made on the
// default device): jit's results are as committed as f's eager results, so the next step moves
// the parameter as the first one did instead of failing on incompatible devices.
TEST(JaxJit, UncommittedParamsStayUncommittedAcrossSteps) {
  const auto mesh = mv::make_mesh({8}, {"batch"});
  const Array x = mv::device_put(host_array(random_floats(16 * 4, 60), {16, 4}),
                                 mv::NamedSharding(mesh, P("batch")));
  mv::Params params{{"w", host_array(random_floats(4 * 2, 61), {4, 2})}, {"b", mv::zeros({2})}};
  const auto loss = [](const mv::Params& p, const Array& in) {
    return mv::mean(mv::square(mv::matmul(in, p.at("w")) + p.at("b") - 1.0f));
  };
  const auto step = mv::jit([&](const mv::Params& p, const Array& in) {
    const auto [l, g] = mv::value_and_grad(loss)(p, in);
    return std::make_pair(l, mv::nn::sgd(p, g, 0.1f));
  });
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i) {
    auto [l, next] = step(params, x);
    EXPECT_FALSE(next.at("b").committed()) << "step " << i;
    losses.push_back(scalar_of(l));
    params = std::move(next);
  }
  EXPECT_LT(losses[2], losses[0]);
  EXPECT_EQ(step.traces(), 1u);
  // Plain jit of uncommitted values gives uncommitted values, as the eager op would.
  EXPECT_FALSE(mv::jit([](const Array& a) { return a + 1; })(mv::arange(3.f)).committed());
}

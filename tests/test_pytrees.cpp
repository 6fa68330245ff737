// User structs registered as pytrees (MESHVK_REGISTER_PYTREE): as jit arguments and results,
// gradients, scan carries, vmap arguments, out_shardings trees and device_put trees.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

struct Dense {
  Array w, b;
  int activation = 0;  // static: copied, not a leaf
};
MESHVK_REGISTER_PYTREE(Dense, &Dense::w, &Dense::b);

struct Mlp {
  std::vector<Dense> layers;
  Array scale;
};
MESHVK_REGISTER_PYTREE(Mlp, &Mlp::layers, &Mlp::scale);

namespace {

Array apply(const Mlp& m, const Array& x) {
  Array h = x;
  for (const Dense& d : m.layers) {
    h = mv::matmul(h, d.w) + d.b;
    if (d.activation) h = mv::tanh(h);
  }
  return h * m.scale;
}

Mlp make_mlp() {
  Mlp m;
  m.layers.push_back({host_array(random_floats(12, 1), {4, 3}), host_array(random_floats(3, 2)), 1});
  m.layers.push_back({host_array(random_floats(6, 3), {3, 2}), host_array(random_floats(2, 4)), 0});
  m.scale = mv::scalar(1.5f);
  return m;
}

void expect_close(const Array& got, const Array& want, float tol = 1e-5f) {
  const auto a = got.to_host<float>(), b = want.to_host<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * std::max(1.f, std::fabs(b[i]))) << i;
}

}  // namespace

TEST(Pytrees, RegisteredStructThroughJitAndGrad) {
  const Mlp m = make_mlp();
  const Array x = host_array(random_floats(8, 5), {2, 4});
  auto loss = [](const Mlp& p, const Array& v) { return (apply(p, v) * apply(p, v)).sum(); };
  const Mlp g = mv::grad(loss)(m, x);
  ASSERT_EQ(g.layers.size(), 2u);
  EXPECT_EQ(g.layers[0].activation, 1);  // the static member came along
  // Against finite differences on one weight.
  const float h = 1e-2f;
  auto w = m.layers[1].w.to_host<float>();
  w[3] += h;
  Mlp up = m;
  up.layers[1].w = host_array(w, {3, 2});
  w[3] -= 2 * h;
  Mlp down = m;
  down.layers[1].w = host_array(w, {3, 2});
  const float numeric = (loss(up, x).to_host<float>()[0] - loss(down, x).to_host<float>()[0]) / (2 * h);
  EXPECT_NEAR(g.layers[1].w.to_host<float>()[3], numeric, 2e-3f * (1 + std::fabs(numeric)));
  // An SGD step under jit, taking and returning the struct.
  auto step = mv::jit([&](const Mlp& p, const Array& v) {
    const Mlp gp = mv::grad(loss)(p, v);
    Mlp next = p;
    for (size_t i = 0; i < p.layers.size(); ++i) {
      next.layers[i].w = p.layers[i].w - 0.01f * gp.layers[i].w;
      next.layers[i].b = p.layers[i].b - 0.01f * gp.layers[i].b;
    }
    return next;
  });
  const Mlp once = step(m, x);
  const Mlp twice = step(once, x);
  EXPECT_EQ(step.traces(), 1u);
  expect_close(once.layers[0].w, m.layers[0].w - 0.01f * g.layers[0].w);
  EXPECT_LT(loss(twice, x).to_host<float>()[0], loss(m, x).to_host<float>()[0]);
}

TEST(Pytrees, ScanCarryVmapAndShardings) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  Dense d{host_array(random_floats(16, 7), {4, 4}), host_array(random_floats(4, 8)), 1};
  // A scan whose carry is the struct.
  auto [last, ys] = mv::lax::scan(
      [](const Dense& c, const Array& k) { return std::make_pair(Dense{c.w * 0.5f, c.b + k, c.activation}, c.b.sum()); }, d,
      host_array({1.f, 2.f, 3.f}));
  expect_close(last.w, d.w * 0.125f);
  expect_close(last.b, d.b + 6.f);
  EXPECT_EQ(ys.shape(), (mv::Shape{3}));
  // vmap over a batch of structs' leaves.
  Dense batch{host_array(random_floats(3 * 16, 9), {3, 4, 4}), host_array(random_floats(12, 10), {3, 4}), 0};
  const Array out = mv::vmap([](const Dense& l) { return mv::matmul(l.b.reshape({1, 4}), l.w).reshape({4}); })(batch);
  EXPECT_EQ(out.shape(), (mv::Shape{3, 4}));
  expect_close(out[1], mv::matmul(batch.b[1].reshape({1, 4}), batch.w[1]).reshape({4}));
  // device_put and out_shardings with a tree of one entry per field.
  const mv::ShardingTree tree = mv::ShardingTree::list({mv::NamedSharding(mesh, P("x", "y")), mv::NamedSharding(mesh, P("y"))});
  const Dense placed = mv::device_put(d, tree);
  EXPECT_TRUE(placed.w.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("x", "y")), 2));
  EXPECT_TRUE(placed.b.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("y")), 1));
  auto f = mv::jit([](const Dense& l) { return Dense{l.w + 1.f, l.b * 2.f, l.activation}; },
                   mv::JitOptions{.out_shardings = {mv::ShardingTree::list({mv::NamedSharding(mesh, P(mv::None, "x")), std::nullopt})}});
  const Dense r = f(placed);
  EXPECT_TRUE(r.w.sharding().is_equivalent_to(mv::NamedSharding(mesh, P(mv::None, "x")), 2)) << r.w.sharding().to_string();
  expect_close(r.b, d.b * 2.f);
  EXPECT_NE(message_of([&] { (void)mv::device_put(d, mv::ShardingTree::list({std::nullopt})); }).find("device_put"),
            std::string::npos);
}

// jax.jit's in_shardings for structured arguments: one sharding for all of an argument's Arrays,
// or a tree shaped like it (a dict for Params, a list for a pair or a registered struct).
TEST(Pytrees, InShardingsAsTrees) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Sharding split(mv::NamedSharding(mesh, P("x"))), whole(mv::NamedSharding(mesh, P()));
  const mv::Params params{{"w", mv::arange(16.f)}, {"b", mv::arange(8.f)}};
  const auto identity = [](const mv::Params& p, const std::pair<Array, Array>& q) {
    return std::make_tuple(p, q.first, q.second);
  };
  const auto f = mv::jit(identity, {.in_shardings = {mv::ShardingTree::dict({{"w", split}, {"b", whole}}),
                                                     mv::ShardingTree::list({std::nullopt, split})}});
  const std::pair<Array, Array> pair{mv::arange(8.f), mv::arange(24.f)};
  const auto [p, first, second] = f(params, pair);
  EXPECT_EQ(p.at("w").sharding(), split);
  EXPECT_EQ(p.at("b").sharding(), whole);
  EXPECT_EQ(second.sharding(), split);
  EXPECT_FALSE(first.sharding().named());  // nullopt: left on its device
  EXPECT_EQ(p.at("w").to_host<float>(), mv::arange(16.f).to_host<float>());
  EXPECT_EQ(second.to_host<float>(), mv::arange(24.f).to_host<float>());

  // A registered struct: a list with one entry per field (a field's entry may be a list too).
  const auto g = mv::jit([](const Mlp& m) { return std::make_pair(m.layers[1].w, m.layers[0].b * m.scale); },
                         {.in_shardings = {mv::ShardingTree::list(
                              {mv::ShardingTree::list({mv::ShardingTree::list({std::nullopt, std::nullopt}),
                                                       mv::ShardingTree::list({whole, std::nullopt})}),
                               whole})}});
  const Mlp m = make_mlp();
  const auto [w1, scaled] = g(m);
  EXPECT_EQ(w1.sharding(), whole);
  EXPECT_EQ(w1.to_host<float>(), m.layers[1].w.to_host<float>());
  expect_close(scaled, m.layers[0].b * m.scale);

  // Trees that do not fit the argument name where and what would.
  const auto wrong_names = mv::jit(identity, {.in_shardings = {mv::ShardingTree::dict({{"w", split}}),
                                                               std::nullopt}});
  const std::string missing = message_of([&] { wrong_names(params, pair); });
  EXPECT_NE(missing.find("jit(f): in_shardings for argument 0 (Params) has no entry 'b'"), std::string::npos)
      << missing;
  const auto wrong_kind = mv::jit(identity, {.in_shardings = {std::nullopt, mv::ShardingTree::list({split})}});
  const std::string short_list = message_of([&] { wrong_kind(params, pair); });
  EXPECT_NE(short_list.find("in_shardings for argument 1 is a list of 1 entry"), std::string::npos) << short_list;
  EXPECT_NE(short_list.find("but the argument there is"), std::string::npos) << short_list;
  // An Array argument takes a sharding, not a list.
  const auto plain = mv::jit([](const Array& a) { return a + 1; },
                             {.in_shardings = {mv::ShardingTree::list({split})}});
  const std::string array_arg = message_of([&] { plain(mv::arange(8.f)); });
  EXPECT_NE(array_arg.find("in_shardings[0] is a list of 1 entry but argument 0 is an Array"), std::string::npos)
      << array_arg;
}

// shard_map over pytrees: each argument's in_spec lays out every Array in it; a single out_spec
// every Array of the result; a list of out_specs one per element of a pair/tuple/vector result.
TEST(Pytrees, ShardMapOverStructures) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Params params{{"w", mv::arange(8.f)}, {"b", mv::arange(16.f) * 2}};
  const Array scale = mv::scalar(3.f);
  // Per device: sum each local piece, psum over 'x': the global sums, replicated.
  const auto sums = mv::shard_map(
      [](const mv::Params& p, const Array& s) {
        mv::Params out;
        for (const auto& [name, x] : p) out.emplace(name, mv::psum(x.sum() * s, "x"));
        return out;
      },
      mesh, {P("x"), P()}, P());
  const mv::Params got = sums(params, scale);
  EXPECT_FLOAT_EQ(got.at("w").to_host<float>()[0], 28.f * 3);
  EXPECT_FLOAT_EQ(got.at("b").to_host<float>()[0], 240.f * 3);
  // Under jit and grad: d/dw of sum(w * s) is s everywhere.
  const auto loss = [&](const mv::Params& p) {
    const mv::Params r = sums(p, scale);
    return r.at("w") + r.at("b");
  };
  const mv::Params g = mv::jit(mv::grad(loss))(params);
  EXPECT_EQ(g.at("w").to_host<float>(), std::vector<float>(8, 3.f));
  EXPECT_EQ(g.at("b").to_host<float>(), std::vector<float>(16, 3.f));

  // A pair result: the local pieces stay split (P('x')) and a psum'd total (P()).
  const auto split = mv::shard_map(
      [](const std::pair<Array, Array>& q) {
        return std::make_tuple(q.first * 2, mv::psum(q.second.sum(), "x"));
      },
      mesh, {P("x")}, {P("x"), P()});
  const auto [doubled, total] = split(std::pair<Array, Array>{mv::arange(8.f), mv::ones({8, 3})});
  EXPECT_EQ(doubled.to_host<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_EQ(doubled.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x"))));
  EXPECT_FLOAT_EQ(total.to_host<float>()[0], 24.f);
  // A registered struct in and out, one out_spec for all of it.
  const Mlp m = make_mlp();
  const auto scaled = mv::shard_map([](const Mlp& local) {
    Mlp r = local;
    r.scale = local.scale * 2;
    return r;
  }, mesh, {P()}, P());
  const Mlp r = scaled(m);
  EXPECT_FLOAT_EQ(r.scale.to_host<float>()[0], 3.f);
  EXPECT_EQ(r.layers[1].activation, 0);
  expect_close(r.layers[0].w, m.layers[0].w);

  // Mismatched specs name what fits.
  const auto three = mv::shard_map([](const Array& a) { return std::make_tuple(a, a, a); }, mesh, {P("x")},
                                   {P("x"), P("x")});
  const std::string count = message_of([&] { three(mv::arange(8.f)); });
  EXPECT_NE(count.find("2 out_specs for a result that is a sequence of 3 elements"), std::string::npos) << count;
  const auto one = mv::shard_map([](const mv::Params& p) { return p; }, mesh, {P("x"), P()}, P("x"));
  const std::string args = message_of([&] { one(params); });
  EXPECT_NE(args.find("2 in_specs for 1 arguments"), std::string::npos) << args;
  const mv::Params odd{{"w", mv::arange(8.f)}, {"v", mv::arange(6.f)}};
  const auto bad_split = mv::shard_map([](const mv::Params& p) { return p; }, mesh, {P("x")}, P("x"));
  const std::string leaf = message_of([&] { bad_split(odd); });
  EXPECT_NE(leaf.find("argument 0: Arrays 0-1"), std::string::npos) << leaf;
}

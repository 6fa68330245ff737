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

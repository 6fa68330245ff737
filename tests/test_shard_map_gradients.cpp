// Gradients through shard_map where a value is the same on every device along a mesh axis (JAX's
// varying-axes types). A cotangent that varies along an axis holds each device's contribution and
// is summed where the primal is one value; one that does not is that value, never summed again.
// A collective over an axis its operand does not vary along adds n equal terms (JAX's pvary), so
// its transpose multiplies by n. Found by an outside review: data-parallel gradients on a 2-D
// mesh came out multiplied by the other axis' size, and psum of a replicated input had the
// gradient of x where the function is n x.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

void expect_values(const mv::Array& got, const std::vector<double>& want, const std::string& what,
                   double tolerance = 1e-6) {
  const std::vector<float> g = got.to_host<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tolerance) << what << ", element " << i;
}

std::vector<double> times(const std::vector<float>& v, double k) {
  std::vector<double> out;
  for (const float x : v) out.push_back(k * x);
  return out;
}

}  // namespace

// Replicated parameters, a batch split over one axis of a (2, 4) mesh and replicated over the
// other, the loss averaged over the split axis: the gradient is the whole batch's, for either axis,
// eager and jitted.
TEST(ShardMapGradients, DataParallelOnATwoDimensionalMesh) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::Array w = mv::array({0.5f, -0.25f});
  const mv::Array batch = mv::arange(32.f).reshape(16, 2) * 0.1f;
  const std::vector<float> b = batch.to_host<float>();
  double g0 = 0, g1 = 0;
  for (int i = 0; i < 16; ++i) {
    const double r = b[2 * i] * 0.5 - b[2 * i + 1] * 0.25 - 1;
    g0 += 2 * r * b[2 * i] / 16;
    g1 += 2 * r * b[2 * i + 1] / 16;
  }
  for (const char* axis : {"x", "y"}) {
    const auto loss = mv::shard_map(
        [axis](const mv::Array& params, const mv::Array& xb) {
          return mv::pmean(mv::square(mv::matmul(xb, params) - 1.f).mean(), axis);
        },
        mesh, {P(), P(axis)}, P());
    const auto g = mv::grad([&](const mv::Array& params) { return loss(params, batch); });
    expect_values(g(w), {g0, g1}, std::string("batch over ") + axis);
    expect_values(mv::jit(g)(w), {g0, g1}, std::string("jit, batch over ") + axis);
  }
}

// Collectives of a replicated input (P(), the same on every device): psum and psum_scatter are n x,
// all_gather n copies, pmax and pmean x itself; each gradient as that function's.
TEST(ShardMapGradients, CollectivesOfValuesTheSameOnEveryDevice) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const std::vector<float> xv = {1, 2, 3, 4, 5, 6, 7, 8}, wv = {1, -2, 3, -4, 5, -6, 7, -8};
  const mv::Array x = mv::array(xv), w = mv::array(wv);
  const auto weighted = [&](auto f) {
    return mv::grad([f, w](const mv::Array& v) { return (f(v) * w).sum(); });
  };
  const auto psum = mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, mesh, {P()}, P());
  expect_values(psum(x), times(xv, 8), "psum's value");
  expect_values(weighted(psum)(x), times(wv, 8), "psum");
  expect_values(mv::jit(weighted(psum))(x), times(wv, 8), "psum, jit");
  const auto scatter = mv::shard_map([](const mv::Array& v) { return mv::psum_scatter(v, "x", 0, true); },
                                     mesh, {P()}, P("x"));
  expect_values(scatter(x), times(xv, 8), "psum_scatter's value");
  expect_values(weighted(scatter)(x), times(wv, 8), "psum_scatter");
  const auto pmax = mv::shard_map([](const mv::Array& v) { return mv::pmax(v, "x"); }, mesh, {P()}, P());
  expect_values(weighted(pmax)(x), times(wv, 1), "pmax");
  const auto pmean = mv::shard_map([](const mv::Array& v) { return mv::pmean(v, "x"); }, mesh, {P()}, P());
  expect_values(weighted(pmean)(x), times(wv, 1), "pmean");
  // Eight copies of x side by side: each element's gradient is the sum of its eight weights.
  const auto gather = mv::shard_map([](const mv::Array& v) { return mv::all_gather(v, "x", 0, true); },
                                    mesh, {P()}, P());
  const mv::Array w64 = mv::arange(64.f) - 20.f;
  const auto g = mv::grad([&](const mv::Array& v) { return (gather(v) * w64).sum(); })(x);
  std::vector<double> want(8, 0.0);
  for (int copy = 0; copy < 8; ++copy)
    for (int i = 0; i < 8; ++i) want[static_cast<size_t>(i)] += copy * 8 + i - 20.0;
  expect_values(g, want, "all_gather");
}

// psum over both axes of a (2, 4) mesh of an input split over 'x' only: 4 (x0 + x1) on every
// device, so each piece's gradient is 4 w; with the input split over 'y' only, 2 (y0 + .. + y3).
TEST(ShardMapGradients, PsumOverAnAxisTheInputDoesNotVaryAlong) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const std::vector<float> wv = {3, -1};
  const mv::Array w = mv::array(wv);
  for (const auto& [axis, repeats, pieces] : {std::tuple{"x", 4.0, 2}, std::tuple{"y", 2.0, 4}}) {
    const auto f = mv::shard_map([](const mv::Array& v) { return mv::psum(v, {"x", "y"}); }, mesh,
                                 {P(axis)}, P());
    const mv::Array x = mv::arange(2.f * pieces);
    const auto g = mv::grad([&](const mv::Array& v) { return (f(v) * w).sum(); });
    std::vector<double> want;
    for (int p = 0; p < pieces; ++p)
      for (const float wi : wv) want.push_back(repeats * wi);
    expect_values(g(x), want, std::string("input over ") + axis);
    expect_values(mv::jit(g)(x), want, std::string("jit, input over ") + axis);
  }
}

// A data-parallel loss plus an L2 term on the replicated parameters: the L2 term's gradient is
// one value on every device, the loss's per-device contributions; summing the two before the
// contributions were summed counted the L2 term once per device.
TEST(ShardMapGradients, ReplicatedTermAddedToPerDeviceContributions) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"d"});
  const mv::Array w = mv::array({0.5f, -0.25f});
  const mv::Array batch = mv::arange(32.f).reshape(16, 2) * 0.1f;
  const auto loss = mv::shard_map(
      [](const mv::Array& p, const mv::Array& xb) { return mv::pmean(mv::matmul(xb, p).sum(), "d") + (p * p).sum(); },
      mesh, {P(), P("d")}, P());
  const std::vector<float> b = batch.to_host<float>();
  double g0 = 2 * 0.5, g1 = 2 * -0.25;
  for (int i = 0; i < 16; ++i) {
    g0 += b[2 * i] / 8;
    g1 += b[2 * i + 1] / 8;
  }
  const auto g = mv::grad([&](const mv::Array& p) { return loss(p, batch); });
  expect_values(g(w), {g0, g1}, "eager");
  expect_values(mv::jit(g)(w), {g0, g1}, "jit");
}

// lax::cond inside a shard_map body with a predicate that differs between devices selects on
// each device (eager too), and its gradient follows each device's branch.
TEST(ShardMapGradients, CondWithAPerDevicePredicate) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"d"});
  const auto f = mv::shard_map(
      [](const mv::Array& u) {
        return mv::lax::cond(mv::axis_index("d") == 1, [](const mv::Array& v) { return v * 2.f; },
                             [](const mv::Array& v) { return -v; }, u);
      },
      mesh, {P("d")}, P("d"));
  const mv::Array x = mv::arange(1.f, 9.f);
  expect_values(f(x), {-1, 4, -3, -4, -5, -6, -7, -8}, "eager");
  expect_values(mv::jit(f)(x), {-1, 4, -3, -4, -5, -6, -7, -8}, "jit");
  const auto g = mv::grad([&](const mv::Array& v) { return f(v).sum(); });
  expect_values(g(x), {-1, 2, -1, -1, -1, -1, -1, -1}, "gradient");
  expect_values(mv::jit(g)(x), {-1, 2, -1, -1, -1, -1, -1, -1}, "jit gradient");
  // A replicated input the branches read: only the devices that took the branch contribute
  // (each branch's backward pass sums over the devices; it once saw all of them).
  const mv::Array rows = mv::arange(16.f).reshape({8, 2}) + 1.f;
  for (const int k : {1, 6}) {
    const auto h = mv::shard_map(
        [k](const mv::Array& w, const mv::Array& xb) {
          const mv::Array r = mv::lax::cond(mv::axis_index("d") == k, [](const mv::Array& v, const mv::Array& ww) { return v * ww; },
                                            [](const mv::Array& v, const mv::Array& ww) { return v * ww * 0.f + v; }, xb, w);
          return mv::psum(r.sum(), "d");
        },
        mesh, {P(), P("d")}, P());
    const auto gw = mv::grad([&](const mv::Array& w) { return h(w, rows); });
    const double a = 2 * k + 1, b = 2 * k + 2;
    expect_values(gw(mv::array({0.5f, -0.25f})), {a, b}, "replicated operand, device " + std::to_string(k));
    expect_values(mv::jit(gw)(mv::array({0.5f, -0.25f})), {a, b}, "jit, replicated operand, device " + std::to_string(k));
  }
}

// A gradient of a gradient and a jvp through shard_map (and through device_put of an uncommitted
// array, which shard_map's inputs take): device_put's rule returned an untaped copy, so second
// derivatives came out zero.
TEST(ShardMapGradients, SecondOrderAndJvp) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"d"});
  const mv::Array x = mv::arange(8.f) * 0.25f - 1.f;
  const std::vector<float> xv = x.to_host<float>();
  std::vector<double> six, three;
  for (const float v : xv) {
    six.push_back(6.0 * v);
    three.push_back(3.0 * v * v);
  }
  for (const mv::PartitionSpec& in : {P("d"), P()}) {
    const auto f = mv::shard_map([](const mv::Array& v) { return v * v * v; }, mesh, {in}, in);
    const auto g = [&](const mv::Array& v) { return mv::grad([&](const mv::Array& u) { return f(u).sum(); })(v); };
    expect_values(mv::grad([&](const mv::Array& v) { return g(v).sum(); })(x), six, "grad of grad, " + in.to_string());
    const auto [out, tangent] = mv::jvp([&](const mv::Array& v) { return f(v); }, std::make_tuple(x), std::make_tuple(mv::ones_like(x)));
    expect_values(tangent, three, "jvp, " + in.to_string());
  }
  const auto plain = [](const mv::Array& v) {
    return mv::grad([](const mv::Array& u) { return (mv::device_put(u, mv::SingleDeviceSharding(1)) * u).sum(); })(v);
  };
  expect_values(mv::grad([&](const mv::Array& v) { return plain(v).sum(); })(x), std::vector<double>(8, 2.0),
                "device_put of an uncommitted array");
}

// A loop carry that comes to vary along an axis inside the body: its value is right, but its
// gradient needs the carry typed varying from the start (lax::pvary), as JAX requires; without it
// a gradient is an Error naming pvary (it was silently summed too often).
TEST(ShardMapGradients, LoopCarryThatBecomesVarying) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::Array x = mv::arange(8.f) * 0.5f - 1.f;
  const auto body = [](bool widen) {
    return [widen](const mv::Array& v) {
      const mv::Array start = widen ? mv::lax::pvary(v, "y") : v;
      const mv::Array c = mv::lax::fori_loop(0, 2, [](const mv::Array&, const mv::Array& c) {
        return c * (mv::axis_index("y").astype(mv::DType::float32) + 1.f);
      }, start);
      return mv::psum(c, "y");
    };
  };
  // Device (x, y) multiplies by (y + 1)^2: the psum over 'y' is 1 + 4 + 9 + 16 = 30 times x.
  std::vector<double> want;
  for (const float v : x.to_host<float>()) want.push_back(30.0 * v);
  const auto plain = mv::shard_map(body(false), mesh, {P("x")}, P("x"));
  expect_values(plain(x), want, "value without pvary");
  expect_error([&] { (void)mv::grad([&](const mv::Array& v) { return plain(v).sum(); })(x); }, "lax::pvary(init, {'y'})");
  const auto widened = mv::shard_map(body(true), mesh, {P("x")}, P("x"));
  expect_values(widened(x), want, "value with pvary");
  const auto g = mv::grad([&](const mv::Array& v) { return widened(v).sum(); });
  expect_values(g(x), std::vector<double>(8, 30.0), "gradient with pvary");
  expect_values(mv::jit(g)(x), std::vector<double>(8, 30.0), "jit gradient with pvary");
  expect_runtime_usable();
}

// shard_map and collectives: every example of the tutorials, both algorithms, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

// Runs `f` with MESHVK_COLLECTIVE_ALGO set to `algo` ("" to clear).
template <class F>
auto with_algorithm(const char* algo, F f) {
  if (*algo) setenv("MESHVK_COLLECTIVE_ALGO", algo, 1);
  else unsetenv("MESHVK_COLLECTIVE_ALGO");
  auto r = f();
  unsetenv("MESHVK_COLLECTIVE_ALGO");
  return r;
}

}  // namespace

TEST(ShardMap, ElementwiseAndLocalShapes) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  mv::Shape seen;
  const auto f = mv::shard_map(
      [&](const Array& x) {
        seen = x.shape();
        return 2 * mv::sin(x) + 1;
      },
      mesh, {P("x")}, P("x"));
  const auto y = f(mv::arange(32)).to_host<float>();
  EXPECT_EQ(seen, mv::Shape{4});
  const std::vector<float> want = {1.f, 2.682942f, 2.818595f, 1.28224f, -0.513605f, -0.9178486f, 0.44116902f, 2.3139732f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6f);
  EXPECT_NEAR(y[31], 0.19192469f, 1e-6f);
}

TEST(ShardMap, SumPerShardAndPsum) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto per_shard = mv::shard_map([](const Array& x) { return mv::sum(x, {}, true); }, mesh, {P("x")}, P("x"));
  EXPECT_EQ(per_shard(mv::arange(32)).to_host<int32_t>(), (std::vector<int32_t>{6, 22, 38, 54, 70, 86, 102, 118}));
  const auto total = mv::shard_map([](const Array& x) { return mv::psum(mv::sum(x), "x"); }, mesh, {P("x")}, P());
  const auto t = total(mv::arange(32));
  EXPECT_EQ(t.shape(), mv::Shape{});
  EXPECT_EQ(t.to_host<int32_t>()[0], 496);
}

TEST(ShardMap, MatmulWithBiasOnTwoAxes) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto vx = random_floats(192 * 64, 1), vw = random_floats(64 * 128, 2), vb = random_floats(128, 3);
  const auto x = mv::array(std::span<const float>(vx), mv::Shape{192, 64});
  const auto w = mv::array(std::span<const float>(vw), mv::Shape{64, 128});
  const auto b = mv::array(std::span<const float>(vb), mv::Shape{128});
  std::vector<mv::Shape> shapes;
  const auto f = mv::shard_map(
      [&](const Array& x, const Array& w, const Array& b) {
        shapes = {x.shape(), w.shape(), b.shape()};
        return mv::matmul(x, w) + b;
      },
      mesh, {P("i", mv::None), P(mv::None, "j"), P("j")}, P("i", "j"));
  const auto got = f(x, w, b).to_host<float>();
  EXPECT_EQ(shapes, (std::vector<mv::Shape>{{48, 64}, {64, 64}, {64}}));
  const auto want = (mv::matmul(x, w) + b).to_host<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f);
}

TEST(ShardMap, ParallelNormalizeWithPmean) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto vx = random_floats(16 * 64, 4);
  const auto x = mv::array(std::span<const float>(vx), mv::Shape{16, 64});
  const auto normalize = mv::shard_map(
      [](const Array& x) {
        const auto mean = mv::pmean(mv::mean(x, {1}, true), "j");
        const auto var = mv::pmean(mv::mean(mv::square(x - mean), {1}, true), "j");
        return (x - mean) * mv::rsqrt(var + 1e-6f);
      },
      mesh, {P("i", "j")}, P("i", "j"));
  const auto y = normalize(x).to_host<float>();
  for (int r = 0; r < 16; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 64; ++c) m += y[r * 64 + c];
    m /= 64;
    for (int c = 0; c < 64; ++c) v += (y[r * 64 + c] - m) * (y[r * 64 + c] - m);
    EXPECT_NEAR(m, 0, 1e-5);
    EXPECT_NEAR(std::sqrt(v / 64), 1, 1e-3);
  }
}

TEST(ShardMap, AllGatherWeights) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto vx = random_floats(32 * 64, 5), vw = random_floats(64 * 128, 6);
  const auto x = mv::array(std::span<const float>(vx), mv::Shape{32, 64});
  const auto w = mv::array(std::span<const float>(vw), mv::Shape{64, 128});
  mv::Shape local, gathered;
  const auto f = mv::shard_map(
      [&](const Array& x, const Array& w) {
        local = w.shape();
        const auto full = mv::all_gather(w, "i", 0, true);
        gathered = full.shape();
        return mv::matmul(x, full);
      },
      mesh, {P("i", mv::None), P("i", mv::None)}, P("i", mv::None));
  const auto got = f(x, w).to_host<float>();
  EXPECT_EQ(local, (mv::Shape{16, 128}));
  EXPECT_EQ(gathered, (mv::Shape{64, 128}));
  const auto want = mv::matmul(x, w).to_host<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f);
  // Untiled: a new leading axis of the group size.
  const auto g = mv::shard_map([](const Array& v) { return mv::all_gather(v, "i"); }, mesh, {P("i")}, P());
  const auto r = g(mv::arange(8));
  EXPECT_EQ(r.shape(), (mv::Shape{4, 2}));
  EXPECT_EQ(r.to_host<int32_t>(), mv::arange(8).to_host<int32_t>());
}

TEST(ShardMap, PsumScatterColumns) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto x = mv::array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2}, mv::Shape{4, 4});
  // Device i receives the sum of column i: the local (1, 4) piece scatters (and drops) dimension 1.
  const auto f = mv::shard_map([](const Array& x) { return mv::psum_scatter(x, "i", 1); }, mesh, {P("i", mv::None)}, P("i"));
  const auto r = f(x);
  EXPECT_EQ(r.shape(), mv::Shape{4});
  EXPECT_EQ(r.to_host<int32_t>(), (std::vector<int32_t>{22, 20, 12, 17}));
  const auto t = mv::shard_map([](const Array& x) { return mv::psum_scatter(x, "i", 1, true); }, mesh, {P("i", mv::None)},
                               P(mv::None, "i"))(x);
  EXPECT_EQ(t.shape(), (mv::Shape{1, 4}));
  EXPECT_EQ(t.to_host<int32_t>(), (std::vector<int32_t>{22, 20, 12, 17}));
}

TEST(ShardMap, PpermuteRingAndAxisIndex) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const std::vector<std::pair<int, int>> ring = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  const auto shift = mv::shard_map([&](const Array& x) { return mv::ppermute(x, "i", ring); }, mesh, {P("i")}, P("i"));
  EXPECT_EQ(shift(mv::arange(4)).to_host<int32_t>(), (std::vector<int32_t>{3, 0, 1, 2}));
  const auto partial = mv::shard_map([](const Array& x) { return mv::ppermute(x, "i", {{0, 1}}); }, mesh, {P("i")}, P("i"));
  EXPECT_EQ(partial(mv::arange(1, 5)).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 0, 0}));  // no sender: zeros
  const auto index = [&](const char* axis) {
    return mv::shard_map([&](const Array&) { return mv::reshape(mv::axis_index(axis), {1}); }, mesh, {P()}, P({"i", "j"}))(
        mv::zeros({1}));
  };
  EXPECT_EQ(index("i").to_host<int32_t>(), (std::vector<int32_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(index("j").to_host<int32_t>(), (std::vector<int32_t>{0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(ShardMap, SliceAndAverageOverTwoAxes) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto f = mv::shard_map(
      [](const Array& x) { return mv::pmean(mv::slice(x, {0}, {4}), {"x", "y"}); }, mesh, {P({"x", "y"})}, P(mv::None));
  const auto r = f(mv::arange(512));
  EXPECT_EQ(r.shape(), mv::Shape{4});
  EXPECT_EQ(r.to_host<float>(), (std::vector<float>{224, 225, 226, 227}));
}

TEST(ShardMap, CollectiveOverOneAxisRunsPerGroup) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  // psum over 'x' on a (2, 4) mesh: 4 independent pairs.
  const auto f = mv::shard_map([](const Array& v) { return mv::psum(v, "x"); }, mesh, {P({"x", "y"})}, P("y"));
  EXPECT_EQ(f(mv::arange(8)).to_host<int32_t>(), (std::vector<int32_t>{4, 6, 8, 10}));
  const auto m = mv::shard_map([](const Array& v) { return mv::pmax(v, "y"); }, mesh, {P({"x", "y"})}, P("x"));
  EXPECT_EQ(m(mv::arange(8)).to_host<int32_t>(), (std::vector<int32_t>{3, 7}));
  const auto b = mv::shard_map([](const Array& v) { return mv::pbroadcast(v, "y", 2); }, mesh, {P({"x", "y"})}, P("x"));
  EXPECT_EQ(b(mv::arange(8)).to_host<int32_t>(), (std::vector<int32_t>{2, 6}));
}

TEST(ShardMap, AllToAllMatchesReference) {
  const auto mesh = mv::make_mesh({4}, {"e"}, {}, {0, 1, 2, 3});
  // Each device holds [4 chunks, 3]: chunk j goes to device j, stacked by source along axis 0.
  const auto x = mv::arange(4 * 4 * 3).reshape({16, 3});
  const auto f = mv::shard_map([](const Array& v) { return mv::all_to_all(v, "e", 0, 0, true); }, mesh, {P("e")}, P("e"));
  const auto got = f(x).to_host<int32_t>();
  const auto host = x.to_host<int32_t>();
  // Device d, row (s * 1 + 0) of its output = device s's chunk d.
  for (int d = 0; d < 4; ++d)
    for (int s = 0; s < 4; ++s)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(got[(d * 4 + s) * 3 + c], host[(s * 4 + d) * 3 + c]);
  // Untiled: split axis of the group size disappears, a new axis appears at concat_axis.
  const auto u = mv::shard_map([](const Array& v) { return mv::all_to_all(mv::reshape(v, {4, 3}), "e", 0, 1); }, mesh,
                               {P("e")}, P("e"));
  const auto ur = u(x);
  EXPECT_EQ(ur.shape(), (mv::Shape{12, 4}));
  const auto uv = ur.to_host<int32_t>();
  for (int d = 0; d < 4; ++d)
    for (int c = 0; c < 3; ++c)
      for (int s = 0; s < 4; ++s) ASSERT_EQ(uv[(d * 3 + c) * 4 + s], host[(s * 4 + d) * 3 + c]);
}

TEST(ShardMap, RingAndOneShotAgree) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto v = random_floats(8 * 100000, 7);
  const auto x = mv::array(std::span<const float>(v), mv::Shape{8 * 100000});
  auto run = [&](const char* algo) {
    return with_algorithm(algo, [&] {
      const auto s = mv::shard_map([](const Array& a) { return mv::psum(a, "x"); }, mesh, {P("x")}, P())(x).to_host<float>();
      const auto g = mv::shard_map([](const Array& a) { return mv::all_gather(a, "x", 0, true); }, mesh, {P("x")}, P())(x)
                         .to_host<float>();
      const auto r = mv::shard_map([](const Array& a) { return mv::psum_scatter(a, "x", 0, true); }, mesh, {P()}, P("x"))(x)
                         .to_host<float>();
      return std::make_tuple(s, g, r);
    });
  };
  const auto [s1, g1, r1] = run("one_shot");
  const auto [s2, g2, r2] = run("ring");
  for (size_t i = 0; i < s1.size(); ++i) {
    double want = 0;
    for (int d = 0; d < 8; ++d) want += v[d * 100000 + i];
    ASSERT_NEAR(s1[i], want, 1e-5);
    ASSERT_NEAR(s2[i], want, 1e-5);
  }
  EXPECT_EQ(g1, v);
  EXPECT_EQ(g2, v);
  for (size_t i = 0; i < r1.size(); ++i) {
    ASSERT_FLOAT_EQ(r1[i], 8 * v[i]);
    ASSERT_FLOAT_EQ(r2[i], 8 * v[i]);
  }
}

TEST(ShardMapErrors, ClearMessages) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const mv::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto claim = message([&] { mv::shard_map([](const Array& x) { return x; }, mesh, {P("x")}, P())(mv::arange(16)); });
  EXPECT_NE(claim.find("replicated over mesh axis 'x'"), std::string::npos) << claim;
  EXPECT_NE(claim.find("output 0"), std::string::npos) << claim;
  const auto count = message([&] { mv::shard_map([](const Array& x) { return x; }, mesh, {P("x"), P()}, P("x"))(mv::arange(16)); });
  EXPECT_NE(count.find("2 in_specs for 1 arguments"), std::string::npos) << count;
  const auto unbound = message([] { mv::psum(mv::arange(4), "x"); });
  EXPECT_NE(unbound.find("not bound"), std::string::npos) << unbound;
  const auto axis = message([&] { mv::shard_map([](const Array& x) { return mv::psum(x, "z"); }, mesh, {P("x")}, P("x"))(mv::arange(16)); });
  EXPECT_NE(axis.find("'z'"), std::string::npos) << axis;
  const auto divide = message([&] { mv::shard_map([](const Array& x) { return x; }, mesh, {P("x")}, P("x"))(mv::arange(12)); });
  EXPECT_NE(divide.find("not divisible by 8"), std::string::npos) << divide;
  const auto perm = message([&] { mv::shard_map([](const Array& x) { return mv::ppermute(x, "x", {{0, 1}, {2, 1}}); }, mesh, {P("x")}, P("x"))(mv::arange(16)); });
  EXPECT_NE(perm.find("twice"), std::string::npos) << perm;
  const auto read = message([&] { mv::shard_map([](const Array& x) { x.to_host<int32_t>(); return x; }, mesh, {P("x")}, P("x"))(mv::arange(16)); });
  EXPECT_NE(read.find("per-device value"), std::string::npos) << read;
  // Still usable afterwards.
  EXPECT_EQ(mv::shard_map([](const Array& x) { return mv::psum(x, "x"); }, mesh, {P("x")}, P())(mv::ones({8}, mv::DType::int32))
                .to_host<int32_t>(),
            std::vector<int32_t>{8});
}

TEST(ShardMap, OutSpecsMayEndInNones) {
  // The 003 tutorial writes P('i', None) for a rank-1 result.
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto x = mv::array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2}, mv::Shape{4, 4});
  const auto f = mv::shard_map([](const Array& v) { return mv::psum_scatter(v, "i", 1); }, mesh, {P("i", mv::None)},
                               P("i", mv::None));
  EXPECT_EQ(f(x).to_host<int32_t>(), (std::vector<int32_t>{22, 20, 12, 17}));
}

// Reductions and data-movement ops against plain CPU references, sharded and not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

}  // namespace

TEST(Reduce, SumsOverEveryAxisSetMatchDoubleReference) {
  const mv::Shape shape{5, 7, 33};
  const auto v = random_floats(5 * 7 * 33, 1);
  const auto x = host_array(v, shape);
  for (const std::vector<int>& axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {-1}, {0, 2}, {0, 1}, {1, 2}}) {
    std::vector<bool> red(3, axes.empty());
    for (int a : axes) red[a < 0 ? a + 3 : a] = true;
    mv::Shape out_shape;
    for (int d = 0; d < 3; ++d)
      if (!red[d]) out_shape.push_back(shape[d]);
    std::vector<double> want(mv::shape_size(out_shape), 0.0);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j)
        for (int k = 0; k < 33; ++k) {
          int64_t o = 0;
          const int64_t idx[3] = {i, j, k};
          for (int d = 0; d < 3; ++d)
            if (!red[d]) o = o * shape[d] + idx[d];
          want[o] += v[(i * 7 + j) * 33 + k];
        }
    const auto s = mv::sum(x, axes);
    ASSERT_EQ(s.shape(), out_shape);
    const auto got = s.to_host<float>();
    for (size_t o = 0; o < want.size(); ++o) ASSERT_NEAR(got[o], want[o], 1e-4) << "axes size " << axes.size();
    EXPECT_EQ(mv::sum(x, axes, true).ndim(), 3u);
  }
}

TEST(Reduce, LongSumsArePairwiseAccurate) {
  // 16M ones plus a small value: a serial float32 sum stalls at 2^24.
  const int64_t n = 1 << 24;
  const auto x = mv::ones({n + 8});
  EXPECT_EQ(mv::sum(x).to_host<float>()[0], static_cast<float>(n + 8));
  const auto v = random_floats(3'000'001, 2);
  double want = 0;
  for (const float f : v) want += f;
  EXPECT_NEAR(mv::sum(host_array(v, {3'000'001})).to_host<float>()[0], want, 1e-3);
}

TEST(Reduce, MaxMinArgWithNansAndTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto x = mv::array({1.f, 5.f, 5.f, -2.f, nan, 7.f, 0.f, -9.f, -9.f}, mv::Shape{3, 3});
  // Rows [1 5 5], [-2 nan 7], [0 -9 -9]: ties give the first index, NaN wins as in numpy.
  EXPECT_EQ(mv::argmax(x, 1).to_host<int32_t>(), (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(mv::argmin(x, 1).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 1}));
  const auto mx = mv::max(x, {1}).to_host<float>();
  EXPECT_EQ(mx[0], 5.f);
  EXPECT_TRUE(std::isnan(mx[1]));
  const auto mn = mv::min(x, {0}).to_host<float>();
  EXPECT_EQ(mn[0], -2.f);
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_EQ(mn[2], -9.f);
  const auto ints = mv::arange(-50, 50).reshape({4, 25});
  EXPECT_EQ(mv::max(ints).to_host<int32_t>()[0], 49);
  EXPECT_EQ(mv::sum(ints, {1}).to_host<int32_t>(), (std::vector<int32_t>{-950, -325, 300, 925}));
  EXPECT_EQ(mv::argmax(mv::arange(10000.f), 0).to_host<int32_t>()[0], 9999);  // multi-pass
  EXPECT_FLOAT_EQ(mv::mean(mv::arange(8.f)).to_host<float>()[0], 3.5f);
  EXPECT_THROW(mv::max(mv::zeros({0, 3}), {0}), mv::Error);
  EXPECT_THROW(mv::sum(x, {2}), mv::Error);
  EXPECT_EQ(mv::sum(mv::zeros({0, 3}), {0}).to_host<float>(), std::vector<float>(3, 0.f));
}

TEST(Reduce, ContractExampleOfTheTutorial) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto xs = mv::device_put(mv::arange(32.f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto r = mv::sum(xs, {0});
  EXPECT_EQ(r.to_host<float>(), (std::vector<float>{48, 52, 56, 60, 64, 68, 72, 76}));
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("y"))));
  // Reduction over an unsplit dimension stays on each device's piece.
  EXPECT_EQ(mv::sum(xs, {1}).to_host<float>(), (std::vector<float>{28, 92, 156, 220}));
}

TEST(Shape, TransposeAnyPermutationKeepsShardingPieces) {
  const auto v = random_floats(2 * 3 * 4 * 5, 3);
  const auto x = host_array(v, {2, 3, 4, 5});
  const std::vector<int> perm{2, 0, 3, 1};
  const auto t = mv::transpose(x, perm).to_host<float>();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d) ASSERT_EQ(t[((c * 2 + a) * 5 + d) * 3 + b], v[((a * 3 + b) * 4 + c) * 5 + d]);
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto s = mv::device_put(mv::arange(64).reshape({8, 8}), mv::NamedSharding(mesh, P("a", "b")));
  const auto st = mv::transpose(s);
  EXPECT_EQ(st.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("b", "a"))));
  const auto sv = st.to_host<int32_t>();
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) ASSERT_EQ(sv[i * 8 + j], j * 8 + i);
  EXPECT_THROW(mv::transpose(x, {0, 0, 1, 2}), mv::Error);
}

TEST(Shape, SliceConcatPadRollBroadcast) {
  const auto x = mv::arange(24).reshape({4, 6});
  EXPECT_EQ(mv::slice(x, {1, 0}, {3, 6}, {1, 2}).to_host<int32_t>(), (std::vector<int32_t>{6, 8, 10, 12, 14, 16}));
  // Starts clamp so the slice fits, as in JAX: (3, 4) becomes (2, 4).
  EXPECT_EQ(mv::dynamic_slice(x, {3, 4}, {2, 2}).to_host<int32_t>(), (std::vector<int32_t>{16, 17, 22, 23}));
  const auto upd = mv::dynamic_update_slice(x, mv::full({1, 2}, int32_t{-1}), {0, 5});
  EXPECT_EQ(upd.to_host<int32_t>()[4], -1);
  EXPECT_EQ(upd.to_host<int32_t>()[5], -1);
  const auto c = mv::concatenate({mv::arange(3), mv::arange(2)}, 0);
  EXPECT_EQ(c.to_host<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1}));
  const auto c2 = mv::concatenate({x, x}, 1);
  EXPECT_EQ(c2.shape(), (mv::Shape{4, 12}));
  EXPECT_EQ(c2.to_host<int32_t>()[6], 0);
  const auto p = mv::pad(mv::arange(4.f).reshape({2, 2}), {{1, 0}, {0, 2}}, -1.f);
  EXPECT_EQ(p.to_host<float>(), (std::vector<float>{-1, -1, -1, -1, 0, 1, -1, -1, 2, 3, -1, -1}));
  EXPECT_EQ(mv::roll(mv::arange(5), 2, 0).to_host<int32_t>(), (std::vector<int32_t>{3, 4, 0, 1, 2}));
  EXPECT_EQ(mv::roll(mv::arange(5), -1, 0).to_host<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 0}));
  const auto b = mv::broadcast_to(mv::arange(3), {2, 3});
  EXPECT_EQ(b.to_host<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_THROW(mv::broadcast_to(mv::arange(3), {2, 4}), mv::Error);
  EXPECT_THROW(mv::slice(x, {0, 0}, {5, 6}), mv::Error);
  EXPECT_THROW(mv::concatenate({x, mv::arange(3)}, 0), mv::Error);
}

TEST(Shape, TakeOneHotArgsort) {
  const auto x = mv::arange(12.f).reshape({3, 4});
  const auto idx = mv::array({2, 0, 2, 7}, mv::Shape{2, 2});  // 7 clamps to 3
  const auto t = mv::take(x, idx, 1, mv::TakeMode::clip);
  EXPECT_EQ(t.shape(), (mv::Shape{3, 2, 2}));
  EXPECT_EQ(t.to_host<float>(), (std::vector<float>{2, 0, 2, 3, 6, 4, 6, 7, 10, 8, 10, 11}));
  const auto oh = mv::one_hot(mv::array({0, 2, 1}), 3);
  EXPECT_EQ(oh.to_host<float>(), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 1, 0}));
  const auto keys = mv::array({3, 1, 2, 1, 3, 0}, mv::Shape{2, 3});
  EXPECT_EQ(mv::argsort(keys, 1).to_host<int32_t>(), (std::vector<int32_t>{1, 2, 0, 2, 0, 1}));
  EXPECT_EQ(mv::argsort(keys, 0).to_host<int32_t>(), (std::vector<int32_t>{1, 0, 1, 0, 1, 0}));
  // Stable, NaN last, for a longer random row.
  std::vector<float> v = random_floats(1000, 4);
  for (int i = 0; i < 1000; i += 7) v[i] = std::round(v[i]);
  v[10] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int32_t> want(1000);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int a, int b) {
    if (std::isnan(v[a])) return false;
    if (std::isnan(v[b])) return true;
    return v[a] < v[b];
  });
  EXPECT_EQ(mv::argsort(host_array(v, {1000})).to_host<int32_t>(), want);
}

TEST(Shape, OpsOnShardedArraysGiveTheUnshardedValues) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = mv::device_put(mv::arange(64.f).reshape({16, 4}), mv::NamedSharding(mesh, P("x")));
  const auto local = mv::arange(64.f).reshape({16, 4});
  EXPECT_EQ(mv::slice(x, {2, 1}, {10, 3}).to_host<float>(), mv::slice(local, {2, 1}, {10, 3}).to_host<float>());
  EXPECT_EQ(mv::roll(x, 3, 0).to_host<float>(), mv::roll(local, 3, 0).to_host<float>());
  EXPECT_EQ(mv::sum(x, {0}).to_host<float>(), mv::sum(local, {0}).to_host<float>());
  EXPECT_EQ((mv::roll(x, 1, 0) - x).to_host<float>()[4], -4.f);
}

TEST(Shape, StackVarStdAndDeviceDynamicSlice) {
  const auto s = mv::stack({mv::arange(3), mv::arange(3) * 10}, 1);
  EXPECT_EQ(s.shape(), (mv::Shape{3, 2}));
  EXPECT_EQ(s.to_host<int32_t>(), (std::vector<int32_t>{0, 0, 1, 10, 2, 20}));
  const auto v = mv::array({1.f, 2.f, 3.f, 4.f});
  EXPECT_FLOAT_EQ(mv::var(v).to_host<float>()[0], 1.25f);
  EXPECT_FLOAT_EQ(mv::std(v).to_host<float>()[0], std::sqrt(1.25f));
  EXPECT_EQ(mv::power(mv::array({2.f, 0.1f}), 0.5).to_host<float>(), (std::vector<float>{std::sqrt(2.f), std::sqrt(0.1f)}));
  // Starts computed on the device, negative ones from the end (-2 is 4), clamped so the slice fits.
  const auto x = mv::arange(24).reshape({4, 6});
  const auto d = mv::dynamic_slice(x, {mv::scalar(int32_t{3}), mv::scalar(int32_t{-2})}, {2, 3});
  EXPECT_EQ(d.to_host<int32_t>(), (std::vector<int32_t>{15, 16, 17, 21, 22, 23}));
  const auto e = mv::dynamic_slice(x, {mv::scalar(int32_t{-9}), mv::scalar(int32_t{-5})}, {2, 3});
  EXPECT_EQ(e.to_host<int32_t>(), (std::vector<int32_t>{1, 2, 3, 7, 8, 9}));
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto per_device = mv::shard_map(
      [](const mv::Array& a) { return mv::dynamic_slice(a, {mv::axis_index("x") % 2}, {1}); }, mesh, {P("x")}, P("x"));
  EXPECT_EQ(per_device(mv::arange(16)).to_host<int32_t>(), (std::vector<int32_t>{0, 3, 4, 7, 8, 11, 12, 15}));
}

TEST(Shape, PiecesBeyondOneBindingTranspose) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  // A 6144 x 6144 int32 transpose on one device: a 144 MiB piece, past lavapipe's 128 MiB
  // storage binding, is copied through windows of it (tests/test_large_buffers.cpp has more).
  const int64_t n = 6144;
  const auto big = mv::arange(static_cast<int32_t>(n * n)).reshape({n, n});
  const auto t = mv::transpose(big);
  EXPECT_EQ(t.shape(), (mv::Shape{n, n}));
  const auto host = t.to_host<int32_t>();
  for (const int64_t i : {int64_t{0}, int64_t{1}, n, n * n / 2 + 77, n * n - 2, n * n - 1})
    EXPECT_EQ(host[i], i % n * n + i / n) << i;
  // Sharded over 8 devices each piece fits one binding; the results agree.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto sharded = mv::transpose(mv::device_put(big, mv::NamedSharding(mesh, P("x"))));
  EXPECT_EQ(sharded.sharding(), mv::Sharding(mv::NamedSharding(mesh, P(mv::None, "x"))));
  EXPECT_EQ(sharded.to_host<int32_t>(), host);
  EXPECT_EQ(mv::sum(sharded, {0}).shape(), mv::Shape{n});
}

// Layout changes that keep the minor axis (attention's heads split and merged, slices of whole
// rows) move vec4s where the rows and offsets allow it, elements otherwise: every permutation of
// the leading axes, minor axes of 4, 8, 32 and 6, slices starting at columns 0, 4 and 2, int32 and
// float32 and bfloat16, against a host reference.
TEST(Shape, TransposesKeepingTheMinorAxisMatchTheReference) {
  for (const int64_t minor : {32, 4, 8, 6}) {
    const mv::Shape shape{3, 5, 2, minor};
    SCOPED_TRACE("minor " + std::to_string(minor));
    const auto v = random_floats(static_cast<size_t>(mv::shape_size(shape)), 7, -5, 5);
    const auto x = host_array(v, shape);
    std::vector<int> perm{0, 1, 2};
    do {
      std::vector<int> full = perm;
      full.push_back(3);
      const auto t = mv::transpose(x, full);
      const auto got = t.to_host<float>();
      const mv::Shape& ts = t.shape();
      for (int64_t i = 0; i < mv::shape_size(ts); ++i) {
        int64_t rest = i, src = 0;
        std::vector<int64_t> at(4);
        for (int d = 3; d >= 0; --d) {
          at[static_cast<size_t>(d)] = rest % ts[static_cast<size_t>(d)];
          rest /= ts[static_cast<size_t>(d)];
        }
        std::vector<int64_t> orig(4);
        for (int d = 0; d < 4; ++d) orig[static_cast<size_t>(full[static_cast<size_t>(d)])] = at[static_cast<size_t>(d)];
        for (int d = 0; d < 4; ++d) src = src * shape[static_cast<size_t>(d)] + orig[static_cast<size_t>(d)];
        ASSERT_EQ(got[static_cast<size_t>(i)], v[static_cast<size_t>(src)]) << "element " << i;
      }
      const auto ti = mv::transpose(mv::astype(x, mv::DType::int32), full).to_host<int32_t>();
      const auto tb = mv::astype(mv::transpose(mv::astype(x, mv::DType::bfloat16), full), mv::DType::float32).to_host<float>();
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(ti[i], static_cast<int32_t>(got[i])) << "element " << i;
        ASSERT_EQ(tb[i], static_cast<float>(mv::bfloat16(got[i]))) << "element " << i;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  const auto m = mv::arange(16 * 40).reshape({16, 40});
  for (const int64_t start : {0, 4, 2}) {
    const auto s = mv::slice(m, {1, start}, {13, start + 24}).to_host<int32_t>();
    for (int64_t i = 0; i < 12; ++i)
      for (int64_t j = 0; j < 24; ++j) ASSERT_EQ(s[static_cast<size_t>(i * 24 + j)], (i + 1) * 40 + start + j);
  }
}

// Takes whose slices are whole vec4s (inner extents 4, 8, 12) move vec4s; with 3 and 6 they move
// elements: every mode, negative and out-of-range indices, against numpy.take's rules.
TEST(Shape, TakeOfWholeVec4SlicesMatchesNumpy) {
  const std::vector<int32_t> ids{0, 2, -1, 5, -7, 1, 3, 9};
  for (const int64_t inner : {4, 8, 12, 3, 6}) {
    for (const int axis : {0, 1}) {
      SCOPED_TRACE("inner " + std::to_string(inner) + " axis " + std::to_string(axis));
      const mv::Shape shape = axis == 0 ? mv::Shape{5, inner} : mv::Shape{3, 5, inner};
      const int64_t outer = axis == 0 ? 1 : 3, n = 5;
      const auto v = random_floats(static_cast<size_t>(mv::shape_size(shape)), 9, -9, 9);
      const auto x = host_array(v, shape);
      for (const mv::TakeMode mode : {mv::TakeMode::fill, mv::TakeMode::clip, mv::TakeMode::wrap}) {
        const auto got = mv::take(x, mv::array(ids), axis, mode, -2.5f).to_host<float>();
        ASSERT_EQ(got.size(), static_cast<size_t>(outer) * ids.size() * static_cast<size_t>(inner));
        size_t at = 0;
        for (int64_t o = 0; o < outer; ++o)
          for (const int32_t id : ids)
            for (int64_t e = 0; e < inner; ++e, ++at) {
              int64_t k = id;
              float want;
              if (mode == mv::TakeMode::clip) {
                k = std::clamp<int64_t>(k, 0, n - 1);
              } else if (mode == mv::TakeMode::wrap) {
                k = ((k % n) + n) % n;
              } else if (k < 0) {
                k += n;
              }
              if (k < 0 || k >= n)
                want = -2.5f;
              else
                want = v[static_cast<size_t>((o * n + k) * inner + e)];
              ASSERT_EQ(got[at], want) << "mode " << static_cast<int>(mode) << " element " << at;
            }
      }
    }
  }
}

// More of jax.numpy / lax / random (issue 29, item 1): take_along_axis, sort, top_k, gather and
// x[ids], at_set / at_add, prod, bernoulli, categorical, truncated_normal and nn::dropout. Values
// against a host reference with numpy's semantics, dtypes, odd sizes, sharded inputs under jit,
// gradients by finite differences, errors, and statistics of the random ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Array ints(const std::vector<int32_t>& v, mv::Shape shape) {
  return mv::array(std::span<const int32_t>(v), std::move(shape));
}
Array ints(const std::vector<int32_t>& v) { return ints(v, {static_cast<int64_t>(v.size())}); }

// Equal as floats, NaN equal to NaN.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": " << got[i];
    else
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
  }
}


TEST(JaxMoreOps, TakeAlongAxisAsNumpy) {
  // x (3, 5), indices (3, 4) along axis 1, negatives from the end, 7 and -6 out of range (fill).
  const auto x = random_floats(15, 1);
  const std::vector<int32_t> idx{0, 4, -1, 2, 3, 3, 7, -5, 1, -6, 0, 4};
  const auto got = mv::take_along_axis(host_array(x, {3, 5}), ints(idx, {3, 4}), 1);
  EXPECT_EQ(got.shape(), (mv::Shape{3, 4}));
  std::vector<float> want;
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 4; ++j) {
      int k = idx[static_cast<size_t>(r * 4 + j)];
      if (k < 0) k += 5;
      want.push_back(k < 0 || k >= 5 ? kNaN : x[static_cast<size_t>(r * 5 + k)]);
    }
  expect_same(got.to_host<float>(), want, "axis 1");
  // Along axis 0 of an odd shape, int32, with indices broadcasting along axis 1 (shape (2, 1)).
  const Array xi = mv::arange(21).reshape(3, 7);
  const Array r0 = mv::take_along_axis(xi, ints({2, 0}, {2, 1}), 0);
  EXPECT_EQ(r0.dtype(), mv::DType::int32);
  EXPECT_EQ(r0.shape(), (mv::Shape{2, 7}));
  std::vector<int32_t> want0;
  for (const int row : {2, 0})
    for (int c = 0; c < 7; ++c) want0.push_back(row * 7 + c);
  EXPECT_EQ(r0.to_host<int32_t>(), want0);
  // x broadcasting against indices: x (1, 3) along axis 1 with indices (2, 2).
  const Array rb = mv::take_along_axis(host_array({10.f, 20.f, 30.f}, {1, 3}), ints({2, 0, 1, 1}, {2, 2}), 1);
  EXPECT_EQ(rb.shape(), (mv::Shape{2, 2}));
  EXPECT_EQ(rb.to_host<float>(), (std::vector<float>{30, 10, 20, 20}));
  // int32 fill is INT32_MIN, as jnp.take's.
  EXPECT_EQ(mv::take_along_axis(mv::arange(3), ints({5}), 0).to_host<int32_t>()[0],
            std::numeric_limits<int32_t>::min());
  // 3-D, the middle axis.
  const Array x3 = mv::arange(2 * 3 * 2).reshape(2, 3, 2);
  const Array r3 = mv::take_along_axis(x3, ints({2, 1, 0, 0}, {2, 1, 2}), 1);
  EXPECT_EQ(r3.to_host<int32_t>(), (std::vector<int32_t>{4, 3, 6, 7}));
  expect_gradient([&](const Array& v) { return mv::take_along_axis(v.reshape(2, 3), ints({2, 2, 0, 1}, {2, 2}), 1); },
                  random_floats(6, 2), "take_along_axis");
  expect_error([] { (void)mv::take_along_axis(mv::ones({3, 2}), ints({0}), 1); },
               "give indices as many dimensions as x");
  expect_error([] { (void)mv::take_along_axis(mv::ones({3}), mv::ones({3}), 0); }, "indices must be int32");
  expect_error([] { (void)mv::take_along_axis(mv::ones({3, 2}), ints({0, 0, 0}, {3, 1}), 2); }, "out of range");
  expect_error([] { (void)mv::take_along_axis(mv::ones({3, 2}), ints({0, 0}, {2, 1}), 1); }, "do not broadcast");
}

TEST(JaxMoreOps, SortIsStableWithNaNLast) {
  for (const int n : {1, 7, 13}) {
    auto x = random_floats(static_cast<size_t>(3 * n), static_cast<uint32_t>(n));
    if (n > 1) x[1] = kNaN;
    const auto got = mv::sort(host_array(x, {3, n})).to_host<float>();
    std::vector<float> want;
    for (int r = 0; r < 3; ++r) {
      std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
      std::stable_sort(row.begin(), row.end(), [](float a, float b) {
        return std::isnan(b) ? !std::isnan(a) : a < b;
      });
      want.insert(want.end(), row.begin(), row.end());
    }
    expect_same(got, want, "sort");
  }
  // Along axis 0, int32.
  const Array xi = ints({5, -1, 3, 2, 9, -7}, {3, 2});
  EXPECT_EQ(mv::sort(xi, 0).to_host<int32_t>(), (std::vector<int32_t>{3, -7, 5, -1, 9, 2}));
  EXPECT_EQ(mv::sort(ints({3, 1, 2})).dtype(), mv::DType::int32);
  EXPECT_EQ(mv::sort(mv::scalar(2.f)).shape(), (mv::Shape{}));
  expect_gradient([](const Array& v) { return mv::sort(v.reshape(2, 4), -1); }, random_floats(8, 3), "sort");
  expect_error([] { (void)mv::sort(mv::ones({2}), 1); }, "out of range");
  // uint32 sorts as its values (in int64): random bits in order.
  const mv::Array bits = mv::random_bits(mv::random_key(0), {3});
  std::vector<uint32_t> want_bits = bits.to_host<uint32_t>();
  std::sort(want_bits.begin(), want_bits.end());
  EXPECT_EQ(mv::sort(bits).to_host<uint32_t>(), want_bits);
}

TEST(JaxMoreOps, TopKLargestFirstTiesLowerIndexFirst) {
  const std::vector<float> x{1, 3, kNaN, 3, -2, 5, 3, 0, 5};  // odd length, ties and a NaN
  const auto [v, i] = mv::lax::top_k(host_array(x), 5);
  EXPECT_EQ(i.dtype(), mv::DType::int32);
  EXPECT_EQ(i.to_host<int32_t>(), (std::vector<int32_t>{2, 5, 8, 1, 3}));
  expect_same(v.to_host<float>(), {kNaN, 5, 5, 3, 3}, "top_k values");
  // Batched, against a host stable sort by descending value; int32.
  const auto y = random_floats(3 * 11, 4, -3.0f, 3.0f);
  std::vector<int32_t> yi;
  for (const float f : y) yi.push_back(static_cast<int32_t>(std::floor(f)));  // many ties
  const auto [vi, ii] = mv::lax::top_k(ints(yi, {3, 11}), 4);
  EXPECT_EQ(vi.shape(), (mv::Shape{3, 4}));
  std::vector<int32_t> want_v, want_i;
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> order(11);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return yi[static_cast<size_t>(r * 11 + a)] > yi[static_cast<size_t>(r * 11 + b)]; });
    for (int k = 0; k < 4; ++k) {
      want_i.push_back(order[static_cast<size_t>(k)]);
      want_v.push_back(yi[static_cast<size_t>(r * 11 + order[static_cast<size_t>(k)])]);
    }
  }
  EXPECT_EQ(ii.to_host<int32_t>(), want_i);
  EXPECT_EQ(vi.to_host<int32_t>(), want_v);
  EXPECT_EQ(mv::lax::top_k(host_array(x), 0).first.shape(), (mv::Shape{0}));
  expect_gradient([](const Array& t) { return mv::lax::top_k(t.reshape(2, 4), 2).first; },
                  random_floats(8, 5), "top_k");
  expect_error([&] { (void)mv::lax::top_k(host_array(x), 10); }, "give k in [0, 9]");
  expect_error([] { (void)mv::lax::top_k(mv::scalar(1.f), 1); }, "0-d");
}

TEST(JaxMoreOps, GatherAsJaxIndexing) {
  const auto x = random_floats(5 * 3, 6);
  const Array a = host_array(x, {5, 3});
  const Array ids = ints({4, -1, 0, 9, -7, 2}, {2, 3});  // 9 and -7 clamp, as JAX's x[ids]
  const Array g = a[ids];
  EXPECT_EQ(g.shape(), (mv::Shape{2, 3, 3}));
  std::vector<float> want;
  for (const int k : {4, 4, 0, 4, 0, 2})
    for (int c = 0; c < 3; ++c) want.push_back(x[static_cast<size_t>(k * 3 + c)]);
  EXPECT_EQ(g.to_host<float>(), want);
  EXPECT_EQ(mv::gather(a, ids).to_host<float>(), want);
  // The integer index still works, and a 0-d index array gives the row's shape.
  EXPECT_EQ(a[1].shape(), (mv::Shape{3}));
  EXPECT_EQ(a[mv::scalar(int32_t{1})].to_host<float>(), a[1].to_host<float>());
  EXPECT_EQ(mv::arange(7)[ints({6, 0})].to_host<int32_t>(), (std::vector<int32_t>{6, 0}));
  expect_gradient([&](const Array& v) { return v.reshape(4, 2)[ints({3, 3, 0})]; }, random_floats(8, 7), "x[ids]");
  expect_error([&] { (void)a[mv::arange(5) > 2]; }, "boolean mask indexing is not supported");
  expect_error([&] { (void)a[mv::ones({2})]; }, "ids must be int32");
  expect_error([] { (void)mv::scalar(1.f)[ints({0})]; }, "0-d");
}

TEST(JaxMoreOps, AtSetAndAtAddAsJax) {
  const auto x = random_floats(5 * 3, 8);
  const Array a = host_array(x, {5, 3});
  const Array ids = ints({1, -1, 1, 7, 3});  // duplicate 1, -1 is row 4, 7 dropped
  const auto v = random_floats(5 * 3, 9);
  const Array va = host_array(v, {5, 3});
  std::vector<float> set = x, add = x;
  const std::vector<int> rows{1, 4, 1, -1, 3};
  for (size_t m = 0; m < rows.size(); ++m) {
    if (rows[m] < 0) continue;
    for (int c = 0; c < 3; ++c) {
      set[static_cast<size_t>(rows[m] * 3 + c)] = v[m * 3 + static_cast<size_t>(c)];  // the last wins
      add[static_cast<size_t>(rows[m] * 3 + c)] += v[m * 3 + static_cast<size_t>(c)];
    }
  }
  EXPECT_EQ(mv::at_set(a, ids, va).to_host<float>(), set);
  const auto got_add = mv::at_add(a, ids, va).to_host<float>();
  for (size_t k = 0; k < add.size(); ++k) EXPECT_FLOAT_EQ(got_add[k], add[k]) << k;
  // Scalars and broadcast rows; int32 exact; x unchanged.
  EXPECT_EQ(mv::at_set(mv::arange(6), ints({0, 5}), 9).to_host<int32_t>(), (std::vector<int32_t>{9, 1, 2, 3, 4, 9}));
  EXPECT_EQ(mv::at_add(mv::arange(7), ints({2, 2, 2, -7}), 10).to_host<int32_t>(),
            (std::vector<int32_t>{10, 1, 32, 3, 4, 5, 6}));
  const Array row = mv::at_set(mv::zeros({3, 2}), ints({1}), host_array({1.f, 2.f}, {2}));
  EXPECT_EQ(row.to_host<float>(), (std::vector<float>{0, 0, 1, 2, 0, 0}));
  EXPECT_EQ(a.to_host<float>(), x);
  // A non-finite update reaches only its own row: inf + finite, inf + -inf (NaN), NaN.
  const Array nf = mv::at_add(mv::zeros({4}), ints({0, 0, 1, 1, 2, 3}), host_array({kInf, 1.f, kInf, -kInf, kNaN, 2.f}));
  expect_same(nf.to_host<float>(), {kInf, kNaN, kNaN, 2.f}, "non-finite at_add");
  expect_same(mv::at_set(mv::zeros({3}), ints({1}), host_array({kNaN})).to_host<float>(), {0, kNaN, 0}, "NaN at_set");
  // Gradients: add sends x's cotangent through and each v row its row's; set keeps the winners'.
  expect_gradient([&](const Array& t) { return mv::at_add(t.reshape(4, 2), ints({1, 1, 3}), host_array(v, {15})[ints({0})] ); },
                  random_floats(8, 10), "at_add wrt x");
  const Array x52 = host_array(random_floats(10, 21), {5, 2});
  expect_gradient([&](const Array& t) { return mv::at_add(x52, ints({1, 1, -1, 8}), t.reshape(4, 2)); },
                  random_floats(8, 11), "at_add wrt v");
  expect_gradient([&](const Array& t) { return mv::at_set(t.reshape(4, 2), ints({1, 1, -1}), host_array(v, {15})[ints({0})]); },
                  random_floats(8, 12), "at_set wrt x");
  expect_gradient([&](const Array& t) { return mv::at_set(x52, ints({1, 1, -1, 8}), t.reshape(4, 2)); },
                  random_floats(8, 13), "at_set wrt v");
  expect_error([&] { (void)mv::at_set(a, ids, mv::ones({5, 2})); }, "v of shape (5, 2) does not broadcast to ids.shape + x.shape[1:] = (5, 3)");
  expect_error([&] { (void)mv::at_add(a, mv::ones({2}), 1.f); }, "ids must be int32");
  expect_error([] { (void)mv::at_add(mv::arange(3) > 1, ints({0}), 1); }, "bool");
  expect_error([] { (void)mv::at_set(mv::scalar(1.f), ints({0}), 1.f); }, "0-d");
}

TEST(JaxMoreOps, ProdExactlyByPairwiseProducts) {
  for (const int n : {1, 2, 5, 7, 13}) {
    const auto x = random_floats(static_cast<size_t>(3 * n), static_cast<uint32_t>(20 + n), 0.5f, 1.5f);
    const auto got = mv::prod(host_array(x, {3, n}), 1).to_host<float>();
    for (int r = 0; r < 3; ++r) {
      double p = 1;
      for (int c = 0; c < n; ++c) p *= x[static_cast<size_t>(r * n + c)];
      EXPECT_NEAR(got[static_cast<size_t>(r)], p, 4e-7 * n * std::abs(p)) << n << " row " << r;
    }
  }
  // int32 exact (wrapping as numpy's), bools as int32, zeros and signs exact, empty gives 1.
  EXPECT_EQ(mv::prod(mv::arange(1, 8)).to_host<int32_t>()[0], 5040);
  EXPECT_EQ(mv::prod(ints({65536, 65536, 3})).to_host<int32_t>()[0], 0);
  EXPECT_EQ(mv::prod(ints({-3, 5, 7})).to_host<int32_t>()[0], -105);
  const Array b = mv::prod(mv::arange(6).reshape(2, 3) > 0, 1);
  EXPECT_EQ(b.dtype(), mv::DType::int32);
  EXPECT_EQ(b.to_host<int32_t>(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(mv::prod(host_array({-2.f, 0.f, kInf})).to_host<float>()[0] != 0.f, true);  // 0 * inf: NaN
  EXPECT_EQ(mv::prod(host_array({-2.f, 0.5f, 3.f})).to_host<float>()[0], -3.f);
  EXPECT_EQ(mv::prod(mv::zeros({0})).to_host<float>(), (std::vector<float>{1.f}));
  EXPECT_EQ(mv::prod(mv::ones({2, 3, 4}), {0, 2}, true).shape(), (mv::Shape{1, 3, 1}));
  EXPECT_EQ(mv::prod(mv::ones({2, 3, 4}), {-1, 0}).shape(), (mv::Shape{3}));
  // Gradients, also where an element is 0 (exp / log could not give them).
  auto z = random_floats(6, 14, 0.5f, 1.5f);
  z[2] = 0.0f;
  expect_gradient([](const Array& t) { return mv::prod(t.reshape(2, 3), 1); }, z, "prod");
  expect_gradient([](const Array& t) { return mv::prod(t); }, random_floats(5, 15, 0.5f, 1.5f), "prod all");
  expect_error([] { (void)mv::prod(mv::ones({2}), {0, 0}); }, "given twice");
  expect_error([] { (void)mv::prod(mv::ones({2}), 1); }, "out of range");
}

TEST(JaxMoreOps, ShardedUnderJitTheyEqualTheUnshardedOnes) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = random_floats(16 * 7, 16);
  const Array host = host_array(x, {16, 7});
  const Array xs = mv::device_put(host, mv::NamedSharding(mesh, P("x")));
  std::vector<int32_t> idv;
  for (int k = 0; k < 16 * 3; ++k) idv.push_back((k * 5) % 9 - 1);
  const Array idx = ints(idv, {16, 3});
  const Array rows = ints({15, 0, 3, 3, -2});
  const Array upd = host_array(random_floats(5 * 7, 17), {5, 7});
  const auto f = [&](const Array& v) {
    return std::vector<Array>{mv::take_along_axis(v, idx, 1), mv::sort(v, 1), mv::sort(v, 0),
                              mv::lax::top_k(v, 3).first, mv::lax::top_k(v, 3).second,
                              v[rows], mv::at_set(v, rows, upd), mv::at_add(v, rows, upd),
                              mv::prod(v, 1), mv::prod(v, 0)};
  };
  const auto sharded = mv::jit(f)(xs);
  const auto plain = f(host);
  ASSERT_EQ(sharded.size(), plain.size());
  for (size_t k = 0; k < plain.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(sharded[k].shape(), plain[k].shape());
    EXPECT_EQ(sharded[k].sharding().device_ids().size(), 8u) << sharded[k].sharding().to_string();
    if (plain[k].dtype() == mv::DType::int32)
      EXPECT_EQ(sharded[k].to_host<int32_t>(), plain[k].to_host<int32_t>());
    else
      expect_same(sharded[k].to_host<float>(), plain[k].to_host<float>(), "sharded");
  }
  // Along the unsplit axis the rows stay split (take_along_axis, sort, top_k, prod), as do the
  // updates of a split axis 0 (at_set, at_add); x[rows] gathers along the split axis (whole, as
  // take), and so do sort and prod along axis 0.
  const mv::Sharding rows_split = mv::NamedSharding(mesh, P("x"));
  for (const size_t k : {0u, 1u, 3u, 4u, 6u, 7u, 8u}) EXPECT_EQ(sharded[k].sharding(), rows_split) << k;
  for (const size_t k : {2u, 5u, 9u}) EXPECT_TRUE(sharded[k].sharding().is_fully_replicated()) << k;
  // The same without jit, and with the gradient (the cotangent returns to the split rows).
  EXPECT_EQ(mv::take_along_axis(xs, idx, 1).sharding(), rows_split);
  const auto g = mv::grad([&](const Array& v) { return mv::sum(mv::lax::top_k(v, 3).first * 2.0f); })(xs);
  const auto gh = mv::grad([&](const Array& v) { return mv::sum(mv::lax::top_k(v, 3).first * 2.0f); })(host);
  EXPECT_EQ(g.to_host<float>(), gh.to_host<float>());
}

TEST(JaxMoreOps, InsideShardMapOnEachPiece) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = random_floats(16 * 5, 22);
  const Array xs = mv::device_put(host_array(x, {16, 5}), mv::NamedSharding(mesh, P("x")));
  const auto per_piece = [](const Array& v) {
    return mv::sort(v, 1) + mv::lax::top_k(v, 5).first + mv::at_add(v, ints({1, 1}), 1.0f) +
           mv::prod(v, 1, true) + mv::take_along_axis(v, ints({4, 0}, {1, 2}), 1)[ints({0})].sum();
  };
  const Array got = mv::shard_map(per_piece, mesh, {P("x")}, P("x"))(xs);
  std::vector<float> want;
  for (int d = 0; d < 8; ++d) {
    const auto piece = per_piece(host_array(std::vector<float>(x.begin() + d * 10, x.begin() + d * 10 + 10), {2, 5}))
                           .to_host<float>();
    want.insert(want.end(), piece.begin(), piece.end());
  }
  expect_same(got.to_host<float>(), want, "shard_map");
  // dropout with a key folded per device: each piece its own mask.
  const Array key = mv::random_key(1);
  const auto drop = mv::shard_map(
      [&](const Array& v) { return mv::nn::dropout(mv::fold_in(key, mv::axis_index("x")), v, 0.5f); }, mesh,
      {P("x")}, P("x"));
  const auto d = drop(xs).to_host<float>();
  for (int dev = 0; dev < 8; ++dev) {
    const Array k = mv::fold_in(key, static_cast<uint32_t>(dev));
    const auto piece = mv::nn::dropout(k, host_array(std::vector<float>(x.begin() + dev * 10, x.begin() + dev * 10 + 10), {2, 5}), 0.5f)
                           .to_host<float>();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(d[static_cast<size_t>(dev * 10 + i)], piece[static_cast<size_t>(i)]) << dev << " " << i;
  }
}

// --- jax.random ---

double mean_of(const std::vector<float>& v) {
  double s = 0;
  for (const float f : v) s += f;
  return s / static_cast<double>(v.size());
}

std::vector<int32_t> bools(const Array& b) {
  EXPECT_EQ(b.dtype(), mv::DType::bool_);
  return mv::astype(b, mv::DType::int32).to_host<int32_t>();
}

TEST(JaxMoreRandom, BernoulliIsUniformBelowP) {
  const Array key = mv::random_key(3);
  const Array b = mv::bernoulli(key, 0.3f, {20001});
  const auto v = bools(b);
  const double frac = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  EXPECT_NEAR(frac, 0.3, 0.02);
  // JAX's formula exactly, and deterministic per key.
  EXPECT_EQ(v, bools(mv::uniform(key, {20001}) < 0.3f));
  EXPECT_EQ(v, bools(mv::bernoulli(key, 0.3f, {20001})));
  EXPECT_NE(v, bools(mv::bernoulli(mv::random_key(4), 0.3f, {20001})));
  // p as an array, broadcast: column 0 never, column 1 always.
  const auto pa = bools(mv::bernoulli(key, host_array({0.f, 1.f}, {1, 2}), mv::Shape{3, 2}));
  EXPECT_EQ(pa, (std::vector<int32_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(mv::bernoulli(key).shape(), (mv::Shape{}));
  // Sharded: equal to the unsharded draw.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const Array bs = mv::bernoulli(key, 0.3f, {16, 5}, mv::NamedSharding(mesh, P("x")));
  EXPECT_EQ(bools(bs), bools(mv::bernoulli(key, 0.3f, {16, 5})));
  expect_error([&] { (void)mv::bernoulli(key, mv::ones({3}), mv::Shape{2}); }, "does not broadcast");
  expect_error([&] { (void)mv::bernoulli(key, mv::arange(3)); }, "p must be float32");
  expect_error([] { (void)mv::bernoulli(mv::ones({3}), 0.5f, {2}); }, "key");
}

TEST(JaxMoreRandom, CategoricalFollowsTheSoftmax) {
  const int n = 12000;
  const std::vector<float> probs{0.2f, 0.5f, 0.3f};
  std::vector<float> logits;
  for (int r = 0; r < n; ++r)
    for (const float p : probs) logits.push_back(std::log(p) + 1.0f);  // shifted: same softmax
  const Array key = mv::random_key(11);
  const Array s = mv::categorical(key, host_array(logits, {n, 3}));
  EXPECT_EQ(s.dtype(), mv::DType::int32);
  EXPECT_EQ(s.shape(), (mv::Shape{n}));
  const auto v = s.to_host<int32_t>();
  for (int c = 0; c < 3; ++c)
    EXPECT_NEAR(std::count(v.begin(), v.end(), c) / static_cast<double>(n), probs[static_cast<size_t>(c)], 0.02) << c;
  EXPECT_EQ(v, mv::categorical(key, host_array(logits, {n, 3})).to_host<int32_t>());
  // Along axis 0; a -inf logit is never drawn.
  const Array t = mv::categorical(key, host_array({0.f, -kInf, 0.f, 0.f, 0.f, -kInf}, {2, 3}), 0);
  EXPECT_EQ(t.shape(), (mv::Shape{3}));
  const auto tv = t.to_host<int32_t>();
  EXPECT_EQ(tv[1], 1);
  EXPECT_EQ(tv[2], 0);
  // Sharded logits under jit: the same samples.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const Array ls = mv::device_put(host_array(random_floats(16 * 5, 18), {16, 5}), mv::NamedSharding(mesh, P("x")));
  const auto draw = [&](const Array& l) { return mv::categorical(key, l); };
  EXPECT_EQ(mv::jit(draw)(ls).to_host<int32_t>(), draw(host_array(random_floats(16 * 5, 18), {16, 5})).to_host<int32_t>());
  expect_error([&] { (void)mv::categorical(key, mv::arange(3)); }, "logits must be float32");
  expect_error([&] { (void)mv::categorical(key, mv::ones({3}), 1); }, "out of range");
}

TEST(JaxMoreRandom, TruncatedNormalStaysInsideWithTheRightMean) {
  const Array key = mv::random_key(5);
  const float lo = -1.0f, hi = 2.0f;
  const auto v = mv::truncated_normal(key, lo, hi, {20001}).to_host<float>();
  for (const float f : v) {
    ASSERT_GT(f, lo);
    ASSERT_LT(f, hi);
  }
  const auto phi = [](double t) { return std::exp(-t * t / 2) / std::sqrt(2 * M_PI); };
  const auto Phi = [](double t) { return 0.5 * (1 + std::erf(t / std::sqrt(2.0))); };
  const double mean = (phi(lo) - phi(hi)) / (Phi(hi) - Phi(lo));
  EXPECT_NEAR(mean_of(v), mean, 0.02);
  EXPECT_EQ(v, mv::truncated_normal(key, lo, hi, {20001}).to_host<float>());
  // One-sided (infinite lower bound): all below 0, mean -sqrt(2/pi).
  const auto w = mv::truncated_normal(key, -kInf, 0.0f, {20001}).to_host<float>();
  for (const float f : w) ASSERT_LT(f, 0.0f);
  EXPECT_NEAR(mean_of(w), -std::sqrt(2 / M_PI), 0.03);
  const auto mesh = mv::make_mesh({8}, {"x"});
  EXPECT_EQ(mv::truncated_normal(key, lo, hi, {16, 3}, mv::NamedSharding(mesh, P("x"))).to_host<float>(),
            mv::truncated_normal(key, lo, hi, {16, 3}).to_host<float>());
  expect_error([&] { (void)mv::truncated_normal(key, 1.0f, 1.0f, {2}); }, "lower < upper");
}

TEST(JaxMoreRandom, DropoutAsFlax) {
  const Array key = mv::random_key(7);
  const auto x = random_floats(20001, 19, 1.0f, 2.0f);  // no zeros of its own
  const Array a = host_array(x);
  EXPECT_EQ(mv::nn::dropout(key, a, 0.0f).to_host<float>(), x);
  EXPECT_EQ(mv::nn::dropout(key, a, 1.0f).to_host<float>(), std::vector<float>(x.size(), 0.0f));
  const auto d = mv::nn::dropout(key, a, 0.25f).to_host<float>();
  size_t zeros = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (d[i] == 0.0f)
      ++zeros;
    else
      EXPECT_EQ(d[i], x[i] / 0.75f) << i;
  }
  EXPECT_NEAR(zeros / static_cast<double>(x.size()), 0.25, 0.02);
  EXPECT_EQ(d, mv::nn::dropout(key, a, 0.25f).to_host<float>());
  // The kept elements are bernoulli(key, 1 - rate).
  const auto keep = bools(mv::bernoulli(key, 0.75f, {20001}));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(keep[i] != 0, d[i] != 0.0f) << i;
  // Gradient: 1 / keep where kept, 0 where dropped.
  const auto g = mv::grad([&](const Array& t) { return mv::sum(mv::nn::dropout(key, t, 0.25f)); })(host_array(x, {20001}))
                     .to_host<float>();
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(g[i], keep[i] ? 1.0f / 0.75f : 0.0f) << i;
  // Sharded under jit: the same mask, the rows stay split.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto y = random_floats(16 * 5, 20);
  const Array ys = mv::device_put(host_array(y, {16, 5}), mv::NamedSharding(mesh, P("x")));
  const auto drop = [&](const Array& t) { return mv::nn::dropout(key, t, 0.5f); };
  const Array out = mv::jit(drop)(ys);
  EXPECT_EQ(out.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x"))));
  EXPECT_EQ(out.to_host<float>(), drop(host_array(y, {16, 5})).to_host<float>());
  expect_error([&] { (void)mv::nn::dropout(key, a, 1.5f); }, "rate must be in [0, 1]");
  expect_error([&] { (void)mv::nn::dropout(key, mv::arange(3), 0.5f); }, "x must be float32");
}

}  // namespace

// int8, uint8, int64 and float64 in the ops that are not elementwise: reductions (JAX's sums:
// int8 -> int32, uint8 -> uint32; int64 exact and wrapping), the layout ops (reshape, transpose,
// slice, concatenate, broadcast, pad, take) at sizes that are not multiples of 4 or 8,
// collectives inside shard_map and from jit on the 2x4 mesh with odd per-device sizes, and
// matmul (int8 @ int8 is int8, wrapped, as in JAX). Expected values are worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "typed_arrays.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::DType;
using mv::P;

using typed_arrays::arr;
using typed_arrays::kI64Max;
using typed_arrays::kI64Min;

namespace {

// start + i * step, wrapping for integers (as the device's int64 arithmetic does; signed overflow
// in C++ is undefined, so the host wraps in the unsigned type).
template <class T>
std::vector<T> iota_of(size_t n, T start, T step) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      v[i] = static_cast<T>(static_cast<U>(static_cast<U>(start) + static_cast<U>(i) * static_cast<U>(step)));
    } else {
      v[i] = static_cast<T>(start + static_cast<T>(i) * step);
    }
  }
  return v;
}

mv::Mesh mesh2x4() {
  return mv::make_mesh({2, 4}, {"x", "y"});
}

}  // namespace

TEST(DtypesWideDevice, ReductionsAsJax) {
  const Array i8 = arr<int8_t>({100, 100, 100, -128, 7});
  EXPECT_EQ(mv::sum(i8).dtype(), DType::int32);  // promote_integers: the default int
  EXPECT_EQ(mv::sum(i8).to_host<int32_t>()[0], 179);
  EXPECT_EQ(mv::max(i8).dtype(), DType::int8);
  EXPECT_EQ(mv::max(i8).to_host<int8_t>()[0], 100);
  EXPECT_EQ(mv::min(i8).to_host<int8_t>()[0], -128);
  EXPECT_EQ(mv::argmin(i8, 0).to_host<int32_t>()[0], 3);
  const Array u8 = arr<uint8_t>({255, 255, 255, 0, 1, 2, 3});
  EXPECT_EQ(mv::sum(u8).dtype(), DType::uint32);
  EXPECT_EQ(mv::sum(u8).to_host<uint32_t>()[0], 771u);
  EXPECT_EQ(mv::max(u8).to_host<uint8_t>()[0], 255);
  EXPECT_NEAR(mv::mean(u8).to_host<float>()[0], 771.0f / 7.0f, 1e-4f);
  // int64: exact past 2^53, and wrapping as int64 does.
  const Array i64 = arr<int64_t>(
      {int64_t{1} << 62, int64_t{1} << 62, -(int64_t{1} << 62), 5, 9007199254740993LL});
  EXPECT_EQ(mv::sum(i64).to_host<int64_t>()[0], (int64_t{1} << 62) + 5 + 9007199254740993LL);
  EXPECT_EQ(mv::sum(arr<int64_t>({kI64Max, 1})).to_host<int64_t>()[0], kI64Min);
  EXPECT_EQ(mv::max(i64).to_host<int64_t>()[0], int64_t{1} << 62);
  EXPECT_EQ(mv::min(i64).to_host<int64_t>()[0], -(int64_t{1} << 62));
  EXPECT_EQ(mv::mean(arr<int64_t>({1, 2})).dtype(), DType::float64);
  EXPECT_EQ(mv::mean(arr<int64_t>({1, 2})).to_host<double>()[0], 1.5);
  // float64 keeps what float32 cannot: 1 + 2^-30.
  EXPECT_EQ(mv::sum(arr<double>({1.0, 0x1p-31, 0x1p-31})).to_host<double>()[0], 1.0 + 0x1p-30);
  EXPECT_EQ(mv::mean(arr<double>({1.0, 0x1p-30})).to_host<double>()[0], 0.5 + 0x1p-31);
  // Along axes, at odd sizes, keepdims.
  for (const int64_t n : {1, 3, 5, 7, 13, 1001}) {
    const auto v = iota_of<int64_t>(3 * n, -1000000000000LL, 999999999937LL);
    const Array x = arr(v, {3, n});
    std::vector<int64_t> rows(3, 0), cols(n, 0);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < n; ++c) {
        rows[r] += v[r * n + c];
        cols[c] += v[r * n + c];
      }
    EXPECT_EQ(mv::sum(x, {1}).to_host<int64_t>(), rows) << n;
    EXPECT_EQ(mv::sum(x, {0}, true).shape(), (mv::Shape{1, n}));
    EXPECT_EQ(mv::sum(x, {0}, true).to_host<int64_t>(), cols) << n;
    EXPECT_EQ(mv::max(x, {1}).to_host<int64_t>()[2], v[3 * n - 1]) << n;
    const auto d = iota_of<double>(n, 0.5, 0.25);
    double total = 0;
    for (const double e : d) total += e;  // dyadic values: exact in any order
    EXPECT_EQ(mv::sum(arr(d)).to_host<double>()[0], total) << n;
    const auto b = iota_of<int8_t>(n, -3, 1);
    int32_t bt = 0;
    for (const int8_t e : b) bt += e;
    EXPECT_EQ(mv::sum(arr(b)).to_host<int32_t>()[0], bt) << n;
  }
  EXPECT_EQ(mv::sum(arr<int64_t>({}, {0})).to_host<int64_t>()[0], 0);
  // Sharded over the mesh: each device holds a 1x3 piece of a reduced dimension.
  const auto mesh = mesh2x4();
  const auto v = iota_of<int64_t>(24, (int64_t{1} << 40) - 11, 1000000007LL);
  const Array xs =
      mv::device_put(std::span<const int64_t>(v), {2, 12}, mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(mv::sum(xs, {1}).to_host<int64_t>(),
            (std::vector<int64_t>{std::accumulate(v.begin(), v.begin() + 12, int64_t{0}),
                                  std::accumulate(v.begin() + 12, v.end(), int64_t{0})}));
  EXPECT_EQ(mv::sum(xs).to_host<int64_t>()[0], std::accumulate(v.begin(), v.end(), int64_t{0}));
  const auto w = iota_of<int8_t>(24, -100, 9);
  const Array ws =
      mv::device_put(std::span<const int8_t>(w), {2, 12}, mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(mv::sum(ws).to_host<int32_t>()[0], std::accumulate(w.begin(), w.end(), 0));
  EXPECT_EQ(mv::max(ws, {0}).to_host<int8_t>()[0], w[12]);
}

TEST(DtypesWideDevice, LayoutOpsMoveWholeElements) {
  for (const int64_t n : {1, 3, 5, 7, 13}) {
    const auto v = iota_of<int8_t>(3 * n, -50, 7);
    const Array x = arr(v, {3, n});
    std::vector<int8_t> t(3 * n);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < n; ++c) t[c * 3 + r] = v[r * n + c];
    EXPECT_EQ(mv::transpose(x).to_host<int8_t>(), t) << n;
    EXPECT_EQ(x.reshape(3 * n).to_host<int8_t>(), v);
    EXPECT_EQ(mv::slice(x, {1, 0}, {2, n}).to_host<int8_t>(),
              std::vector<int8_t>(v.begin() + n, v.begin() + 2 * n));
    std::vector<int8_t> cat(v);
    cat.insert(cat.end(), v.begin(), v.begin() + n);
    EXPECT_EQ(mv::concatenate({x, mv::slice(x, {0, 0}, {1, n})}, 0).to_host<int8_t>(), cat) << n;
    std::vector<int8_t> twice(v.begin(), v.begin() + n);
    twice.insert(twice.end(), v.begin(), v.begin() + n);
    EXPECT_EQ(mv::broadcast_to(mv::slice(x, {0, 0}, {1, n}), {2, n}).to_host<int8_t>(), twice) << n;
    const auto u = iota_of<uint8_t>(n, 250, 1);
    std::vector<uint8_t> odd;
    for (int64_t i = 0; i < n; i += 2) odd.push_back(u[i]);
    EXPECT_EQ(mv::slice(arr(u), {0}, {n}, {2}).to_host<uint8_t>(), odd) << n;
    const auto l = iota_of<int64_t>(3 * n, kI64Min + 3, 4611686018427387903LL);
    std::vector<int64_t> lt(3 * n);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < n; ++c) lt[c * 3 + r] = l[r * n + c];
    EXPECT_EQ(mv::transpose(arr(l, {3, n})).to_host<int64_t>(), lt) << n;
    const auto d = iota_of<double>(3 * n, 0.1, 1.0 / 3);
    std::vector<double> dt(3 * n);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < n; ++c) dt[c * 3 + r] = d[r * n + c];
    EXPECT_EQ(mv::transpose(arr(d, {3, n})).to_host<double>(), dt) << n;
    EXPECT_EQ(mv::concatenate({arr(d), arr(d)}, 0).to_host<double>().back(), d.back());
  }
  // pad: the value in the dtype (int64 and float64 as 8-byte fills).
  EXPECT_EQ(mv::pad(arr<int8_t>({1, 2, 3}), {{1, 2}}, -5.0f).to_host<int8_t>(),
            (std::vector<int8_t>{-5, 1, 2, 3, -5, -5}));
  EXPECT_EQ(mv::pad(arr<int64_t>({kI64Max}), {{2, 1}}, -1.0f).to_host<int64_t>(),
            (std::vector<int64_t>{-1, -1, kI64Max, -1}));
  EXPECT_EQ(mv::pad(arr<double>({0.1}), {{1, 1}}, 2.5f).to_host<double>(),
            (std::vector<double>{2.5, 0.1, 2.5}));
  expect_error([] { (void)mv::pad(arr<uint8_t>({1}), {{1, 0}}, 300.0f); }, "0 to 255");
  // take: clip, wrap, and fill's defaults (the dtype's lowest int, the largest unsigned, NaN).
  const Array idx = mv::array({2, -1, 9, 0});
  EXPECT_EQ(mv::take(arr<int8_t>({10, -20, 30}), idx).to_host<int8_t>(),
            (std::vector<int8_t>{30, 30, -128, 10}));
  EXPECT_EQ(mv::take(arr<uint8_t>({10, 20, 30}), idx).to_host<uint8_t>(),
            (std::vector<uint8_t>{30, 30, 255, 10}));
  EXPECT_EQ(mv::take(arr<int64_t>({kI64Max, 5, -(int64_t{1} << 50)}), idx).to_host<int64_t>(),
            (std::vector<int64_t>{-(int64_t{1} << 50), -(int64_t{1} << 50), kI64Min, kI64Max}));
  EXPECT_EQ(mv::take(arr<int64_t>({kI64Max, 5, 7}), idx, 0, mv::TakeMode::clip).to_host<int64_t>(),
            (std::vector<int64_t>{7, kI64Max, 7, kI64Max}));
  EXPECT_EQ(mv::take(arr<int64_t>({kI64Max, 5, 7}), idx, 0, mv::TakeMode::wrap).to_host<int64_t>(),
            (std::vector<int64_t>{7, 7, kI64Max, kI64Max}));
  const auto tf = mv::take(arr<double>({0.1, 0.2, 0.3}), idx).to_host<double>();
  EXPECT_EQ(tf[0], 0.3);
  EXPECT_EQ(tf[1], 0.3);
  EXPECT_TRUE(std::isnan(tf[2]));
  EXPECT_EQ(mv::take(arr<double>({0.1, 0.2, 0.3}), idx, 0, mv::TakeMode::fill, -1.5f)
                .to_host<double>()[2],
            -1.5);
  // Along a middle axis of a 3-d int64 array.
  const auto c = iota_of<int64_t>(2 * 3 * 2, int64_t{1} << 33, 1);
  EXPECT_EQ(mv::take(arr(c, {2, 3, 2}), mv::array({2, 0}), 1).to_host<int64_t>(),
            (std::vector<int64_t>{c[4], c[5], c[0], c[1], c[10], c[11], c[6], c[7]}));
  // A reshard of a sharded int8 array with odd pieces.
  const auto mesh = mesh2x4();
  const auto v = iota_of<int8_t>(8 * 5, -100, 5);
  const Array s =
      mv::device_put(std::span<const int8_t>(v), {8, 5}, mv::NamedSharding(mesh, P({"x", "y"})));
  EXPECT_EQ(mv::device_put(s, mv::NamedSharding(mesh, P("y"))).to_host<int8_t>(), v);
  EXPECT_EQ(mv::transpose(s).to_host<int8_t>().size(), 40u);
}

TEST(DtypesWideDevice, CollectivesInShardMapOnTheMesh) {
  const auto mesh = mesh2x4();
  // int64 past 2^53 summed exactly over x (2 members) and y (4 members); pieces of 1x3.
  const auto v = iota_of<int64_t>(2 * 12, (int64_t{1} << 60) + 1, 3);
  const Array x =
      mv::device_put(std::span<const int64_t>(v), {2, 12}, mv::NamedSharding(mesh, P("x", "y")));
  const auto psum_x = mv::shard_map([](const Array& a) { return mv::psum(a, "x"); }, mesh,
                                    {P("x", "y")}, P(mv::None, "y"));
  const Array px = psum_x(x);
  EXPECT_EQ(px.dtype(), DType::int64);
  std::vector<int64_t> want(12);
  for (int c = 0; c < 12; ++c) want[c] = v[c] + v[12 + c];  // 2^61 + ...: wraps nowhere, exact
  EXPECT_EQ(px.to_host<int64_t>(), want);
  const auto psum_y =
      mv::shard_map([](const Array& a) { return mv::psum(a, "y"); }, mesh, {P("x", "y")}, P("x"));
  std::vector<int64_t> want_y(6);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c)
      for (int q = 0; q < 4; ++q) want_y[r * 3 + c] += v[r * 12 + q * 3 + c];
  EXPECT_EQ(psum_y(x).to_host<int64_t>(), want_y);
  const auto pmax_x = mv::shard_map([](const Array& a) { return mv::pmax(a, "x"); }, mesh,
                                    {P("x", "y")}, P(mv::None, "y"));
  EXPECT_EQ(pmax_x(x).to_host<int64_t>(), std::vector<int64_t>(v.begin() + 12, v.end()));
  // int8 psum wraps as int8: 100 + 100 is -56.
  std::vector<int8_t> b(2 * 12, 100);
  b[5] = -128;
  b[17] = -1;
  const Array xb =
      mv::device_put(std::span<const int8_t>(b), {2, 12}, mv::NamedSharding(mesh, P("x", "y")));
  const Array pb = psum_x(xb);
  EXPECT_EQ(pb.dtype(), DType::int8);
  std::vector<int8_t> want_b(12, -56);
  want_b[5] = 127;  // -128 + -1 wraps
  EXPECT_EQ(pb.to_host<int8_t>(), want_b);
  const auto pmin_y =
      mv::shard_map([](const Array& a) { return mv::pmin(a, "y"); }, mesh, {P("x", "y")}, P("x"));
  EXPECT_EQ(pmin_y(xb).to_host<int8_t>(), (std::vector<int8_t>{100, 100, -128, 100, 100, -1}));
  // uint8 and float64.
  const auto u = iota_of<uint8_t>(24, 200, 3);
  const Array xu =
      mv::device_put(std::span<const uint8_t>(u), {2, 12}, mv::NamedSharding(mesh, P("x", "y")));
  std::vector<uint8_t> want_u(12);
  for (int c = 0; c < 12; ++c) want_u[c] = static_cast<uint8_t>(u[c] + u[12 + c]);
  EXPECT_EQ(psum_x(xu).to_host<uint8_t>(), want_u);
  const auto d = iota_of<double>(24, 1.0, 0x1p-40);
  const Array xd =
      mv::device_put(std::span<const double>(d), {2, 12}, mv::NamedSharding(mesh, P("x", "y")));
  std::vector<double> want_d(12);
  for (int c = 0; c < 12; ++c) want_d[c] = d[c] + d[12 + c];
  EXPECT_EQ(psum_x(xd).to_host<double>(), want_d);
  const auto pmean_x = mv::shard_map([](const Array& a) { return mv::pmean(a, "x"); }, mesh,
                                     {P("x", "y")}, P(mv::None, "y"));
  EXPECT_EQ(pmean_x(xd).dtype(), DType::float64);
  EXPECT_EQ(pmean_x(xd).to_host<double>()[0], (d[0] + d[12]) / 2);
  // Data movement: all_gather and ppermute of 1- and 8-byte pieces of odd sizes.
  const auto gather_y = mv::shard_map(
      [](const Array& a) { return mv::all_gather(a, "y", 1, true); }, mesh, {P("x", "y")}, P("x"));
  EXPECT_EQ(gather_y(xb).to_host<int8_t>(), b);
  EXPECT_EQ(gather_y(x).to_host<int64_t>(), v);
  EXPECT_EQ(gather_y(xd).to_host<double>(), d);
  const auto shift = mv::shard_map(
      [](const Array& a) {
        return mv::ppermute(a, "y", {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
      },
      mesh, {P("x", "y")}, P("x", "y"));
  std::vector<int8_t> shifted(24);
  for (int r = 0; r < 2; ++r)
    for (int q = 0; q < 4; ++q)
      for (int c = 0; c < 3; ++c) shifted[r * 12 + ((q + 1) % 4) * 3 + c] = b[r * 12 + q * 3 + c];
  EXPECT_EQ(shift(xb).to_host<int8_t>(), shifted);
}

TEST(DtypesWideDevice, JitOnShardedArrays) {
  const auto mesh = mesh2x4();
  const auto v = iota_of<int64_t>(8 * 3, -(int64_t{1} << 45), 77777777777LL);
  const Array x =
      mv::device_put(std::span<const int64_t>(v), {8, 3}, mv::NamedSharding(mesh, P({"x", "y"})));
  const auto f = mv::jit([](const Array& a) { return mv::sum(a * 3 - 1, {0}); });
  std::vector<int64_t> want(3, 0);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 3; ++c) want[c] += v[r * 3 + c] * 3 - 1;
  EXPECT_EQ(f(x).to_host<int64_t>(), want);
  EXPECT_EQ(f(x).to_host<int64_t>(), want);  // replayed
  const auto b = iota_of<int8_t>(8 * 5, 90, 3);
  const Array xb =
      mv::device_put(std::span<const int8_t>(b), {8, 5}, mv::NamedSharding(mesh, P({"x", "y"})));
  const auto g = mv::jit([](const Array& a) { return mv::max(a + a, {0}); });
  std::vector<int8_t> want_b(5, -128);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 5; ++c)
      want_b[c] = std::max<int8_t>(want_b[c], static_cast<int8_t>(2 * b[r * 5 + c]));
  EXPECT_EQ(g(xb).to_host<int8_t>(), want_b);
}

TEST(DtypesWideDevice, MatmulAsJax) {
  // int8 @ int8 is int8 in JAX: the int32 sum wrapped (203 -> -53); preferred int32 keeps it.
  const Array a = arr<int8_t>({100, 1, -7, 127}, {2, 2}), b = arr<int8_t>({2, 3}, {2, 1});
  EXPECT_EQ(mv::matmul(a, b).dtype(), DType::int8);
  EXPECT_EQ(mv::matmul(a, b).to_host<int8_t>(), (std::vector<int8_t>{-53, 111}));
  EXPECT_EQ(mv::matmul(a, b, DType::int32).to_host<int32_t>(), (std::vector<int32_t>{203, 367}));
  const Array u = arr<uint8_t>({200, 100}, {1, 2});
  EXPECT_EQ(mv::matmul(u, arr<uint8_t>({1, 1}, {2, 1})).to_host<uint8_t>(),
            (std::vector<uint8_t>{44}));
  EXPECT_EQ(mv::matmul(a, mv::array({1, 1}, {2, 1})).to_host<int32_t>(),
            (std::vector<int32_t>{101, 120}));
  EXPECT_EQ(mv::matmul(a, mv::array({0.5f, 1.0f}, {2, 1})).to_host<float>(),
            (std::vector<float>{51.0f, 123.5f}));
  // Odd shapes: 5x7 @ 7x3 of int8 against the host, wrapped.
  const auto x = iota_of<int8_t>(35, -60, 7), y = iota_of<int8_t>(21, 13, -5);
  std::vector<int8_t> want(15);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      int s = 0;
      for (int k = 0; k < 7; ++k) s += x[i * 7 + k] * y[k * 3 + j];
      want[i * 3 + j] = static_cast<int8_t>(s);
    }
  EXPECT_EQ(mv::matmul(arr(x, {5, 7}), arr(y, {7, 3})).to_host<int8_t>(), want);
  // float64 and int64: summed in their dtype (a broadcast product and a pairwise sum).
  const Array d = arr<double>({0.1, 0.2, 0.3, 0.4}, {2, 2}), e = arr<double>({1.0, 2.0}, {2, 1});
  EXPECT_EQ(mv::matmul(d, e).dtype(), DType::float64);
  EXPECT_EQ(mv::matmul(d, e).to_host<double>(),
            (std::vector<double>{0.1 * 1.0 + 0.2 * 2.0, 0.3 * 1.0 + 0.4 * 2.0}));
  EXPECT_EQ(mv::matmul(arr<int64_t>({int64_t{1} << 40, 3}, {1, 2}),
                       arr<int64_t>({int64_t{1} << 20, 5}, {2, 1}))
                .to_host<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 60) + 15}));
  EXPECT_EQ(mv::matmul(mv::array({1, 2}, {1, 2}), arr<int64_t>({int64_t{1} << 40, 1}, {2, 1}))
                .to_host<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 40) + 2}));
  EXPECT_EQ(mv::matmul(a, b, DType::int64).to_host<int64_t>(), (std::vector<int64_t>{203, 367}));
  EXPECT_EQ(mv::matmul(mv::array({0.1f}, {1, 1}), mv::array({0.1f}, {1, 1}), DType::float64)
                .to_host<double>()[0],
            static_cast<double>(0.1f) * static_cast<double>(0.1f));
  // 5x7 @ 7x3 and a batch, dyadic values (exact sums in any order), and a transposed operand.
  std::vector<double> xd(35), yd(21);
  for (size_t i = 0; i < xd.size(); ++i)
    xd[i] = static_cast<double>(static_cast<int>(i % 11) - 5) * 0.5;
  for (size_t i = 0; i < yd.size(); ++i)
    yd[i] = static_cast<double>(static_cast<int>(i % 7) - 3) * 0.25 + 1e-3 * 0;
  std::vector<double> wd(15);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 7; ++k) wd[i * 3 + j] += xd[i * 7 + k] * yd[k * 3 + j];
  EXPECT_EQ(mv::matmul(arr(xd, {5, 7}), arr(yd, {7, 3})).to_host<double>(), wd);
  EXPECT_EQ(
      mv::matmul(arr(xd, {5, 7}), mv::transpose(mv::transpose(arr(yd, {7, 3})))).to_host<double>(),
      wd);
  EXPECT_EQ(mv::einsum("ik,kj->ij", arr(xd, {5, 7}), arr(yd, {7, 3})).to_host<double>(), wd);
  std::vector<double> twice(wd);
  twice.insert(twice.end(), wd.begin(), wd.end());
  EXPECT_EQ(mv::matmul(mv::broadcast_to(arr(xd, {1, 5, 7}), {2, 5, 7}), arr(yd, {7, 3}))
                .to_host<double>(),
            twice);
}

TEST(DtypesWideDevice, ArgmaxAndPsumScatterOf64BitDtypes) {
  EXPECT_EQ(mv::argmax(arr<int64_t>({3, kI64Max, kI64Max, -1}), 0).to_host<int32_t>()[0], 1);
  EXPECT_EQ(mv::argmin(arr<int64_t>({3, kI64Max, kI64Min, kI64Min}), 0).to_host<int32_t>()[0], 2);
  EXPECT_EQ(mv::argmax(arr<double>({1.0, NAN, 5.0, NAN}), 0).to_host<int32_t>()[0], 1);
  EXPECT_EQ(mv::argmin(arr<double>({1.0, -2.0, 5.0, -2.0, 0.5}), 0).to_host<int32_t>()[0], 1);
  const auto v = iota_of<int64_t>(2 * 7, -(int64_t{1} << 50), 3000000000LL);
  std::vector<int64_t> shuffled(v);
  std::swap(shuffled[2], shuffled[12]);
  const Array x = arr(shuffled, {2, 7});
  EXPECT_EQ(mv::argmax(x, 1).to_host<int32_t>(), (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(mv::argmin(x, 0, true).shape(), (mv::Shape{1, 7}));
  EXPECT_EQ(mv::argmin(x, 0).to_host<int32_t>(),
            (std::vector<int32_t>{0, 0, 1, 0, 0, 1, 0}));  // v[12] and v[2] swapped
  // psum_scatter over y (4 members) of int64 pieces of 1x12: each member's block of 3.
  const auto mesh = mesh2x4();
  const auto w = iota_of<int64_t>(2 * 48, (int64_t{1} << 55) + 7, 1234567);
  const Array xw =
      mv::device_put(std::span<const int64_t>(w), {2, 48}, mv::NamedSharding(mesh, P("x", "y")));
  const auto scatter =
      mv::shard_map([](const Array& a) { return mv::psum_scatter(a, "y", 1, true); }, mesh,
                    {P("x", "y")}, P("x", "y"));
  std::vector<int64_t> want(2 * 12, 0);
  for (int r = 0; r < 2; ++r)
    for (int q = 0; q < 4; ++q)      // the member receiving block q
      for (int c = 0; c < 3; ++c)    // element c of the block
        for (int p = 0; p < 4; ++p)  // summed over the members' pieces
          want[r * 12 + q * 3 + c] += w[r * 48 + p * 12 + q * 3 + c];
  EXPECT_EQ(scatter(xw).to_host<int64_t>(), want);
}

// argsort, sort and top_k of int64 and float64 (graph/wide_dtypes.cpp's argsort64: two stable
// passes of the 32-bit argsort over the low and high words) against numpy's kind='stable'
// semantics worked on the host: duplicates kept in order, values that differ only in their low
// word (and in its top bit), int64's extremes, float64's NaN (last, in order), infinities, -0.0
// equal to 0.0 and subnormals; sizes 0, 1, 7 and 1000, along axis 0 and -1, sharded inputs, under
// jit, and top_k (largest first, NaN first, ties to the lower index).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "typed_arrays.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;
using typed_arrays::arr;
using typed_arrays::kI64Max;
using typed_arrays::kI64Min;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// numpy's order: NaN after everything, equal to one another; -0.0 == 0.0.
template <class T>
bool before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// The stable argsort of each row of an [rows, n] row-major array.
template <class T>
std::vector<int32_t> host_argsort(const std::vector<T>& v, size_t rows, size_t n) {
  std::vector<int32_t> out(rows * n);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return before(v[r * n + a], v[r * n + b]); });
    std::copy(idx.begin(), idx.end(), out.begin() + static_cast<std::ptrdiff_t>(r * n));
  }
  return out;
}

template <class T>
std::vector<T> transposed(const std::vector<T>& v, size_t rows, size_t cols) {
  std::vector<T> t(v.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  return t;
}

template <class T>
bool same_values(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if constexpr (std::is_floating_point_v<T>) {
      if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i])) return false;
    } else if (a[i] != b[i]) {
      return false;
    }
  return true;
}

// Hard int64 values: extremes, duplicates, and pairs equal in the high word that differ only in
// the low word (its top bit among them), or equal in the low word only.
std::vector<int64_t> int64_values(size_t n, uint64_t seed) {
  const std::vector<int64_t> hard = {kI64Min, kI64Max, 0, -1, 1, kI64Min + 1, kI64Max - 1,
                                     (int64_t{5} << 32) | 0x80000000LL, (int64_t{5} << 32) | 0x7fffffffLL,
                                     (int64_t{5} << 32), (int64_t{5} << 32) | 0xffffffffLL, (int64_t{6} << 32),
                                     -(int64_t{5} << 32), -(int64_t{5} << 32) + 0x80000000LL, 0x80000000LL,
                                     0x7fffffffLL, -0x80000000LL, -0x80000001LL, int64_t{1} << 32};
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    if (i % 3 == 0) v.push_back(hard[r % hard.size()]);
    else if (i % 3 == 1) v.push_back(static_cast<int64_t>(r));
    else v.push_back(static_cast<int64_t>((r % 4) << 32 | (r >> 32)));  // few high words
  }
  return v;
}

std::vector<double> float64_values(size_t n, uint64_t seed) {
  const std::vector<double> hard = {kNaN, -kNaN, kInf, -kInf, 0.0, -0.0, 0x1p-1074, -0x1p-1074, 0x1p-1022,
                                    -0x1p-1022, 1.0, std::nextafter(1.0, 2.0), std::nextafter(1.0, 0.0), -1.0,
                                    std::nextafter(-1.0, -2.0), std::numeric_limits<double>::max(),
                                    -std::numeric_limits<double>::max(), 1.0 + 0x1p-31, 1.0 + 0x1p-32};
  std::mt19937_64 rng(seed);
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    if (i % 3 == 0) v.push_back(hard[r % hard.size()]);
    else if (i % 3 == 1) v.push_back(std::bit_cast<double>(r));  // NaN now and then too
    else v.push_back(static_cast<double>(static_cast<int>(r % 5)) + std::ldexp(static_cast<double>(r >> 40), -60));
  }
  return v;
}

template <class T>
void expect_sorts_as_numpy(const std::vector<T>& v, size_t rows, size_t n) {
  const Array x = arr(v, {static_cast<int64_t>(rows), static_cast<int64_t>(n)});
  // Along the last axis.
  const std::vector<int32_t> want = host_argsort(v, rows, n);
  EXPECT_EQ(mv::argsort(x, -1).to_host<int32_t>(), want) << rows << "x" << n;
  std::vector<T> sorted(v.size());
  for (size_t i = 0; i < v.size(); ++i) sorted[i] = v[(i / n) * n + static_cast<size_t>(want[i])];
  EXPECT_TRUE(same_values(mv::sort(x, -1).to_host<T>(), sorted)) << rows << "x" << n;
  // Along axis 0: the transposed problem.
  const std::vector<int32_t> want0 = transposed(host_argsort(transposed(v, rows, n), n, rows), n, rows);
  EXPECT_EQ(mv::argsort(x, 0).to_host<int32_t>(), want0) << rows << "x" << n << " axis 0";
}

}  // namespace

TEST(SortWide, Int64AsNumpyStable) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    expect_sorts_as_numpy(int64_values(n, n + 1), 1, n);
    expect_sorts_as_numpy(int64_values(3 * n, n + 2), 3, n);
  }
  // Only the low words differ, around their top bit.
  const std::vector<int64_t> low = {(int64_t{7} << 32) | 0x80000001LL, (int64_t{7} << 32) | 0x7fffffffLL,
                                    (int64_t{7} << 32) | 0x80000000LL, (int64_t{7} << 32), (int64_t{7} << 32) | 1};
  EXPECT_EQ(mv::argsort(arr(low), 0).to_host<int32_t>(), (std::vector<int32_t>{3, 4, 1, 2, 0}));
}

TEST(SortWide, Float64AsNumpyStable) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    expect_sorts_as_numpy(float64_values(n, n + 3), 1, n);
    expect_sorts_as_numpy(float64_values(3 * n, n + 4), 3, n);
  }
  // NaN last in their order, -0.0 and 0.0 equal (kept in order), subnormals between.
  const std::vector<double> v = {kNaN, 0.0, -0.0, -kNaN, 0x1p-1074, -0x1p-1074, -kInf, kInf, -0.0, 1.0};
  EXPECT_EQ(mv::argsort(arr(v), 0).to_host<int32_t>(), (std::vector<int32_t>{6, 5, 1, 2, 8, 4, 9, 7, 0, 3}));
}

// Sharded over the 2x4 mesh (rows split, and the sorted axis split: gathered first), and
// inside jit.
TEST(SortWide, ShardedAndUnderJit) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const std::vector<double> v = float64_values(8 * 12, 21);
  const Array xs = mv::device_put(std::span<const double>(v), {8, 12}, mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(mv::argsort(xs, -1).to_host<int32_t>(), host_argsort(v, 8, 12));
  EXPECT_EQ(mv::argsort(xs, 0).to_host<int32_t>(), transposed(host_argsort(transposed(v, 8, 12), 12, 8), 12, 8));
  const std::vector<int64_t> w = int64_values(8 * 12, 22);
  const Array ws = mv::device_put(std::span<const int64_t>(w), {8, 12}, mv::NamedSharding(mesh, P("x")));
  const auto jitted = mv::jit([](const Array& a) { return mv::sort(a, -1); });
  std::vector<int64_t> want(w.size());
  const std::vector<int32_t> order = host_argsort(w, 8, 12);
  for (size_t i = 0; i < w.size(); ++i) want[i] = w[(i / 12) * 12 + static_cast<size_t>(order[i])];
  EXPECT_EQ(jitted(ws).to_host<int64_t>(), want);
  EXPECT_EQ(jitted(ws).to_host<int64_t>(), want);  // the replayed program
}

// top_k: the k largest along the last axis, NaN counted largest, ties to the lower index.
TEST(SortWide, TopKFloat64AndInt64) {
  const std::vector<double> v = {1.5, kNaN, 3.0, -kInf, 3.0, 1.0 + 0x1p-40, 1.0, kInf, -0.0, 0.0};
  const auto [values, indices] = mv::lax::top_k(arr(v), 5);
  EXPECT_EQ(indices.to_host<int32_t>(), (std::vector<int32_t>{1, 7, 2, 4, 0}));
  const std::vector<double> got = values.to_host<double>();
  ASSERT_EQ(got.size(), 5u);
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(std::vector<double>(got.begin() + 1, got.end()), (std::vector<double>{kInf, 3.0, 3.0, 1.5}));
  const std::vector<int64_t> w = {5, kI64Max, (int64_t{1} << 32) | 0x80000000LL, kI64Min, kI64Max, (int64_t{1} << 32) | 1};
  const auto [wv, wi] = mv::lax::top_k(arr(w, {2, 3}), 2);
  EXPECT_EQ(wi.to_host<int32_t>(), (std::vector<int32_t>{1, 2, 1, 2}));
  EXPECT_EQ(wv.to_host<int64_t>(), (std::vector<int64_t>{kI64Max, (int64_t{1} << 32) | 0x80000000LL, kI64Max,
                                                          (int64_t{1} << 32) | 1}));
}

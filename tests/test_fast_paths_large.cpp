// An outside tester's checks of today's vec4 fast paths on arrays past one binding
// (lavapipe's maxStorageBufferRange is 128 MiB: 32M floats): the elementwise kernel's chunks with
// row and splat broadcast reads, a minor-axis-keeping transpose just under and past the limit,
// and a take of whole vec4 rows from a table of 128 MiB. Exact against host loops.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;

namespace {
// Small exact integers, a pattern that differs from element to element.
std::vector<float> pattern(int64_t n, int64_t mul, int64_t mod) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i * mul) % mod - mod / 2);
  return v;
}

void expect_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first wrong at " << first << " got " << got[first] << " want " << want[first];
}
}  // namespace

TEST(FastPathsLarge, ElementwiseRowAndSplatBroadcastsAcrossChunks) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  // 3 x 11.2M = 33.6M outputs: two chunks of the elementwise kernel, the second starting inside
  // a row.
  const int64_t r = 3, c = 11200000;
  const auto vx = pattern(r * c, 7, 61), vrow = pattern(c, 13, 29), vcol = pattern(r, 1, 7);
  const Array X = host_array(vx, {r, c}), Row = host_array(vrow, {1, c}), Col = host_array(vcol, {r, 1});
  const auto fn = [](const Array& x, const Array& row, const Array& col) { return x * row - col; };
  std::vector<float> want(static_cast<size_t>(r * c));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) want[i * c + j] = vx[i * c + j] * vrow[j] - vcol[i];
  expect_equal(fn(X, Row, Col).to_host<float>(), want, "eager");
  expect_equal(mv::jit(fn)(X, Row, Col).to_host<float>(), want, "jit");
}

TEST(FastPathsLarge, TransposeKeepingMinorAxisNearAndPastOneBinding) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  for (const int64_t m : {int64_t{3900000}, int64_t{4500000}}) {  // 31.2M and 36M floats
    const int64_t a = 2, c = 4;
    const auto v = pattern(a * m * c, 11, 1009);
    const Array X = host_array(v, {a, m, c});
    std::vector<float> want(v.size());
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t k = 0; k < c; ++k) want[(j * a + i) * c + k] = v[(i * m + j) * c + k];
    expect_equal(mv::transpose(X, {1, 0, 2}).to_host<float>(), want, "m=" + std::to_string(m));
  }
}

TEST(FastPathsLarge, TakeRowsOfATableOf128MiB) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  const int64_t rows = 8 * 1024 * 1024, cols = 4;  // exactly 128 MiB of float32
  const auto v = pattern(rows * cols, 3, 100003);
  const Array T = host_array(v, {rows, cols});
  const std::vector<int32_t> ids = {rows - 1, 0, static_cast<int32_t>(rows / 2 + 3), -1, -static_cast<int32_t>(rows), 5};
  std::vector<float> want;
  for (int32_t id : ids) {
    const int64_t k = id < 0 ? id + rows : id;
    for (int64_t j = 0; j < cols; ++j) want.push_back(v[k * cols + j]);
  }
  const Array I = mv::array(std::span<const int32_t>(ids), mv::Shape{6});
  expect_equal(mv::reshape(mv::take(T, I), {24}).to_host<float>(), want, "take");
}

// An int8 input read one element per row (a splat: x[:, :1] broadcast along rows) from a buffer
// of more than 2^27 bytes: the kernel binds the input's whole buffer as one-byte texels.
TEST(FastPathsLarge, Int8SplatFromABufferPastTheTexelLimit) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  const int64_t rows = 34000000, cols = 4;  // 136 MB of int8
  std::vector<int8_t> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int8_t>((i * 7 + i / 4) % 61 - 30);
  const Array X = mv::array(std::span<const int8_t>(v), mv::Shape{rows, cols});
  const Array y = X - mv::slice(X, {0, 0}, {rows, 1});
  const auto got = y.to_host<int8_t>();
  ASSERT_EQ(got.size(), v.size());
  size_t bad = 0, first = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const auto want = static_cast<int8_t>(v[i * cols + j] - v[i * cols]);
      if (got[i * cols + j] != want && bad++ == 0) first = static_cast<size_t>(i * cols + j);
    }
  EXPECT_EQ(bad, 0u) << "first wrong at " << first << " (row " << first / 4 << ")";
}

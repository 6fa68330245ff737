// Per-device pieces larger than one descriptor binding (lavapipe: 128 MiB storage buffers,
// 512 MiB of R32 texels): layout changes, reductions, take and argsort bind windows of their
// buffers and split their dispatches, and match host references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

uint64_t storage_limit() {
  return test_runtime().state()->device_limits().maxStorageBufferRange;
}
uint64_t texel_limit() {
  return test_runtime().state()->device_limits().maxTexelBufferElements;
}

// An int32 array on device 0 holding 0, 1, 2, ... in `shape`, so every element names its own
// source position.
mv::Array positions(const mv::Shape& shape) {
  int64_t n = 1;
  for (const int64_t s : shape) n *= s;
  return mv::arange(static_cast<int32_t>(n)).reshape(shape);
}

// Each index of `got` checked against `want(i)`; stops at the first few mismatches.
template <typename T, typename F>
void expect_all(const std::vector<T>& got, size_t size, F want) {
  ASSERT_EQ(got.size(), size);
  int reported = 0;
  for (size_t i = 0; i < size && reported < 5; ++i) {
    const T w = want(i);
    if (got[i] != w) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << w;
      ++reported;
    }
  }
}

// While alive, kernels bind at most `bytes` at once (MESHVK_TEST_BINDING_BYTES), so small arrays
// take the windowed paths.
class SmallBindings {
 public:
  explicit SmallBindings(uint64_t bytes) {
    setenv("MESHVK_TEST_BINDING_BYTES", std::to_string(bytes).c_str(), 1);
  }
  ~SmallBindings() { unsetenv("MESHVK_TEST_BINDING_BYTES"); }
  SmallBindings(const SmallBindings&) = delete;
  SmallBindings& operator=(const SmallBindings&) = delete;
};

// f's result with 64 KiB bindings equals its result with the adapter's own.
template <typename T>
void expect_same_windowed(const std::string& what, const std::function<mv::Array()>& f) {
  auto& dispatches = test_runtime().state()->dispatches;
  const uint64_t before = dispatches.load();
  const auto want = f().to_host<T>();
  const uint64_t plain = dispatches.load() - before;
  std::vector<T> got;
  {
    const SmallBindings small(64 << 10);
    got = f().to_host<T>();
  }
  EXPECT_EQ(got, want) << what;
  // Windows split the work into more dispatches: the windowed path did run.
  EXPECT_GT(dispatches.load() - before - plain, plain) << what;
}

}  // namespace

// 6000 x 6000 int32 (137 MiB) on one device: input and output each past one storage binding.
TEST(LargeBuffers, TransposeSliceConcatenatePadRollBroadcast) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  // An adapter that binds the whole piece (a GPU's 4 GiB maxStorageBufferRange) has no path
  // past one binding to test at this size (lavapipe's is 128 MiB).
  if (6000ull * 6000 * 4 <= storage_limit()) GTEST_SKIP() << "the adapter binds the whole piece";
  const int64_t n = 6000;
  const auto x = positions({n, n});
  {
    const auto t = mv::transpose(x).to_host<int32_t>();
    expect_all(t, n * n, [&](size_t i) { return static_cast<int32_t>(i % n * n + i / n); });
  }
  {
    // Three dimensions, a permutation that keeps no axis in place.
    const auto t = mv::transpose(x.reshape({60, 100, 6000}), {2, 0, 1}).to_host<int32_t>();
    expect_all(t, n * n, [&](size_t i) {
      const size_t c = i / 6000, a = i / 100 % 60, b = i % 100;
      return static_cast<int32_t>(a * 600000 + b * 6000 + c);
    });
  }
  {
    const int64_t m = n - 1;
    const auto s = mv::slice(x, {1, 0}, {n, n - 1}).to_host<int32_t>();
    expect_all(s, m * m, [&](size_t i) { return static_cast<int32_t>((i / m + 1) * n + i % m); });
    const auto strided = mv::slice(x, {0, 1}, {n, n}, {1, 2}).to_host<int32_t>();
    expect_all(strided, n * (n / 2), [&](size_t i) {
      return static_cast<int32_t>(i / (n / 2) * n + 1 + 2 * (i % (n / 2)));
    });
  }
  {
    const auto c = mv::concatenate({x, x}, 1).to_host<int32_t>();
    expect_all(c, 2 * n * n,
               [&](size_t i) { return static_cast<int32_t>(i / (2 * n) * n + i % n); });
  }
  {
    const int64_t w = n + 3;
    const auto p = mv::pad(x, {{1, 2}, {2, 1}}, -1.f).to_host<int32_t>();
    expect_all(p, (n + 3) * w, [&](size_t i) {
      const int64_t r = static_cast<int64_t>(i) / w - 1, c = static_cast<int64_t>(i) % w - 2;
      return r < 0 || r >= n || c < 0 || c >= n ? -1 : static_cast<int32_t>(r * n + c);
    });
  }
  {
    const auto r = mv::roll(x, 7, 1).to_host<int32_t>();
    expect_all(r, n * n,
               [&](size_t i) { return static_cast<int32_t>(i / n * n + (i % n + n - 7) % n); });
  }
  {
    const auto b = mv::broadcast_to(mv::arange(static_cast<int32_t>(n)), {n, n}).to_host<int32_t>();
    expect_all(b, n * n, [&](size_t i) { return static_cast<int32_t>(i % n); });
  }
}

// 140M int32 (534 MiB) on one device: past the R32 texel limit too, so the input is windowed.
TEST(LargeBuffers, TransposeAndMaxBeyondTheTexelLimit) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  const int64_t rows = 14000, cols = 10000;
  ASSERT_GT(static_cast<uint64_t>(rows * cols), texel_limit())
      << "the adapter binds the whole piece: nothing to test";
  const auto x = positions({rows, cols});
  {
    const auto t = mv::transpose(x).to_host<int32_t>();
    expect_all(t, rows * cols,
               [&](size_t i) { return static_cast<int32_t>(i % rows * cols + i / rows); });
  }
  EXPECT_EQ(mv::max(x).to_host<int32_t>(),
            std::vector<int32_t>{static_cast<int32_t>(rows * cols - 1)});
  EXPECT_EQ(mv::argmin(x.reshape({rows * cols}), 0).to_host<int32_t>(), std::vector<int32_t>{0});
  // Take along the first axis: every slice of the taken axis is 10000 elements, and the input is
  // read in several windows of that axis.
  std::vector<int32_t> picks;
  for (int32_t i = 0; i < 1500; ++i) picks.push_back((i * 9973) % rows);
  const auto idx =
      mv::array(std::span<const int32_t>(picks), mv::Shape{static_cast<int64_t>(picks.size())});
  const auto taken = mv::take(x, idx, 0).to_host<int32_t>();
  expect_all(taken, picks.size() * cols,
             [&](size_t i) { return static_cast<int32_t>(picks[i / cols] * cols + i % cols); });
}

TEST(LargeBuffers, ReductionsWithOutputsPastOneBinding) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  // 36M rows: the 144 MiB of results are written through several windows.
  const int64_t rows = 36'000'000;
  if (static_cast<uint64_t>(rows) * 4 <= storage_limit()) GTEST_SKIP() << "the adapter binds the whole output";
  {
    const auto x = positions({rows, 2});
    expect_all(mv::sum(x, {1}).to_host<int32_t>(), rows,
               [](size_t i) { return static_cast<int32_t>(4 * i + 1); });
    expect_all(mv::max(x, {1}).to_host<int32_t>(), rows,
               [](size_t i) { return static_cast<int32_t>(2 * i + 1); });
    expect_all(mv::argmin(x, 1).to_host<int32_t>(), rows, [](size_t) { return 0; });
  }
  {
    // Over the first axis the reduced axis first moves last (a windowed layout change).
    const auto y = positions({2, rows});
    expect_all(mv::sum(y, {0}).to_host<int32_t>(), rows,
               [&](size_t i) { return static_cast<int32_t>(2 * i + rows); });
    expect_all(mv::argmax(y, 0).to_host<int32_t>(), rows, [](size_t) { return 1; });
  }
  // Float sums, through the vector loads.
  expect_all(mv::sum(mv::ones({rows, 4}), {1}).to_host<float>(), rows, [](size_t) { return 4.f; });
}

TEST(LargeBuffers, TakeWithOutputsPastOneBinding) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  const int64_t n = 6000;
  const auto x = positions({n, n});
  std::vector<int32_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = static_cast<int32_t>((i * 7 + 3) % n);
  perm[5] = -4;     // clamped to 0
  perm[6] = n + 9;  // clamped to n - 1
  auto clamp = [&](size_t i) {
    return static_cast<int64_t>(std::clamp<int32_t>(perm[i], 0, n - 1));
  };
  const auto idx = mv::array(std::span<const int32_t>(perm), mv::Shape{n});
  expect_all(mv::take(x, idx, 0, mv::TakeMode::clip).to_host<int32_t>(), n * n,
             [&](size_t i) { return static_cast<int32_t>(clamp(i / n) * n + i % n); });
  expect_all(mv::take(x, idx, 1, mv::TakeMode::clip).to_host<int32_t>(), n * n,
             [&](size_t i) { return static_cast<int32_t>(i / n * n + clamp(i % n)); });
}

TEST(LargeBuffers, ArgsortOfManyRows) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  // 2.5M rows of 16 floats: 160 MiB of input, output and sort keys, sorted in groups of rows.
  const int64_t rows = 2'500'000, n = 16;
  const auto v = random_floats(rows * n, 7);
  const auto order = mv::argsort(host_array(v, {rows, n})).to_host<int32_t>();
  ASSERT_EQ(order.size(), static_cast<size_t>(rows * n));
  for (const int64_t r : {int64_t{0}, int64_t{1}, rows / 2 - 1, rows / 2, rows / 2 + 1, rows - 1}) {
    std::vector<int32_t> want(n);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(),
                     [&](int32_t a, int32_t b) { return v[r * n + a] < v[r * n + b]; });
    EXPECT_EQ(std::vector<int32_t>(order.begin() + r * n, order.begin() + (r + 1) * n), want)
        << "row " << r;
  }
  // Every row a permutation in ascending order.
  for (int64_t r = 0; r < rows; r += 997)
    for (int64_t j = 1; j < n; ++j)
      ASSERT_LE(v[r * n + order[r * n + j - 1]], v[r * n + order[r * n + j]]) << "row " << r;
}

// Sharded pieces still take the single-binding paths, and the results agree.
TEST(LargeBuffers, ShardedAndSingleDeviceAgree) {
  SKIP_FULL_SIZE_UNDER_ASAN();
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = positions({6000, 6000});
  const auto sharded = mv::device_put(x, mv::NamedSharding(mesh, P("x")));
  EXPECT_EQ(mv::transpose(sharded).to_host<int32_t>(), mv::transpose(x).to_host<int32_t>());
  EXPECT_EQ(mv::max(sharded, {0}).to_host<int32_t>(), mv::max(x, {0}).to_host<int32_t>());
}

// The windowed paths at 64 KiB bindings, on small arrays: every split the large pieces above
// take (and the ones too slow to reach at full size on a CPU adapter) against the
// single-binding results.
TEST(LargeBuffers, WindowedPathsMatchSingleBindingOnes) {
  const auto x = host_array(random_floats(300 * 400, 3), {300, 400});
  const auto xi = positions({30, 40, 100});
  // Layout changes.
  expect_same_windowed<float>("transpose", [&] { return mv::transpose(x); });
  expect_same_windowed<int32_t>("transpose 3d", [&] { return mv::transpose(xi, {2, 0, 1}); });
  expect_same_windowed<int32_t>("transpose 3d b", [&] { return mv::transpose(xi, {1, 2, 0}); });
  expect_same_windowed<float>("slice", [&] { return mv::slice(x, {1, 3}, {299, 400}, {1, 3}); });
  expect_same_windowed<float>("pad", [&] { return mv::pad(x, {{3, 1}, {0, 5}}, 2.5f); });
  expect_same_windowed<float>("concatenate", [&] { return mv::concatenate({x, x * 2.f}, 1); });
  expect_same_windowed<float>("roll", [&] { return mv::roll(x, -13, 1); });
  // broadcast_to is an elementwise program (its consumers read the input with zero strides): its
  // large case is the 6000 x 6000 one above, through the elementwise kernels' chunks.
  expect_same_windowed<float>("update", [&] {
    return mv::dynamic_update_slice(x, mv::ones({200, 300}), {50, 60});
  });
  // Reductions: long rows (windowed input, several passes), many rows (windowed output), and
  // over leading axes (a windowed layout change first).
  const auto longrow = host_array(random_floats(100'003, 4), {100'003});
  for (const auto& [name, a] :
       std::vector<std::pair<std::string, mv::Array>>{{"x", x}, {"long", longrow}}) {
    for (const std::vector<int>& axes : std::vector<std::vector<int>>{{}, {0}, {-1}}) {
      expect_same_windowed<float>("sum " + name, [&] { return mv::sum(a, axes); });
      expect_same_windowed<float>("max " + name, [&] { return mv::max(a, axes); });
      expect_same_windowed<float>("min " + name, [&] { return mv::min(a, axes); });
    }
    expect_same_windowed<int32_t>("argmax " + name, [&] { return mv::argmax(a, 0); });
    expect_same_windowed<int32_t>("argmin " + name, [&] { return mv::argmin(a, -1); });
  }
  expect_same_windowed<float>("sum vec4", [&] { return mv::sum(x.reshape({120'000})); });
  expect_same_windowed<int32_t>("int sum rows", [&] {
    return mv::sum(positions({20'000, 3}), {1});
  });
  expect_same_windowed<int32_t>("int argmax", [&] { return mv::argmax(xi, 1); });
  // Take: whole blocks per window, a block split over several windows of the taken axis, and
  // more indices than one binding holds.
  std::vector<int32_t> picks;
  for (int32_t i = 0; i < 20'000; ++i) picks.push_back((i * 37) % 330 - 15);
  const auto many = mv::array(std::span<const int32_t>(picks), mv::Shape{20'000});
  const auto few = mv::array(std::span<const int32_t>(picks.data(), 50), mv::Shape{5, 10});
  expect_same_windowed<float>("take axis 0",
                              [&] { return mv::take(x, few, 0, mv::TakeMode::clip); });
  expect_same_windowed<float>("take axis 1",
                              [&] { return mv::take(x, few, 1, mv::TakeMode::clip); });
  expect_same_windowed<int32_t>("take many", [&] {
    return mv::take(xi.reshape({1200, 100}), many, 1);
  });
  expect_same_windowed<int32_t>("take 3d", [&] { return mv::take(xi, few, 1); });
  // Argsort: groups of aligned rows, and rows sorted one at a time from unaligned offsets.
  expect_same_windowed<int32_t>("argsort rows", [&] {
    return mv::argsort(x.reshape({7'500, 16}));
  });
  expect_same_windowed<int32_t>("argsort long rows", [&] {
    return mv::argsort(host_array(random_floats(5 * 5001, 5), {5, 5001}));
  });
  // Sorted results are right, not just the same both ways.
  {
    const SmallBindings small(64 << 10);
    const auto v = random_floats(5 * 5001, 5);
    const auto order = mv::argsort(host_array(v, {5, 5001})).to_host<int32_t>();
    for (int r = 0; r < 5; ++r) {
      std::vector<int32_t> want(5001);
      std::iota(want.begin(), want.end(), 0);
      std::stable_sort(want.begin(), want.end(),
                       [&](int32_t a, int32_t b) { return v[r * 5001 + a] < v[r * 5001 + b]; });
      EXPECT_TRUE(std::equal(want.begin(), want.end(), order.begin() + r * 5001)) << "row " << r;
    }
    expect_all(mv::transpose(xi, {2, 0, 1}).to_host<int32_t>(), 120'000, [](size_t i) {
      const size_t c = i / 1200, a = i / 40 % 30, b = i % 40;
      return static_cast<int32_t>(a * 4000 + b * 100 + c);
    });
  }
}

// What still needs more than one binding fails with an error that says so, and nothing breaks.
TEST(LargeBuffers, WhatCannotBeWindowedIsAClearError) {
  const SmallBindings small(64 << 10);
  const auto check = [](const std::function<void()>& f, const std::string& says) {
    try {
      f();
      ADD_FAILURE() << "expected an error saying " << says;
    } catch (const mv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  // One slice along the taken axis (20000 elements) is past 64 KiB.
  check(
      [] {
        mv::take(positions({3, 20'000}), mv::array({2, 0}), 0).to_host<int32_t>();
      },
      "shard the array over more devices");
  // One row of 20000 needs 128 KiB of sort keys.
  check(
      [] {
        mv::argsort(positions({2, 20'000})).to_host<int32_t>();
      },
      "sort fewer elements per row");
  EXPECT_EQ(mv::sum(positions({4, 4})).to_host<int32_t>(), std::vector<int32_t>{120});
}

TEST(LargeBuffers, OneElementOfAPiecePastOneBinding) {
  // A one-element copy simplifies to no dimensions; past the binding limits it is a plain copy.
  const SmallBindings small(64 << 10);
  const auto x = positions({300, 200});  // 240 KB on one device, past 64 KiB
  EXPECT_EQ(mv::slice(x, {123, 45}, {124, 46}).to_host<int32_t>(),
            std::vector<int32_t>{123 * 200 + 45});
  EXPECT_EQ(mv::dynamic_update_slice(x, mv::full({1, 1}, int32_t{-5}), {7, 9})
                .to_host<int32_t>()[7 * 200 + 9],
            -5);
}

// An outside tester's attempts to break the copies and takes that move vec4s
// (kernels/strided_copy.cpp, kernels/take.cpp): every permutation, slices, concatenate and pad at
// every alignment, every take mode and fill, sharded, against plain host loops, exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "fast_paths_checks.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

using namespace fast_paths;  // NOLINT: the shared host references, mv, Array, P, Shape

TEST(FastPathsAdversarial, TransposeEveryPermutationOfThreeToFiveDims) {
  for (const Shape& s : std::vector<Shape>{{3, 5, 8}, {2, 3, 4, 4}, {2, 3, 5, 7}, {2, 1, 3, 2, 12}, {1, 2, 3, 2, 5}}) {
    const auto v = small_ints(numel(s), 20);
    std::vector<int> perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    const Array X = host_array(v, s);
    do {
      std::string name = "perm";
      for (int p : perm) name += " " + std::to_string(p);
      const auto want = host_transpose(v, s, perm);
      expect_exact<float>(mv::transpose(X, perm), want, name);
      // Reshape to 2-D after the transpose (a copy that must materialize the permuted order).
      const Array flat = mv::reshape(mv::transpose(X, perm), {numel(s)});
      expect_exact<float>(flat, want, name + " reshaped");
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(FastPathsAdversarial, TransposeKeepingMinorAxisJitIntAndSharded) {
  const Shape s = {3, 4, 5, 8};
  std::vector<int32_t> vi(numel(s));
  for (size_t i = 0; i < vi.size(); ++i) vi[i] = static_cast<int32_t>(i * 2654435761u);
  const auto fn = [](const Array& x) { return mv::transpose(x, {2, 0, 1, 3}); };
  const auto want = host_transpose(vi, s, {2, 0, 1, 3});
  const Array X = mv::array(std::span<const int32_t>(vi), s);
  const auto j = mv::jit(fn);
  expect_exact<int32_t>(j(X), want, "int32 jit");
  std::vector<int32_t> vi2(vi.rbegin(), vi.rend());
  expect_exact<int32_t>(j(mv::array(std::span<const int32_t>(vi2), s)), host_transpose(vi2, s, {2, 0, 1, 3}),
                        "int32 jit replay");
  // 16-bit elements keep the scalar path: bfloat16 transpose keeping the last axis of 4.
  std::vector<mv::bfloat16> vb(numel(s));
  std::vector<float> vf(numel(s));
  for (size_t i = 0; i < vb.size(); ++i) {
    vf[i] = static_cast<float>(static_cast<int>(i % 200) - 100);
    vb[i] = mv::bfloat16(vf[i]);
  }
  expect_exact<float>(mv::astype(fn(mv::array(std::span<const mv::bfloat16>(vb), s)), mv::DType::float32),
                      host_transpose(vf, s, {2, 0, 1, 3}), "bf16");
  // Sharded: (8, 6, 12) split over x on axis 0, transposed to (6, 8, 12).
  for (const int n : {2, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const Shape t = {8, 6, 12};
    const auto v = small_ints(numel(t), 21);
    const Array Xs = placed_array(v, t, mv::NamedSharding(mesh, P("x")));
    const auto tf = [](const Array& x) { return mv::transpose(x, {1, 0, 2}) + 1.f; };
    auto want2 = host_transpose(v, t, {1, 0, 2});
    for (auto& w : want2) w += 1.f;
    expect_exact<float>(tf(Xs), want2, "sharded eager n=" + std::to_string(n));
    expect_exact<float>(mv::jit(tf)(Xs), want2, "sharded jit n=" + std::to_string(n));
  }
}

TEST(FastPathsAdversarial, SlicesOfRowsWithOddStarts) {
  const Shape s = {9, 20};
  const auto v = small_ints(numel(s), 22);
  const Array X = host_array(v, s);
  for (int64_t r0 = 0; r0 < 3; ++r0)
    for (int64_t c0 : {0, 1, 2, 3, 4, 5}) {
      for (int64_t width : {4, 8, 12, 15}) {
        if (c0 + width > 20) continue;
        const Array got = mv::slice(X, {r0, c0}, {9, c0 + width});
        std::vector<float> want;
        for (int64_t i = r0; i < 9; ++i)
          for (int64_t j = c0; j < c0 + width; ++j) want.push_back(v[i * 20 + j]);
        expect_exact<float>(mv::reshape(got, {static_cast<int64_t>(want.size())}), want,
                            "slice r0=" + std::to_string(r0) + " c0=" + std::to_string(c0) + " w=" + std::to_string(width));
      }
    }
  // Stepped rows, whole rows kept.
  const Array stepped = mv::slice(X, {1, 0}, {9, 20}, {3, 1});
  std::vector<float> want;
  for (int64_t i = 1; i < 9; i += 3)
    for (int64_t j = 0; j < 20; ++j) want.push_back(v[i * 20 + j]);
  expect_exact<float>(mv::reshape(stepped, {static_cast<int64_t>(want.size())}), want, "stepped rows");
}

namespace {
// numpy take with JAX's modes along `axis`.
std::vector<float> host_take(const std::vector<float>& x, const Shape& s, const std::vector<int32_t>& ids, int axis,
                             mv::TakeMode mode, float fill) {
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < axis; ++k) outer *= s[k];
  for (size_t k = axis + 1; k < s.size(); ++k) inner *= s[k];
  const int64_t n = s[axis];
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int32_t id : ids)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = id;
        bool filled = false;
        if (mode == mv::TakeMode::fill) {
          if (k < 0) k += n;
          if (k < 0 || k >= n) filled = true;
        } else if (mode == mv::TakeMode::clip) {
          k = std::clamp<int64_t>(k, 0, n - 1);
        } else {
          k = ((k % n) + n) % n;
        }
        out.push_back(filled ? fill : x[(o * n + k) * inner + i]);
      }
  return out;
}

}  // namespace

TEST(FastPathsAdversarial, TakeEveryAxisEveryModeVec4AndNot) {
  const std::vector<int32_t> ids = {0, -1, 3, 7, -8, 2, 100, -100, 5, 1, 4};
  for (const Shape& s : std::vector<Shape>{{7, 4}, {3, 7, 8}, {2, 5, 3, 4}, {5, 12}, {6, 3}, {4, 2, 2}}) {
    const auto v = small_ints(numel(s), 30);
    const Array X = host_array(v, s);
    for (int axis = 0; axis < static_cast<int>(s.size()); ++axis)
      for (const auto mode : {mv::TakeMode::fill, mv::TakeMode::clip, mv::TakeMode::wrap}) {
        // Index array of shape (11,) and, reshaped, a 2-D one of the first 10 ids.
        const Array I = mv::array(std::span<const int32_t>(ids), Shape{11});
        const auto want = host_take(v, s, ids, axis, mode, std::nanf(""));
        const std::string what = "shape rank " + std::to_string(s.size()) + " last " + std::to_string(s.back()) +
                                 " axis " + std::to_string(axis) + " mode " + std::to_string(static_cast<int>(mode));
        const Array got = mv::take(X, I, axis, mode);
        expect_exact<float>(mv::reshape(got, {numel(got.shape())}), want, what);
        const auto j = mv::jit([axis, mode](const Array& x, const Array& i) { return mv::take(x, i, axis, mode, 0.f); });
        const auto want0 = host_take(v, s, ids, axis, mode, 0.f);
        const Array gj = j(X, I);
        expect_exact<float>(mv::reshape(gj, {numel(gj.shape())}), want0, what + " jit fill 0");
        std::vector<int32_t> ids2(ids.rbegin(), ids.rend());
        const Array gj2 = j(X, mv::array(std::span<const int32_t>(ids2), Shape{11}));
        expect_exact<float>(mv::reshape(gj2, {numel(gj2.shape())}), host_take(v, s, ids2, axis, mode, 0.f),
                            what + " jit replay");
        const std::vector<int32_t> ids2d(ids.begin(), ids.begin() + 10);
        const Array g2 = mv::take(X, mv::array(std::span<const int32_t>(ids2d), Shape{2, 5}), axis, mode, 0.f);
        Shape ws = s;
        ws.erase(ws.begin() + axis);
        ws.insert(ws.begin() + axis, {2, 5});
        EXPECT_EQ(g2.shape(), ws) << what;
        expect_exact<float>(mv::reshape(g2, {numel(g2.shape())}), host_take(v, s, ids2d, axis, mode, 0.f), what + " 2-D ids");
      }
  }
}

TEST(FastPathsAdversarial, TakeTypedAndIndexingAndGradient) {
  const std::vector<int32_t> ids = {2, 0, -1, 2};
  // int32 rows of 4 (vec4 path), int8 / bfloat16 rows of 4 and 8 (not 4-byte elements).
  const Shape s = {3, 8};
  std::vector<int32_t> vi(24);
  std::vector<int8_t> v8(24);
  std::vector<mv::bfloat16> vb(24);
  std::vector<float> vf(24);
  for (int i = 0; i < 24; ++i) {
    vi[i] = i * 1000003 - 7;
    v8[i] = static_cast<int8_t>(i * 5 - 60);
    vf[i] = static_cast<float>(i - 12);
    vb[i] = mv::bfloat16(vf[i]);
  }
  const Array I = mv::array(std::span<const int32_t>(ids), Shape{4});
  std::vector<int32_t> wi;
  std::vector<int8_t> w8;
  std::vector<float> wf;
  for (int32_t id : ids) {
    const int r = id < 0 ? id + 3 : id;
    for (int k = 0; k < 8; ++k) {
      wi.push_back(vi[r * 8 + k]);
      w8.push_back(v8[r * 8 + k]);
      wf.push_back(vf[r * 8 + k]);
    }
  }
  expect_exact<int32_t>(mv::reshape(mv::take(mv::array(std::span<const int32_t>(vi), s), I), {32}), wi, "int32");
  expect_exact<int8_t>(mv::reshape(mv::take(mv::array(std::span<const int8_t>(v8), s), I), {32}), w8, "int8");
  expect_exact<float>(
      mv::reshape(mv::astype(mv::take(mv::array(std::span<const mv::bfloat16>(vb), s), I), mv::DType::float32), {32}), wf,
      "bfloat16");
  // x[ids] spelling.
  const Array Xf = host_array(vf, s);
  expect_exact<float>(mv::reshape(Xf[I], {32}), wf, "x[ids]");
  // take_along_axis on axis 1 (rows of 8).
  std::vector<int32_t> along(24);
  for (int i = 0; i < 24; ++i) along[i] = (i * 3) % 8;
  std::vector<float> wa(24);
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 8; ++k) wa[r * 8 + k] = vf[r * 8 + along[r * 8 + k]];
  expect_exact<float>(mv::reshape(mv::take_along_axis(Xf, mv::array(std::span<const int32_t>(along), s), 1), {24}), wa,
                      "take_along_axis");
  // Gradient of sum(take(x, ids) * w): rows accumulate their weights (index 2 given twice, -1 = 2).
  const auto wv = small_ints(32, 31);
  const Array W = host_array(wv, {4, 8});
  const auto g = mv::grad([&](const Array& x) { return mv::sum(mv::take(x, I) * W); })(Xf);
  std::vector<float> wg(24, 0.f);
  for (size_t j = 0; j < ids.size(); ++j) {
    const int r = ids[j] < 0 ? ids[j] + 3 : ids[j];
    for (int k = 0; k < 8; ++k) wg[r * 8 + k] += wv[j * 8 + k];
  }
  expect_exact<float>(mv::reshape(g, {24}), wg, "grad of take");
}

TEST(FastPathsAdversarial, Int64AndFloat64TransposesSlicesAndTakes) {
  for (const Shape& s : std::vector<Shape>{{3, 5, 2}, {2, 3, 4}, {4, 2, 1}, {2, 2, 3}}) {
    std::vector<int64_t> v(numel(s));
    std::vector<double> d(numel(s));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = (static_cast<int64_t>(i) - 7) * 1000000007LL * 65536;
      d[i] = static_cast<double>(i) * 1.0000000001 - 3.5;
    }
    const Array X = mv::array(std::span<const int64_t>(v), s);
    const Array D = mv::array(std::span<const double>(d), s);
    std::vector<int> perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      expect_exact<int64_t>(mv::transpose(X, perm), host_transpose(v, s, perm), "int64 transpose");
      expect_exact<double>(mv::transpose(D, perm), host_transpose(d, s, perm), "float64 transpose");
    } while (std::next_permutation(perm.begin(), perm.end()));
    // Slices along the last axis at every start.
    for (int64_t st = 0; st < s.back(); ++st) {
      std::vector<int64_t> want;
      const int64_t outer = numel(s) / s.back();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = st; k < s.back(); ++k) want.push_back(v[o * s.back() + k]);
      std::vector<int64_t> start(s.size(), 0), stop(s.begin(), s.end());
      start.back() = st;
      expect_exact<int64_t>(mv::reshape(mv::slice(X, start, stop), {static_cast<int64_t>(want.size())}), want,
                            "int64 slice start " + std::to_string(st));
    }
    // take along axis 0 every mode.
    const std::vector<int32_t> ids = {1, -1, 0, 9, -9};
    for (const auto mode : {mv::TakeMode::fill, mv::TakeMode::clip, mv::TakeMode::wrap}) {
      const int64_t n0 = s[0], inner = numel(s) / n0;
      std::vector<int64_t> want;
      std::vector<double> wantd;
      for (int32_t id : ids) {
        int64_t k = id;
        bool filled = false;
        if (mode == mv::TakeMode::fill) {
          if (k < 0) k += n0;
          filled = k < 0 || k >= n0;
        } else if (mode == mv::TakeMode::clip) {
          k = std::clamp<int64_t>(k, 0, n0 - 1);
        } else {
          k = ((k % n0) + n0) % n0;
        }
        for (int64_t i = 0; i < inner; ++i) {
          want.push_back(filled ? std::numeric_limits<int64_t>::min() : v[k * inner + i]);
          wantd.push_back(filled ? std::nan("") : d[k * inner + i]);
        }
      }
      const Array I = mv::array(std::span<const int32_t>(ids), Shape{5});
      const Array t = mv::take(X, I, 0, mode);
      expect_exact<int64_t>(mv::reshape(t, {numel(t.shape())}), want, "int64 take mode " + std::to_string(int(mode)));
      const Array td = mv::jit([mode](const Array& x, const Array& i) { return mv::take(x, i, 0, mode); })(D, I);
      expect_exact<double>(mv::reshape(td, {numel(td.shape())}), wantd, "float64 take mode " + std::to_string(int(mode)));
    }
  }
}

TEST(FastPathsAdversarial, ShardedTakeUnevenMeshes) {
  for (const int n : {1, 2, 3, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    // Table (rows, 8) split over columns (8 isn't split evenly by 3: use 4n columns) and ids.
    const int64_t rows = 7, cols = 4 * n;
    const auto v = small_ints(rows * cols, 500 + n);
    const Array T = placed_array(v, {rows, cols}, mv::NamedSharding(mesh, P(mv::None, "x")));
    const std::vector<int32_t> ids = {6, 0, -1, 3, 3, 12, -8, 2};
    const Array I = mv::array(std::span<const int32_t>(ids), Shape{8});
    const auto want = host_take(v, {rows, cols}, ids, 0, mv::TakeMode::clip, 0.f);
    const auto f = [](const Array& t, const Array& i) { return mv::take(t, i, 0, mv::TakeMode::clip) * 1.f; };
    expect_exact<float>(mv::reshape(f(T, I), {8 * cols}), want, "table split over columns n=" + std::to_string(n));
    expect_exact<float>(mv::reshape(mv::jit(f)(T, I), {8 * cols}), want, "jit n=" + std::to_string(n));
    // Rows split (the take axis itself split), wrap mode.
    const Array R = placed_array(v, {rows + 0, cols}, mv::NamedSharding(mesh, P()));
    const Array Ids = mv::device_put(std::span<const int32_t>(ids), Shape{8}, mv::NamedSharding(mesh, 8 % n == 0 ? P("x") : P()));
    const auto want2 = host_take(v, {rows, cols}, ids, 0, mv::TakeMode::wrap, 0.f);
    expect_exact<float>(mv::reshape(mv::take(R, Ids, 0, mv::TakeMode::wrap), {8 * cols}), want2,
                        "ids split n=" + std::to_string(n));
  }
}

// Out-of-range takes of every small dtype with rows of 4 and 8 (the vec4 kernel) and 3: JAX's
// default fills (NaN, -128, 255, true, UINT32_MAX, INT32_MIN).
TEST(FastPathsAdversarial, TakeDefaultFillsOfEveryDtypeOnVec4Rows) {
  const std::vector<int32_t> ids = {1, 5, -1, -6, 0};
  for (const int64_t inner : {int64_t{3}, int64_t{4}, int64_t{8}}) {
    const int64_t rows = 4;
    const Array I = mv::array(std::span<const int32_t>(ids), Shape{5});
    const auto row_of = [&](int32_t id) -> int64_t {
      const int64_t k = id < 0 ? id + rows : id;
      return (k < 0 || k >= rows) ? -1 : k;
    };
    const std::string w = " inner " + std::to_string(inner);
    {
      std::vector<int8_t> v(rows * inner), want;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int8_t>(i * 9 - 70);
      for (int32_t id : ids)
        for (int64_t j = 0; j < inner; ++j) want.push_back(row_of(id) < 0 ? int8_t{-128} : v[row_of(id) * inner + j]);
      const Array t = mv::take(mv::array(std::span<const int8_t>(v), Shape{rows, inner}), I);
      expect_exact<int8_t>(mv::reshape(t, {5 * inner}), want, "int8" + w);
    }
    {
      std::vector<uint8_t> v(rows * inner), want;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 13);
      for (int32_t id : ids)
        for (int64_t j = 0; j < inner; ++j) want.push_back(row_of(id) < 0 ? uint8_t{255} : v[row_of(id) * inner + j]);
      const Array t = mv::take(mv::array(std::span<const uint8_t>(v), Shape{rows, inner}), I);
      expect_exact<uint8_t>(mv::reshape(t, {5 * inner}), want, "uint8" + w);
    }
    {
      std::vector<uint32_t> v(rows * inner), want;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint32_t>(i * 2654435761u);
      for (int32_t id : ids)
        for (int64_t j = 0; j < inner; ++j) want.push_back(row_of(id) < 0 ? 0xffffffffu : v[row_of(id) * inner + j]);
      const Array t = mv::take(mv::array(std::span<const uint32_t>(v), Shape{rows, inner}), I);
      expect_exact<uint32_t>(mv::reshape(t, {5 * inner}), want, "uint32" + w);
    }
    {
      std::vector<int32_t> v(rows * inner), want;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i * 7 - 11);
      for (int32_t id : ids)
        for (int64_t j = 0; j < inner; ++j)
          want.push_back(row_of(id) < 0 ? std::numeric_limits<int32_t>::min() : v[row_of(id) * inner + j]);
      const Array t = mv::take(mv::array(std::span<const int32_t>(v), Shape{rows, inner}), I);
      expect_exact<int32_t>(mv::reshape(t, {5 * inner}), want, "int32" + w);
      // bool: from int32 != 0, filled with true.
      const Array tb = mv::take(mv::array(std::span<const int32_t>(v), Shape{rows, inner}) != 0, I);
      std::vector<int32_t> wb;
      for (int32_t id : ids)
        for (int64_t j = 0; j < inner; ++j) wb.push_back(row_of(id) < 0 ? 1 : (v[row_of(id) * inner + j] != 0));
      expect_exact<int32_t>(mv::reshape(mv::astype(tb, mv::DType::int32), {5 * inner}), wb, "bool" + w);
    }
    {
      std::vector<mv::float16> v(rows * inner);
      std::vector<mv::bfloat16> vb(rows * inner);
      std::vector<float> vf(rows * inner), want;
      for (size_t i = 0; i < v.size(); ++i) {
        vf[i] = static_cast<float>(static_cast<int>(i) - 9);
        v[i] = mv::float16(vf[i]);
        vb[i] = mv::bfloat16(vf[i]);
      }
      for (int32_t id : ids)
        for (int64_t j = 0; j < inner; ++j) want.push_back(row_of(id) < 0 ? std::nanf("") : vf[row_of(id) * inner + j]);
      const Array th = mv::take(mv::array(std::span<const mv::float16>(v), Shape{rows, inner}), I);
      const Array tbf = mv::take(mv::array(std::span<const mv::bfloat16>(vb), Shape{rows, inner}), I);
      expect_exact<float>(mv::reshape(mv::astype(th, mv::DType::float32), {5 * inner}), want, "float16" + w);
      expect_exact<float>(mv::reshape(mv::astype(tbf, mv::DType::float32), {5 * inner}), want, "bfloat16" + w);
    }
  }
}

// Copies into windows of an output (concatenate and pad along the last axis) at every
// alignment, 4- and 8-byte elements.
TEST(FastPathsAdversarial, ConcatenateAndPadAlongTheLastAxisAtEveryAlignment) {
  const int64_t r = 3;
  for (int64_t c1 = 1; c1 <= 8; ++c1)
    for (int64_t c2 : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{8}}) {
      const auto a = small_ints(r * c1, 1100 + c1), b = small_ints(r * c2, 1200 + c2);
      std::vector<float> want;
      std::vector<int64_t> a64(a.begin(), a.end()), b64(b.begin(), b.end()), want64;
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t j = 0; j < c1; ++j) want.push_back(a[i * c1 + j]);
        for (int64_t j = 0; j < c2; ++j) want.push_back(b[i * c2 + j]);
      }
      for (float f : want) want64.push_back(static_cast<int64_t>(f) * 4294967296LL + 3);
      for (auto& x : a64) x = x * 4294967296LL + 3;
      for (auto& x : b64) x = x * 4294967296LL + 3;
      const std::string w = "c1=" + std::to_string(c1) + " c2=" + std::to_string(c2);
      const auto cat = [](const Array& x, const Array& y) { return mv::concatenate({x, y}, 1); };
      expect_exact<float>(mv::reshape(cat(host_array(a, {r, c1}), host_array(b, {r, c2})), {r * (c1 + c2)}), want, "f32 " + w);
      expect_exact<float>(mv::reshape(mv::jit(cat)(host_array(a, {r, c1}), host_array(b, {r, c2})), {r * (c1 + c2)}), want,
                          "f32 jit " + w);
      expect_exact<int64_t>(mv::reshape(cat(mv::array(std::span<const int64_t>(a64), Shape{r, c1}),
                                            mv::array(std::span<const int64_t>(b64), Shape{r, c2})),
                                        {r * (c1 + c2)}),
                            want64, "i64 " + w);
      // pad (before c2, after c1) with 5.
      std::vector<float> wp;
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t j = 0; j < c2; ++j) wp.push_back(5.f);
        for (int64_t j = 0; j < c1; ++j) wp.push_back(a[i * c1 + j]);
        for (int64_t j = 0; j < c1; ++j) wp.push_back(5.f);
      }
      expect_exact<float>(mv::reshape(mv::pad(host_array(a, {r, c1}), {{0, 0}, {c2, c1}}, 5.f), {r * (c2 + 2 * c1)}), wp,
                          "pad " + w);
    }
}

// Six dimensions: a sample of the permutations (those keeping the last axis and others), and
// 4-D transposes of arrays split over the mesh on different axes, jitted and replayed.
TEST(FastPathsAdversarial, SixDimTransposesAndShardedFourDimTransposes) {
  const Shape s = {2, 3, 1, 2, 3, 4};
  const auto v = small_ints(numel(s), 1400);
  const Array X = host_array(v, s);
  std::vector<int> perm = {0, 1, 2, 3, 4, 5};
  std::mt19937 rng(7);
  for (int k = 0; k < 36; ++k) {
    std::shuffle(perm.begin(), perm.end() - (k % 2 == 0 ? 1 : 0), rng);  // even k: keep the last axis
    std::string name = "6-D perm";
    for (int p : perm) name += " " + std::to_string(p);
    expect_exact<float>(mv::transpose(X, perm), host_transpose(v, s, perm), name);
  }
  for (const int n : {2, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const Shape t = {8, 2, 3, 8};
    for (const int split_axis : {0, 3}) {
      std::vector<mv::SpecEntry> spec(4, mv::SpecEntry());
      spec[split_axis] = mv::SpecEntry("x");
      const mv::NamedSharding sh(mesh, mv::PartitionSpec(spec));
      const auto f = mv::jit([](const Array& x) { return mv::transpose(x, {2, 0, 1, 3}) * 2.f; });
      for (int call = 0; call < 2; ++call) {
        const auto vv = small_ints(numel(t), 1500 + call);
        auto want = host_transpose(vv, t, {2, 0, 1, 3});
        for (auto& w : want) w *= 2.f;
        expect_exact<float>(f(placed_array(vv, t, sh)), want,
                            "sharded 4-D n=" + std::to_string(n) + " axis " + std::to_string(split_axis) + " call " + std::to_string(call));
      }
    }
  }
}

// Joins along the leading axis go as runs of one copy command per pair of buffers
// (kernels::record_copy_runs): every dtype size (1, 2, 4 and 8 bytes, the last box by box),
// operands of 0 rows and odd sizes, on one device and each device joining its own pieces.
TEST(FastPathsAdversarial, ConcatenateAlongTheLeadingAxisInRuns) {
  const std::vector<int64_t> rows{3, 0, 5, 1, 7};
  const int64_t cols = 24;  // 3 per device over 8
  std::vector<std::vector<float>> parts;
  for (size_t k = 0; k < rows.size(); ++k) {
    std::vector<float> v(static_cast<size_t>(rows[k] * cols));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + k * 31) % 199) - 99);
    parts.push_back(std::move(v));
  }
  std::vector<float> want;
  for (const auto& p : parts) want.insert(want.end(), p.begin(), p.end());
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Mesh three = mv::make_mesh({3}, {"x"}, {}, {2, 5, 6});
  for (const mv::DType dtype : {mv::DType::float32, mv::DType::bfloat16, mv::DType::int8, mv::DType::int64}) {
    for (int layout = 0; layout < 3; ++layout) {
      std::vector<Array> in;
      for (size_t k = 0; k < parts.size(); ++k) {
        Array a = mv::astype(mv::array(std::span<const float>(parts[k]), mv::Shape{rows[k], cols}), dtype);
        if (layout == 1) a = mv::device_put(a, mv::NamedSharding(mesh, P(mv::None, "x")));
        if (layout == 2) a = mv::device_put(a, mv::NamedSharding(three, P(mv::None, "x")));
        in.push_back(a);
      }
      const std::string what = std::string(mv::dtype_name(dtype)) + ", layout " + std::to_string(layout);
      const Array joined = mv::concatenate(in, 0);
      ASSERT_EQ(joined.shape(), (mv::Shape{16, cols})) << what;
      EXPECT_EQ(mv::astype(joined, mv::DType::float32).to_host<float>(), want) << what;
      const auto jf = mv::jit([](const Array& a, const Array& b, const Array& c) { return mv::concatenate({a, b, c, a}, 0); });
      std::vector<float> w3;
      for (const size_t k : {size_t{0}, size_t{2}, size_t{4}, size_t{0}}) w3.insert(w3.end(), parts[k].begin(), parts[k].end());
      for (int call = 0; call < 2; ++call)
        EXPECT_EQ(mv::astype(jf(in[0], in[2], in[4]), mv::DType::float32).to_host<float>(), w3) << what << ", jit";
    }
  }
}

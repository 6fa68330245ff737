// An outside tester's attempts to break five fast paths: the vector elementwise kernel's
// broadcast row reads (kernels/elementwise.cpp), strided copies that move vec4s
// (kernels/strided_copy.cpp), take's vec4 kernel (kernels/take.cpp), jit constants made only
// when traced (trace_only: runtime/submission.cpp, exec/sharded_value.cpp) and scan's saved
// matmul products (graph/linalg_ops.cpp, graph/saved_collectives.cpp). Everything is checked
// against plain host loops (numpy's semantics), exactly where the arithmetic is exact.
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
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;
using mv::Shape;

namespace {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// Flat index into `in` (shape `ins`, right-aligned numpy broadcast) of the output's multi-index.
int64_t bcast_index(const std::vector<int64_t>& idx, const Shape& ins) {
  const auto st = strides_of(ins);
  const size_t off = idx.size() - ins.size();
  int64_t f = 0;
  for (size_t k = 0; k < ins.size(); ++k) f += (ins[k] == 1 ? 0 : idx[off + k]) * st[k];
  return f;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

Shape bshape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape o(n, 1);
  for (size_t k = 0; k < n; ++k) {
    const int64_t da = k + a.size() >= n ? a[k + a.size() - n] : 1;
    const int64_t db = k + b.size() >= n ? b[k + b.size() - n] : 1;
    o[k] = da == 1 ? db : da;
  }
  return o;
}

// Host transpose: out[i] = in[i permuted back].
template <class T>
std::vector<T> host_transpose(const std::vector<T>& in, const Shape& s, const std::vector<int>& perm) {
  Shape os(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) os[k] = s[perm[k]];
  const auto ist = strides_of(s);
  std::vector<T> out(in.size());
  for (int64_t f = 0; f < static_cast<int64_t>(out.size()); ++f) {
    const auto idx = unravel(f, os);
    int64_t src = 0;
    for (size_t k = 0; k < perm.size(); ++k) src += idx[k] * ist[perm[k]];
    out[f] = in[src];
  }
  return out;
}

template <class T>
void expect_exact(const Array& got, const std::vector<T>& want, const std::string& what) {
  const auto v = got.to_host<T>();
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(v[i])) << what << " at " << i;
        continue;
      }
    }
    ASSERT_EQ(v[i], want[i]) << what << " at " << i;
  }
}

std::vector<float> small_ints(size_t n, uint32_t seed) {
  std::vector<float> v = random_floats(n, seed, -50.f, 50.f);
  for (auto& x : v) x = std::round(x);
  return v;
}

mv::Mesh mesh_of(int n) {
  std::vector<int> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return mv::make_mesh({n}, {"x"}, {}, ids);
}

}  // namespace

// ---------------------------------------------------------------- 1. elementwise broadcasts

TEST(FastPathsAdversarial, ElementwiseBroadcastRowsEagerAndJit) {
  struct Case {
    Shape a, b, c;
  };
  const std::vector<Case> cases = {
      {{3, 1, 8}, {1, 5, 8}, {8}},          {{3, 5, 1}, {1, 1, 4}, {1}},
      {{2, 3, 12}, {12}, {2, 3, 1}},        {{1, 4}, {7, 1}, {7, 4}},
      {{5, 1, 1, 16}, {1, 3, 1, 16}, {1, 1, 2, 1}}, {{1}, {9, 4}, {4}},
      {{6, 20}, {1, 20}, {6, 1}},           {{2, 3, 4}, {3, 4}, {2, 1, 4}},
      {{4, 1}, {1, 1}, {1, 8}},             {{3, 7}, {1, 7}, {3, 1}},  // last axis not a multiple of 4
      {{1, 1, 4}, {1, 1, 4}, {1, 1, 4}},   {{0, 4}, {1, 4}, {0, 1}},
  };
  uint32_t seed = 10;
  for (const auto& c : cases) {
    const Shape o = bshape(bshape(c.a, c.b), c.c);
    const auto va = small_ints(numel(c.a), seed++), vb = small_ints(numel(c.b), seed++),
               vc = small_ints(numel(c.c), seed++);
    std::vector<float> want(numel(o));
    for (int64_t f = 0; f < numel(o); ++f) {
      const auto idx = unravel(f, o);
      want[f] = va[bcast_index(idx, c.a)] * vb[bcast_index(idx, c.b)] + vc[bcast_index(idx, c.c)] -
                vb[bcast_index(idx, c.b)];
    }
    const auto fn = [](const Array& a, const Array& b, const Array& c) { return a * b + c - b; };
    const Array A = host_array(va, c.a), B = host_array(vb, c.b), C = host_array(vc, c.c);
    expect_exact<float>(fn(A, B, C), want, "eager " + std::to_string(seed));
    const auto j = mv::jit(fn);
    expect_exact<float>(j(A, B, C), want, "jit " + std::to_string(seed));
    // Replayed with other inputs.
    const auto va2 = small_ints(numel(c.a), seed + 100);
    for (int64_t f = 0; f < numel(o); ++f) {
      const auto idx = unravel(f, o);
      want[f] = va2[bcast_index(idx, c.a)] * vb[bcast_index(idx, c.b)] + vc[bcast_index(idx, c.c)] -
                vb[bcast_index(idx, c.b)];
    }
    expect_exact<float>(j(host_array(va2, c.a), B, C), want, "jit replay " + std::to_string(seed));
  }
}

TEST(FastPathsAdversarial, ElementwiseTransposedAndSlicedOperands) {
  for (const auto& [r, c] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 12}, {5, 8}, {12, 4}, {3, 16}}) {
    const auto vx = small_ints(r * c, 1), vy = small_ints(c * r, 2);
    const auto yt = host_transpose(vy, {c, r}, {1, 0});
    std::vector<float> want(r * c);
    for (int64_t i = 0; i < r * c; ++i) want[i] = vx[i] + 2.f * yt[i];
    const auto fn = [](const Array& x, const Array& y) { return x + mv::transpose(y) * 2.f; };
    expect_exact<float>(fn(host_array(vx, {r, c}), host_array(vy, {c, r})), want, "x + y.T eager");
    expect_exact<float>(mv::jit(fn)(host_array(vx, {r, c}), host_array(vy, {c, r})), want, "x + y.T jit");
  }
  // Slices with offsets not a multiple of 4 feeding an elementwise op on a last axis of 4 / 8.
  const auto vx = small_ints(7 * 13, 3);
  for (const int64_t start : {0, 1, 2, 3, 4, 5}) {
    const auto fn = [start](const Array& x) {
      const Array s = mv::slice(x, {1, start}, {7, start + 8});
      const Array row = mv::slice(x, {0, start}, {1, start + 8});  // (1, 8): broadcast along rows
      return s * row + s;
    };
    std::vector<float> want(6 * 8);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 8; ++j) {
        const float s = vx[(i + 1) * 13 + start + j], row = vx[start + j];
        want[i * 8 + j] = s * row + s;
      }
    expect_exact<float>(fn(host_array(vx, {7, 13})), want, "slice eager start " + std::to_string(start));
    expect_exact<float>(mv::jit(fn)(host_array(vx, {7, 13})), want, "slice jit start " + std::to_string(start));
  }
}

TEST(FastPathsAdversarial, ElementwiseWhereBroadcastPredicateAndManyInputs) {
  const int64_t a = 3, b = 5, c = 8;
  const auto vx = small_ints(a * b * c, 4), vy = small_ints(c, 5), vp = small_ints(a * b, 6);
  const auto fn = [](const Array& x, const Array& y, const Array& p) {
    return mv::where(p > 0.f, x, y);  // p (a,b,1), x (a,b,c), y (c)
  };
  std::vector<float> want(a * b * c);
  for (int64_t i = 0; i < a * b; ++i)
    for (int64_t k = 0; k < c; ++k) want[i * c + k] = vp[i] > 0 ? vx[i * c + k] : vy[k];
  const Array X = host_array(vx, {a, b, c}), Y = host_array(vy, {c}), Pp = host_array(vp, {a, b, 1});
  expect_exact<float>(fn(X, Y, Pp), want, "where eager");
  expect_exact<float>(mv::jit(fn)(X, Y, Pp), want, "where jit");
  // Many inputs, each broadcast differently.
  const auto many = [](const std::vector<Array>& v) {
    Array acc = v[0];
    for (size_t i = 1; i < v.size(); ++i) acc = (i % 2) ? acc + v[i] : acc - v[i] * 2.f;
    return acc;
  };
  const std::vector<Shape> shapes = {{2, 3, 8}, {8}, {2, 1, 8}, {1, 3, 1}, {2, 3, 1}, {1, 1, 8}, {3, 8}, {1}, {2, 1, 1}};
  std::vector<std::vector<float>> vals;
  std::vector<Array> arrs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    vals.push_back(small_ints(numel(shapes[i]), 40 + i));
    arrs.push_back(host_array(vals.back(), shapes[i]));
  }
  std::vector<float> want2(48);
  for (int64_t f = 0; f < 48; ++f) {
    const auto idx = unravel(f, {2, 3, 8});
    float acc = vals[0][bcast_index(idx, shapes[0])];
    for (size_t i = 1; i < shapes.size(); ++i) {
      const float v = vals[i][bcast_index(idx, shapes[i])];
      acc = (i % 2) ? acc + v : acc - v * 2.f;
    }
    want2[f] = acc;
  }
  expect_exact<float>(many(arrs), want2, "many eager");
  expect_exact<float>(mv::jit([&](const Array& x) {
                        std::vector<Array> v = arrs;
                        v[0] = x;
                        return many(v);
                      })(arrs[0]),
                      want2, "many jit");
}

TEST(FastPathsAdversarial, ElementwiseBroadcastSmallDtypes) {
  const int64_t a = 3, c = 8;
  // int8 / uint8 / bfloat16 / float16 / int32, (a,1,c) + (1,2,c) and (a,2,1) * (c).
  std::vector<int8_t> i8a(a * c), i8b(2 * c);
  std::vector<uint8_t> u8a(a * c), u8b(2 * c);
  std::vector<int32_t> i32a(a * c), i32b(2 * c);
  for (int64_t i = 0; i < a * c; ++i) {
    i8a[i] = static_cast<int8_t>((i * 7) % 60 - 30);
    u8a[i] = static_cast<uint8_t>((i * 13) % 120);
    i32a[i] = static_cast<int32_t>(i * 1001 - 5000);
  }
  for (int64_t i = 0; i < 2 * c; ++i) {
    i8b[i] = static_cast<int8_t>((i * 5) % 40 - 20);
    u8b[i] = static_cast<uint8_t>((i * 11) % 100);
    i32b[i] = static_cast<int32_t>(i * 77 - 300);
  }
  auto check = [&](auto va, auto vb, const std::string& what) {
    using T = typename decltype(va)::value_type;
    std::vector<T> want(a * 2 * c);
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t k = 0; k < c; ++k)
          want[(i * 2 + j) * c + k] = static_cast<T>(va[i * c + k] + vb[j * c + k]);
    const Array A = mv::array(std::span<const T>(va), Shape{a, 1, c});
    const Array B = mv::array(std::span<const T>(vb), Shape{1, 2, c});
    const auto fn = [](const Array& x, const Array& y) { return x + y; };
    expect_exact<T>(fn(A, B), want, what + " eager");
    expect_exact<T>(mv::jit(fn)(A, B), want, what + " jit");
  };
  check(i8a, i8b, "int8");
  check(u8a, u8b, "uint8");
  check(i32a, i32b, "int32");
  // 16-bit floats: exact small integers.
  std::vector<mv::bfloat16> ba(a * c), bb(2 * c);
  std::vector<mv::float16> ha(a * c), hb(2 * c);
  std::vector<float> fa(a * c), fb(2 * c);
  for (int64_t i = 0; i < a * c; ++i) {
    fa[i] = static_cast<float>(i % 17 - 8);
    ba[i] = mv::bfloat16(fa[i]);
    ha[i] = mv::float16(fa[i]);
  }
  for (int64_t i = 0; i < 2 * c; ++i) {
    fb[i] = static_cast<float>(i % 9 - 4);
    bb[i] = mv::bfloat16(fb[i]);
    hb[i] = mv::float16(fb[i]);
  }
  std::vector<float> want(a * 2 * c);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < c; ++k) want[(i * 2 + j) * c + k] = fa[i * c + k] * fb[j * c + k];
  const auto fn = [](const Array& x, const Array& y) { return x * y; };
  for (const bool jit : {false, true}) {
    const Array rb = jit ? mv::jit(fn)(mv::array(std::span<const mv::bfloat16>(ba), Shape{a, 1, c}),
                                       mv::array(std::span<const mv::bfloat16>(bb), Shape{1, 2, c}))
                         : fn(mv::array(std::span<const mv::bfloat16>(ba), Shape{a, 1, c}),
                              mv::array(std::span<const mv::bfloat16>(bb), Shape{1, 2, c}));
    const Array rh = jit ? mv::jit(fn)(mv::array(std::span<const mv::float16>(ha), Shape{a, 1, c}),
                                       mv::array(std::span<const mv::float16>(hb), Shape{1, 2, c}))
                         : fn(mv::array(std::span<const mv::float16>(ha), Shape{a, 1, c}),
                              mv::array(std::span<const mv::float16>(hb), Shape{1, 2, c}));
    expect_exact<float>(mv::astype(rb, mv::DType::float32), want, jit ? "bf16 jit" : "bf16 eager");
    expect_exact<float>(mv::astype(rh, mv::DType::float32), want, jit ? "f16 jit" : "f16 eager");
  }
}

TEST(FastPathsAdversarial, ElementwiseShardedLastAxisWithReplicatedBroadcast) {
  for (const int n : {1, 2, 3, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const int64_t r = 5, c = 8 * n;
    const auto vx = small_ints(r * c, 7), vrow = small_ints(c, 8), vcol = small_ints(r, 9);
    const Array X = placed_array(vx, {r, c}, mv::NamedSharding(mesh, P(mv::None, "x")));
    const Array Row = placed_array(vrow, {1, c}, mv::NamedSharding(mesh, P()));
    const Array Col = placed_array(vcol, {r, 1}, mv::NamedSharding(mesh, P()));
    std::vector<float> want(r * c);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) want[i * c + j] = vx[i * c + j] * vrow[j] - vcol[i];
    const auto fn = [](const Array& x, const Array& row, const Array& col) { return x * row - col; };
    expect_exact<float>(fn(X, Row, Col), want, "sharded eager n=" + std::to_string(n));
    expect_exact<float>(mv::jit(fn)(X, Row, Col), want, "sharded jit n=" + std::to_string(n));
  }
}

// ---------------------------------------------------------------- 2. strided copies

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

// ---------------------------------------------------------------- 3. take

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

// ---------------------------------------------------------------- 4. jit constants (trace_only)

TEST(FastPathsAdversarial, ConstantsWrittenByDataDependentUpdatesAcrossReplays) {
  // dynamic_update_slice into zeros with a start that changes between replays: every replay must
  // start from zeros (a write into the constant's own buffer would leave the earlier row behind).
  const auto dus = mv::jit([](const Array& row, const Array& i) {
    return mv::dynamic_update_slice(mv::zeros({6, 4}), mv::reshape(row, {1, 4}), {i, mv::scalar(0)});
  });
  const auto aset = mv::jit([](const Array& ids, const Array& v) { return mv::at_set(mv::zeros({7, 4}), ids, v); });
  const auto arange_set = mv::jit([](const Array& ids) { return mv::at_set(mv::arange(8.0f), ids, 100.f); });
  for (int call = 0; call < 4; ++call) {
    const int32_t at = (call * 5 + 1) % 6;
    const std::vector<float> row = {float(call + 1), float(call + 2), float(call + 3), float(call + 4)};
    const Array got = dus(host_array(row), mv::scalar(at));
    std::vector<float> want(24, 0.f);
    for (int k = 0; k < 4; ++k) want[at * 4 + k] = row[k];
    expect_exact<float>(mv::reshape(got, {24}), want, "dynamic_update_slice call " + std::to_string(call));

    const std::vector<int32_t> ids = {call % 7, (call + 3) % 7};
    const Array got2 = aset(mv::array(std::span<const int32_t>(ids), Shape{2}), mv::scalar(float(call + 10)));
    std::vector<float> want2(28, 0.f);
    for (int32_t id : ids)
      for (int k = 0; k < 4; ++k) want2[id * 4 + k] = float(call + 10);
    expect_exact<float>(mv::reshape(got2, {28}), want2, "at_set call " + std::to_string(call));

    const std::vector<int32_t> one = {call};
    std::vector<float> want3(8);
    for (int k = 0; k < 8; ++k) want3[k] = k == call ? 100.f : float(k);
    expect_exact<float>(arange_set(mv::array(std::span<const int32_t>(one), Shape{1})), want3,
                        "at_set arange call " + std::to_string(call));
  }
}

TEST(FastPathsAdversarial, ConstantsAsLoopCarriesAndXsAcrossReplays) {
  // fori_loop / scan / while_loop with constant init carries: a loop that writes its carry in
  // place into the constant's buffer would start the next replay from the last result.
  const auto fori = mv::jit([](const Array& x) {
    return mv::lax::fori_loop(0, 3, [&x](const Array&, const Array& c) { return c + x; }, mv::zeros({5}));
  });
  const auto scanned = mv::jit([](const Array& x) {
    auto [c, ys] = mv::lax::scan([](const Array& c, const Array& t) {
      const Array n = c * 2.f + t;
      return std::make_pair(n, n);
    }, mv::ones({4}) * x, mv::reshape(mv::arange(12.0f), {3, 4}));
    return std::vector<Array>{c, ys};
  });
  const auto inner_const = mv::jit([](const Array& x) {
    auto [c, ys] = mv::lax::scan([](const Array& c, std::nullopt_t) {
      const Array n = c + mv::full({4}, 2.0f) + mv::astype(mv::arange(4), mv::DType::float32);
      return std::make_pair(n, std::nullopt);
    }, x, std::nullopt, 3);
    return c;
  });
  for (int call = 0; call < 4; ++call) {
    const float s = float(call + 1);
    std::vector<float> vx = {s, -s, 2 * s, 0.5f, 3.f};
    std::vector<float> want(5);
    for (int k = 0; k < 5; ++k) want[k] = 3 * vx[k];
    expect_exact<float>(fori(host_array(vx)), want, "fori call " + std::to_string(call));

    const auto out = scanned(mv::scalar(s));
    std::vector<float> c(4, s), ys;
    for (int t = 0; t < 3; ++t) {
      for (int k = 0; k < 4; ++k) c[k] = c[k] * 2.f + float(t * 4 + k);
      ys.insert(ys.end(), c.begin(), c.end());
    }
    expect_exact<float>(out[0], c, "scan carry call " + std::to_string(call));
    expect_exact<float>(mv::reshape(out[1], {12}), ys, "scan ys call " + std::to_string(call));

    std::vector<float> x4 = {s, 0.f, -s, 1.f}, w4(4);
    for (int k = 0; k < 4; ++k) w4[k] = x4[k] + 3.f * (2.f + float(k));
    expect_exact<float>(inner_const(host_array(x4)), w4, "constants in body call " + std::to_string(call));
  }
}

TEST(FastPathsAdversarial, ConstantsReturnedFedBackRetracedAndNested) {
  // A jit returning a constant the caller feeds back in as the next input.
  const auto step = mv::jit([](const Array& x) { return std::vector<Array>{mv::zeros({4}), x + mv::ones({4})}; });
  Array z = mv::ones({4}) * 5.f;
  for (int call = 0; call < 4; ++call) {
    const auto out = step(z);
    expect_exact<float>(out[0], std::vector<float>(4, 0.f), "zeros out call " + std::to_string(call));
    const float expect_x = call == 0 ? 6.f : 1.f;
    expect_exact<float>(out[1], std::vector<float>(4, expect_x), "x+1 call " + std::to_string(call));
    z = out[0];  // the returned constant comes back as the input
    // The earlier output stays untouched by the later replays.
    expect_exact<float>(out[0], std::vector<float>(4, 0.f), "zeros out kept call " + std::to_string(call));
  }
  // Returned constants held across replays, and the caller computing from them eagerly.
  const auto mk = mv::jit([](const Array& x) { return std::vector<Array>{mv::eye(4) * 1.f, mv::tril(mv::ones({4, 4})) + x}; });
  const auto a = mk(mv::scalar(1.f));
  const auto b = mk(mv::scalar(2.f));
  const Array a_mod = mv::at_set(a[0], mv::array({1}, Shape{1}), 9.f);
  std::vector<float> eye(16, 0.f), tr1(16), tr2(16), eye_mod(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      eye[i * 4 + j] = i == j ? 1.f : 0.f;
      tr1[i * 4 + j] = (j <= i ? 1.f : 0.f) + 1.f;
      tr2[i * 4 + j] = (j <= i ? 1.f : 0.f) + 2.f;
      eye_mod[i * 4 + j] = i == 1 ? 9.f : eye[i * 4 + j];
    }
  expect_exact<float>(mv::reshape(a_mod, {16}), eye_mod, "modified eye");
  expect_exact<float>(mv::reshape(a[0], {16}), eye, "first eye");
  expect_exact<float>(mv::reshape(b[0], {16}), eye, "second eye");
  expect_exact<float>(mv::reshape(a[1], {16}), tr1, "first tril");
  expect_exact<float>(mv::reshape(b[1], {16}), tr2, "second tril");
  expect_exact<float>(mv::reshape(mk(mv::scalar(1.f))[0], {16}), eye, "third eye after modifying");
  // Retrace: the same jit at different shapes, then back to the first shape.
  const auto shaped = mv::jit([](const Array& x) { return x + mv::astype(mv::arange(static_cast<int32_t>(x.shape()[0])), mv::DType::float32); });
  for (const int64_t n : {3, 8, 3, 5, 8}) {
    const auto v = small_ints(n, static_cast<uint32_t>(n * 7 + 1));
    std::vector<float> want(n);
    for (int64_t k = 0; k < n; ++k) want[k] = v[k] + float(k);
    expect_exact<float>(shaped(host_array(v)), want, "retrace n=" + std::to_string(n));
  }
  // Nested jit: an inner jit making constants, called from an outer jit, replayed.
  const auto inner = mv::jit([](const Array& x) { return x * mv::full({4}, 3.0f) + mv::arange(4.0f); });
  const auto outer = mv::jit([&inner](const Array& x) { return inner(x) + inner(x * 2.f) + mv::zeros({4}); });
  for (int call = 0; call < 3; ++call) {
    const std::vector<float> v = {float(call), 1.f, -2.f, 0.5f};
    std::vector<float> want(4);
    for (int k = 0; k < 4; ++k) want[k] = (v[k] * 3.f + k) + (v[k] * 2.f * 3.f + k);
    expect_exact<float>(outer(host_array(v)), want, "nested call " + std::to_string(call));
  }
}

TEST(FastPathsAdversarial, ConstantsUnderShardMapAndSharded) {
  for (const int n : {2, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const auto sm = mv::shard_map([](const Array& x) { return x + mv::arange(4.0f) + mv::ones({4}); }, mesh,
                                  {P("x")}, P("x"));
    const auto j = mv::jit([sm](const Array& x) { return sm(x); });
    for (int call = 0; call < 3; ++call) {
      const auto v = small_ints(4 * n, 50 + call);
      std::vector<float> want(4 * n);
      for (int k = 0; k < 4 * n; ++k) want[k] = v[k] + float(k % 4) + 1.f;
      expect_exact<float>(j(placed_array(v, {4 * n}, mv::NamedSharding(mesh, P("x")))), want,
                          "shard_map n=" + std::to_string(n) + " call " + std::to_string(call));
    }
    // A sharded zeros updated with data-dependent indices under jit.
    const auto sz = mv::jit([mesh, n](const Array& ids) {
      return mv::at_set(mv::zeros({2 * n, 4}, mv::DType::float32, mv::NamedSharding(mesh, P("x"))), ids, 1.f);
    });
    for (int call = 0; call < 3; ++call) {
      const std::vector<int32_t> ids = {call % (2 * n)};
      std::vector<float> want(8 * n, 0.f);
      for (int k = 0; k < 4; ++k) want[ids[0] * 4 + k] = 1.f;
      expect_exact<float>(mv::reshape(sz(mv::array(std::span<const int32_t>(ids), Shape{1})), {8 * n}), want,
                          "sharded zeros n=" + std::to_string(n) + " call " + std::to_string(call));
    }
  }
}

// ---------------------------------------------------------------- 5. scan's saved matmuls

namespace {
Array body_step(const Array& h, const Array& w) {
  // Products depending on the carry through both operands and transposes.
  const Array a = mv::matmul(h, w);                               // (b,d)x(d,d)
  const Array b = mv::matmul(mv::transpose(w), mv::transpose(h));  // (d,b)
  const Array c = mv::einsum("bd,de->be", mv::tanh(a), w);
  return mv::tanh(c + mv::transpose(b) * 0.5f + h);
}

Array scan_loss(const Array& h0, const Array& ws, bool reverse) {
  auto [last, ys] = mv::lax::scan(
      [](const Array& h, const Array& w) {
        const Array n = body_step(h, w);
        return std::make_pair(n, mv::matmul(n, mv::transpose(n)));
      },
      h0, ws, std::nullopt, reverse);
  return mv::sum(last * last) + mv::sum(ys) * 0.1f;
}

Array unrolled_loss(const Array& h0, const Array& ws, bool reverse) {
  Array h = h0;
  std::vector<Array> ys;
  const int64_t n = ws.shape()[0];
  for (int64_t t = 0; t < n; ++t) {
    h = body_step(h, ws[reverse ? n - 1 - t : t]);
    ys.push_back(mv::matmul(h, mv::transpose(h)));
  }
  return mv::sum(h * h) + mv::sum(mv::stack(ys, 0)) * 0.1f;
}

void expect_same(const std::vector<Array>& got, const std::vector<Array>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(what + ", gradient " + std::to_string(i));
    EXPECT_EQ(got[i].shape(), want[i].shape());
    expect_close(got[i], want[i].to_host<float>(), 1e-5f);
  }
}
}  // namespace

TEST(FastPathsAdversarial, ScanMatmulGradientsMatchUnrolled) {
  for (const bool reverse : {false, true}) {
    const int64_t layers = 3, b = 5, d = 6;
    const auto f_scan = [reverse](const Array& h, const Array& w) { return scan_loss(h, w, reverse); };
    const auto f_unr = [reverse](const Array& h, const Array& w) { return unrolled_loss(h, w, reverse); };
    const auto gs = mv::grad(f_scan, std::vector<int>{0, 1});
    const auto gu = mv::grad(f_unr, std::vector<int>{0, 1});
    const auto jgs = mv::jit(gs);
    for (int call = 0; call < 3; ++call) {
      const Array h0 = host_array(random_floats(b * d, 60 + call), {b, d});
      const Array ws = host_array(random_floats(layers * d * d, 70 + call, -0.5f, 0.5f), {layers, d, d});
      const auto want = gu(h0, ws);
      const std::string what = std::string(reverse ? "reverse" : "forward") + " call " + std::to_string(call);
      expect_same(gs(h0, ws), want, what + " eager");
      expect_same(jgs(h0, ws), want, what + " jit");
      // value_and_grad agrees too.
      const auto [val, g] = mv::value_and_grad(f_scan, std::vector<int>{0, 1})(h0, ws);
      EXPECT_NEAR(val.to_host<float>()[0], f_unr(h0, ws).to_host<float>()[0], 1e-4f) << what;
      expect_same(g, want, what + " value_and_grad");
    }
  }
}

TEST(FastPathsAdversarial, ScanBatchedMatmulGradientsAndAnalytic) {
  // Batched matmul in the body; the carry is the right operand in one product and the left in
  // another.
  const auto body = [](const Array& c, const Array& w) {
    const Array left = mv::matmul(w, c);                       // (2,3,3)x(2,3,4)
    const Array right = mv::matmul(c, mv::transpose(c, {0, 2, 1}));  // (2,3,3)
    return mv::tanh(left + mv::matmul(right, c) * 0.1f);
  };
  const auto f_scan = [body](const Array& c0, const Array& ws) {
    auto [last, ys] = mv::lax::scan([body](const Array& c, const Array& w) {
      const Array n = body(c, w);
      return std::make_pair(n, mv::sum(n));
    }, c0, ws);
    return mv::sum(last) + mv::sum(ys);
  };
  const auto f_unr = [body](const Array& c0, const Array& ws) {
    Array c = c0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < ws.shape()[0]; ++t) {
      c = body(c, ws[t]);
      acc = acc + mv::sum(c);
    }
    return mv::sum(c) + acc;
  };
  const Array c0 = host_array(random_floats(24, 80), {2, 3, 4});
  const Array ws = host_array(random_floats(4 * 18, 81, -0.5f, 0.5f), {4, 2, 3, 3});
  const auto want = mv::grad(f_unr, std::vector<int>{0, 1})(c0, ws);
  expect_same(mv::grad(f_scan, std::vector<int>{0, 1})(c0, ws), want, "batched eager");
  expect_same(mv::jit(mv::grad(f_scan, std::vector<int>{0, 1}))(c0, ws), want, "batched jit");
  // Analytic: a linear scan c <- W c over n steps, loss sum(c_n): dL/dc0 = (W^T)^n 1.
  const int64_t d = 4, n = 3;
  const auto vw = random_floats(d * d, 82, -0.5f, 0.5f);
  const auto lin = [n](const Array& c0, const Array& w) {
    auto [last, none] = mv::lax::scan([w](const Array& c, std::nullopt_t) {
      return std::make_pair(mv::matmul(w, c), std::nullopt);
    }, c0, std::nullopt, n);
    return mv::sum(last);
  };
  std::vector<double> g(d, 1.0);
  for (int s = 0; s < n; ++s) {
    std::vector<double> ng(d, 0.0);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) ng[j] += vw[i * d + j] * g[i];
    g = ng;
  }
  std::vector<float> gf(g.begin(), g.end());
  const auto got = mv::grad(lin, 0)(host_array(random_floats(d, 83)), host_array(vw, {d, d}));
  expect_close(got, gf, 1e-5f);
}

TEST(FastPathsAdversarial, ScanMatmulGradientsSharded) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const int64_t layers = 3, b = 4, d = 8;
  const Array h0 = placed_array(random_floats(b * d, 90), {b, d}, mv::NamedSharding(mesh, P("data")));
  const Array ws = placed_array(random_floats(layers * d * d, 91, -0.4f, 0.4f), {layers, d, d},
                                mv::NamedSharding(mesh, P(mv::None, mv::None, "model")));
  const auto f_scan = [](const Array& h, const Array& w) { return scan_loss(h, w, false); };
  const auto f_unr = [](const Array& h, const Array& w) { return unrolled_loss(h, w, false); };
  const auto want = mv::grad(f_unr, std::vector<int>{0, 1})(h0, ws);
  expect_same(mv::grad(f_scan, std::vector<int>{0, 1})(h0, ws), want, "sharded eager");
  const auto j = mv::jit(mv::grad(f_scan, std::vector<int>{0, 1}));
  expect_same(j(h0, ws), want, "sharded jit");
  const Array h1 = placed_array(random_floats(b * d, 92), {b, d}, mv::NamedSharding(mesh, P("data")));
  expect_same(j(h1, ws), mv::grad(f_unr, std::vector<int>{0, 1})(h1, ws), "sharded jit replay");
}

// ---------------------------------------------------------------- second round

// Constants inside loop bodies written at the loop's (per-iteration) index: the body is replayed
// once per iteration, so a write into the body's constant would leak into the next iteration.
TEST(FastPathsAdversarial, ConstantsInLoopBodiesWrittenAtTheIterationIndex) {
  const int64_t n = 6;
  const auto run = [n](const Array& x) {
    // Each iteration: a fresh zeros(n) with x's i-th value at i, added to the carry.
    return mv::lax::fori_loop(0, n, [&x, n](const Array& i, const Array& c) {
      const Array one = mv::dynamic_slice(x, {i}, {1});
      return c + mv::dynamic_update_slice(mv::zeros({n}), one, {i}) * (mv::astype(i, mv::DType::float32) + 1.f);
    }, mv::zeros({n}));
  };
  const auto dus_carry = [n](const Array& x) {
    // The carry starts as a constant and is updated in place-able fashion at i.
    return mv::lax::fori_loop(0, n, [&x](const Array& i, const Array& c) {
      return mv::dynamic_update_slice(c, mv::dynamic_slice(x, {i}, {1}) * 2.f, {i});
    }, mv::full({n}, -1.0f));
  };
  const auto j = mv::jit(run);
  const auto jd = mv::jit(dus_carry);
  for (int call = 0; call < 3; ++call) {
    const auto v = small_ints(n, 100 + call);
    std::vector<float> want(n), want_d(n);
    for (int64_t k = 0; k < n; ++k) {
      want[k] = v[k] * float(k + 1);
      want_d[k] = v[k] * 2.f;
    }
    const std::string c = " call " + std::to_string(call);
    expect_exact<float>(run(host_array(v)), want, "eager body constants" + c);
    expect_exact<float>(j(host_array(v)), want, "jit body constants" + c);
    expect_exact<float>(dus_carry(host_array(v)), want_d, "eager dus carry" + c);
    expect_exact<float>(jd(host_array(v)), want_d, "jit dus carry" + c);
  }
  // A scan whose y is a constant updated at the iteration's index, and whose xs is an arange.
  const auto ys_const = mv::jit([](const Array& s) {
    auto [c, ys] = mv::lax::scan([](const Array& c, const Array& t) {
      const Array ti = mv::astype(t, mv::DType::int32);
      const Array y = mv::dynamic_update_slice(mv::zeros({4}), mv::reshape(c, {1}), {ti});
      return std::make_pair(c + 1.f, y);
    }, s, mv::arange(4.0f));
    return ys;
  });
  for (int call = 0; call < 3; ++call) {
    const float s = float(10 * call + 1);
    std::vector<float> want(16, 0.f);
    for (int t = 0; t < 4; ++t) want[t * 4 + t] = s + float(t);
    expect_exact<float>(mv::reshape(ys_const(mv::scalar(s)), {16}), want, "scan y constant call " + std::to_string(call));
  }
}

// Constants made on one device and moved to a sharded layout, or made sharded and reduced
// across devices, in jit replays.
TEST(FastPathsAdversarial, ConstantsMovedAcrossDevicesInReplays) {
  for (const int n : {3, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const mv::NamedSharding split(mesh, P("x"));
    const int64_t len = 4 * n;
    const auto f = mv::jit([split, len](const Array& x) {
      const Array r = mv::with_sharding_constraint(mv::arange(static_cast<float>(len)), split);
      const Array o = mv::full({len}, 2.0f, split);
      return std::vector<Array>{x * o + r, mv::sum(mv::ones({len}) * x)};
    });
    for (int call = 0; call < 3; ++call) {
      const auto v = small_ints(len, 200 + call);
      std::vector<float> want(len);
      float total = 0;
      for (int64_t k = 0; k < len; ++k) {
        want[k] = v[k] * 2.f + float(k);
        total += v[k];
      }
      const auto out = f(placed_array(v, {len}, split));
      expect_exact<float>(out[0], want, "n=" + std::to_string(n) + " call " + std::to_string(call));
      EXPECT_EQ(out[1].to_host<float>()[0], total) << "sum, n=" << n << " call " << call;
    }
    // psum of a constant inside shard_map, jitted.
    const auto sm = mv::shard_map([](const Array& x) { return x + mv::psum(mv::ones({4}), "x"); }, mesh, {P("x")}, P("x"));
    const auto js = mv::jit([sm](const Array& x) { return sm(x); });
    for (int call = 0; call < 2; ++call) {
      const auto v = small_ints(len, 300 + call);
      std::vector<float> want(len);
      for (int64_t k = 0; k < len; ++k) want[k] = v[k] + float(n);
      expect_exact<float>(js(placed_array(v, {len}, split)), want, "psum of ones n=" + std::to_string(n));
    }
  }
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

TEST(FastPathsAdversarial, BoolAndByteBroadcastsAndUnalignedContiguousSlices) {
  // bool predicate broadcast along rows (1, c) and per row (r, 1); int8 splat.
  const int64_t r = 5, c = 12;
  const auto vx = small_ints(r * c, 400), vy = small_ints(r * c, 401), vm = small_ints(c, 402), vs = small_ints(r, 403);
  const auto fn = [](const Array& x, const Array& y, const Array& row, const Array& col) {
    const Array m = mv::astype(row, mv::DType::bool_);
    const Array k = mv::astype(col, mv::DType::bool_);
    return mv::where(mv::logical_and(m, k), x, y);
  };
  std::vector<float> want(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) want[i * c + j] = (vm[j] != 0 && vs[i] != 0) ? vx[i * c + j] : vy[i * c + j];
  const Array X = host_array(vx, {r, c}), Y = host_array(vy, {r, c}), M = host_array(vm, {1, c}), S = host_array(vs, {r, 1});
  expect_exact<float>(fn(X, Y, M, S), want, "bool where eager");
  expect_exact<float>(mv::jit(fn)(X, Y, M, S), want, "bool where jit");
  std::vector<int8_t> a8(r * c), s8(r);
  for (int64_t i = 0; i < r * c; ++i) a8[i] = static_cast<int8_t>(i * 3 - 90);
  for (int64_t i = 0; i < r; ++i) s8[i] = static_cast<int8_t>(i * 7 - 20);
  std::vector<int8_t> w8(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) w8[i * c + j] = static_cast<int8_t>(a8[i * c + j] - s8[i]);
  const auto sub = [](const Array& a, const Array& b) { return a - b; };
  const Array A8 = mv::array(std::span<const int8_t>(a8), Shape{r, c}), S8 = mv::array(std::span<const int8_t>(s8), Shape{r, 1});
  expect_exact<int8_t>(sub(A8, S8), w8, "int8 splat eager");
  expect_exact<int8_t>(mv::jit(sub)(A8, S8), w8, "int8 splat jit");
  // 1-D contiguous slices at every start (start not a multiple of 4, length a multiple of 4).
  const auto v = small_ints(41, 404);
  const Array V = host_array(v);
  for (int64_t st = 0; st < 9; ++st)
    for (int64_t len : {4, 8, 32}) {
      const auto f = [st, len](const Array& x) {
        const Array a = mv::slice(x, {st}, {st + len});
        const Array b = mv::slice(x, {1}, {1 + len});
        return a * 3.f + b;
      };
      std::vector<float> w(len);
      for (int64_t k = 0; k < len; ++k) w[k] = v[st + k] * 3.f + v[1 + k];
      expect_exact<float>(f(V), w, "1-D slice start " + std::to_string(st) + " len " + std::to_string(len));
      expect_exact<float>(mv::jit(f)(V), w, "1-D slice jit start " + std::to_string(st) + " len " + std::to_string(len));
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

// ---------------------------------------------------------------- third round: saved products

namespace {
// A body whose carry IS a raw matmul product (no elementwise op after it), returned as y too,
// with closure-captured weights (not xs).
Array raw_product_loss(const Array& h0, const Array& w, const Array& ws, int64_t steps) {
  auto [last, ys] = mv::lax::scan(
      [w](const Array& h, const Array& v) {
        const Array p = mv::matmul(h, w);           // carry-dependent, closure weight
        const Array q = mv::matmul(p, v) * 0.5f;    // product of a product
        return std::make_pair(q, p);
      },
      h0, ws);
  (void)steps;
  return mv::sum(last * last) + mv::sum(ys * ys) * 0.25f;
}
Array raw_product_unrolled(const Array& h0, const Array& w, const Array& ws, int64_t steps) {
  Array h = h0;
  std::vector<Array> ys;
  for (int64_t t = 0; t < steps; ++t) {
    const Array p = mv::matmul(h, w);
    h = mv::matmul(p, ws[t]) * 0.5f;
    ys.push_back(p);
  }
  return mv::sum(h * h) + mv::sum(mv::stack(ys, 0) * mv::stack(ys, 0)) * 0.25f;
}
}  // namespace

TEST(FastPathsAdversarial, ScanRawProductCarryClosureWeightsAndRepeatedPullbacks) {
  const int64_t steps = 4, b = 3, d = 4;
  const Array h0 = host_array(random_floats(b * d, 600), {b, d});
  const Array w = host_array(random_floats(d * d, 601, -0.6f, 0.6f), {d, d});
  const Array ws = host_array(random_floats(steps * d * d, 602, -0.6f, 0.6f), {steps, d, d});
  const auto fs = [steps](const Array& h, const Array& w, const Array& ws) { return raw_product_loss(h, w, ws, steps); };
  const auto fu = [steps](const Array& h, const Array& w, const Array& ws) { return raw_product_unrolled(h, w, ws, steps); };
  const auto want = mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w, ws);
  const auto gs = mv::grad(fs, std::vector<int>{0, 1, 2});
  expect_same(gs(h0, w, ws), want, "raw product eager");
  const auto j = mv::jit(gs);
  expect_same(j(h0, w, ws), want, "raw product jit");
  // The products are handed back (else this test would not reach the fast path).
  EXPECT_NE(j.lower(h0, w, ws).as_text().find("(nothing computed)"), std::string::npos);
  // Replayed with other weights: the saved products must be this call's.
  const Array w2 = host_array(random_floats(d * d, 603, -0.6f, 0.6f), {d, d});
  expect_same(j(h0, w2, ws), mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w2, ws), "raw product jit, other w");
  // vjp's pullback called twice (and with another cotangent): the saved products handed back
  // on each call.
  auto [y, pull] = mv::vjp(fs, h0, w, ws);
  EXPECT_NEAR(y.to_host<float>()[0], fu(h0, w, ws).to_host<float>()[0], 1e-4f);
  const auto g1 = pull(mv::scalar(1.0f));
  const auto g2 = pull(mv::scalar(2.0f));
  const auto g3 = pull(mv::scalar(1.0f));
  expect_same({std::get<0>(g1), std::get<1>(g1), std::get<2>(g1)}, want, "pullback first");
  std::vector<Array> twice;
  for (const auto& a : want) twice.push_back(a * 2.f);
  expect_same({std::get<0>(g2), std::get<1>(g2), std::get<2>(g2)}, twice, "pullback second, cotangent 2");
  expect_same({std::get<0>(g3), std::get<1>(g3), std::get<2>(g3)}, want, "pullback third");
}

TEST(FastPathsAdversarial, ScanProductsUnderCondAndTwoProductsOnOneLine) {
  // The body picks one of two matmuls per iteration (cond on xs data), and one helper line makes
  // two products of equal shapes from different operands.
  const auto two = [](const Array& h, const Array& a, const Array& b) {
    const auto mm = [](const Array& x, const Array& y) { return mv::matmul(x, y); };
    return mm(h, a) - mm(h, b);  // the same source line in mm, twice
  };
  const auto body = [two](const Array& h, const std::vector<Array>& x) {
    const Array flip = x[2];
    const Array n = mv::lax::cond(
        flip > 0.f, [two](const Array& h, const Array& a, const Array& b) { return mv::tanh(two(h, a, b)); },
        [](const Array& h, const Array& a, const Array&) { return mv::tanh(mv::matmul(h, mv::transpose(a)) + h); },
        h, x[0], x[1]);
    return n;
  };
  const auto fs = [body](const Array& h0, const Array& as, const Array& bs, const Array& flips) {
    auto [last, ys] = mv::lax::scan(
        [body](const Array& h, const std::vector<Array>& x) {
          const Array n = body(h, x);
          return std::make_pair(n, mv::sum(n * n));
        },
        h0, std::vector<Array>{as, bs, flips});
    return mv::sum(last) + mv::sum(ys);
  };
  const auto fu = [body](const Array& h0, const Array& as, const Array& bs, const Array& flips) {
    Array h = h0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < as.shape()[0]; ++t) {
      h = body(h, {as[t], bs[t], flips[t]});
      acc = acc + mv::sum(h * h);
    }
    return mv::sum(h) + acc;
  };
  const int64_t steps = 5, b = 2, d = 4;
  const Array h0 = host_array(random_floats(b * d, 700), {b, d});
  const Array as = host_array(random_floats(steps * d * d, 701, -0.7f, 0.7f), {steps, d, d});
  const Array bs = host_array(random_floats(steps * d * d, 702, -0.7f, 0.7f), {steps, d, d});
  const Array flips = host_array({1.f, -1.f, 1.f, 1.f, -1.f}, {steps});
  const auto want = mv::grad(fu, std::vector<int>{0, 1, 2})(h0, as, bs, flips);
  expect_same(mv::grad(fs, std::vector<int>{0, 1, 2})(h0, as, bs, flips), want, "cond eager");
  const auto j = mv::jit(mv::grad(fs, std::vector<int>{0, 1, 2}));
  expect_same(j(h0, as, bs, flips), want, "cond jit");
  EXPECT_NE(j.lower(h0, as, bs, flips).as_text().find("(nothing computed)"), std::string::npos);
  const Array flips2 = host_array({-1.f, 1.f, -1.f, -1.f, 1.f}, {steps});
  expect_same(j(h0, as, bs, flips2), mv::grad(fu, std::vector<int>{0, 1, 2})(h0, as, bs, flips2), "cond jit, other branches");
}

TEST(FastPathsAdversarial, ScanProductsEinsumTransposedOperandsReverseAndBf16) {
  // einsum with operands transposed by the subscripts, and a reverse scan with a fori_loop-like
  // length only (no xs): the carry multiplies a closure weight.
  const int64_t d = 4, b = 3;
  const Array w = host_array(random_floats(d * d, 800, -0.5f, 0.5f), {d, d});
  const Array h0 = host_array(random_floats(b * d, 801), {b, d});
  const auto step = [](const Array& h, const Array& w) {
    const Array a = mv::einsum("bi,ji->bj", h, w);  // h @ w.T
    const Array g = mv::einsum("bi,bj->ij", h, a);  // h.T @ a (outer products summed)
    return mv::tanh(a + mv::einsum("bi,ij->bj", h, g) * 0.1f);
  };
  const auto fs = [step](const Array& h0, const Array& w) {
    auto [last, none] = mv::lax::scan([step, w](const Array& h, std::nullopt_t) { return std::make_pair(step(h, w), std::nullopt); },
                                      h0, std::nullopt, 3, /*reverse=*/true);
    return mv::sum(last * last);
  };
  const auto fu = [step](const Array& h0, const Array& w) {
    Array h = h0;
    for (int t = 0; t < 3; ++t) h = step(h, w);
    return mv::sum(h * h);
  };
  const auto want = mv::grad(fu, std::vector<int>{0, 1})(h0, w);
  expect_same(mv::grad(fs, std::vector<int>{0, 1})(h0, w), want, "einsum reverse eager");
  expect_same(mv::jit(mv::grad(fs, std::vector<int>{0, 1}))(h0, w), want, "einsum reverse jit");
  // value_and_grad under jit, replayed with another h0.
  const auto vg = mv::jit([fs](const Array& h, const Array& w) {
    auto [v, g] = mv::value_and_grad(fs, std::vector<int>{0, 1})(h, w);
    return std::vector<Array>{v, g[0], g[1]};
  });
  for (int call = 0; call < 3; ++call) {
    const Array h = host_array(random_floats(b * d, 810 + call), {b, d});
    const auto out = vg(h, w);
    const auto wg = mv::grad(fu, std::vector<int>{0, 1})(h, w);
    EXPECT_NEAR(out[0].to_host<float>()[0], fu(h, w).to_host<float>()[0], 1e-4f);
    expect_same({out[1], out[2]}, wg, "value_and_grad jit call " + std::to_string(call));
  }
  // bfloat16 products in the body (rounded to bfloat16 the same way in both loops).
  const auto step16 = [](const Array& h, const Array& w) {
    const Array p = mv::matmul(mv::astype(h, mv::DType::bfloat16), mv::astype(w, mv::DType::bfloat16));
    return mv::tanh(mv::astype(p, mv::DType::float32) + h);
  };
  const auto fs16 = [step16](const Array& h0, const Array& ws) {
    auto [last, ys] = mv::lax::scan([step16](const Array& h, const Array& w) {
      const Array n = step16(h, w);
      return std::make_pair(n, n);
    }, h0, ws);
    return mv::sum(last) + mv::sum(ys * ys);
  };
  const auto fu16 = [step16](const Array& h0, const Array& ws) {
    Array h = h0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < ws.shape()[0]; ++t) {
      h = step16(h, ws[t]);
      acc = acc + mv::sum(h * h);
    }
    return mv::sum(h) + acc;
  };
  const Array ws = host_array(random_floats(3 * d * d, 820, -0.5f, 0.5f), {3, d, d});
  const auto want16 = mv::grad(fu16, std::vector<int>{0, 1})(h0, ws);
  expect_same(mv::grad(fs16, std::vector<int>{0, 1})(h0, ws), want16, "bf16 eager");
  expect_same(mv::jit(mv::grad(fs16, std::vector<int>{0, 1}))(h0, ws), want16, "bf16 jit");
}

namespace {
// One helper (one source line per product) used by two scans of equal shapes in one loss.
Array layer_scan(const Array& h0, const Array& ws) {
  auto [last, ys] = mv::lax::scan(
      [](const Array& h, const Array& w) {
        const Array n = mv::tanh(mv::matmul(h, w));
        return std::make_pair(n, mv::matmul(n, w));
      },
      h0, ws);
  return last + mv::sum(ys, 0) * 0.1f;
}
Array layer_unrolled(const Array& h0, const Array& ws) {
  Array h = h0;
  Array acc = mv::zeros_like(h0);
  for (int64_t t = 0; t < ws.shape()[0]; ++t) {
    h = mv::tanh(mv::matmul(h, ws[t]));
    acc = acc + mv::matmul(h, ws[t]);
  }
  return h + acc * 0.1f;
}
}  // namespace

TEST(FastPathsAdversarial, TwoScansOfOneHelperCheckpointAndShortLengths) {
  const int64_t b = 2, d = 4;
  const Array h0 = host_array(random_floats(b * d, 900), {b, d});
  for (const int64_t steps : {int64_t{1}, int64_t{3}}) {
    const Array w1 = host_array(random_floats(steps * d * d, 901, -0.8f, 0.8f), {steps, d, d});
    const Array w2 = host_array(random_floats(steps * d * d, 902, -0.8f, 0.8f), {steps, d, d});
    const auto fs = [](const Array& h, const Array& a, const Array& c) {
      return mv::sum(mv::square(layer_scan(layer_scan(h, a), c)));
    };
    const auto fu = [](const Array& h, const Array& a, const Array& c) {
      return mv::sum(mv::square(layer_unrolled(layer_unrolled(h, a), c)));
    };
    // The same weights in both scans, then different ones (a mixed-up hand-back shows only then).
    const auto want = mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w1, w2);
    const std::string s = " steps " + std::to_string(steps);
    expect_same(mv::grad(fs, std::vector<int>{0, 1, 2})(h0, w1, w2), want, "two scans eager" + s);
    const auto j = mv::jit(mv::grad(fs, std::vector<int>{0, 1, 2}));
    expect_same(j(h0, w1, w2), want, "two scans jit" + s);
    expect_same(j(h0, w2, w1), mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w2, w1), "two scans jit swapped" + s);
    // The whole thing checkpointed: its backward pass runs both scans' forward passes again.
    const auto fc = mv::checkpoint([fs](const Array& h, const Array& a, const Array& c) { return fs(h, a, c); });
    expect_same(mv::grad(fc, std::vector<int>{0, 1, 2})(h0, w1, w2), want, "checkpointed" + s);
  }
}

// Outputs split along the last axis (evenly and not) with broadcast inputs replicated or split
// the same way: each device's piece has its own offset into a replicated row.
TEST(FastPathsAdversarial, ElementwiseUnevenSplitsAlongTheLastAxis) {
  int tried = 0, refused = 0;
  for (const int n : {2, 3, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    for (const int64_t c : {int64_t{12}, int64_t{28}, int64_t{40}, int64_t{44}, int64_t{52}, int64_t{8 * n}, int64_t{12 * n + 4}}) {
      if (c < n) continue;
      const int64_t r = 3;
      const auto vx = small_ints(r * c, 1000 + c), vrow = small_ints(c, 1001 + c), vcol = small_ints(r, 1002 + c);
      std::vector<float> want(r * c);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) want[i * c + j] = (vx[i * c + j] + vrow[j]) * vcol[i];
      const auto fn = [](const Array& x, const Array& row, const Array& col) { return (x + row) * col; };
      const std::string what = "n=" + std::to_string(n) + " c=" + std::to_string(c);
      Array X, RowRep, RowSplit;
      try {
        X = placed_array(vx, {r, c}, mv::NamedSharding(mesh, P(mv::None, "x")));
        RowRep = placed_array(vrow, {1, c}, mv::NamedSharding(mesh, P()));
        RowSplit = placed_array(vrow, {1, c}, mv::NamedSharding(mesh, P(mv::None, "x")));
      } catch (const mv::Error& e) {
        ++refused;  // uneven splits: the library refuses them (its size must be a multiple)
        EXPECT_NE(std::string(e.what()).find("divisible"), std::string::npos) << e.what();
        continue;  // a split this mesh does not take (reported by the library, not a wrong value)
      }
      ++tried;
      const Array Col = placed_array(vcol, {r, 1}, mv::NamedSharding(mesh, P()));
      expect_exact<float>(fn(X, RowRep, Col), want, what + " replicated row");
      expect_exact<float>(fn(X, RowSplit, Col), want, what + " split row");
      expect_exact<float>(mv::jit(fn)(X, RowRep, Col), want, what + " replicated row jit");
      expect_exact<float>(mv::jit(fn)(X, RowSplit, Col), want, what + " split row jit");
      // A slice of the replicated row at an offset feeding the split output.
      const Array Wide = placed_array(small_ints(c + 8, 7), {1, c + 8}, mv::NamedSharding(mesh, P()));
      const auto wv = small_ints(c + 8, 7);
      const auto fs = [c](const Array& x, const Array& wide) { return x - mv::slice(wide, {0, 4}, {1, 4 + c}); };
      std::vector<float> want2(r * c);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) want2[i * c + j] = vx[i * c + j] - wv[4 + j];
      expect_exact<float>(fs(X, Wide), want2, what + " sliced row");
      expect_exact<float>(mv::jit(fs)(X, Wide), want2, what + " sliced row jit");
    }
  }
  std::cout << tried << " layouts tried, " << refused << " refused\n";
  EXPECT_GT(tried, 10);
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

// A jit that makes constants, first traced inside a loop body (itself inside a jit), then called
// by every iteration and replay with other indices; and a while_loop (traced again each call)
// whose body writes into a fresh zeros at its counter.
TEST(FastPathsAdversarial, NestedJitConstantsInsideLoopBodiesAndWhileLoops) {
  const int64_t n = 5;
  const auto onehot_row = mv::jit([n](const Array& i, const Array& v) {
    return mv::dynamic_update_slice(mv::zeros({n}), mv::reshape(v, {1}), {i}) + mv::astype(mv::arange(static_cast<int32_t>(n)), mv::DType::float32) * 0.f;
  });
  const auto outer = mv::jit([&onehot_row, n](const Array& x, const Array& shift) {
    return mv::lax::fori_loop(0, n, [&](const Array& i, const Array& c) {
      const Array at = mv::remainder(i + shift, static_cast<int32_t>(n));
      return c + onehot_row(at, mv::reshape(mv::dynamic_slice(x, {i}, {1}), {}));
    }, mv::zeros({n}));
  });
  for (int call = 0; call < 4; ++call) {
    const auto v = small_ints(n, 1300 + call);
    const int32_t shift = call * 2 + 1;
    std::vector<float> want(n, 0.f);
    for (int64_t i = 0; i < n; ++i) want[(i + shift) % n] += v[i];
    expect_exact<float>(outer(host_array(v), mv::scalar(shift)), want, "nested jit in loop, call " + std::to_string(call));
  }
  // while_loop: count up to a data-dependent bound, each step adding a one-hot made from zeros.
  const auto wl = mv::jit([n](const Array& bound) {
    const auto out = mv::lax::while_loop(
        [bound](const std::vector<Array>& s) { return s[0] < bound; },
        [n](const std::vector<Array>& s) {
          const Array one = mv::dynamic_update_slice(mv::zeros({n}), mv::ones({1}), {s[0]});
          return std::vector<Array>{s[0] + 1, s[1] + one};
        },
        std::vector<Array>{mv::scalar(0), mv::zeros({n})});
    return out[1];
  });
  for (const int32_t bound : {3, 5, 1, 4}) {
    std::vector<float> want(n, 0.f);
    for (int32_t i = 0; i < bound; ++i) want[i] = 1.f;
    expect_exact<float>(wl(mv::scalar(bound)), want, "while_loop bound " + std::to_string(bound));
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

// A Hessian-vector product through a scan whose body multiplies (the scan's backward pass
// differentiated again), against the unrolled loop.
TEST(FastPathsAdversarial, HessianVectorProductThroughAScanOfMatmuls) {
  const int64_t b = 2, d = 3, steps = 3;
  const Array h0 = host_array(random_floats(b * d, 1600), {b, d});
  const Array w = host_array(random_floats(d * d, 1601, -0.7f, 0.7f), {d, d});
  const Array v = host_array(random_floats(d * d, 1602), {d, d});
  const auto fs = [h0, steps](const Array& w) {
    auto [last, ys] = mv::lax::scan([w](const Array& h, std::nullopt_t) {
      const Array n = mv::tanh(mv::matmul(h, w));
      return std::make_pair(n, mv::matmul(n, mv::transpose(w)));
    }, h0, std::nullopt, steps);
    return mv::sum(last * last) + mv::sum(ys);
  };
  const auto fu = [h0, steps](const Array& w) {
    Array h = h0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < steps; ++t) {
      h = mv::tanh(mv::matmul(h, w));
      acc = acc + mv::sum(mv::matmul(h, mv::transpose(w)));
    }
    return mv::sum(h * h) + acc;
  };
  const auto hvp = [v](const std::function<Array(const Array&)>& f) {
    return mv::grad([f, v](const Array& w) { return mv::sum(mv::grad(f)(w) * v); });
  };
  const Array want = hvp(fu)(w);
  expect_close(hvp(fs)(w), want.to_host<float>(), 1e-5f);
  expect_close(mv::jit(hvp(fs))(w), want.to_host<float>(), 1e-5f);
}

// Stepped row slices and row-offset slices as broadcast operands (strides that are multiples of
// 4 with offsets of whole rows), in eager and jit, and transposed-then-broadcast operands.
TEST(FastPathsAdversarial, SteppedRowSlicesAndTransposedBroadcastOperands) {
  const int64_t R = 13, C = 8;
  const auto v = small_ints(R * C, 1700);
  const Array X = host_array(v, {R, C});
  for (const int64_t step : {2, 3, 5})
    for (const int64_t start : {0, 1, 2}) {
      const int64_t rows = (R - start + step - 1) / step;
      const auto f = [start, step, rows](const Array& x) {
        const Array s = mv::slice(x, {start, 0}, {13, 8}, {step, 1});  // (rows, 8)
        const Array first = mv::slice(x, {start, 0}, {start + 1, 8});  // (1, 8) at a row offset
        return mv::reshape(s, {rows, 1, 8}) * first + mv::reshape(s, {1, rows, 8});
      };
      std::vector<float> want(rows * rows * C);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < rows; ++j)
          for (int64_t k = 0; k < C; ++k)
            want[(i * rows + j) * C + k] = v[(start + i * step) * C + k] * v[start * C + k] + v[(start + j * step) * C + k];
      const std::string w = "step " + std::to_string(step) + " start " + std::to_string(start);
      expect_exact<float>(mv::reshape(f(X), {rows * rows * C}), want, w);
      expect_exact<float>(mv::reshape(mv::jit(f)(X), {rows * rows * C}), want, w + " jit");
    }
  // (c, r).T broadcast against (b, r, c): the transposed operand has stride r on the last axis.
  const int64_t b = 2, r = 4, c = 8;
  const auto vt = small_ints(c * r, 1701), vb = small_ints(b * r * c, 1702);
  std::vector<float> want(b * r * c);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < r; ++j)
      for (int64_t k = 0; k < c; ++k) want[(i * r + j) * c + k] = vb[(i * r + j) * c + k] - vt[k * r + j];
  const auto g = [](const Array& big, const Array& t) { return big - mv::transpose(t); };
  expect_exact<float>(g(host_array(vb, {b, r, c}), host_array(vt, {c, r})), want, "transposed broadcast");
  expect_exact<float>(mv::jit(g)(host_array(vb, {b, r, c}), host_array(vt, {c, r})), want, "transposed broadcast jit");
}

// The gradient of a jitted scan (grad outside jit), called again with other inputs.
TEST(FastPathsAdversarial, GradOfJittedScan) {
  const int64_t layers = 3, b = 2, d = 4;
  const auto f_scan = [](const Array& h, const Array& w) { return scan_loss(h, w, false); };
  const auto f_unr = [](const Array& h, const Array& w) { return unrolled_loss(h, w, false); };
  const auto g_outer = mv::grad(mv::jit(f_scan), std::vector<int>{0, 1});
  for (int call = 0; call < 2; ++call) {
    const Array h0 = host_array(random_floats(b * d, 1800 + call), {b, d});
    const Array ws = host_array(random_floats(layers * d * d, 1810 + call, -0.5f, 0.5f), {layers, d, d});
    const auto want = mv::grad(f_unr, std::vector<int>{0, 1})(h0, ws);
    expect_same(g_outer(h0, ws), want, "grad(jit(scan)) call " + std::to_string(call));
  }
}

namespace {
// A scan whose loss uses its final carry nonlinearly (sum of squares): its output cotangent
// depends on the forward values.
Array inner_scan_loss(const Array& h0, const Array& ws, bool square) {
  auto [last, ys] = mv::lax::scan([](const Array& h, const Array& w) {
    const Array n = mv::tanh(h * w);
    return std::make_pair(n, n);
  }, h0, ws);
  return (square ? mv::sum(last * last) : mv::sum(last)) + mv::sum(ys);
}
}  // namespace

// The gradient of a scan whose body runs another scan and uses that inner scan's result
// nonlinearly (here sum(last * last)), and grad(vmap(f)) of such an f (vmap is a scan over the
// mapped axis): a plain first-order gradient, equal to the unrolled loop's. Until 2026-11-27 it
// threw "scan: its backward pass is being differentiated ... by a transform that was not active
// when the scan ran": the inner scan's cotangent (2 * last * ct) was tracked by the outer
// scan's TapeIsolation probe, which only notes what an isolated body reads, and the check took
// the probe for a transform (graph/autodiff.cpp, tracked_by_a_transform).
TEST(FastPathsAdversarial, GradOfNestedScanUsingTheInnerResultNonlinearly) {
  const Array hs = host_array(random_floats(12, 1900), {3, 4});
  const Array ws = host_array(random_floats(8, 1901), {2, 4});
  for (const bool square : {false, true}) {
    SCOPED_TRACE(square ? "sum(last * last)" : "sum(last)");
    const auto outer = [square](const Array& hs, const Array& ws) {
      auto [c, ys] = mv::lax::scan([ws, square](const Array& c, const Array& h) {
        return std::make_pair(c, inner_scan_loss(h, ws, square));
      }, mv::scalar(0.f), hs);
      return mv::sum(ys);
    };
    const auto via_vmap = [square](const Array& hs, const Array& ws) {
      return mv::sum(mv::vmap([ws, square](const Array& h) { return inner_scan_loss(h, ws, square); })(hs));
    };
    const auto unrolled = [square](const Array& hs, const Array& ws) {
      return inner_scan_loss(hs[0], ws, square) + inner_scan_loss(hs[1], ws, square) + inner_scan_loss(hs[2], ws, square);
    };
    const std::vector<Array> want = mv::grad(unrolled, std::vector<int>{0, 1})(hs, ws);
    for (const bool use_vmap : {false, true}) {
      SCOPED_TRACE(use_vmap ? "grad(vmap(scan))" : "grad(scan(scan))");
      try {
        const std::vector<Array> got = use_vmap ? mv::grad(via_vmap, std::vector<int>{0, 1})(hs, ws)
                                                : mv::grad(outer, std::vector<int>{0, 1})(hs, ws);
        expect_same(got, want, "nested");
      } catch (const mv::Error& e) {
        ADD_FAILURE() << e.what();
      }
    }
  }
}

// The spellings a JAX user tries first: int axes and methods (x.sum(0), x.T()), scalars on the
// left of every operator and compound assignment, dynamic_slice with braced starts, bool
// arithmetic as jax.numpy does it, and take's out-of-bounds modes. Each is checked eagerly against
// numpy's values (worked out by hand or on the host), under jit, with inputs sharded over 8
// devices, and through grad where it is differentiable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::DType;
using mv::P;

namespace {

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

mv::Mesh mesh_2x4() {
  return mv::make_mesh({2, 4}, {"a", "b"});
}

}  // namespace

// ---- sum(x, 0), max(x, -1), x.sum(), x.T(), x.astype(...), x.reshape(2, 3, 4)

TEST(JaxSpellings, IntAxesAndArrayMethods) {
  const Array x = mv::arange(24.f).reshape(2, 3, 4);  // x[i][j][k] = 12 i + 4 j + k
  EXPECT_EQ(x.shape(), (mv::Shape{2, 3, 4}));
  EXPECT_EQ(x.ndim(), 3u);
  EXPECT_EQ(x.size(), 24);
  EXPECT_EQ(x.dtype(), DType::float32);

  // One int axis: the free functions and the methods agree with numpy.
  const std::vector<float> sum0{12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34};
  EXPECT_EQ(mv::sum(x, 0).to_host<float>(), sum0);
  EXPECT_EQ(x.sum(0).to_host<float>(), sum0);
  EXPECT_EQ(mv::sum(x, 0).shape(), (mv::Shape{3, 4}));
  EXPECT_EQ(mv::sum(x, size_t{0}).to_host<float>(), sum0);  // any integer type
  EXPECT_EQ(mv::max(x, -1).to_host<float>(), (std::vector<float>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(x.max(-1).to_host<float>(), (std::vector<float>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(mv::min(x, 1, true).shape(), (mv::Shape{2, 1, 4}));
  EXPECT_EQ(x.min(1, true).to_host<float>(), (std::vector<float>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(mv::mean(x, 2).to_host<float>(), (std::vector<float>{1.5, 5.5, 9.5, 13.5, 17.5, 21.5}));
  EXPECT_EQ(x.mean(2).to_host<float>(), (std::vector<float>{1.5, 5.5, 9.5, 13.5, 17.5, 21.5}));
  // var over axis 0 of pairs (v, v + 12): 36 everywhere; std 6.
  EXPECT_EQ(mv::var(x, 0).to_host<float>(), std::vector<float>(12, 36.0f));
  EXPECT_EQ(x.std(0).to_host<float>(), std::vector<float>(12, 6.0f));
  EXPECT_EQ(mv::std(x, 0, true).shape(), (mv::Shape{1, 3, 4}));

  // Braced lists still mean lists of axes, not one int: {} is every axis, {0} axis 0.
  EXPECT_EQ(mv::sum(x, {}).to_host<float>(), std::vector<float>{276});
  EXPECT_EQ(mv::sum(x, {}, true).shape(), (mv::Shape{1, 1, 1}));
  EXPECT_EQ(mv::sum(x, {0}).to_host<float>(), sum0);
  EXPECT_EQ(mv::sum(x, {0, 2}).to_host<float>(), (std::vector<float>{60, 92, 124}));
  EXPECT_EQ(x.sum({}).to_host<float>(), std::vector<float>{276});
  EXPECT_EQ(x.sum({0, 2}, true).shape(), (mv::Shape{1, 3, 1}));
  EXPECT_EQ(x.sum().to_host<float>(), std::vector<float>{276});
  EXPECT_EQ(x.mean().to_host<float>(), std::vector<float>{11.5});
  EXPECT_EQ(x.max().to_host<float>(), std::vector<float>{23});
  EXPECT_EQ(x.min().to_host<float>(), std::vector<float>{0});

  // argmax / argmin: flattened without an axis (jnp.argmax(x) with axis=None).
  const Array y = mv::array({3.f, 9.f, 1.f, 9.f, -4.f, 0.f}, mv::Shape{2, 3});
  EXPECT_EQ(mv::argmax(y).to_host<int32_t>(), std::vector<int32_t>{1});
  EXPECT_EQ(y.argmax().to_host<int32_t>(), std::vector<int32_t>{1});
  EXPECT_EQ(y.argmin().ndim(), 0u);
  EXPECT_EQ(y.argmin().to_host<int32_t>(), std::vector<int32_t>{4});
  EXPECT_EQ(y.argmax(1).to_host<int32_t>(), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(y.argmin(0, true).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 1}));

  // x.T reverses the axes; transpose takes the permutation as a list or one by one.
  const Array t = x.T();
  EXPECT_EQ(t.shape(), (mv::Shape{4, 3, 2}));
  const auto tv = t.to_host<float>();
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) ASSERT_EQ(tv[(k * 3 + j) * 2 + i], 12 * i + 4 * j + k);
  EXPECT_EQ(x.transpose().to_host<float>(), tv);
  EXPECT_EQ(x.transpose(2, 1, 0).to_host<float>(), tv);
  EXPECT_EQ(x.transpose({1, 0, 2}).shape(), (mv::Shape{3, 2, 4}));
  EXPECT_EQ(x.transpose(1, 0, 2).to_host<float>(), mv::transpose(x, {1, 0, 2}).to_host<float>());

  // astype, reshape(-1 inferred), flatten / ravel.
  const Array xi = (x / 4.0f).astype(DType::int32);
  EXPECT_EQ(xi.dtype(), DType::int32);
  EXPECT_EQ(xi.reshape(-1).to_host<int32_t>()[23], 5);
  EXPECT_EQ(x.reshape(6, -1).shape(), (mv::Shape{6, 4}));
  EXPECT_EQ(x.reshape({4, 6}).shape(), (mv::Shape{4, 6}));
  EXPECT_EQ(x.flatten().shape(), (mv::Shape{24}));
  EXPECT_EQ(x.ravel().to_host<float>(), iota_floats(24));
  EXPECT_EQ(xi.astype(DType::float32).dtype(), DType::float32);
}

TEST(JaxSpellings, MethodsUnderJitShardedAndGrad) {
  const auto v = random_floats(8 * 16, 5);
  const Array host = host_array(v, {8, 16});
  const Array xs = mv::device_put(host, mv::NamedSharding(mesh_2x4(), P("a", "b")));
  const auto f = [](const Array& x) {
    return x.sum(0) + x.T().max(-1) + mv::mean(x, 0) - x.reshape(2, 4, 16).min(1).sum(0) +
           x.std(0) * x.var(0);
  };
  const auto want = f(host).to_host<float>();
  const auto jf = mv::jit(f);
  for (int call = 0; call < 2; ++call) {  // the trace, then a replay
    const Array got = jf(xs);
    EXPECT_EQ(got.shape(), (mv::Shape{16}));
    const auto g = got.to_host<float>();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(g[i], want[i], 1e-4f) << i;
  }
  // A sharded sum over an int axis keeps the other dimension's split.
  EXPECT_EQ(xs.sum(0).sharding(), mv::Sharding(mv::NamedSharding(mesh_2x4(), P("b"))));

  // grad through x.T(), reshape, astype and sum with an int axis: d/dx sum(x.T() * w) = w.T.
  const auto vw = random_floats(16 * 8, 6);
  const Array w = host_array(vw, {16, 8});
  const auto loss = [&](const Array& x) {
    return (x.T() * w).reshape(4, 32).astype(DType::float32).sum(1).sum() + 0.0f * x.max(-1).mean();
  };
  for (const Array& in : {host, xs}) {
    const auto g = mv::grad(loss)(in).to_host<float>();
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 16; ++j) ASSERT_NEAR(g[i * 16 + j], vw[j * 8 + i], 1e-6f);
    const auto gj = mv::jit([&](const Array& x) { return mv::grad(loss)(x); })(in).to_host<float>();
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 16; ++j) ASSERT_NEAR(gj[i * 16 + j], vw[j * 8 + i], 1e-6f);
  }
  // grad of x.max(-1).sum(): one at each row's maximum.
  const auto gm = mv::grad([](const Array& x) { return x.max(-1).sum(); })(xs).to_host<float>();
  for (int i = 0; i < 8; ++i) {
    int best = 0;
    for (int j = 1; j < 16; ++j)
      if (v[i * 16 + j] > v[i * 16 + best]) best = j;
    for (int j = 0; j < 16; ++j) ASSERT_EQ(gm[i * 16 + j], j == best ? 1.0f : 0.0f);
  }
}

// ---- scalars on the left of every operator, weak typing, compound assignment

namespace {

std::vector<int32_t> ints(const Array& a) {
  EXPECT_EQ(a.dtype(), DType::int32) << mv::type_of(a);
  return a.to_host<int32_t>();
}
std::vector<float> floats(const Array& a) {
  EXPECT_EQ(a.dtype(), DType::float32) << mv::type_of(a);
  return a.to_host<float>();
}
// Bools read back as 0/1 int32 words.
std::vector<int32_t> bools(const Array& a) {
  EXPECT_EQ(a.dtype(), DType::bool_) << mv::type_of(a);
  std::vector<int32_t> v(static_cast<size_t>(a.size()));
  a.copy_to_host(v.data(), DType::bool_);
  return v;
}

}  // namespace

TEST(JaxSpellings, ScalarOnTheLeftOfEveryOperator) {
  const Array xi = mv::array({-3, -1, 2, 5, 7});
  const Array xf = mv::array({-1.5f, 0.f, 0.5f, 2.f, 3.f});
  // Arithmetic: an int scalar keeps int32, a float scalar makes float32 (JAX's weak typing).
  EXPECT_EQ(ints(2 + xi), (std::vector<int32_t>{-1, 1, 4, 7, 9}));
  EXPECT_EQ(floats(2.5f + xi), (std::vector<float>{-0.5f, 1.5f, 4.5f, 7.5f, 9.5f}));
  EXPECT_EQ(ints(2 - xi), (std::vector<int32_t>{5, 3, 0, -3, -5}));
  EXPECT_EQ(floats(0.5 - xi),
            (std::vector<float>{3.5f, 1.5f, -1.5f, -4.5f, -6.5f}));  // a double is a weak float too
  EXPECT_EQ(ints(3 * xi), (std::vector<int32_t>{-9, -3, 6, 15, 21}));
  EXPECT_EQ(floats(2.f * xi), (std::vector<float>{-6, -2, 4, 10, 14}));
  EXPECT_EQ(floats(2 * xf), (std::vector<float>{-3, 0, 1, 4, 6}));
  EXPECT_EQ(floats(7 / xi),
            (std::vector<float>{7.f / -3, -7.f, 3.5f, 1.4f, 1.f}));  // true division
  EXPECT_EQ(floats(1.f / xf)[0], 1.f / -1.5f);
  EXPECT_EQ(ints(7 % xi), (std::vector<int32_t>{-2, 0, 1, 2, 0}));  // the divisor's sign, as numpy
  EXPECT_EQ(floats(7.5f % xi), (std::vector<float>{-1.5f, -0.5f, 1.5f, 2.5f, 0.5f}));
  EXPECT_EQ(ints(int64_t{4} - xi)[0], 7);
  // Comparisons give bool whichever side the scalar is on.
  EXPECT_EQ(bools(0 < xi), (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(bools(0.f < xf), (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(bools(2 <= xi), (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(bools(0.5f > xf), (std::vector<int32_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(bools(-1 >= xi), (std::vector<int32_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(bools(2 == xi), (std::vector<int32_t>{0, 0, 1, 0, 0}));
  EXPECT_EQ(bools(2.f != xf), (std::vector<int32_t>{1, 1, 1, 0, 1}));
  EXPECT_EQ(bools(xi == xi), std::vector<int32_t>(5, 1));
  EXPECT_EQ(bools(xf < xf + 1.f), std::vector<int32_t>(5, 1));
  // Bitwise on int32 (two's complement, as numpy), logical on bools.
  EXPECT_EQ(ints(6 & xi), (std::vector<int32_t>{6 & -3, 6 & -1, 6 & 2, 6 & 5, 6 & 7}));
  EXPECT_EQ(ints(1 | xi), (std::vector<int32_t>{1 | -3, 1 | -1, 1 | 2, 1 | 5, 1 | 7}));
  EXPECT_EQ(ints(5 ^ xi), (std::vector<int32_t>{5 ^ -3, 5 ^ -1, 5 ^ 2, 5 ^ 5, 5 ^ 7}));
  EXPECT_EQ(ints(xi & xi), ints(xi));
  EXPECT_EQ(ints(~xi), (std::vector<int32_t>{2, 0, -3, -6, -8}));
  EXPECT_EQ(ints(mv::invert(mv::array({std::numeric_limits<int32_t>::min()}))),
            std::vector<int32_t>{std::numeric_limits<int32_t>::max()});
  const Array b = xi > 0, c = xi < 5;  // F F T T T, T T T F F
  EXPECT_EQ(bools(b & c), (std::vector<int32_t>{0, 0, 1, 0, 0}));
  EXPECT_EQ(bools(b | c), (std::vector<int32_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(bools(b ^ c), (std::vector<int32_t>{1, 1, 0, 1, 1}));
  EXPECT_EQ(bools(~b), (std::vector<int32_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(bools(mv::logical_xor(b, c)), (std::vector<int32_t>{1, 1, 0, 1, 1}));
  EXPECT_EQ(ints(1 & b), (std::vector<int32_t>{0, 0, 1, 1, 1}));  // a weak int with bools: int32
  EXPECT_EQ(ints(2 * b), (std::vector<int32_t>{0, 0, 2, 2, 2}));
  // Floats have no bits to and, as in numpy; the message says what would work.
  try {
    (void)(1 & xf);
    FAIL() << "bitwise_and of a float array did not throw";
  } catch (const mv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("logical_and"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)(xi ^ 1.5f), mv::Error);
  EXPECT_THROW((void)~xf, mv::Error);
  EXPECT_EQ(floats(+xf), floats(xf));
}

TEST(JaxSpellings, CompoundAssignmentRebindsTheHandle) {
  Array x = mv::array({1, 2, 3});
  const Array y = x;
  x += 1;
  EXPECT_EQ(ints(x), (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(ints(y), (std::vector<int32_t>{1, 2, 3}));  // y = x; x += 1 leaves y alone
  x -= y;
  EXPECT_EQ(ints(x), (std::vector<int32_t>{1, 1, 1}));
  x *= 6;
  x %= 4;
  EXPECT_EQ(ints(x), (std::vector<int32_t>{2, 2, 2}));
  x |= 5;
  x &= 6;
  x ^= 1;
  EXPECT_EQ(ints(x), (std::vector<int32_t>{7, 7, 7}));  // ((2|5)&6)^1 = (7&6)^1 = 7
  x /= 2;  // true division: x becomes float32, as `x /= 2` rebinds in JAX
  EXPECT_EQ(floats(x), (std::vector<float>{3.5f, 3.5f, 3.5f}));
  x *= 2.f;
  EXPECT_EQ(floats(x), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(y.dtype(), DType::int32);
}

TEST(JaxSpellings, OperatorsUnderJitShardedAndGrad) {
  const auto v = random_floats(8 * 16, 7, 0.5f, 2.0f);
  const Array host = host_array(v, {8, 16});
  const Array xs = mv::device_put(host, mv::NamedSharding(mesh_2x4(), P("a", "b")));
  const auto f = [](const Array& x) {
    Array r = 2.f - x;
    r += 3 * x;
    r *= (1.f < x);
    r -= 1.f / x;
    const Array k = (x * 10.f).astype(DType::int32);
    return r + ((7 & k) ^ ~(1 | k)).astype(DType::float32) + (2 % k).astype(DType::float32);
  };
  const auto want = f(host).to_host<float>();
  const auto jf = mv::jit(f);
  for (int call = 0; call < 2; ++call) {
    const Array got = jf(xs);
    EXPECT_TRUE(got.sharding().is_equivalent_to(xs.sharding(), 2)) << got.sharding().to_string();
    const auto g = got.to_host<float>();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(g[i], want[i], 1e-5f) << i;
  }
  // d/dx sum(2 - 3x + 1/x) with the scalars on the left and a compound assignment.
  const auto loss = [](const Array& x) {
    Array r = 2.f - 3.f * x;
    r += 1.f / x;
    return r.sum();
  };
  for (const Array& in : {host, xs}) {
    const auto g = mv::grad(loss)(in).to_host<float>();
    for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(g[i], -3.f - 1.f / (v[i] * v[i]), 1e-4f) << i;
  }
}

// ---- dynamic_slice(x, {6}, {4}) and dynamic_update_slice with host and device starts

TEST(JaxSpellings, DynamicSliceWithBracedStarts) {
  const Array x = mv::arange(10.f);
  EXPECT_EQ(mv::dynamic_slice(x, {6}, {4}).to_host<float>(), (std::vector<float>{6, 7, 8, 9}));
  EXPECT_EQ(mv::dynamic_slice(x, {8}, {4}).to_host<float>(),
            (std::vector<float>{6, 7, 8, 9}));  // clamped, as lax
  // A negative start counts from the end (-2 is 8), then clamps (to 7), as lax.
  EXPECT_EQ(mv::dynamic_slice(x, {-2}, {3}).to_host<float>(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(mv::dynamic_slice(x, {-4}, {3}).to_host<float>(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(mv::dynamic_slice(x, {-40}, {3}).to_host<float>(), (std::vector<float>{0, 1, 2}));
  const int i = 3;
  const int64_t j = 5;
  EXPECT_EQ(mv::dynamic_slice(x, {i}, {2}).to_host<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(mv::dynamic_slice(x, {j}, {2}).to_host<float>(), (std::vector<float>{5, 6}));
  // int32 scalar Arrays as starts, as JAX takes traced ones; and mixed with host ints.
  EXPECT_EQ(mv::dynamic_slice(x, {mv::scalar(int32_t{6})}, {4}).to_host<float>(),
            (std::vector<float>{6, 7, 8, 9}));
  EXPECT_EQ(mv::dynamic_slice(x, {mv::scalar(int32_t{9})}, {4}).to_host<float>(),
            (std::vector<float>{6, 7, 8, 9}));
  const Array m = mv::arange(24.f).reshape(4, 6);
  EXPECT_EQ(mv::dynamic_slice(m, {mv::scalar(int32_t{1}), 2}, {2, 3}).to_host<float>(),
            (std::vector<float>{8, 9, 10, 14, 15, 16}));
  EXPECT_EQ(mv::dynamic_slice(m, {1, 2}, {2, 3}).to_host<float>(),
            (std::vector<float>{8, 9, 10, 14, 15, 16}));
  // Vectors still pick the overloads they always did.
  const std::vector<int64_t> hs{1, 2};
  const std::vector<Array> ds{mv::scalar(int32_t{1}), mv::scalar(int32_t{2})};
  EXPECT_EQ(mv::dynamic_slice(m, hs, {2, 3}).to_host<float>(),
            mv::dynamic_slice(m, ds, {2, 3}).to_host<float>());
  // A float start is an Error naming what is wanted.
  EXPECT_THROW(mv::dynamic_slice(x, {mv::scalar(1.5f)}, {2}), mv::Error);

  // dynamic_update_slice: host starts, device starts, mixed; clamped so the update fits.
  const Array u = mv::array({-1.f, -2.f, -3.f});
  const std::vector<float> at2{0, 1, -1, -2, -3, 5, 6, 7, 8, 9},
      at7{0, 1, 2, 3, 4, 5, 6, -1, -2, -3};
  EXPECT_EQ(mv::dynamic_update_slice(x, u, {2}).to_host<float>(), at2);
  EXPECT_EQ(mv::dynamic_update_slice(x, u, {mv::scalar(int32_t{2})}).to_host<float>(), at2);
  EXPECT_EQ(mv::dynamic_update_slice(x, u, {9}).to_host<float>(), at7);
  EXPECT_EQ(mv::dynamic_update_slice(x, u, {mv::scalar(int32_t{9})}).to_host<float>(), at7);
  // -5 counts from the end (5), as lax's.
  EXPECT_EQ(mv::dynamic_update_slice(x, u, {mv::scalar(int32_t{-5})}).to_host<float>()[5], -1.f);
  EXPECT_EQ(mv::dynamic_update_slice(x, u, {mv::scalar(int32_t{-50})}).to_host<float>()[0], -1.f);
  const Array block = mv::full({2, 2}, 100.f);
  std::vector<float> want2d = iota_floats(24);
  for (int r = 2; r < 4; ++r)
    for (int c = 1; c < 3; ++c) want2d[r * 6 + c] = 100.f;
  EXPECT_EQ(mv::dynamic_update_slice(m, block, {mv::scalar(int32_t{3}), 1}).to_host<float>(),
            want2d);
  EXPECT_EQ(mv::dynamic_update_slice(m, block, {2, 1}).to_host<float>(), want2d);
  const Array mi = mv::arange(6).reshape(2, 3);
  EXPECT_EQ(ints(mv::dynamic_update_slice(mi, mv::array({9}, mv::Shape{1, 1}),
                                          {1, mv::scalar(int32_t{2})})),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 9}));
}

TEST(JaxSpellings, DynamicSliceUnderJitShardedAndGrad) {
  const auto v = random_floats(8 * 16, 8);
  const Array host = host_array(v, {8, 16});
  const Array xs = mv::device_put(host, mv::NamedSharding(mesh_2x4(), P("a", "b")));
  // The start is a jit argument: each call's own value is used on replay.
  const auto f = mv::jit([](const Array& x, const Array& s) {
    return mv::dynamic_slice(x, {s, 4}, {2, 8}) +
           mv::dynamic_update_slice(x, mv::zeros({3, 16}), {s, 0}).sum(0).sum();
  });
  for (const int32_t s : {1, 5, 7, -3}) {
    const int32_t from_end = s < 0 ? s + 8 : s;  // as lax's negative starts
    const int32_t r0 = std::clamp(from_end, 0, 6);
    const int32_t u0 = std::clamp(from_end, 0, 5);
    float rest = 0;
    for (int r = 0; r < 8; ++r)
      if (r < u0 || r >= u0 + 3)
        for (int c = 0; c < 16; ++c) rest += v[r * 16 + c];
    const auto got = f(xs, mv::scalar(s)).to_host<float>();
    ASSERT_EQ(got.size(), 16u);
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 8; ++c)
        ASSERT_NEAR(got[r * 8 + c], v[(r0 + r) * 16 + 4 + c] + rest, 1e-4f) << s;
  }
  // Gradients: the slice's cotangent lands where it came from; the update's where it went.
  const auto w = host_array(random_floats(3 * 16, 9), {3, 16});
  const auto wv = w.to_host<float>();
  for (const Array& in : {host, xs}) {
    const auto g = mv::grad([](const Array& x) {
                     return mv::dynamic_slice(x, {mv::scalar(int32_t{2}), 3}, {3, 5}).sum();
                   })(in)
                       .to_host<float>();
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 16; ++c)
        ASSERT_EQ(g[r * 16 + c], (r >= 2 && r < 5 && c >= 3 && c < 8) ? 1.f : 0.f) << r << "," << c;
    const auto [val, grads] = mv::value_and_grad(
        [&](const Array& x, const Array& upd) {
          return (mv::dynamic_update_slice(x, upd, {mv::scalar(int32_t{4}), 0}) * 2.f).sum();
        },
        {0, 1})(in, w);
    const auto gx = grads[0].to_host<float>(), gu = grads[1].to_host<float>();
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 16; ++c) ASSERT_EQ(gx[r * 16 + c], (r >= 4 && r < 7) ? 0.f : 2.f);
    for (const float e : gu) ASSERT_EQ(e, 2.f);
    (void)wv;
  }
}

// ---- take: JAX's default mode "fill", clip and wrap

TEST(JaxSpellings, TakeOutOfBoundsModes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Array x = mv::array({10.f, 20.f, 30.f, 40.f});
  const Array idx = mv::array({0, -1, 3, 4, -5, -4, 100});
  const auto same = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      if (std::isnan(want[i]))
        EXPECT_TRUE(std::isnan(got[i])) << i << ": " << got[i];
      else
        EXPECT_EQ(got[i], want[i]) << i;
  };
  // fill: -1 is the last element, -4 the first; 4, -5 and 100 are outside [-4, 4): NaN.
  same(mv::take(x, idx).to_host<float>(), {10, 40, 40, nan, nan, 10, nan});
  same(mv::take(x, idx, 0, mv::TakeMode::fill).to_host<float>(), {10, 40, 40, nan, nan, 10, nan});
  same(mv::take(x, idx, 0, mv::TakeMode::fill, -1.f).to_host<float>(),
       {10, 40, 40, -1, -1, 10, -1});
  same(mv::take(x, idx, 0, mv::TakeMode::clip).to_host<float>(), {10, 10, 40, 40, 10, 10, 40});
  same(mv::take(x, idx, 0, mv::TakeMode::wrap).to_host<float>(), {10, 40, 40, 10, 40, 10, 10});
  // int32 fills with the most negative int32, bool with true (JAX's defaults).
  const Array xi = mv::array({1, 2, 3, 4});
  constexpr int32_t lo = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(ints(mv::take(xi, idx)), (std::vector<int32_t>{1, 4, 4, lo, lo, 1, lo}));
  EXPECT_EQ(ints(mv::take(xi, idx, 0, mv::TakeMode::fill, 0)),
            (std::vector<int32_t>{1, 4, 4, 0, 0, 1, 0}));
  EXPECT_EQ(ints(mv::take(xi, idx, 0, mv::TakeMode::fill, 7.f)),
            (std::vector<int32_t>{1, 4, 4, 7, 7, 1, 7}));
  const Array xb = xi > 2;
  EXPECT_EQ(bools(mv::take(xb, idx)), (std::vector<int32_t>{0, 1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(bools(mv::take(xb, idx, 0, mv::TakeMode::fill, 0)),
            (std::vector<int32_t>{0, 1, 1, 0, 0, 0, 0}));
  EXPECT_THROW(mv::take(x, idx, 0, mv::TakeMode::fill, x), mv::Error);

  // Along axis 1 of a sharded array, eagerly and under jit, every mode against the host.
  const auto v = random_floats(8 * 8, 10);
  const Array host = host_array(v, {8, 8});
  const Array xs = mv::device_put(host, mv::NamedSharding(mesh_2x4(), P("a", "b")));
  const Array cols = mv::array({7, -1, 8, -9, 0, 2}, mv::Shape{2, 3});
  const std::vector<int32_t> c{7, -1, 8, -9, 0, 2};
  for (const auto mode : {mv::TakeMode::fill, mv::TakeMode::clip, mv::TakeMode::wrap}) {
    std::vector<float> want;
    for (int r = 0; r < 8; ++r)
      for (const int32_t k : c) {
        int32_t at = k;
        if (mode == mv::TakeMode::clip) at = std::clamp(k, 0, 7);
        if (mode == mv::TakeMode::wrap) at = ((k % 8) + 8) % 8;
        if (mode == mv::TakeMode::fill && at < 0) at += 8;
        want.push_back(at >= 0 && at < 8 ? v[r * 8 + at] : nan);
      }
    same(mv::take(host, cols, 1, mode).to_host<float>(), want);
    const Array got = mv::take(xs, cols, 1, mode);
    EXPECT_EQ(got.shape(), (mv::Shape{8, 2, 3}));
    same(got.to_host<float>(), want);
    const auto jt =
        mv::jit([mode](const Array& a, const Array& i) { return mv::take(a, i, 1, mode); });
    same(jt(xs, cols).to_host<float>(), want);
    same(jt(xs, cols).to_host<float>(), want);
  }

  // Gradients reach the elements taken (negative indices at their wrapped place); filled
  // elements send nothing back.
  const auto loss = [&](const Array& a) { return (mv::take(a, cols, 1) * 3.f).sum(); };
  for (const Array& in : {host, xs}) {
    const auto g = mv::grad(loss)(in).to_host<float>();
    for (int r = 0; r < 8; ++r)
      for (int k = 0; k < 8; ++k) {
        // 7 taken twice (as 7 and -1), 0 and 2 once; 8 and -9 are filled.
        const float want = k == 7 ? 6.f : (k == 0 || k == 2) ? 3.f : 0.f;
        ASSERT_EQ(g[r * 8 + k], want) << r << "," << k;
      }
  }
}

TEST(JaxSpellings, TakeModesInWindowedKernels) {
  // With bindings shrunk to 64 KiB the take kernel runs over windows of the taken axis; a fill
  // element must still be written exactly once, and wrap must agree too.
  std::vector<int32_t> picks;
  for (int32_t i = 0; i < 50; ++i)
    picks.push_back((i * 37) % 330 - 15);  // some outside [-300, 300)
  picks.push_back(-310);
  const Array few = mv::array(std::span<const int32_t>(picks), mv::Shape{51});
  const Array x = mv::arange(300 * 400).reshape(300, 400);
  for (const auto mode : {mv::TakeMode::fill, mv::TakeMode::clip, mv::TakeMode::wrap}) {
    const auto plain = ints(mv::take(x, few, 0, mode));
    const auto plain1 = ints(mv::take(x.T(), few, 1, mode));
    auto& dispatches = test_runtime().state()->dispatches;
    const uint64_t before = dispatches.load();
    (void)ints(mv::take(x, few, 0, mode));
    const uint64_t plain_dispatches = dispatches.load() - before;
    setenv("MESHVK_TEST_BINDING_BYTES", "65536", 1);
    const uint64_t before_windowed = dispatches.load();
    const auto windowed = ints(mv::take(x, few, 0, mode));
    // More dispatches than with whole bindings: the windowed kernel did run.
    EXPECT_GT(dispatches.load() - before_windowed, plain_dispatches);
    const auto windowed1 = ints(mv::take(x.T(), few, 1, mode));
    unsetenv("MESHVK_TEST_BINDING_BYTES");
    EXPECT_EQ(windowed, plain);
    EXPECT_EQ(windowed1, plain1);
    for (size_t j = 0; j < picks.size(); ++j) {
      int32_t k = picks[j];
      if (mode == mv::TakeMode::clip) k = std::clamp(k, 0, 299);
      if (mode == mv::TakeMode::wrap) k = ((k % 300) + 300) % 300;
      if (mode == mv::TakeMode::fill && k < 0) k += 300;
      const int32_t want = k >= 0 && k < 300 ? k * 400 + 7 : std::numeric_limits<int32_t>::min();
      ASSERT_EQ(windowed[j * 400 + 7], want) << j;
    }
  }
}

// ---- bool arithmetic as jax.numpy does it, and bools in .npy files

TEST(JaxSpellings, BoolArithmeticStaysBool) {
  const Array b = mv::array({0, 0, 1, 1}) > 0;                  // F F T T
  const Array c = mv::array({0, 1, 0, 1}) > 0;                  // F T F T
  EXPECT_EQ(bools(b + c), (std::vector<int32_t>{0, 1, 1, 1}));  // add is logical or
  EXPECT_EQ(bools(b + b), (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(bools(b * c), (std::vector<int32_t>{0, 0, 0, 1}));  // multiply is logical and
  EXPECT_EQ(bools(mv::maximum(b, c)), (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(bools(mv::minimum(b, c)), (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(bools(mv::where(c, b, c)), (std::vector<int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(bools(mv::abs(b)), (std::vector<int32_t>{0, 0, 1, 1}));
  // Reductions: max / min of bools are bools (any / all); sum counts (int32), mean is float32.
  EXPECT_EQ(bools(mv::max(b)), std::vector<int32_t>{1});
  EXPECT_EQ(bools(b.min()), std::vector<int32_t>{0});
  EXPECT_EQ(bools(mv::max(b.reshape(2, 2), 1)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(bools(mv::min((b + c).reshape(2, 2), -1)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ints(mv::sum(b)), std::vector<int32_t>{2});
  EXPECT_EQ(floats(b.mean()), std::vector<float>{0.5f});
  // With a number they are numbers, as with JAX's weak types.
  EXPECT_EQ(ints(b + 1), (std::vector<int32_t>{1, 1, 2, 2}));
  EXPECT_EQ(floats(b * 2.5f), (std::vector<float>{0, 0, 2.5f, 2.5f}));
  EXPECT_EQ(ints(b + mv::array({5, 5, 5, 5})), (std::vector<int32_t>{5, 5, 6, 6}));
  EXPECT_EQ(floats(b / c)[3], 1.f);
  // -b and b - c are errors, as in numpy; the message names what works instead.
  for (const auto& bad :
       std::vector<std::function<Array()>>{[&] { return -b; }, [&] { return b - c; }}) {
    try {
      (void)bad();
      FAIL() << "bool negative / subtract did not throw";
    } catch (const mv::Error& e) {
      const std::string m = e.what();
      EXPECT_TRUE(m.find("logical_not") != std::string::npos ||
                  m.find("logical_xor") != std::string::npos)
          << m;
      EXPECT_NE(m.find("bool"), std::string::npos) << m;
    }
  }
  EXPECT_EQ(ints(b - 1), (std::vector<int32_t>{-1, -1, 0, 0}));  // a bool and an int: int32
  // Under jit with sharded bools.
  const Array bs = mv::device_put(b.reshape(4, 1) * mv::ones({4, 8}).astype(DType::bool_),
                                  mv::NamedSharding(mesh_2x4(), P("a", "b")));
  const auto f = mv::jit([](const Array& x) { return (x + ~x).min(0) * x.max(0); });
  EXPECT_EQ(bools(f(bs)), std::vector<int32_t>(8, 1));
  EXPECT_EQ(bools(f(bs)), std::vector<int32_t>(8, 1));
}

TEST(JaxSpellings, BoolNpyIsB1) {
  const std::string path = ::testing::TempDir() + "meshvk_bool.npy";
  const Array b = mv::array({0, 2, 1, 0, 0, 7}, mv::Shape{2, 3}) != 0;
  mv::save_npy(path, b);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("'descr': '|b1'"), std::string::npos) << bytes.substr(0, 80);
  // numpy's layout: a 64-byte-aligned header, then one byte per element.
  ASSERT_EQ(bytes.size(), 128u + 6u);
  EXPECT_EQ(bytes.substr(128), std::string("\0\1\1\0\0\1", 6));
  const Array back = mv::load_npy(path);
  EXPECT_EQ(back.shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(bools(back), (std::vector<int32_t>{0, 1, 1, 0, 0, 1}));
  std::remove(path.c_str());
}

// numpy's np.array(values).reshape(2, 3) is spelled with a braced shape, for every host type.
TEST(JaxSpellings, ArrayFromHostValuesWithABracedShape) {
  const std::vector<float> f{0, 1, 2, 3, 4, 5};
  const std::vector<int32_t> i{0, 1, 2, 3, 4, 5};
  const std::vector<uint32_t> u{0, 1, 2, 3, 4, 5};
  EXPECT_EQ(mv::array(f, {2, 3}).shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(mv::array(i, {3, 2}).shape(), (mv::Shape{3, 2}));
  EXPECT_EQ(mv::array(u, {6}).shape(), (mv::Shape{6}));
  EXPECT_EQ(mv::array({1.f, 2.f, 3.f, 4.f}, {2, 2}).to_host<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(mv::array({1, 2, 3, 4}, {4, 1}).dtype(), mv::DType::int32);
  EXPECT_EQ(mv::array(i, {2, 3}).to_host<int32_t>(), i);
  EXPECT_THROW(mv::array(f, {4, 2}), mv::Error);  // 6 values for 8 places
}

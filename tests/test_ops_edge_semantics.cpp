// Everyday ops at edges an outside review compared with numpy and JAX (2026-11-27): empty batch
// dimensions of matmul and einsum, bool matmul, the dtypes of prod, at_add and concatenate,
// power at special values and its gradient at a zero base, pad of int64 past int32, sort's
// errors, and jit of a shard_map.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::DType;
using mv::P;

namespace {
mv::Array f64(const std::vector<double>& v) {
  return mv::device_put(std::span<const double>(v), {static_cast<int64_t>(v.size())}, mv::SingleDeviceSharding(0));
}
}  // namespace

TEST(OpsEdgeSemantics, MatmulAndEinsumWithAnEmptyBatch) {
  EXPECT_EQ(mv::matmul(mv::zeros({0, 2, 3}), mv::zeros({0, 3, 4})).shape(), (mv::Shape{0, 2, 4}));
  EXPECT_EQ(mv::matmul(mv::zeros({0, 2, 3}), mv::zeros({3, 4})).shape(), (mv::Shape{0, 2, 4}));
  EXPECT_EQ(mv::matmul(mv::zeros({3}), mv::zeros({0, 3, 4})).shape(), (mv::Shape{0, 4}));
  EXPECT_EQ(mv::einsum("bij,bjk->bik", mv::zeros({0, 2, 3}), mv::zeros({0, 3, 4})).shape(), (mv::Shape{0, 2, 4}));
  EXPECT_EQ(mv::einsum("bi,bi->b", mv::zeros({0, 3}), mv::zeros({0, 3})).to_host<float>().size(), 0u);
  const auto f = mv::jit([](const mv::Array& a, const mv::Array& b) { return mv::matmul(a, b); });
  EXPECT_EQ(f(mv::zeros({0, 2, 3}), mv::zeros({0, 3, 4})).shape(), (mv::Shape{0, 2, 4}));
  const mv::Array g = mv::grad([](const mv::Array& a) { return mv::matmul(a, mv::ones({0, 3, 4})).sum(); })(mv::zeros({0, 2, 3}));
  EXPECT_EQ(g.shape(), (mv::Shape{0, 2, 3}));
  expect_runtime_usable();
}

TEST(OpsEdgeSemantics, BoolMatmulIsBool) {
  const mv::Array m = mv::array({1, 0, 1, 1}, {2, 2}) > 0;
  const mv::Array r = mv::matmul(m, m);
  EXPECT_EQ(r.dtype(), DType::bool_);
  EXPECT_EQ(mv::astype(r, DType::int32).to_host<int32_t>(), (std::vector<int32_t>{1, 0, 1, 1}));
}

TEST(OpsEdgeSemantics, ProdOfNarrowIntegersPromotes) {
  const mv::Array i8 = mv::astype(mv::array({100, 100, 3}), DType::int8);
  const mv::Array p = mv::prod(i8);
  EXPECT_EQ(p.dtype(), DType::int32);
  EXPECT_EQ(p.to_host<int32_t>(), std::vector<int32_t>{30000});
  const mv::Array u8 = mv::astype(mv::array({200, 2, 255, 255, 255, 255}), DType::uint8);
  const mv::Array q = mv::prod(u8);
  EXPECT_EQ(q.dtype(), DType::uint32);
  EXPECT_EQ(q.to_host<uint32_t>(), std::vector<uint32_t>{static_cast<uint32_t>(400ull * 255 * 255 * 255 * 255)});
}

TEST(OpsEdgeSemantics, AtAddKeepsTheDtypeAndItsPrecision) {
  const mv::Array x = f64({1.0, 2.0, 3.0});
  const std::vector<double> got = mv::at_add(x, mv::array({0, 2, 0}), f64({0.1, 1e-10, 1e-12})).to_host<double>();
  // Within a float64 rounding or two (the order of duplicates' adds is unspecified, as XLA's);
  // a float32 step would be off by ~1e-9.
  const std::vector<double> want = {1.0 + 0.1 + 1e-12, 2.0, 3.0 + 1e-10};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  for (const DType t : {DType::bfloat16, DType::float16}) {
    const mv::Array h = mv::astype(mv::array({1.f, 2.f, 3.f}), t);
    const mv::Array r = mv::at_add(h, mv::array({0, 0}), 0.1f);
    EXPECT_EQ(r.dtype(), t);
    const float want = mv::astype(mv::astype(mv::array({1.2f}), t), DType::float32).to_host<float>()[0];
    EXPECT_EQ(mv::astype(r, DType::float32).to_host<float>()[0], want) << mv::dtype_name(t);
  }
}

TEST(OpsEdgeSemantics, ConcatenatePromotesWideDtypes) {
  const mv::Array d = f64({1.0 + 1e-12});
  const mv::Array c = mv::concatenate({d, mv::array({2.f})});
  EXPECT_EQ(c.dtype(), DType::float64);
  EXPECT_EQ(c.to_host<double>(), (std::vector<double>{1.0 + 1e-12, 2.0}));
  EXPECT_EQ(mv::concatenate({mv::array({2.f}), d}).dtype(), DType::float64);
  EXPECT_EQ(mv::concatenate({mv::astype(mv::array({1}), DType::int8), mv::array({7})}).dtype(), DType::int32);
  EXPECT_EQ(mv::concatenate({mv::array({1}) > 0, mv::astype(mv::array({1}), DType::uint8)}).dtype(), DType::uint8);
  EXPECT_EQ(mv::concatenate({mv::astype(mv::array({1}), DType::int64), mv::array({1.5f})}).dtype(), DType::float32);
}

TEST(OpsEdgeSemantics, PowerAtSpecialValuesAndItsGradientAtZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const mv::Array x = mv::array({-inf, -0.f, 0.f, 4.f});
  const std::vector<float> half = mv::power(x, 0.5f).to_host<float>();
  EXPECT_EQ(half[0], inf);
  EXPECT_EQ(half[1], 0.f);
  EXPECT_FALSE(std::signbit(half[1])) << "pow(-0, 0.5) is +0";
  EXPECT_EQ(half[3], 2.f);
  const std::vector<float> inv = mv::power(x, -0.5f).to_host<float>();
  EXPECT_EQ(inv[0], 0.f);
  EXPECT_EQ(inv[1], inf);
  EXPECT_EQ(inv[2], inf);
  EXPECT_EQ(inv[3], 0.5f);
  // d/dx x^0 = 0 and d/dy 0^y = 0, as JAX's (not 0 * inf).
  const mv::Array z = mv::array({0.f, 2.f});
  EXPECT_EQ(mv::grad([](const mv::Array& a) { return mv::power(a, mv::zeros({2})).sum(); })(z).to_host<float>(),
            (std::vector<float>{0, 0}));
  EXPECT_EQ(mv::grad([](const mv::Array& y) { return mv::power(mv::zeros({2}), y).sum(); })(mv::array({1.f, 2.f})).to_host<float>(),
            (std::vector<float>{0, 0}));
  // A scalar exponent of +-0.5 (rewritten to sqrt / rsqrt) has pow's gradient, as an array one.
  const mv::Array zs = mv::array({0.f, -0.f, 4.f});
  for (const float e : {0.5f, -0.5f}) {
    const auto scalar_e = mv::grad([e](const mv::Array& a) { return mv::power(a, e).sum(); })(zs).to_host<float>();
    const auto array_e = mv::grad([e](const mv::Array& a) { return mv::power(a, mv::full({3}, e)).sum(); })(zs).to_host<float>();
    EXPECT_EQ(scalar_e, array_e) << "exponent " << e;
  }
  // Elsewhere the gradients are the usual ones.
  const std::vector<float> g = mv::grad([](const mv::Array& a) { return mv::power(a, mv::full({2}, 3.f)).sum(); })(z).to_host<float>();
  EXPECT_EQ(g, (std::vector<float>{0, 12}));
}

TEST(OpsEdgeSemantics, PadOfInt64PastInt32) {
  const mv::Array x = mv::astype(mv::array({1, 2}), DType::int64);
  EXPECT_EQ(mv::pad(x, {{1, 2}}, 3e9f).to_host<int64_t>(),
            (std::vector<int64_t>{3000000000, 1, 2, 3000000000, 3000000000}));
  EXPECT_EQ(mv::pad(x, {{1, 0}}, -5e12f).to_host<int64_t>()[0], static_cast<int64_t>(-5e12f));
  expect_error([&] { mv::pad(mv::array({1, 2}), {{1, 0}}, 3e9f); }, "does not fit in int32");
}

TEST(OpsEdgeSemantics, SortNamesItselfInErrors) {
  expect_error([] { mv::sort(mv::zeros({2, 3}), 2); }, "sort: axis 2");
}

TEST(OpsEdgeSemantics, JitOfAShardMap) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const auto f = mv::jit(mv::shard_map([](const mv::Array& x) { return mv::psum(x, "x"); }, mesh, {P("x")}, P()));
  EXPECT_EQ(f(mv::arange(16.f)).to_host<float>(), (std::vector<float>{56, 64}));
  const auto two = mv::jit(mv::shard_map([](const mv::Array& x, const mv::Array& y) { return x * y; }, mesh,
                                         {P("x"), P("x")}, P("x")));
  EXPECT_EQ(two(mv::arange(8.f), mv::full({8}, 2.f)).to_host<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14}));
}

// A sharding that does not divide, given to jit or a constraint: the Error says which argument,
// result or constraint it came from, beside what does not divide.
TEST(OpsEdgeSemantics, ShardingErrorsNameTheArgumentOrResult) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"a", "b"});
  const mv::Array x = mv::arange(20.f).reshape({5, 4});
  const auto in = mv::jit([](const mv::Array& v, const mv::Array& w) { return v + w; },
                          {.in_shardings = {std::nullopt, mv::NamedSharding(mesh, P("a"))}});
  expect_error([&] { (void)in(x, x); }, "argument 1 (float32[5,4]) cannot take its in_shardings entry: dimension 0");
  const auto out = mv::jit([](const mv::Array& v) { return std::make_pair(v, v * 2.f); },
                           {.out_shardings = {mv::NamedSharding(mesh, P()), mv::NamedSharding(mesh, P("b", "a"))}});
  expect_error([&] { (void)out(x); }, "result 1 (float32[5,4]) cannot take out_shardings[1]");
  expect_error([&] { (void)mv::with_sharding_constraint(x, mv::NamedSharding(mesh, P("b"))); },
               "with_sharding_constraint: float32[5,4] cannot take");
  expect_runtime_usable();
}

// Found by the second outside review (2026-11-27 evening).
TEST(OpsEdgeSemantics, DynamicSliceNegativeStartsCountFromTheEnd) {
  const mv::Array x = mv::arange(10.0f);
  const auto jitted = mv::jit([](const mv::Array& v, const mv::Array& i) { return mv::dynamic_slice(v, {i}, {3}); });
  EXPECT_EQ(mv::dynamic_slice(x, {mv::scalar(-2)}, {3}).to_host<float>(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(jitted(x, mv::scalar(-3)).to_host<float>(), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(jitted(x, mv::scalar(-5)).to_host<float>(), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(mv::dynamic_update_slice(mv::arange(4.0f), mv::array({9.0f}), {-1}).to_host<float>(),
            (std::vector<float>{0, 1, 2, 9}));
  EXPECT_EQ(mv::dynamic_update_slice(mv::arange(4.0f), mv::array({9.0f}), {mv::scalar(-2)}).to_host<float>(),
            (std::vector<float>{0, 1, 9, 3}));
  const mv::Array g = mv::grad([](const mv::Array& a) { return mv::sum(mv::dynamic_slice(a, {-1}, {1})); })(mv::arange(4.0f));
  EXPECT_EQ(g.to_host<float>(), (std::vector<float>{0, 0, 0, 1}));
  const mv::Array gd =
      mv::grad([](const mv::Array& a) { return mv::sum(mv::dynamic_slice(a, {mv::scalar(-2)}, {1}) * 3.0f); })(mv::arange(4.0f));
  EXPECT_EQ(gd.to_host<float>(), (std::vector<float>{0, 0, 3, 0}));
  expect_runtime_usable();
}

// An integer or bool that the shader compiler can prove zero (d * 0, d ^ d, d != d), converted to
// float, was folded as if inf and NaN did not exist: x / it left the result unwritten (stale
// memory came back), 0 / x lost its sign and NaN. Found by the second outside review's fuzzer.
TEST(OpsEdgeSemantics, FloatsOfIntegersKnownZeroKeepIeeeArithmetic) {
  const mv::Array x = mv::array({1.0f, 2.0f, 3.0f, 4.0f});
  const mv::Array d = mv::array({0, 5, 0, 6});
  {
    const mv::Array junk = mv::array({777.0f, 778.0f, 779.0f, 780.0f});
    EXPECT_EQ(junk.to_host<float>()[0], 777.0f);
  }  // freed: a result left unwritten would show these values
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> infs(4, inf);
  EXPECT_EQ((x / (d * 0)).to_host<float>(), infs);
  EXPECT_EQ((x / (d ^ d)).to_host<float>(), infs);
  EXPECT_EQ((x / (d != d)).to_host<float>(), infs);
  EXPECT_EQ(mv::floor_divide(x, d - d).to_host<float>(), infs);
  EXPECT_EQ(mv::jit([](const mv::Array& a, const mv::Array& b) { return a / (b * 0); })(x, d).to_host<float>(), infs);
  const std::vector<float> q = ((d * 0) / (x - 3.0f)).to_host<float>();  // [-0, -0, NaN, 0]
  EXPECT_TRUE(std::signbit(q[0]) && q[0] == 0.0f);
  EXPECT_TRUE(std::signbit(q[1]) && q[1] == 0.0f);
  EXPECT_TRUE(std::isnan(q[2]));
  EXPECT_TRUE(!std::signbit(q[3]) && q[3] == 0.0f);
  const std::vector<float> p = (mv::array({inf, -2.0f, 1.0f, 0.0f}) * (d & 0)).to_host<float>();  // [NaN, -0, 0, 0]
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_TRUE(std::signbit(p[1]) && p[1] == 0.0f);
  EXPECT_EQ(mv::sum(x / mv::astype(d * 0, DType::float32)).to_host<float>()[0], inf);
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Array ds = mv::device_put(mv::concatenate({d, d}), mv::NamedSharding(mesh, P("x")));
  EXPECT_EQ((mv::concatenate({x, x}) / (ds * 0)).to_host<float>(), std::vector<float>(8, inf));
  expect_runtime_usable();
}

// uint32 computes (in int64, wrapping back modulo 2^32): the uint32 sum of uint8 (JAX's
// promote_integers) was a dead end before. Found by the second outside review.
TEST(OpsEdgeSemantics, Uint32Computes) {
  const std::vector<uint8_t> v{200, 100, 255, 1};
  const mv::Array u = mv::array(std::span<const uint8_t>(v), mv::Shape{2, 2});
  const mv::Array s = mv::sum(u, {1});
  EXPECT_EQ(s.dtype(), DType::uint32);
  EXPECT_EQ(s.to_host<uint32_t>(), (std::vector<uint32_t>{300, 256}));
  EXPECT_EQ((s / 2).to_host<float>(), (std::vector<float>{150.0f, 128.0f}));
  EXPECT_EQ((s + 1).to_host<uint32_t>(), (std::vector<uint32_t>{301, 257}));
  EXPECT_EQ(mv::astype(s > 299, DType::int32).to_host<int32_t>(), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ((mv::astype(u, DType::uint32) - mv::sum(u, {1}, true)).to_host<uint32_t>(),
            (std::vector<uint32_t>{4294967196u, 4294967096u, 4294967295u, 4294967041u}));
  const std::vector<uint32_t> big{4294967295u, 2147483648u, 7u, 0u};
  const mv::Array b = mv::array(std::span<const uint32_t>(big));
  EXPECT_EQ((b + 1).to_host<uint32_t>(), (std::vector<uint32_t>{0u, 2147483649u, 8u, 1u}));
  EXPECT_EQ(mv::floor_divide(b, 2).to_host<uint32_t>(), (std::vector<uint32_t>{2147483647u, 1073741824u, 3u, 0u}));
  EXPECT_EQ(mv::max(b).to_host<uint32_t>()[0], 4294967295u);
  EXPECT_EQ(mv::min(b).to_host<uint32_t>()[0], 0u);
  EXPECT_EQ(mv::argmax(b, 0).to_host<int32_t>()[0], 0);
  EXPECT_EQ(mv::sum(b).to_host<uint32_t>()[0], 2147483654u);  // wraps modulo 2^32
  EXPECT_EQ(mv::sort(b).to_host<uint32_t>(), (std::vector<uint32_t>{0u, 7u, 2147483648u, 4294967295u}));
  EXPECT_EQ(mv::lax::top_k(b, 2).first.to_host<uint32_t>(), (std::vector<uint32_t>{4294967295u, 2147483648u}));
  EXPECT_EQ(mv::prod(mv::array(std::span<const uint32_t>(std::vector<uint32_t>{65536u, 65537u}))).to_host<uint32_t>()[0], 65536u);
  const auto jitted = mv::jit([](const mv::Array& x) { return x * 3 + 1; });
  EXPECT_EQ(jitted(b).to_host<uint32_t>(), (std::vector<uint32_t>{4294967294u, 2147483649u, 22u, 1u}));
  expect_runtime_usable();
}

// Elementwise kernels against a plain CPU reference: every op, numpy broadcasting, weak scalar
// typing, int32 floor semantics, NaN/Inf, awkward sizes, sharded operands and fusion.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

std::vector<int32_t> random_ints(size_t n, uint32_t seed, int lo = -9, int hi = 9) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Relative-or-absolute closeness that treats NaN as equal to NaN and infinities exactly.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, float tol = 2e-6f) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (std::fabs(g - w) <= tol * std::max(1.0f, std::fabs(w))) continue;
    return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

int32_t floordiv(int32_t a, int32_t b) {
  if (b == 0) return 0;
  int32_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int32_t floormod(int32_t a, int32_t b) { return b == 0 ? 0 : a - b * floordiv(a, b); }

}  // namespace

TEST(Elementwise, UnaryFloatOpsMatchReference) {
  const std::vector<std::pair<std::function<mv::Array(const mv::Array&)>, std::function<float(float)>>> ops = {
      {mv::negative, [](float x) { return -x; }},
      {[](const mv::Array& x) { return mv::abs(x); }, [](float x) { return std::fabs(x); }},
      {mv::sign, [](float x) { return float((x > 0) - (x < 0)); }},
      {[](const mv::Array& x) { return mv::exp(x); }, [](float x) { return std::exp(x); }},
      {[](const mv::Array& x) { return mv::sin(x); }, [](float x) { return std::sin(x); }},
      {[](const mv::Array& x) { return mv::cos(x); }, [](float x) { return std::cos(x); }},
      {[](const mv::Array& x) { return mv::tanh(x); }, [](float x) { return std::tanh(x); }},
      {mv::sigmoid, [](float x) { return 1.0f / (1.0f + std::exp(-x)); }},
      {mv::relu, [](float x) { return std::max(x, 0.0f); }},
      {mv::square, [](float x) { return x * x; }},
      {mv::reciprocal, [](float x) { return 1.0f / x; }},
  };
  for (const size_t n : {1u, 7u, 1023u, 4096u, 100003u}) {
    const auto v = random_floats(n, static_cast<uint32_t>(n));
    const auto x = mv::array(std::span<const float>(v));
    for (size_t k = 0; k < ops.size(); ++k) {
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = ops[k].second(v[i]);
      EXPECT_TRUE(close(ops[k].first(x).to_host<float>(), want, 4e-6f)) << "op " << k << " n " << n;
    }
  }
  const auto pos = random_floats(1000, 5, 0.01f, 100.f);
  const auto p = mv::array(std::span<const float>(pos));
  std::vector<float> lg(pos.size()), sq(pos.size()), rs(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    lg[i] = std::log(pos[i]);
    sq[i] = std::sqrt(pos[i]);
    rs[i] = 1.0f / std::sqrt(pos[i]);
  }
  EXPECT_TRUE(close(mv::log(p).to_host<float>(), lg, 4e-6f));
  EXPECT_TRUE(close(mv::sqrt(p).to_host<float>(), sq, 4e-6f));
  EXPECT_TRUE(close(mv::rsqrt(p).to_host<float>(), rs, 4e-6f));
}

TEST(Elementwise, BinaryFloatOpsMatchReference) {
  const auto va = random_floats(1023, 1, -3, 3), vb = random_floats(1023, 2, -3, 3);
  const auto a = mv::array(std::span<const float>(va)), b = mv::array(std::span<const float>(vb));
  auto check = [&](const mv::Array& got, const std::function<float(float, float)>& f, const char* what) {
    std::vector<float> want(va.size());
    for (size_t i = 0; i < va.size(); ++i) want[i] = f(va[i], vb[i]);
    EXPECT_TRUE(close(got.to_host<float>(), want, 4e-6f)) << what;
  };
  check(a + b, std::plus<float>(), "add");
  check(a - b, std::minus<float>(), "sub");
  check(a * b, std::multiplies<float>(), "mul");
  check(a / b, std::divides<float>(), "div");
  check(mv::maximum(a, b), [](float x, float y) { return std::max(x, y); }, "maximum");
  check(mv::minimum(a, b), [](float x, float y) { return std::min(x, y); }, "minimum");
  check(mv::floor_divide(a, b), [](float x, float y) { return std::floor(x / y); }, "floor_divide");
  check(a % b, [](float x, float y) { float r = std::fmod(x, y); return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r; }, "remainder");
  check(mv::power(mv::abs(a), b), [](float x, float y) { return std::pow(std::fabs(x), y); }, "pow");
  auto as_float = [](const mv::Array& m) { return mv::astype(m, mv::DType::float32); };
  check(as_float(a < b), [](float x, float y) { return float(x < y); }, "lt");
  check(as_float(a >= b), [](float x, float y) { return float(x >= y); }, "ge");
  check(mv::where(a > b, a, b), [](float x, float y) { return x > y ? x : y; }, "where");
}

TEST(Elementwise, PowerOfNegativeBasesAndZero) {
  const auto a = mv::array({-2.f, -2.f, 0.f, 0.f, 4.f, -8.f});
  const auto b = mv::array({3.f, 0.5f, -1.f, 2.f, 0.5f, 2.f});
  const auto r = mv::power(a, b).to_host<float>();
  EXPECT_FLOAT_EQ(r[0], -8.f);
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_TRUE(std::isinf(r[2]));
  EXPECT_EQ(r[3], 0.f);
  EXPECT_FLOAT_EQ(r[4], 2.f);
  EXPECT_FLOAT_EQ(r[5], 64.f);
}

TEST(Elementwise, IntegerSemanticsFollowNumpy) {
  const auto va = random_ints(999, 3, -50, 50), vb = random_ints(999, 4, -7, 7);
  const auto a = mv::array(std::span<const int32_t>(va)), b = mv::array(std::span<const int32_t>(vb));
  const auto fd = mv::floor_divide(a, b).to_host<int32_t>();
  const auto md = (a % b).to_host<int32_t>();
  const auto mx = mv::maximum(a, b).to_host<int32_t>();
  const auto pw = mv::power(b, mv::array(std::span<const int32_t>(random_ints(999, 5, 0, 6)))).to_host<int32_t>();
  const auto e5 = random_ints(999, 5, 0, 6);
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(fd[i], floordiv(va[i], vb[i])) << va[i] << " // " << vb[i];
    ASSERT_EQ(md[i], floormod(va[i], vb[i])) << va[i] << " % " << vb[i];
    ASSERT_EQ(mx[i], std::max(va[i], vb[i]));
    int32_t p = 1;
    for (int k = 0; k < e5[i]; ++k) p *= vb[i];
    ASSERT_EQ(pw[i], p);
  }
  EXPECT_EQ((a + b).dtype(), mv::DType::int32);
  EXPECT_EQ((a / b).dtype(), mv::DType::float32);  // true division
  EXPECT_EQ((2 * a).dtype(), mv::DType::int32);     // weak int scalar keeps int32
  EXPECT_EQ((2.5 * a).dtype(), mv::DType::float32); // weak float scalar makes float32
  EXPECT_EQ((a < b).dtype(), mv::DType::bool_);
  EXPECT_EQ(mv::sin(a).dtype(), mv::DType::float32);
  EXPECT_EQ(mv::negative(a).to_host<int32_t>()[0], -va[0]);
}

TEST(Elementwise, NanAndInfPropagateAsNumpy) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto a = mv::array({nan, 1.f, inf, -inf, 0.f, 2.f, nan, 3.f});
  const auto b = mv::array({1.f, nan, 1.f, inf, 0.f, inf, nan, -inf});
  const auto mx = mv::maximum(a, b).to_host<float>();
  const auto mn = mv::minimum(a, b).to_host<float>();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mx[2], inf);
  EXPECT_EQ(mn[3], -inf);
  const auto sum = (a + b).to_host<float>();
  EXPECT_TRUE(std::isnan(sum[3]));  // inf + -inf
  EXPECT_TRUE(std::isnan((a / b).to_host<float>()[4]));  // 0 / 0
  EXPECT_EQ((b / a).to_host<float>()[5], inf);
  const auto eq = mv::astype(mv::equal(a, a), mv::DType::int32).to_host<int32_t>();
  EXPECT_EQ(eq[0], 0);  // NaN != NaN
  EXPECT_EQ(eq[1], 1);
  EXPECT_EQ(mv::astype(mv::not_equal(a, a), mv::DType::int32).to_host<int32_t>()[0], 1);
  EXPECT_TRUE(std::isnan(mv::exp(a).to_host<float>()[0]));
  EXPECT_EQ(mv::tanh(mv::array({inf, -inf, 40.f})).to_host<float>(), (std::vector<float>{1.f, -1.f, 1.f}));
  EXPECT_EQ(mv::sigmoid(mv::array({-inf, inf})).to_host<float>(), (std::vector<float>{0.f, 1.f}));
}

TEST(Elementwise, BroadcastingEdgeCases) {
  const auto col = mv::arange(4.f).reshape({4, 1});
  const auto row = mv::arange(8.f).reshape({1, 8});
  const auto sum = (col * 10 + row).to_host<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) ASSERT_EQ(sum[i * 8 + j], i * 10 + j);
  const auto m = mv::arange(24).reshape({2, 3, 4});
  const auto v = mv::arange(4);
  const auto r = (m - v).to_host<int32_t>();
  for (int i = 0; i < 24; ++i) ASSERT_EQ(r[i], i - i % 4);
  EXPECT_EQ((m + mv::scalar(int32_t{5})).to_host<int32_t>()[23], 28);
  const auto empty = mv::zeros({0, 3});
  EXPECT_EQ((empty + 1.f).shape(), (mv::Shape{0, 3}));
  EXPECT_EQ((empty + 1.f).to_host<float>().size(), 0u);
  try {
    (void)(mv::zeros({3, 4}) + mv::zeros({5}));
    FAIL();
  } catch (const mv::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("add"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(3, 4)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(5,)"), std::string::npos) << msg;
  }
}

TEST(Elementwise, ChainFusesIntoOneDispatchPerDevice) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = mv::device_put(mv::arange(32.f), mv::NamedSharding(mesh, P("x")));
  auto& state = *test_runtime().state();
  const uint64_t before = state.dispatches.load();
  const auto y = 2 * mv::sin(x) + 1;
  EXPECT_EQ(state.dispatches.load(), before);  // nothing has run yet
  const auto v = y.to_host<float>();
  EXPECT_EQ(state.dispatches.load(), before + 8);  // one fused dispatch per device
  EXPECT_EQ(y.sharding(), x.sharding());
  const std::vector<float> want = {1.f, 2.682942f, 2.818595f, 1.28224f, -0.513605f, -0.9178486f, 0.44116902f, 2.3139732f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(v[i], want[i], 1e-6f);
  EXPECT_NEAR(v[31], 0.19192469f, 1e-6f);
}

TEST(Elementwise, ShardedOperandsFollowTheirLayout) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto va = random_floats(64 * 32, 11, -3, 3);
  const auto a = mv::device_put(std::span<const float>(va), {64, 32}, mv::NamedSharding(mesh, P("a", "b")));
  const auto bias = mv::arange(32.f);  // uncommitted: moves to where it is needed
  const auto r = a + bias;
  EXPECT_EQ(r.sharding(), a.sharding());
  const auto got = r.to_host<float>();
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 32; ++j) ASSERT_EQ(got[i * 32 + j], va[i * 32 + j] + j);
  // Explicit-style broadcast of two sharded operands: [4,1]@P('a',None) + [1,8]@P(None,'b').
  const auto x = mv::device_put(mv::arange(4).reshape({4, 1}), mv::NamedSharding(mesh, P("a", mv::None)));
  const auto y = mv::device_put(mv::arange(8).reshape({1, 8}), mv::NamedSharding(mesh, P(mv::None, "b")));
  const auto s = x + y;
  EXPECT_EQ(s.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("a", "b"))));
  const auto sv = s.to_host<int32_t>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) ASSERT_EQ(sv[i * 8 + j], i + j);
}

TEST(Elementwise, IncompatibleCommittedDevicesAreAnError) {
  const auto m1 = mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3});
  const auto m2 = mv::make_mesh({4}, {"x"}, {}, {4, 5, 6, 7});
  const auto x = mv::device_put(mv::zeros({64, 8}), mv::NamedSharding(m1, P("x")));
  const auto y = mv::device_put(mv::zeros({64, 8}), mv::NamedSharding(m2, P("x")));
  try {
    (void)(x + y);
    FAIL();
  } catch (const mv::Error& e) {
    const std::string p = test_runtime().platform();
    EXPECT_NE(std::string(e.what()).find("Received incompatible devices for jitted computation. Got argument x of add with shape float32[64,8] and device ids [0, 1, 2, 3] on platform " + p +
                                         " and argument y of add with shape float32[64,8] and device ids [4, 5, 6, 7] on platform " + p),
              std::string::npos)
        << e.what();
  }
  // Uncommitted operands move freely.
  EXPECT_EQ((y + mv::ones_like(y)).to_host<float>()[0], 1.f);
}

TEST(Elementwise, LargeArraysBeyondOneBinding) {
  // 40M floats = 160 MiB, past lavapipe's 128 MiB maxStorageBufferRange.
  const auto x = mv::arange(40'000'000.f) * 0.5f + 1.f;
  const auto v = x.to_host<float>();
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[33'554'433], 33'554'433 * 0.5f + 1.f);
  EXPECT_EQ(v.back(), 39'999'999 * 0.5f + 1.f);
}

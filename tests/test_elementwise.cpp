// Elementwise kernels against a plain CPU reference: every op, numpy broadcasting, weak scalar
// typing, int32 floor semantics, NaN/Inf, awkward sizes, sharded operands and fusion.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
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

namespace {

// The element of a row-major `shape` at `flat` in the output, read from an input of `in_shape`
// broadcast to it (numpy's rules: trailing axes aligned, size-1 axes repeated).
size_t broadcast_index(const mv::Shape& shape, const mv::Shape& in_shape, size_t flat) {
  size_t index = 0, stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    const size_t c = flat % static_cast<size_t>(shape[d]);
    flat /= static_cast<size_t>(shape[d]);
    const size_t lead = shape.size() - in_shape.size();
    if (d < lead) continue;
    const auto n = static_cast<size_t>(in_shape[d - lead]);
    if (n != 1) index += c * stride;
    stride *= n;
  }
  return index;
}

struct BroadcastCase {
  mv::Shape a, b;
};

}  // namespace

// Inputs broadcast along rows (a bias, a mean over the last axis, a middle axis of 1) are read a
// vec4 at a time where the last axis is a multiple of 4, and element by element otherwise; both
// must give numpy's result bit for bit, for every dtype, on one device and on sharded pieces whose
// replicated inputs start inside the piece (offsets that are and are not multiples of 4).
TEST(Elementwise, RowBroadcastsMatchNumpyBitForBit) {
  const std::vector<BroadcastCase> cases = {
      {{16, 64, 128}, {128}},  {{16, 64, 128}, {16, 64, 1}}, {{5, 3, 12}, {5, 1, 12}}, {{5, 3, 12}, {1, 3, 1}},
      {{7, 4}, {4}},           {{7, 4}, {7, 1}},             {{3, 5}, {5}},            {{3, 6}, {3, 1}},
      {{2, 3, 8}, {3, 8}},     {{9, 20}, {1, 20}},           {{4, 1, 8}, {4, 6, 1}},   {{1, 4}, {3, 1}},
      {{6, 16}, {6, 16}},      {{33, 36}, {36}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("a " + mv::shape_to_string(c.a) + " b " + mv::shape_to_string(c.b));
    const mv::Shape shape = mv::broadcast_shapes(c.a, c.b);
    const size_t n = static_cast<size_t>(mv::shape_size(shape));
    const auto va = random_floats(static_cast<size_t>(mv::shape_size(c.a)), 31, -4, 4);
    const auto vb = random_floats(static_cast<size_t>(mv::shape_size(c.b)), 32, -4, 4);
    const mv::Array a = mv::array(va, c.a), b = mv::array(vb, c.b);
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      const float x = va[broadcast_index(shape, c.a, i)], y = vb[broadcast_index(shape, c.b, i)];
      const float t = x - y;
      want[i] = t * x;
    }
    const auto got = ((a - b) * mv::broadcast_to(a, shape)).to_host<float>();
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "element " << i;

    // int32 and bfloat16 read the same ways (4-byte and 2-byte texels).
    std::vector<int32_t> ia(va.size()), ib(vb.size());
    for (size_t i = 0; i < va.size(); ++i) ia[i] = static_cast<int32_t>(va[i] * 1000);
    for (size_t i = 0; i < vb.size(); ++i) ib[i] = static_cast<int32_t>(vb[i] * 1000);
    const auto gi = (mv::array(ia, c.a) * 3 - mv::array(ib, c.b)).to_host<int32_t>();
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(gi[i], ia[broadcast_index(shape, c.a, i)] * 3 - ib[broadcast_index(shape, c.b, i)]) << "element " << i;
    const auto ha = mv::astype(a, mv::DType::bfloat16), hb = mv::astype(b, mv::DType::bfloat16);
    const auto gh = mv::astype(ha + hb, mv::DType::float32).to_host<float>();
    for (size_t i = 0; i < n; ++i) {
      const float x = static_cast<float>(mv::bfloat16(va[broadcast_index(shape, c.a, i)]));
      const float y = static_cast<float>(mv::bfloat16(vb[broadcast_index(shape, c.b, i)]));
      ASSERT_EQ(gh[i], static_cast<float>(mv::bfloat16(x + y))) << "element " << i;
    }
  }
}

TEST(Elementwise, RowBroadcastsOnShardedPiecesMatchNumpy) {
  // A replicated bias and row vector added to outputs split along their last axis: each device's
  // piece reads the bias from inside it (offsets 4, 8, 12, ...), on meshes of 2, 3 and 4; pieces
  // of 3 and 6 columns take the element-by-element kernel.
  for (const int64_t cols : {48, 12, 24}) {
    for (const int devices : {4, 3, 2}) {
      if (cols % devices != 0) continue;
      SCOPED_TRACE("cols " + std::to_string(cols) + " devices " + std::to_string(devices));
      std::vector<int> ids(static_cast<size_t>(devices));
      std::iota(ids.begin(), ids.end(), 0);
      const auto mesh = mv::make_mesh({devices}, {"x"}, {}, ids);
      const auto vx = random_floats(static_cast<size_t>(10 * cols), 41, -3, 3);
      const auto vb = random_floats(static_cast<size_t>(cols), 42, -3, 3);
      const auto vr = random_floats(10, 43, -3, 3);
      const auto x = mv::device_put(std::span<const float>(vx), {10, cols}, mv::NamedSharding(mesh, P(mv::None, "x")));
      const auto got = ((x + mv::array(vb, {cols})) * mv::array(vr, {10, 1})).to_host<float>();
      for (int64_t i = 0; i < 10; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const float t = vx[static_cast<size_t>(i * cols + j)] + vb[static_cast<size_t>(j)];
          ASSERT_EQ(got[static_cast<size_t>(i * cols + j)], t * vr[static_cast<size_t>(i)]) << i << ", " << j;
        }
    }
  }
}

TEST(Elementwise, RowBroadcastBeyondOneBinding) {
  // 262,401 x 128 floats (past lavapipe's 128 MiB binding): the second chunk finds its rows from
  // its first element, not from 0.
  const int64_t rows = 262'401;
  const auto x = mv::arange(static_cast<float>(rows * 128)).reshape({rows, 128});
  const auto r = (x - mv::arange(128.f)) + mv::arange(static_cast<float>(rows)).reshape({rows, 1}) * 0.5f;
  const auto v = r.to_host<float>();
  for (const int64_t i : {int64_t{0}, int64_t{1}, int64_t{262'143}, int64_t{262'144}, rows - 1})
    for (const int64_t j : {int64_t{0}, int64_t{3}, int64_t{127}})
      ASSERT_EQ(v[static_cast<size_t>(i * 128 + j)], static_cast<float>(i * 128 + j) - static_cast<float>(j) + static_cast<float>(i) * 0.5f)
          << i << ", " << j;
}

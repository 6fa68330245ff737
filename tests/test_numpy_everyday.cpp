// Everyday jax.numpy functions a transformer user reaches for (rounding, flip, tile, repeat,
// moveaxis, split, log10, logaddexp, isclose, nan_to_num, linspace, searchsorted, bincount,
// linalg.norm, lax.switch), against numpy's results (computed with numpy 1.24, float32 where the
// inputs are), eager, under jit, on sharded inputs and through grad.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::DType;
using mv::P;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Bit for bit, so that -0 and +0 differ and NaN equals NaN.
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

}  // namespace

TEST(NumpyEveryday, RoundingIsExactAndKeepsIntegers) {
  const std::vector<float> x{-2.5f, -1.5f, -0.5f, -0.0f, 0.5f, 1.5f, 2.5f, 1.7f, -1.7f, kInf, -kInf, 1e30f,
                             8388609.0f, 0.49999997f, -0.2f};
  const mv::Array a = mv::array(x);
  expect_bits(mv::floor(a).to_host<float>(),
              {-3, -2, -1, -0.0f, 0, 1, 2, 1, -2, kInf, -kInf, 1e30f, 8388609.0f, 0, -1}, "floor");
  expect_bits(mv::ceil(a).to_host<float>(),
              {-2, -1, -0.0f, -0.0f, 1, 2, 3, 2, -1, kInf, -kInf, 1e30f, 8388609.0f, 1, -0.0f}, "ceil");
  const std::vector<float> truncated{-2, -1, -0.0f, -0.0f, 0, 1, 2, 1, -1, kInf, -kInf, 1e30f, 8388609.0f, 0, -0.0f};
  expect_bits(mv::trunc(a).to_host<float>(), truncated, "trunc");
  expect_bits(mv::fix(a).to_host<float>(), truncated, "fix");
  const std::vector<float> rinted{-2, -2, -0.0f, -0.0f, 0, 2, 2, 2, -2, kInf, -kInf, 1e30f, 8388609.0f, 0, -0.0f};
  expect_bits(mv::rint(a).to_host<float>(), rinted, "rint");
  expect_bits(mv::round(a).to_host<float>(), rinted, "round");
  // The same fused into a chain, under jit, on a sharded array.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  std::vector<float> many;
  for (int i = 0; i < 40; ++i) many.push_back(static_cast<float>(i) * 0.25f - 5.0f);
  const mv::Array s = mv::device_put(std::span<const float>(many), {40}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::jit([](const mv::Array& v) { return mv::floor(v * 2.0f) + mv::ceil(v) - mv::round(v); });
  std::vector<float> want;
  for (const float v : many) want.push_back(std::floor(v * 2.0f) + std::ceil(v) - std::nearbyint(v));
  expect_bits(f(s).to_host<float>(), want, "jit chain");
  // Integers come back unchanged (the same dtype); bfloat16 and float64 round in their type.
  const mv::Array i = mv::array({-3, 7});
  EXPECT_EQ(mv::floor(i).dtype(), DType::int32);
  EXPECT_EQ(mv::round(i).to_host<int32_t>(), (std::vector<int32_t>{-3, 7}));
  EXPECT_EQ(mv::rint(mv::astype(mv::array({2.5f, -3.5f}), DType::bfloat16)).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::astype(mv::rint(mv::astype(mv::array({2.5f, -3.5f}), DType::bfloat16)), DType::float32).to_host<float>(),
            (std::vector<float>{2.0f, -4.0f}));
  // Random floats and doubles of every magnitude against C's roundings (lavapipe's own double
  // roundEven was wrong off the halves).
  std::vector<float> rf;
  std::vector<double> rd;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int exponent = static_cast<int>((state >> 40) % 70) - 10;  // |x| from 2^-10 to 2^60
    const double base = std::ldexp(static_cast<double>(state >> 11) / 9007199254740992.0, exponent) * ((state & 1) ? -1 : 1);
    rf.push_back(static_cast<float>(base));
    rd.push_back(base);
    rf.push_back(std::nearbyint(static_cast<float>(base * 4)) / 4 + 0.5f);  // ties
    rd.push_back(std::nearbyint(base * 4) / 4 + 0.5);
  }
  rd.push_back(-0.5000000000000001);
  rd.push_back(4503599627370497.0);
  rd.push_back(-0.0);
  const mv::Array af = mv::array(rf), ad = mv::array(std::span<const double>(rd));
  using F = double (*)(double);
  const std::vector<std::pair<std::function<mv::Array(const mv::Array&)>, F>> fns{
      {[](const mv::Array& v) { return mv::floor(v); }, [](double v) { return std::floor(v); }},
      {[](const mv::Array& v) { return mv::ceil(v); }, [](double v) { return std::ceil(v); }},
      {[](const mv::Array& v) { return mv::trunc(v); }, [](double v) { return std::trunc(v); }},
      {[](const mv::Array& v) { return mv::rint(v); }, [](double v) { return std::nearbyint(v); }}};
  for (size_t k = 0; k < fns.size(); ++k) {
    const std::vector<float> gf = fns[k].first(af).to_host<float>();
    const std::vector<double> gd = fns[k].first(ad).to_host<double>();
    for (size_t i = 0; i < rf.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(gf[i]), std::bit_cast<uint32_t>(static_cast<float>(fns[k].second(rf[i]))))
          << "function " << k << " of " << rf[i];
    for (size_t i = 0; i < rd.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint64_t>(gd[i]), std::bit_cast<uint64_t>(fns[k].second(rd[i])))
          << "function " << k << " of " << rd[i];
  }
  // Gradients are zero, as JAX's.
  const mv::Array g = mv::grad([](const mv::Array& v) { return mv::sum(mv::floor(v) + mv::round(v) * v); })(mv::array({1.5f, -2.25f}));
  EXPECT_EQ(g.to_host<float>(), (std::vector<float>{2.0f, -2.0f}));
  expect_runtime_usable();
}

TEST(NumpyEveryday, RoundWithDecimals) {
  const mv::Array a = mv::array({1.2345f, 2.675f, -2.5f, 1234.5f, 0.125f});
  expect_bits(mv::round(a, 2).to_host<float>(), {1.23f, 2.68f, -2.5f, 1234.5f, 0.12f}, "round 2");
  expect_bits(mv::round(a, -2).to_host<float>(), {0.0f, 0.0f, -0.0f, 1200.0f, 0.0f}, "round -2");
  const std::vector<double> d{1.2345, 2.675, -2.5, 1234.5, 0.125};
  EXPECT_EQ(mv::round(mv::array(std::span<const double>(d)), 2).to_host<double>(),
            (std::vector<double>{1.23, 2.68, -2.5, 1234.5, 0.12}));
  // Integers: halves to the even multiple, as numpy.
  EXPECT_EQ(mv::round(mv::array({15, 25, -15, -25, 14, -14, 35}), -1).to_host<int32_t>(),
            (std::vector<int32_t>{20, 20, -20, -20, 10, -10, 40}));
  EXPECT_EQ(mv::round(mv::array({15, 25}), 3).to_host<int32_t>(), (std::vector<int32_t>{15, 25}));
  EXPECT_EQ(mv::round(mv::array({2147483647, -5}), -12).to_host<int32_t>(), (std::vector<int32_t>{0, 0}));
  EXPECT_THROW(mv::round(a, 39), mv::Error);
  expect_runtime_usable();
}

TEST(NumpyEveryday, FlipTileRepeatMoveaxis) {
  const mv::Array a = mv::arange(24).reshape(mv::Shape{2, 3, 4});
  EXPECT_EQ(mv::flip(a, 1).to_host<int32_t>(),
            (std::vector<int32_t>{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3, 20, 21, 22, 23, 16, 17, 18, 19, 12, 13, 14, 15}));
  std::vector<int32_t> reversed(24);
  for (int i = 0; i < 24; ++i) reversed[static_cast<size_t>(i)] = 23 - i;
  EXPECT_EQ(mv::flip(a).to_host<int32_t>(), reversed);
  EXPECT_EQ(mv::flip(a, {0, 1, 2}).to_host<int32_t>(), reversed);
  EXPECT_THROW(mv::flip(a, {1, -2}), mv::Error);
  EXPECT_EQ(mv::tile(mv::arange(3), {2, 2}).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(mv::tile(mv::arange(3), {2, 2}).shape(), (mv::Shape{2, 6}));
  EXPECT_EQ(mv::tile(mv::arange(6).reshape(mv::Shape{2, 3}), 2).to_host<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(mv::tile(mv::arange(3), 0).shape(), (mv::Shape{0}));
  EXPECT_EQ(mv::repeat(mv::arange(6).reshape(mv::Shape{2, 3}), 2, 1).to_host<int32_t>(),
            (std::vector<int32_t>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}));
  EXPECT_EQ(mv::repeat(mv::arange(6).reshape(mv::Shape{2, 3}), 2).shape(), (mv::Shape{12}));
  EXPECT_EQ(mv::repeat(mv::arange(4), {1, 0, 2, 3}).to_host<int32_t>(), (std::vector<int32_t>{0, 2, 2, 3, 3, 3}));
  EXPECT_THROW(mv::repeat(mv::arange(4), {1, 2}), mv::Error);
  const mv::Array m = mv::moveaxis(a, 0, -1);
  EXPECT_EQ(m.shape(), (mv::Shape{3, 4, 2}));
  EXPECT_EQ(m.to_host<int32_t>(), (std::vector<int32_t>{0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17, 6, 18, 7, 19,
                                                         8, 20, 9, 21, 10, 22, 11, 23}));
  EXPECT_EQ(mv::moveaxis(mv::zeros({2, 3, 4, 5}), {0, 1}, {-1, -2}).shape(), (mv::Shape{4, 5, 3, 2}));
  EXPECT_EQ(mv::swapaxes(a, 0, 2).shape(), (mv::Shape{4, 3, 2}));
  EXPECT_THROW(mv::moveaxis(a, {0, 0}, {1, 2}), mv::Error);
  // On a sharded array, under jit, and the gradients: flip's is the cotangent flipped back,
  // tile's and repeat's the sums of the copies.
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"a", "b"});
  const mv::Array s = mv::device_put(mv::arange(32.0f).reshape(mv::Shape{4, 8}), mv::NamedSharding(mesh, P("a", "b")));
  const auto f = mv::jit([](const mv::Array& v) { return mv::flip(mv::tile(v, {1, 2}), 1); });
  const std::vector<float> got = f(s).to_host<float>();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 16; ++c)
      EXPECT_EQ(got[static_cast<size_t>(r * 16 + c)], static_cast<float>(r * 8 + (15 - c) % 8));
  const mv::Array w = mv::arange(12.0f).reshape(mv::Shape{3, 4});
  const mv::Array g = mv::grad([&](const mv::Array& v) {
    return mv::sum(mv::flip(v, 1) * w) + mv::sum(mv::tile(v, {2, 1})) + mv::sum(mv::repeat(v, 3, 0));
  })(mv::zeros({3, 4}));
  std::vector<float> want;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) want.push_back(static_cast<float>(r * 4 + (3 - c)) + 2.0f + 3.0f);
  EXPECT_EQ(g.to_host<float>(), want);
  expect_runtime_usable();
}

TEST(NumpyEveryday, SplitAndArraySplit) {
  auto host = [](const std::vector<mv::Array>& parts) {
    std::vector<std::vector<int32_t>> out;
    for (const mv::Array& p : parts) out.push_back(p.to_host<int32_t>());
    return out;
  };
  using V = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(host(mv::array_split(mv::arange(7), 3)), (V{{0, 1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(host(mv::split(mv::arange(7), {2, -2, 10})), (V{{0, 1}, {2, 3, 4}, {5, 6}, {}}));
  EXPECT_EQ(host(mv::split(mv::arange(7), {5, 2})), (V{{0, 1, 2, 3, 4}, {}, {2, 3, 4, 5, 6}}));
  EXPECT_EQ(host(mv::split(mv::arange(8), 4, 0)), (V{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(host(mv::split(mv::arange(8), {4}, 0)), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_THROW(mv::split(mv::arange(7), 3, 0), mv::Error);
  EXPECT_THROW(mv::array_split(mv::arange(7), 0), mv::Error);
  const std::vector<mv::Array> cols = mv::split(mv::arange(12).reshape(mv::Shape{3, 4}), 2, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[1].shape(), (mv::Shape{3, 2}));
  EXPECT_EQ(cols[1].to_host<int32_t>(), (std::vector<int32_t>{2, 3, 6, 7, 10, 11}));
  expect_runtime_usable();
}

TEST(NumpyEveryday, Log10LogaddexpIsclose) {
  const mv::Array l = mv::array({1.0f, 10.0f, 100.0f, 1000.0f, 1e-5f, 2.0f, 0.5f, 0.0f, -1.0f});
  // JAX's log10 (log(x) / log(10)): exact at these powers of ten.
  expect_bits(mv::log10(l).to_host<float>(),
              {0.0f, 1.0f, 2.0f, 3.0f, -5.0f, 0.3010299801826477f, -0.3010299801826477f, -kInf, kNaN}, "log10");
  EXPECT_EQ(mv::log10(mv::array({100})).dtype(), DType::float32);
  const std::vector<double> d{1000.0, 1e-300};
  const std::vector<double> ld = mv::log10(mv::array(std::span<const double>(d))).to_host<double>();
  EXPECT_NEAR(ld[0], 3.0, 1e-15);
  EXPECT_NEAR(ld[1], -300.0, 1e-12);

  const mv::Array a = mv::array({1.0f, -kInf, kInf, kInf, 0.0f, 1000.0f, -1000.0f, kNaN});
  const mv::Array b = mv::array({2.0f, -kInf, kInf, -kInf, -kInf, 999.0f, -1001.0f, 1.0f});
  const std::vector<float> lae = mv::logaddexp(a, b).to_host<float>();
  const std::vector<float> want{2.3132617473602295f, -kInf, kInf, kInf, 0.0f, 1000.313232421875f, -999.686767578125f, kNaN};
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(lae[i])) << i;
    else if (std::isinf(want[i])) EXPECT_EQ(lae[i], want[i]) << i;
    else EXPECT_NEAR(lae[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i]))) << i;
  }
  // Gradient: softmax weights of the two operands; JAX's rule at equal infinities.
  const std::vector<mv::Array> gs =
      mv::grad([](const mv::Array& p, const mv::Array& q) { return mv::sum(mv::logaddexp(p, q)); },
               std::vector<int>{0, 1})(mv::array({0.0f, 3.0f, kInf, -kInf}), mv::array({0.0f, 1.0f, kInf, 0.0f}));
  const std::vector<float> hga = gs[0].to_host<float>(), hgb = gs[1].to_host<float>();
  EXPECT_FLOAT_EQ(hga[0], 0.5f);
  EXPECT_NEAR(hga[1], 1.0f / (1.0f + std::exp(-2.0f)), 1e-6f);
  EXPECT_NEAR(hgb[1], 1.0f / (1.0f + std::exp(2.0f)), 1e-6f);
  EXPECT_EQ(hga[2], 1.0f);
  EXPECT_EQ(hgb[2], 1.0f);
  EXPECT_EQ(hga[3], 0.0f);
  EXPECT_EQ(hgb[3], 1.0f);
  EXPECT_EQ(mv::logaddexp(mv::array({1.0f}), 1.0f).to_host<float>()[0], 1.0f + std::log(2.0f));

  const mv::Array p = mv::array({1.0f, kInf, kInf, kNaN, 1e10f, 1.0f, -kInf});
  const mv::Array q = mv::array({1.000001f, kInf, -kInf, kNaN, 1.00001e10f, 1.1f, -kInf});
  auto bools = [](const mv::Array& v) { return mv::astype(v, DType::int32).to_host<int32_t>(); };
  EXPECT_EQ(bools(mv::isclose(p, q)), (std::vector<int32_t>{1, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(bools(mv::isclose(p, q, 1e-5, 1e-8, true)), (std::vector<int32_t>{1, 1, 0, 1, 0, 0, 1}));
  EXPECT_EQ(bools(mv::isclose(mv::array({1, 5}), mv::array({2, 5}), 0.0, 1.0)), (std::vector<int32_t>{1, 1}));
  EXPECT_FALSE(bools(mv::allclose(p, q))[0]);
  EXPECT_TRUE(bools(mv::allclose(mv::array({1.0f, 2.0f}), mv::array({1.0f, 2.000001f})))[0]);
  expect_runtime_usable();
}

TEST(NumpyEveryday, NanToNum) {
  const mv::Array x = mv::array({kNaN, kInf, -kInf, 1.5f});
  expect_bits(mv::nan_to_num(x).to_host<float>(), {0.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1.5f},
              "float32");
  expect_bits(mv::nan_to_num(x, 7, 8, -9).to_host<float>(), {7, 8, -9, 1.5f}, "values");
  expect_bits(mv::astype(mv::nan_to_num(mv::astype(x, DType::float16)), DType::float32).to_host<float>(),
              {0.0f, 65504.0f, -65504.0f, 1.5f}, "float16");
  const std::vector<double> d{std::nan(""), HUGE_VAL, -HUGE_VAL, 1.5};
  EXPECT_EQ(mv::nan_to_num(mv::array(std::span<const double>(d))).to_host<double>(),
            (std::vector<double>{0.0, std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(), 1.5}));
  EXPECT_EQ(mv::nan_to_num(mv::array({1, 2})).dtype(), DType::int32);
  expect_runtime_usable();
}

TEST(NumpyEveryday, LinspaceAsNumpy) {
  expect_bits(mv::linspace(0, 1, 7).to_host<float>(),
              {0.0f, 0.1666666716337204f, 0.3333333432674408f, 0.5f, 0.6666666865348816f, 0.8333333134651184f, 1.0f}, "0..1");
  const std::vector<float> l = mv::linspace(-3.3, 9.1, 50, false).to_host<float>();
  ASSERT_EQ(l.size(), 50u);
  EXPECT_EQ(l[1], -3.052000045776367f);
  EXPECT_EQ(l[17], 0.9160000085830688f);
  EXPECT_EQ(l[49], 8.85200023651123f);
  expect_bits(mv::linspace(0.1, 0.7, 11).to_host<float>(),
              {0.10000000149011612f, 0.1599999964237213f, 0.2199999988079071f, 0.2800000011920929f, 0.3400000035762787f,
               0.4000000059604645f, 0.46000000834465027f, 0.5199999809265137f, 0.5799999833106995f, 0.6399999856948853f,
               0.699999988079071f},
              "0.1..0.7");
  EXPECT_EQ(mv::linspace(2.5, 7, 1).to_host<float>(), (std::vector<float>{2.5f}));
  EXPECT_EQ(mv::linspace(1, 1, 5).to_host<float>(), (std::vector<float>(5, 1.0f)));
  EXPECT_EQ(mv::linspace(0, 1, 0).shape(), (mv::Shape{0}));
  EXPECT_EQ(mv::linspace(0, 10, 4, true, DType::int32).to_host<int32_t>(), (std::vector<int32_t>{0, 3, 6, 10}));
  EXPECT_EQ(mv::linspace(-1, 1, 5, true, DType::int32).to_host<int32_t>(), (std::vector<int32_t>{-1, -1, 0, 0, 1}));
  EXPECT_THROW(mv::linspace(0, 1, -1), mv::Error);
  expect_runtime_usable();
}

TEST(NumpyEveryday, SearchsortedBincountNorm) {
  const mv::Array sorted = mv::array({1.0f, 2.0f, 2.0f, 2.0f, 3.0f, 5.0f, kNaN});
  const mv::Array v = mv::array({2.0f, 0.0f, 6.0f, kNaN, 3.0f, 2.5f}, {2, 3});
  EXPECT_EQ(mv::searchsorted(sorted, v).to_host<int32_t>(), (std::vector<int32_t>{1, 0, 6, 6, 4, 4}));
  EXPECT_EQ(mv::searchsorted(sorted, v, "right").to_host<int32_t>(), (std::vector<int32_t>{4, 0, 6, 7, 5, 4}));
  EXPECT_EQ(mv::searchsorted(sorted, v).shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(mv::searchsorted(mv::array({1, 3, 5}), mv::array({3, 6})).to_host<int32_t>(), (std::vector<int32_t>{1, 3}));
  EXPECT_THROW(mv::searchsorted(sorted, v, "middle"), mv::Error);

  EXPECT_EQ(mv::bincount(mv::array({0, 1, 1, 3, 2, 1, 7})).to_host<int32_t>(), (std::vector<int32_t>{1, 3, 1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(mv::bincount(mv::array({0, 1, 1, 3}), mv::array({0.5f, 1.0f, 2.0f, 4.0f}), 6).to_host<float>(),
            (std::vector<float>{0.5f, 3.0f, 0.0f, 4.0f, 0.0f, 0.0f}));
  // JAX's rule with a length: negative values count as 0, values past it are dropped; and under jit.
  const auto counts = mv::jit([](const mv::Array& x) { return mv::bincount(x, std::nullopt, 0, 4); });
  EXPECT_EQ(counts(mv::array({-2, 0, 3, 9, 3})).to_host<int32_t>(), (std::vector<int32_t>{2, 0, 0, 2}));
  EXPECT_THROW(mv::bincount(mv::array({1.0f})), mv::Error);

  const mv::Array m = mv::array({1.0f, -2.0f, 3.0f, -4.0f, 5.0f, -6.0f}, {2, 3});
  const mv::Array vec = mv::array({3.0f, -4.0f, 0.0f, 1.0f});
  auto one = [](const mv::Array& a) { return a.to_host<float>()[0]; };
  EXPECT_NEAR(one(mv::linalg::norm(m)), 9.539392471313477f, 1e-5f);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::optional<double>> ords{std::nullopt, 1.0, inf, -inf, 0.0, 3.0, 0.5};
  const std::vector<float> vec_want{5.099019527435303f, 8.0f, 4.0f, 0.0f, 3.0f, 4.514357566833496f, 22.392305374145508f};
  for (size_t i = 0; i < ords.size(); ++i) EXPECT_NEAR(one(mv::linalg::norm(vec, ords[i])), vec_want[i], 1e-4f) << i;
  const std::vector<std::optional<double>> mords{std::nullopt, 1.0, -1.0, inf, -inf};
  const std::vector<float> mat_want{9.539392471313477f, 9.0f, 5.0f, 15.0f, 6.0f};
  for (size_t i = 0; i < mords.size(); ++i) EXPECT_NEAR(one(mv::linalg::norm(m, mords[i])), mat_want[i], 1e-5f) << i;
  const std::vector<float> rows = mv::linalg::norm(m, std::nullopt, {1}).to_host<float>();
  EXPECT_NEAR(rows[0], 3.7416574954986572f, 1e-6f);
  EXPECT_NEAR(rows[1], 8.774964332580566f, 1e-6f);
  EXPECT_EQ(mv::linalg::norm(m, 1.0, {0, 1}, true).shape(), (mv::Shape{1, 1}));
  EXPECT_THROW(mv::linalg::norm(m, 2.0), mv::Error);
  EXPECT_THROW(mv::linalg::norm(mv::zeros({2, 2, 2}), 1.0), mv::Error);
  expect_runtime_usable();
}

TEST(NumpyEveryday, LaxSwitch) {
  const std::vector<std::function<mv::Array(const mv::Array&)>> branches{
      [](const mv::Array& x) { return x + 1.0f; }, [](const mv::Array& x) { return x * 10.0f; },
      [](const mv::Array& x) { return -x; }};
  const mv::Array x = mv::array({1.0f, 2.0f});
  const std::vector<int> indices{-5, 0, 1, 2, 7};
  const std::vector<std::vector<float>> want{{2, 3}, {2, 3}, {10, 20}, {-1, -2}, {-1, -2}};  // clamped
  const auto jitted = mv::jit([&](const mv::Array& i, const mv::Array& v) { return mv::lax::switch_(i, branches, v); });
  for (size_t k = 0; k < indices.size(); ++k) {
    const mv::Array i = mv::scalar(indices[k]);
    EXPECT_EQ(mv::lax::switch_(i, branches, x).to_host<float>(), want[k]) << indices[k];
    EXPECT_EQ(jitted(i, x).to_host<float>(), want[k]) << indices[k];
  }
  const mv::Array g = mv::grad([&](const mv::Array& v) { return mv::sum(mv::lax::switch_(mv::scalar(1), branches, v)); })(x);
  EXPECT_EQ(g.to_host<float>(), (std::vector<float>{10.0f, 10.0f}));
  EXPECT_THROW(mv::lax::switch_(mv::scalar(1.0f), branches, x), mv::Error);
  expect_runtime_usable();
}

TEST(NumpyEveryday, DiagonalTraceDiagMeshgridDotGeneral) {
  const mv::Array m = mv::arange(12).reshape(mv::Shape{3, 4});
  EXPECT_EQ(mv::diagonal(m).to_host<int32_t>(), (std::vector<int32_t>{0, 5, 10}));
  EXPECT_EQ(mv::diagonal(m, 1).to_host<int32_t>(), (std::vector<int32_t>{1, 6, 11}));
  EXPECT_EQ(mv::diagonal(m, -1).to_host<int32_t>(), (std::vector<int32_t>{4, 9}));
  EXPECT_EQ(mv::diagonal(m, 5).shape(), (mv::Shape{0}));
  EXPECT_EQ(mv::trace(m).to_host<int32_t>()[0], 15);
  const mv::Array t = mv::arange(24).reshape(mv::Shape{2, 3, 4});
  EXPECT_EQ(mv::diagonal(t, 0, 1, 2).to_host<int32_t>(), (std::vector<int32_t>{0, 5, 10, 12, 17, 22}));  // numpy's
  EXPECT_EQ(mv::diagonal(t, 0, 0, 2).to_host<int32_t>(), (std::vector<int32_t>{0, 13, 4, 17, 8, 21}));
  EXPECT_EQ(mv::diag(mv::array({1, 2}), 1).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 0, 0, 0, 2, 0, 0, 0}));
  EXPECT_EQ(mv::diag(mv::array({1, 2}), -1).to_host<int32_t>(), (std::vector<int32_t>{0, 0, 0, 1, 0, 0, 0, 2, 0}));
  EXPECT_EQ(mv::diag(m, 1).to_host<int32_t>(), (std::vector<int32_t>{1, 6, 11}));
  // Empty inputs, as numpy: diag of [] off the main diagonal is a zero matrix; empty matrices.
  EXPECT_EQ(mv::diag(mv::zeros({0}), 2).to_host<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(mv::diagonal(mv::zeros({0, 3})).shape(), (mv::Shape{0}));
  EXPECT_EQ(mv::trace(mv::zeros({0, 0})).to_host<float>(), (std::vector<float>{0.0f}));
  EXPECT_EQ(mv::flip(mv::zeros({0, 3})).shape(), (mv::Shape{0, 3}));
  EXPECT_EQ(mv::tile(mv::zeros({0}), {3}).shape(), (mv::Shape{0}));
  EXPECT_EQ(mv::repeat(mv::zeros({2, 0}), 3, 1).shape(), (mv::Shape{2, 0}));
  EXPECT_EQ(mv::searchsorted(mv::zeros({0}), mv::array({1.0f, 2.0f})).to_host<int32_t>(), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(mv::bincount(mv::zeros({0}, DType::int32)).shape(), (mv::Shape{0}));
  EXPECT_EQ(mv::linalg::norm(mv::zeros({0})).to_host<float>(), (std::vector<float>{0.0f}));
  const mv::Array g = mv::grad([](const mv::Array& a) { return mv::trace(a * a); })(mv::arange(4.0f).reshape(mv::Shape{2, 2}));
  EXPECT_EQ(g.to_host<float>(), (std::vector<float>{0, 0, 0, 6}));
  const std::vector<mv::Array> xy = mv::meshgrid({mv::array({1, 2, 3}), mv::array({7, 8})});
  EXPECT_EQ(xy[0].shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(xy[0].to_host<int32_t>(), (std::vector<int32_t>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(xy[1].to_host<int32_t>(), (std::vector<int32_t>{7, 7, 7, 8, 8, 8}));
  const std::vector<mv::Array> ij = mv::meshgrid({mv::array({1, 2, 3}), mv::array({7, 8})}, "ij");
  EXPECT_EQ(ij[0].to_host<int32_t>(), (std::vector<int32_t>{1, 1, 2, 2, 3, 3}));
  // dot_general: batch 0 with batch 0, contract lhs 2 with rhs 1 -> [batch, lhs free, rhs free].
  const mv::Array a = mv::arange(24.0f).reshape(mv::Shape{2, 3, 4}), b = mv::arange(40.0f).reshape(mv::Shape{2, 4, 5});
  const mv::Array d = mv::lax::dot_general(a, b, {{2}, {1}, {0}, {0}});
  EXPECT_EQ(d.shape(), (mv::Shape{2, 3, 5}));
  EXPECT_EQ(d.to_host<float>(), mv::matmul(a, b).to_host<float>());
  const mv::Array e = mv::lax::dot_general(b, a, {{1}, {2}});  // no batch: [2, 5, 2, 3]
  EXPECT_EQ(e.shape(), (mv::Shape{2, 5, 2, 3}));
  EXPECT_EQ(e.to_host<float>(), mv::einsum("bkn,cmk->bncm", b, a).to_host<float>());
  EXPECT_EQ(mv::lax::dot_general(a, b, {{2}, {1}, {0}, {0}}, DType::float32).dtype(), DType::float32);
  EXPECT_THROW(mv::lax::dot_general(a, b, {{1}, {1}}), mv::Error);
  EXPECT_THROW(mv::lax::dot_general(a, b, {{2}, {1}, {0}, {}}), mv::Error);
  expect_runtime_usable();
}

// Found by an outside review of the functions above (2026-11-27 evening).
TEST(NumpyEveryday, ReviewedEdges) {
  // flip keeps its operand's sharding (lax.rev's rule), in explicit mode its type too.
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"a", "b"});
  const mv::Array x = mv::device_put(mv::arange(32.0f).reshape(mv::Shape{4, 8}), mv::NamedSharding(mesh, P("a", "b")));
  EXPECT_TRUE(mv::flip(x).sharding().is_equivalent_to(x.sharding(), 2));
  std::vector<float> want(32);
  for (int i = 0; i < 32; ++i) want[static_cast<size_t>(i)] = static_cast<float>(31 - i);
  EXPECT_EQ(mv::flip(x).to_host<float>(), want);
  const mv::Mesh em = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const mv::Array xe = mv::device_put(mv::arange(32.0f).reshape(mv::Shape{4, 8}), mv::NamedSharding(em, P("X", "Y")));
  EXPECT_EQ(mv::type_of(mv::flip(xe)), "float32[4@X,8@Y]");
  expect_error([&] { (void)mv::tile(xe, {1, 2}); }, "tile of float32[4@X,8@Y]");
  expect_error([&] { (void)mv::repeat(xe, 2); }, "repeat flattens");
  // bincount: without length under jit, the message says what to give; uint32 counts too.
  expect_error([] { (void)mv::jit([](const mv::Array& a) { return mv::bincount(a); })(mv::array({1, 2})); }, "give length");
  const std::vector<uint32_t> u{1, 1, 4000000000u};
  EXPECT_EQ(mv::bincount(mv::array(std::span<const uint32_t>(u)), std::nullopt, 0, 3).to_host<int32_t>(),
            (std::vector<int32_t>{0, 2, 0}));
  expect_error([] { (void)mv::bincount(mv::array({2000000000})); }, "one-hot");
  // round of uint32 works as its values; linspace too large is an Error, not bad_alloc.
  EXPECT_EQ(mv::round(mv::array(std::span<const uint32_t>(std::vector<uint32_t>{15, 4000000005u})), -1).to_host<uint32_t>(),
            (std::vector<uint32_t>{20, 4000000000u}));
  expect_error([] { (void)mv::linspace(0, 1, int64_t{1} << 40); }, "linspace");
  // float64 random draws are refused rather than cast up from 16 bits.
  expect_error([] { (void)mv::uniform(mv::random_key(0), {4}, DType::float64); }, "float64");
  expect_runtime_usable();
}

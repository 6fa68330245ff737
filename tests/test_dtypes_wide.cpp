// int8, uint8, int64 and float64 as numpy and JAX have them, on the host and in elementwise
// kernels: storage (1 and 8 bytes per element, sizes that are not multiples of 4 or 8), JAX's
// promotion table, wrapping arithmetic, astype between every pair, numpy's printing, .npy (files
// numpy wrote, in tests/data/wide_dtypes, and round trips) and the errors, including those an
// adapter without the Vulkan features gives (MESHVK_HIDE_FEATURES). Expected values are worked
// by hand from numpy's rules (noted where numpy printed them).
// Reductions, layout ops, collectives and matmul: test_dtypes_wide_device.cpp.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <limits>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "typed_arrays.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::DType;
using mv::P;

using typed_arrays::arr;
using typed_arrays::kI64Max;
using typed_arrays::kI64Min;

namespace {

// Deterministic values of each dtype for `n` elements.
std::vector<int8_t> i8_values(size_t n) {
  std::vector<int8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int8_t>(static_cast<int>((i * 37) % 256) - 128);
  return v;
}
std::vector<uint8_t> u8_values(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 53 + 7) & 255);
  return v;
}
std::vector<int64_t> i64_values(size_t n) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (static_cast<int64_t>(i) - 500) * 3000000007LL + 1;
  return v;
}
std::vector<double> f64_values(size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i) * 0.1 - 3.0 + 1e-12;
  return v;
}

const std::vector<size_t> kOddSizes = {1, 3, 5, 7, 13, 1001};

}  // namespace

TEST(DtypesWide, SizesAndNames) {
  EXPECT_EQ(mv::dtype_size(DType::int8), 1u);
  EXPECT_EQ(mv::dtype_size(DType::uint8), 1u);
  EXPECT_EQ(mv::dtype_size(DType::int64), 8u);
  EXPECT_EQ(mv::dtype_size(DType::float64), 8u);
  EXPECT_EQ(mv::dtype_name(DType::int8), "int8");
  EXPECT_EQ(mv::dtype_name(DType::uint8), "uint8");
  EXPECT_EQ(mv::dtype_name(DType::int64), "int64");
  EXPECT_EQ(mv::dtype_name(DType::float64), "float64");
  EXPECT_TRUE(mv::is_floating(DType::float64));
  EXPECT_TRUE(mv::is_integer(DType::int8) && mv::is_integer(DType::uint8) &&
              mv::is_integer(DType::int64));
  EXPECT_EQ(mv::type_of(arr<int8_t>({1, 2, 3})), "int8[3]");
}

TEST(DtypesWide, HostRoundTripAtOddSizes) {
  for (const size_t n : kOddSizes) {
    EXPECT_EQ(arr(i8_values(n)).to_host<int8_t>(), i8_values(n)) << n;
    EXPECT_EQ(arr(u8_values(n)).to_host<uint8_t>(), u8_values(n)) << n;
    EXPECT_EQ(arr(i64_values(n)).to_host<int64_t>(), i64_values(n)) << n;
    EXPECT_EQ(arr(f64_values(n)).to_host<double>(), f64_values(n)) << n;
  }
  // Laid out over the 2x4 mesh, each device holding a row of an odd length.
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding rows(mesh, P({"x", "y"}));
  for (const int64_t n : {1, 3, 5, 7, 13}) {
    const auto v8 = i8_values(8 * n);
    const Array a = mv::device_put(std::span<const int8_t>(v8), {8, n}, rows);
    EXPECT_EQ(a.to_host<int8_t>(), v8) << n;
    EXPECT_EQ(a.addressable_shards()[3].data.to_host<int8_t>(),
              std::vector<int8_t>(v8.begin() + 3 * n, v8.begin() + 4 * n));
    const auto vu = u8_values(8 * n);
    EXPECT_EQ(mv::device_put(std::span<const uint8_t>(vu), {8, n}, rows).to_host<uint8_t>(), vu);
    const auto v64 = i64_values(8 * n);
    EXPECT_EQ(mv::device_put(std::span<const int64_t>(v64), {8, n}, rows).to_host<int64_t>(), v64);
    const auto vf = f64_values(8 * n);
    EXPECT_EQ(mv::device_put(std::span<const double>(vf), {8, n}, rows).to_host<double>(), vf);
  }
  // Made arrays: zeros, ones, full_like hold the dtype's values.
  EXPECT_EQ(mv::ones({5}, DType::int8).to_host<int8_t>(), std::vector<int8_t>(5, 1));
  EXPECT_EQ(mv::ones({7}, DType::uint8).to_host<uint8_t>(), std::vector<uint8_t>(7, 1));
  EXPECT_EQ(mv::ones({3}, DType::int64).to_host<int64_t>(), std::vector<int64_t>(3, 1));
  EXPECT_EQ(mv::ones({3}, DType::float64).to_host<double>(), std::vector<double>(3, 1.0));
  EXPECT_EQ(mv::zeros({5}, DType::float64).to_host<double>(), std::vector<double>(5, 0.0));
  EXPECT_EQ(mv::full_like(mv::zeros({3}, DType::float64), 0.1).to_host<double>(),
            std::vector<double>(3, 0.1));
  EXPECT_EQ(mv::full_like(mv::zeros({2}, DType::int64), 3e12).to_host<int64_t>(),
            std::vector<int64_t>(2, 3000000000000LL));
  EXPECT_EQ(mv::zeros({8, 3}, DType::int64, rows).to_host<int64_t>(), std::vector<int64_t>(24, 0));
}

// jnp.promote_types for meshvk's dtypes; uint8 + int8 is int16 in JAX, int32 here (no int16).
// (uint32 + int32 is int64 in the table too, but uint32 arithmetic is refused: astype first.)
TEST(DtypesWide, PromotionFollowsJaxTable) {
  const Array i8 = arr<int8_t>({1}), u8 = arr<uint8_t>({1}), i64 = arr<int64_t>({1});
  const Array f64 = arr<double>({1}), i32 = mv::array({1}), f32 = mv::array({1.0f});
  const Array b = mv::array({1}) > 0, bf = mv::astype(f32, DType::bfloat16),
              h = mv::astype(f32, DType::float16);
  const auto t = [](const Array& x) { return x.dtype(); };
  EXPECT_EQ(t(i8 + i8), DType::int8);
  EXPECT_EQ(t(i8 + i32), DType::int32);
  EXPECT_EQ(t(i8 + i64), DType::int64);
  EXPECT_EQ(t(u8 + u8), DType::uint8);
  EXPECT_EQ(t(u8 + i32), DType::int32);
  EXPECT_EQ(t(u8 + i64), DType::int64);
  EXPECT_EQ(t(u8 + i8), DType::int32);  // JAX: int16
  EXPECT_EQ(t(i32 + i64), DType::int64);
  EXPECT_EQ(t(b + u8), DType::uint8);
  EXPECT_EQ(t(b + i8), DType::int8);
  EXPECT_EQ(t(b + b), DType::bool_);  // logical_or, as numpy and JAX
  EXPECT_EQ(t(b * 3), DType::int32);
  EXPECT_EQ(t(i8 + f32), DType::float32);
  EXPECT_EQ(t(i64 + f32), DType::float32);
  EXPECT_EQ(t(i64 + bf), DType::bfloat16);
  EXPECT_EQ(t(u8 + h), DType::float16);
  EXPECT_EQ(t(f32 + f64), DType::float64);
  EXPECT_EQ(t(bf + f64), DType::float64);
  EXPECT_EQ(t(h + f64), DType::float64);
  EXPECT_EQ(t(f64 + i64), DType::float64);
  EXPECT_EQ(t(b + f64), DType::float64);
  EXPECT_EQ(t(bf + h), DType::float32);
  // Weak scalars take the array's type; a float scalar makes an integer float32 (C++ doubles
  // never make float64: there is no x64 switch).
  EXPECT_EQ(t(i8 + 1), DType::int8);
  EXPECT_EQ(t(u8 * 2), DType::uint8);
  EXPECT_EQ(t(i64 - 1), DType::int64);
  EXPECT_EQ(t(f64 * 2.5), DType::float64);
  EXPECT_EQ(t(i8 * 2.5), DType::float32);
  EXPECT_EQ(t(i64 * 2.5), DType::float32);
  EXPECT_EQ(t(f32 * 2.5), DType::float32);
  // True division and float functions: int8 -> float32, int64 -> float64 (to_inexact_dtype).
  EXPECT_EQ(t(i8 / i8), DType::float32);
  EXPECT_EQ(t(i64 / i64), DType::float64);
  EXPECT_EQ(t(mv::sqrt(i64)), DType::float64);
  EXPECT_EQ(t(mv::sqrt(u8)), DType::float32);
  EXPECT_EQ(t(i8 < i8), DType::bool_);
  EXPECT_EQ(t(i8 & i8), DType::int8);
  EXPECT_EQ(t(i64 | 1), DType::int64);
  EXPECT_EQ(t(mv::matmul(i8.reshape(1, 1), i8.reshape(1, 1))), DType::int8);
  EXPECT_EQ(t(mv::matmul(u8.reshape(1, 1), i32.reshape(1, 1))), DType::int32);
}

TEST(DtypesWide, Int8ArithmeticWrapsAsNumpy) {
  const Array a = arr<int8_t>({100, -100, 127, -128, 5, -7, -128});
  const Array b = arr<int8_t>({100, -100, 1, -1, 3, 2, 1});
  EXPECT_EQ((a + b).to_host<int8_t>(), (std::vector<int8_t>{-56, 56, -128, 127, 8, -5, -127}));
  EXPECT_EQ((a - b).to_host<int8_t>(), (std::vector<int8_t>{0, 0, 126, -127, 2, -9, 127}));
  EXPECT_EQ((a * b).to_host<int8_t>(), (std::vector<int8_t>{16, 16, 127, -128, 15, -14, -128}));
  EXPECT_EQ(mv::floor_divide(a, b).to_host<int8_t>(),
            (std::vector<int8_t>{1, 1, 127, -128, 1, -4, -128}));
  EXPECT_EQ(mv::remainder(a, b).to_host<int8_t>(), (std::vector<int8_t>{0, 0, 0, 0, 2, 1, 0}));
  EXPECT_EQ((-a).to_host<int8_t>(), (std::vector<int8_t>{-100, 100, -127, -128, -5, 7, -128}));
  EXPECT_EQ(mv::abs(a).to_host<int8_t>(), (std::vector<int8_t>{100, 100, 127, -128, 5, 7, -128}));
  EXPECT_EQ(mv::maximum(a, b).to_host<int8_t>(),
            (std::vector<int8_t>{100, -100, 127, -1, 5, 2, 1}));
  EXPECT_EQ(mv::astype(a > b, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{0, 0, 1, 0, 1, 0, 0}));
  // A fused chain wraps after every op: (a + b) > 0 sees -56 for 100 + 100.
  EXPECT_EQ(mv::astype(a + b > 0, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{0, 1, 0, 1, 1, 0, 0}));
  EXPECT_EQ((a + 1).to_host<int8_t>(), (std::vector<int8_t>{101, -99, -128, -127, 6, -6, -127}));
  EXPECT_EQ((a & b).to_host<int8_t>(), (std::vector<int8_t>{100, -100, 1, -128, 1, 0, 0}));
  EXPECT_EQ((~a).to_host<int8_t>(), (std::vector<int8_t>{-101, 99, -128, 127, -6, 6, 127}));
  // Every odd size, through the vector kernels' tails and broadcasting's strided kernels.
  for (const size_t n : kOddSizes) {
    const auto x = i8_values(n), y = i8_values(n + 5);
    std::vector<int8_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = static_cast<int8_t>(x[i] * 3 + y[i + 5]);
    const Array yy = mv::slice(arr(y), {5}, {static_cast<int64_t>(n + 5)});
    EXPECT_EQ((arr(x) * 3 + yy).to_host<int8_t>(), want) << n;
  }
  const Array col = arr<int8_t>({1, 100, -128}, {3, 1}),
              row = arr<int8_t>({0, 27, 28, -1, 127}, {1, 5});
  std::vector<int8_t> want;
  for (const int c : {1, 100, -128})
    for (const int r : {0, 27, 28, -1, 127}) want.push_back(static_cast<int8_t>(c + r));
  EXPECT_EQ((col + row).to_host<int8_t>(), want);
}

TEST(DtypesWide, Uint8ArithmeticWrapsAsNumpy) {
  const Array a = arr<uint8_t>({250, 5, 0, 200, 255});
  const Array b = arr<uint8_t>({10, 10, 1, 2, 255});
  EXPECT_EQ((a + b).to_host<uint8_t>(), (std::vector<uint8_t>{4, 15, 1, 202, 254}));
  EXPECT_EQ((a - b).to_host<uint8_t>(), (std::vector<uint8_t>{240, 251, 255, 198, 0}));
  EXPECT_EQ((a * b).to_host<uint8_t>(), (std::vector<uint8_t>{196, 50, 0, 144, 1}));
  EXPECT_EQ(mv::floor_divide(a, b).to_host<uint8_t>(), (std::vector<uint8_t>{25, 0, 0, 100, 1}));
  EXPECT_EQ((-a).to_host<uint8_t>(), (std::vector<uint8_t>{6, 251, 0, 56, 1}));
  EXPECT_EQ(mv::astype(a > 127, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{1, 0, 0, 1, 1}));
  EXPECT_EQ(mv::minimum(a, b).to_host<uint8_t>(), (std::vector<uint8_t>{10, 5, 0, 2, 255}));
  EXPECT_EQ((~a).to_host<uint8_t>(), (std::vector<uint8_t>{5, 250, 255, 55, 0}));
  for (const size_t n : kOddSizes) {
    const auto x = u8_values(n);
    std::vector<uint8_t> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = static_cast<uint8_t>(x[i] * x[i] + 77);
    EXPECT_EQ((arr(x) * arr(x) + 77).to_host<uint8_t>(), want) << n;
  }
}

TEST(DtypesWide, Int64AndFloat64ComputeInTheirWidth) {
  const Array a = arr<int64_t>(
      {int64_t{1} << 40, -(int64_t{1} << 40), kI64Max, -7, 9007199254740993LL, kI64Min});
  const Array b = arr<int64_t>({1, 1, 1, 2, 2, -1});
  EXPECT_EQ((a + b).to_host<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 40) + 1, -(int64_t{1} << 40) + 1, kI64Min, -5,
                                  9007199254740995LL, kI64Max}));
  EXPECT_EQ((a * 3).to_host<int64_t>(),
            (std::vector<int64_t>{3 * (int64_t{1} << 40), -3 * (int64_t{1} << 40), kI64Max - 2, -21,
                                  27021597764222979LL, kI64Min}));
  EXPECT_EQ(mv::floor_divide(a, b).to_host<int64_t>(),
            (std::vector<int64_t>{int64_t{1} << 40, -(int64_t{1} << 40), kI64Max, -4,
                                  4503599627370496LL, kI64Min}));
  EXPECT_EQ(mv::remainder(a, b).to_host<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(mv::floor_divide(a, 0).to_host<int64_t>(), std::vector<int64_t>(6, 0));
  EXPECT_EQ(mv::astype(a > 5, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(mv::maximum(a, b).to_host<int64_t>(),
            (std::vector<int64_t>{int64_t{1} << 40, 1, kI64Max, 2, 9007199254740993LL, -1}));
  EXPECT_EQ((a ^ -1).to_host<int64_t>(),
            (std::vector<int64_t>{~(int64_t{1} << 40), (int64_t{1} << 40) - 1, kI64Min, 6,
                                  ~9007199254740993LL, kI64Max}));
  EXPECT_EQ(mv::power(arr<int64_t>({3, -2}), arr<int64_t>({39, 63})).to_host<int64_t>(),
            (std::vector<int64_t>{4052555153018976267LL, kI64Min}));

  const Array x = arr<double>({0.1, 0.2, 1e300, -1e-300, 3.0});
  const Array y = arr<double>({0.2, 0.1, 1e300, 1e-300, 7.0});
  EXPECT_EQ((x + y).to_host<double>(),
            (std::vector<double>{0.1 + 0.2, 0.2 + 0.1, 2e300, 0.0, 10.0}));
  EXPECT_EQ((x * y).to_host<double>(),
            (std::vector<double>{0.1 * 0.2, 0.2 * 0.1, INFINITY, -1e-300 * 1e-300, 21.0}));
  EXPECT_EQ((x - y).to_host<double>(),
            (std::vector<double>{0.1 - 0.2, 0.2 - 0.1, 0.0, -2e-300, -4.0}));
  const auto q = (x / y).to_host<double>();
  EXPECT_NEAR(q[0], 0.5, 1e-16);
  EXPECT_NEAR(q[4], 3.0 / 7.0, 1e-16);
  EXPECT_NEAR(mv::sqrt(arr<double>({2.0})).to_host<double>()[0], 1.4142135623730951, 4e-16);
  EXPECT_EQ(mv::astype(x < y, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{1, 0, 0, 1, 1}));
  EXPECT_EQ(mv::maximum(x, arr<double>({NAN, 0, 0, 0, 0})).to_host<double>()[1], 0.2);
  EXPECT_TRUE(std::isnan(mv::maximum(x, arr<double>({NAN, 0, 0, 0, 0})).to_host<double>()[0]));
  EXPECT_EQ(mv::where(x > 0.15, x, y).to_host<double>(),
            (std::vector<double>{0.2, 0.2, 1e300, 1e-300, 3.0}));
  // A weak float scalar is taken as C++ gave it: 0.5 is exact either way.
  EXPECT_EQ((x * 0.5).to_host<double>(), (std::vector<double>{0.05, 0.1, 5e299, -5e-301, 1.5}));
  for (const size_t n : kOddSizes) {
    const auto v = f64_values(n);
    const auto w = i64_values(n);
    std::vector<double> want(n);
    std::vector<int64_t> want64(n);
    for (size_t i = 0; i < n; ++i) want[i] = v[i] * v[i] - v[i];
    for (size_t i = 0; i < n; ++i) want64[i] = w[i] * 5 - w[i];
    EXPECT_EQ((arr(v) * arr(v) - arr(v)).to_host<double>(), want) << n;
    EXPECT_EQ((arr(w) * 5 - arr(w)).to_host<int64_t>(), want64) << n;
  }
}

// numpy's astype: float -> int truncates toward zero, int -> narrower int wraps, int64 <->
// float64 exact where representable. (A float beyond the target's range is undefined in numpy
// too; meshvk gives the adapter's int32 conversion, wrapped to 8 bits: not tested.)
TEST(DtypesWide, AstypeBetweenDtypes) {
  const Array f = mv::array({1.9f, -1.9f, 127.0f, -128.0f, 0.5f, 255.0f});
  EXPECT_EQ(mv::astype(f, DType::int8).to_host<int8_t>(),
            (std::vector<int8_t>{1, -1, 127, -128, 0, -1}));
  EXPECT_EQ(mv::astype(mv::abs(f), DType::uint8).to_host<uint8_t>(),
            (std::vector<uint8_t>{1, 1, 127, 128, 0, 255}));
  EXPECT_EQ(mv::astype(f, DType::int64).to_host<int64_t>(),
            (std::vector<int64_t>{1, -1, 127, -128, 0, 255}));
  const Array i = mv::array({300, -129, 128, -1, 256, 257});
  EXPECT_EQ(mv::astype(i, DType::int8).to_host<int8_t>(),
            (std::vector<int8_t>{44, 127, -128, -1, 0, 1}));
  EXPECT_EQ(mv::astype(i, DType::uint8).to_host<uint8_t>(),
            (std::vector<uint8_t>{44, 127, 128, 255, 0, 1}));
  const Array s = arr<int8_t>({-1, -128, 127, 0});
  EXPECT_EQ(mv::astype(s, DType::uint8).to_host<uint8_t>(),
            (std::vector<uint8_t>{255, 128, 127, 0}));
  EXPECT_EQ(mv::astype(mv::astype(s, DType::uint8), DType::int8).to_host<int8_t>(),
            s.to_host<int8_t>());
  EXPECT_EQ(mv::astype(s, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{-1, -128, 127, 0}));
  EXPECT_EQ(mv::astype(mv::astype(s, DType::uint8), DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{255, 128, 127, 0}));
  EXPECT_EQ(mv::astype(s, DType::float32).to_host<float>(), (std::vector<float>{-1, -128, 127, 0}));
  EXPECT_EQ(mv::astype(mv::astype(s, DType::bool_), DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(mv::astype(s, DType::int64).to_host<int64_t>(),
            (std::vector<int64_t>{-1, -128, 127, 0}));
  EXPECT_EQ(mv::astype(s, DType::float64).to_host<double>(),
            (std::vector<double>{-1, -128, 127, 0}));
  // int64 <-> float64, past float32's and int32's ranges.
  const Array big =
      arr<int64_t>({int64_t{1} << 53, -(int64_t{1} << 53) - 2, 1000000000000000000LL, 5, -3});
  EXPECT_EQ(mv::astype(big, DType::float64).to_host<double>(),
            (std::vector<double>{0x1p53, -0x1p53 - 2, 1e18, 5.0, -3.0}));
  EXPECT_EQ(mv::astype(mv::astype(big, DType::float64), DType::int64).to_host<int64_t>(),
            big.to_host<int64_t>());
  EXPECT_EQ(mv::astype(arr<double>({-2.5, 2.999, 1e18, -0.0}), DType::int64).to_host<int64_t>(),
            (std::vector<int64_t>{-2, 2, 1000000000000000000LL, 0}));
  EXPECT_EQ(mv::astype(arr<int64_t>({(int64_t{1} << 32) + 5, -2147483649LL, 300}), DType::int32)
                .to_host<int32_t>(),
            (std::vector<int32_t>{5, 2147483647, 300}));
  EXPECT_EQ(mv::astype(arr<int64_t>({300, -1, 255}), DType::int8).to_host<int8_t>(),
            (std::vector<int8_t>{44, -1, -1}));
  EXPECT_EQ(mv::astype(mv::array({-5, 7}), DType::int64).to_host<int64_t>(),
            (std::vector<int64_t>{-5, 7}));
  EXPECT_EQ(mv::astype(mv::array(std::vector<uint32_t>{4294967295u, 7u}), DType::int64)
                .to_host<int64_t>(),
            (std::vector<int64_t>{4294967295LL, 7}));
  EXPECT_EQ(mv::astype(arr<int64_t>({-1, 7}), DType::uint32).to_host<uint32_t>(),
            (std::vector<uint32_t>{4294967295u, 7u}));
  // float64 <-> the float formats: rounded to nearest, widened exactly.
  EXPECT_EQ(mv::astype(arr<double>({0.1, 1e300, -1.5}), DType::float32).to_host<float>(),
            (std::vector<float>{0.1f, INFINITY, -1.5f}));
  EXPECT_EQ(mv::astype(mv::array({0.1f, -0.0f}), DType::float64).to_host<double>(),
            (std::vector<double>{static_cast<double>(0.1f), -0.0}));
  EXPECT_EQ(mv::astype(mv::astype(arr<double>({1.5, -2.0}), DType::bfloat16), DType::float64)
                .to_host<double>(),
            (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(mv::astype(arr<double>({255.9, 0.5}), DType::uint8).to_host<uint8_t>(),
            (std::vector<uint8_t>{255, 0}));
  EXPECT_EQ(
      mv::astype(mv::astype(mv::array({0, 3}) > 0, DType::int64), DType::float64).to_host<double>(),
      (std::vector<double>{0.0, 1.0}));
  // Every pair round trips the values every dtype holds (0..100).
  std::vector<int32_t> small(101);
  for (int k = 0; k <= 100; ++k) small[k] = k;
  const Array base = mv::array(std::span<const int32_t>(small));
  for (const DType from : mv::kAllDTypes) {
    if (from == DType::bool_) continue;
    for (const DType to : mv::kAllDTypes) {
      if (to == DType::bool_) continue;
      const Array r = mv::astype(mv::astype(mv::astype(base, from), to), DType::int32);
      EXPECT_EQ(r.to_host<int32_t>(), small)
          << mv::dtype_name(from) << " -> " << mv::dtype_name(to);
    }
  }
}

TEST(DtypesWide, PrintsAsNumpy) {
  // Strings as numpy 1.24 printed the arrays in tests/data/wide_dtypes (make.py).
  EXPECT_EQ(arr<int8_t>({-128, -1, 0, 1, 100, 127}, {2, 3}).to_string(),
            "[[-128   -1    0]\n [   1  100  127]]");
  EXPECT_EQ(arr<uint8_t>({0, 1, 128, 200, 255}).to_string(), "[  0   1 128 200 255]");
  EXPECT_EQ(arr<int64_t>({kI64Min, -1, 2147483648LL, 9007199254740993LL, kI64Max}).to_string(),
            "[-9223372036854775808                   -1           2147483648\n"
            "     9007199254740993  9223372036854775807]");
  EXPECT_EQ(arr<double>({0.1, -2.5, 1e300, 5e-324, INFINITY, -0.0, 1.0 / 3}).to_string(),
            "[ 1.00000000e-001 -2.50000000e+000  1.00000000e+300  4.94065646e-324\n"
            "              inf -0.00000000e+000  3.33333333e-001]");
  EXPECT_EQ(arr<double>({1.25, 2.0, 0.1, -3.0, 1e-20, 7.0}, {2, 3}).to_string(),
            "[[ 1.25e+00  2.00e+00  1.00e-01]\n [-3.00e+00  1.00e-20  7.00e+00]]");
  EXPECT_EQ(arr<double>({0.1, 2.5, -3.0}).to_string(), "[ 0.1  2.5 -3. ]");
  EXPECT_EQ(arr<double>({1.0 / 3, 2.0}).to_string(), "[0.33333333 2.        ]");
  EXPECT_EQ(arr<double>({1e300, 1.0}).to_string(), "[1.e+300 1.e+000]");
  // An element rounded to 8 digits that end in zeros keeps its column's 8 (numpy's min_digits).
  EXPECT_EQ(arr<double>({1.999999999e8, 1.23456789}).to_string(), "[2.00000000e+08 1.23456789e+00]");
  EXPECT_EQ(arr<double>({5.7220458984375e-06, 1.23456789}).to_string(), "[5.72204590e-06 1.23456789e+00]");
  EXPECT_EQ(arr<double>({-1.1920928955078125e-10, 1.25090922e+08}).to_string(), "[-1.19209290e-10  1.25090922e+08]");
  EXPECT_EQ(arr<double>({0.1}).reshape(mv::Shape{}).to_string(), "0.1");
  EXPECT_EQ(arr<int8_t>({-5}).reshape(mv::Shape{}).to_string(), "-5");
  EXPECT_EQ(arr<uint8_t>({200}).reshape(mv::Shape{}).to_string(), "200");
  EXPECT_EQ(arr<int64_t>({kI64Min}).reshape(mv::Shape{}).to_string(), "-9223372036854775808");
}

TEST(DtypesWide, NpyFilesNumpyWroteAndRoundTrips) {
  const std::string data = MESHVK_TEST_DATA_DIR "/wide_dtypes/";
  const Array i1 = mv::load_npy(data + "i1.npy");
  EXPECT_EQ(i1.dtype(), DType::int8);
  EXPECT_EQ(i1.shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(i1.to_host<int8_t>(), (std::vector<int8_t>{-128, -1, 0, 1, 100, 127}));
  EXPECT_EQ(mv::load_npy(data + "u1.npy").to_host<uint8_t>(),
            (std::vector<uint8_t>{0, 1, 128, 200, 255}));
  EXPECT_EQ(mv::load_npy(data + "i8.npy").to_host<int64_t>(),
            (std::vector<int64_t>{kI64Min, -1, 2147483648LL, 9007199254740993LL, kI64Max}));
  const auto f8 = mv::load_npy(data + "f8.npy").to_host<double>();
  EXPECT_EQ(f8, (std::vector<double>{0.1, -2.5, 1e300, 5e-324, INFINITY, -0.0, 1.0 / 3}));
  EXPECT_TRUE(std::signbit(f8[5]));
  const Array fb = mv::load_npy(data + "f8_big_fortran.npy");  // '>f8', Fortran order
  EXPECT_EQ(fb.dtype(), DType::float64);
  EXPECT_EQ(fb.to_host<double>(), (std::vector<double>{1.25, 2.0, 0.1, -3.0, 1e-20, 7.0}));
  const Array f2 = mv::load_npy(data + "f2.npy");
  EXPECT_EQ(f2.dtype(), DType::float16);
  EXPECT_EQ(mv::astype(f2, DType::float32).to_host<float>()[1], 65504.0f);

  // Round trips, each the file numpy would write: 128 header bytes, then itemsize bytes each.
  const std::string path = testing::TempDir() + "/wide_" + std::to_string(::getpid()) + ".npy";
  const auto file_size = [&] {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    EXPECT_NE(file, nullptr);
    std::fseek(file, 0, SEEK_END);
    const long size = std::ftell(file);
    std::fclose(file);
    return size;
  };
  for (const size_t n : {size_t{1}, size_t{7}, size_t{13}}) {
    mv::save_npy(path, arr(i8_values(n)));
    EXPECT_EQ(file_size(), static_cast<long>(128 + n));
    EXPECT_EQ(mv::load_npy(path).to_host<int8_t>(), i8_values(n));
    mv::save_npy(path, arr(u8_values(n)));
    EXPECT_EQ(mv::load_npy(path).to_host<uint8_t>(), u8_values(n));
    mv::save_npy(path, arr(i64_values(n)));
    EXPECT_EQ(file_size(), static_cast<long>(128 + 8 * n));
    EXPECT_EQ(mv::load_npy(path).to_host<int64_t>(), i64_values(n));
    mv::save_npy(path, arr(f64_values(n)));
    EXPECT_EQ(mv::load_npy(path).dtype(), DType::float64);
    EXPECT_EQ(mv::load_npy(path).to_host<double>(), f64_values(n));
  }
  std::remove(path.c_str());
}

TEST(DtypesWide, ErrorsNameTheDtypeAndTheWayOut) {
  expect_error([] { (void)arr<int8_t>({1}).to_host<float>(); }, "to_host<int8_t>");
  expect_error([] { (void)arr<uint8_t>({1}).to_host<int8_t>(); }, "to_host<uint8_t>");
  expect_error([] { (void)arr<int64_t>({1}).to_host<int32_t>(); }, "to_host<int64_t>");
  expect_error([] { (void)arr<double>({1}).to_host<float>(); }, "to_host<double>");
  expect_error(
      [] {
        (void)mv::matmul(mv::zeros({512, 512}, DType::float64),
                         mv::zeros({512, 512}, DType::float64));
      },
      "past the 67108864 the 64-bit matmul");
  expect_error(
      [] {
        (void)mv::matmul(mv::array({1}, {1, 1}), mv::array({1}, {1, 1}), DType::uint8);
      },
      "use DType::int32, DType::int64 or a floating dtype");
  expect_error([] { (void)(arr<double>({1.0}) & arr<double>({1.0})); }, "not defined for float64");
  // A weak int outside the 8-bit dtype: JAX's OverflowError.
  expect_error([] { (void)(arr<uint8_t>({1}) + 300); },
               "add: scalar 300 does not fit uint8 (0 to 255)");
  expect_error([] { (void)(arr<int8_t>({1}) * -129); }, "does not fit int8 (-128 to 127)");
  expect_error([] { (void)(arr<uint8_t>({1}) > -1); }, "does not fit uint8");
  expect_runtime_usable();
}

// An adapter without the features: every dtype that needs one names it (MESHVK_HIDE_FEATURES
// makes the adapter lack them).
TEST(DtypesWide, MissingFeaturesAreErrorsNamingThem) {
  {
    const ScopedEnv hide("MESHVK_HIDE_FEATURES",
                         "shaderInt64,shaderFloat64,storageBuffer8BitAccess");
    mv::Runtime rt;
    expect_error(
        [] {
          (void)arr<int64_t>({1, 2});
        },
        "int64 arrays need the Vulkan feature shaderInt64");
    expect_error([] { (void)arr<double>({1.0}); },
                 "float64 arrays need the Vulkan feature shaderFloat64");
    expect_error([] { (void)arr<int8_t>({1}); },
                 "int8 arrays need the Vulkan feature storageBuffer8BitAccess");
    expect_error(
        [] {
          (void)mv::astype(mv::array({1, 2}), DType::uint8);
        },
        "storageBuffer8BitAccess");
    expect_error([] { (void)mv::zeros({3}, DType::int64); }, "shaderInt64");
    expect_error([] { (void)mv::astype(mv::array({1.0f}), DType::float64).to_host<double>(); },
                 "shaderFloat64");
    // The other dtypes still work there.
    EXPECT_EQ((mv::array({1, 2}) + 1).to_host<int32_t>(), (std::vector<int32_t>{2, 3}));
  }
  {
    const ScopedEnv hide("MESHVK_HIDE_FEATURES", "shaderInt63");
    expect_error([] { mv::Runtime rt; }, "MESHVK_HIDE_FEATURES: 'shaderInt63' is not a feature");
  }
  expect_runtime_usable();
}

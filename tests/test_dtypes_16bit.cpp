// bfloat16 and float16 as JAX has them: rounding (against the host conversions and numpy),
// promotion, per-op rounding in fused chains, reductions and matmul accumulating in float32,
// sharded arrays under jit and shard_map, grad, printing, .npy and the errors.
// Expected bits marked "numpy" come from numpy 1.24 (float16) or from bfloat16 emulated in numpy
// uint32 arithmetic (round to nearest even), computed in float32 then rounded, op by op.
#include <gtest/gtest.h>

#include <unistd.h>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::DType;
using mv::P;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Array f32(const std::vector<float>& v) {
  return mv::array(std::span<const float>(v));
}

std::vector<uint16_t> bits_of(const std::vector<mv::bfloat16>& v) {
  std::vector<uint16_t> b;
  for (const auto& x : v) b.push_back(x.bits);
  return b;
}
std::vector<uint16_t> bits_of(const std::vector<mv::float16>& v) {
  std::vector<uint16_t> b;
  for (const auto& x : v) b.push_back(x.bits);
  return b;
}
std::vector<uint16_t> bits16(const Array& x) {
  return x.dtype() == DType::bfloat16 ? bits_of(x.to_host<mv::bfloat16>())
                                      : bits_of(x.to_host<mv::float16>());
}

Array bf16(const std::vector<float>& v) {
  return mv::astype(f32(v), DType::bfloat16);
}
Array f16(const std::vector<float>& v) {
  return mv::astype(f32(v), DType::float16);
}

// Values that exercise every rounding case of both formats.
std::vector<float> awkward_values() {
  std::vector<float> v = {
      0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, std::nanf(""), -std::nanf(""),
      std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(), 0x1p-130f,
      // bfloat16 ties: to even down (1 + 2^-8) and up (1 + 3 * 2^-8)
      1.00390625f, 1.01171875f, -1.00390625f, 0x1.fep127f, 0x1.ff0p127f,
      // float16 ties, its largest finite value and the overflow boundary
      1.00048828125f, 1.00146484375f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f,
      // float16 subnormals: 2^-24, 2^-25 (ties to 0), 1.5 * 2^-24 (ties up to 2^-23)
      0x1p-24f, 0x1p-25f, 0x1.8p-24f, 0x1.8p-25f, 0x1.000002p-25f, 0x1.ffcp-15f, 0x1.ffep-15f,
      0x1p-14f, 6.1e-5f, 0.1f, 1.0f / 3.0f, 3.14159265f, 1e10f, -2.5e-7f};
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t u = rng();
    const float f = std::bit_cast<float>(u);
    v.push_back(f);
    // Half of them near float16's range, where its rounding matters most.
    v.push_back(std::bit_cast<float>((u & 0x807fffffu) | ((100u + (u >> 23) % 45u) << 23)));
  }
  return v;
}

bool same_value(uint16_t a, uint16_t b, DType t) {
  const auto nan = [t](uint16_t h) {
    return t == DType::bfloat16 ? ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
                                : ((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
  };
  return a == b || (nan(a) && nan(b) && (a & 0x8000) == (b & 0x8000));
}

}  // namespace

TEST(Dtypes16, HostConversionsMatchNumpy) {
  // numpy: np.array([...], np.float32).astype(np.float16).view(np.uint16)
  const std::vector<float> in = {0.1f,       65504.0f,       65520.0f, 0x1p-25f,
                                 0x1.8p-24f, 1.00048828125f, -2.5e-7f, 1e-3f};
  const std::vector<uint16_t> want = {0x2e66, 0x7bff, 0x7c00, 0x0000,
                                      0x0002, 0x3c00, 0x8004, 0x1419};
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(mv::float16_bits(in[i]), want[i]) << in[i];
  EXPECT_EQ(mv::bfloat16_bits(1.00390625f), 0x3f80);   // tie to even (down)
  EXPECT_EQ(mv::bfloat16_bits(1.01171875f), 0x3f82);   // tie to even (up)
  EXPECT_EQ(mv::bfloat16_bits(0x1.ff0p127f), 0x7f80);  // overflows to inf
  EXPECT_EQ(mv::bfloat16_bits(0.1f), 0x3dcd);
  EXPECT_EQ(mv::bfloat16(3.0f).to_float(), 3.0f);
  EXPECT_EQ(mv::float16::from_bits(0x0001).to_float(), 0x1p-24f);
  EXPECT_TRUE(std::isnan(mv::bfloat16(std::nanf("")).to_float()));
}

TEST(Dtypes16, DeviceRoundingMatchesHostBitForBit) {
  const std::vector<float> v = awkward_values();
  const Array x = f32(v);
  for (const DType t : {DType::bfloat16, DType::float16}) {
    const Array y = mv::astype(x, t);
    EXPECT_EQ(y.dtype(), t);
    const std::vector<uint16_t> got = bits16(y);
    const std::vector<float> back = mv::astype(y, DType::float32).to_host<float>();
    ASSERT_EQ(got.size(), v.size());
    int bad = 0;
    for (size_t i = 0; i < v.size() && bad < 10; ++i) {
      const uint16_t want = t == DType::bfloat16 ? mv::bfloat16_bits(v[i]) : mv::float16_bits(v[i]);
      const float want_f = mv::round_to(t, v[i]);
      const bool ok = same_value(got[i], want, t) &&
                      (std::bit_cast<uint32_t>(back[i]) == std::bit_cast<uint32_t>(want_f) ||
                       (std::isnan(back[i]) && std::isnan(want_f)));
      if (!ok) {
        ++bad;
        ADD_FAILURE() << mv::dtype_name(t) << " of " << std::hexfloat << v[i] << ": got 0x"
                      << std::hex << got[i] << " want 0x" << want;
      }
    }
  }
  // bfloat16 -> float16 and back round again; ints convert through float32 (as XLA's convert).
  EXPECT_EQ(bits16(mv::astype(bf16({65536.0f, 0x1p-25f, 3.0f}), DType::float16)),
            (std::vector<uint16_t>{0x7c00, 0x0000, 0x4200}));
  EXPECT_EQ(bits16(mv::astype(mv::array({16777217, -3, 257}), DType::bfloat16)),
            (std::vector<uint16_t>{0x4b80, 0xc040, 0x4380}));
  EXPECT_EQ(mv::astype(bf16({2.75f, -2.75f, 300.0f}), DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{2, -2, 300}));
  EXPECT_EQ(mv::astype(mv::astype(f16({0.0f, 0.5f, -0.0f}), DType::bool_), DType::int32)
                .to_host<int32_t>(),
            (std::vector<int32_t>{0, 1, 0}));
}

TEST(Dtypes16, PromotionFollowsJax) {
  const Array b = bf16({1.5f}), h = f16({1.5f}), f = f32({1.5f}), i = mv::array({2}),
              t = mv::astype(mv::array({1}), DType::bool_);
  EXPECT_EQ((b + b).dtype(), DType::bfloat16);
  EXPECT_EQ((h * h).dtype(), DType::float16);
  EXPECT_EQ((b + h).dtype(), DType::float32);
  EXPECT_EQ((b + f).dtype(), DType::float32);
  EXPECT_EQ((f + h).dtype(), DType::float32);
  EXPECT_EQ((b + 2.5f).dtype(), DType::bfloat16);  // weak float scalar
  EXPECT_EQ((2 * h).dtype(), DType::float16);      // weak int scalar
  EXPECT_EQ((i + b).dtype(), DType::bfloat16);     // int32 array + bfloat16
  EXPECT_EQ((t * h).dtype(), DType::float16);
  EXPECT_EQ((i / i).dtype(), DType::float32);
  EXPECT_EQ((b / 3).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::exp(b).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::exp(i).dtype(), DType::float32);
  EXPECT_EQ((b < f).dtype(), DType::bool_);
  EXPECT_EQ(mv::where(t, b, 0.0f).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::concatenate({b, h}).dtype(), DType::float32);
  EXPECT_EQ(mv::concatenate({b, i}).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::concatenate({f, b}).dtype(), DType::float32);
  EXPECT_EQ(mv::matmul(b.reshape(1, 1), b.reshape(1, 1)).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::matmul(b.reshape(1, 1), f.reshape(1, 1)).dtype(), DType::float32);
  EXPECT_EQ(mv::type_of(mv::zeros({4, 2}, DType::bfloat16)), "bfloat16[4,2]");
  // The weak scalar is rounded to bfloat16 first: 1 + 0.1 is 1 + 0.10009765625 -> 1.1015625.
  EXPECT_EQ(bits16(bf16({1.0f}) + 0.1f), (std::vector<uint16_t>{0x3f8d}));
}

TEST(Dtypes16, ElementwiseRoundsAfterEveryOpAsNumpy) {
  const std::vector<float> xv = {0.1f, 0.2f, 0.7f, 1.1f, 3.3f},
                           yv = {3.0f, -1.0f, 2.5f, 0.3f, 7.0f};
  // numpy float16
  const Array hx = f16(xv), hy = f16(yv);
  EXPECT_EQ(bits16(hx * hy), (std::vector<uint16_t>{13516, 45670, 16128, 13639, 19911}));
  EXPECT_EQ(bits16(hx + hy), (std::vector<uint16_t>{16947, 47718, 16998, 15769, 18726}));
  EXPECT_EQ(bits16(mv::exp(hx)), (std::vector<uint16_t>{15468, 15587, 16391, 16898, 20169}));
  // bfloat16 (numpy emulation)
  const Array bx = bf16(xv), by = bf16(yv);
  EXPECT_EQ(bits16(bx), (std::vector<uint16_t>{15821, 15949, 16179, 16269, 16467}));
  EXPECT_EQ(bits16(bx * by), (std::vector<uint16_t>{16026, 48717, 16352, 16042, 16825}));
  EXPECT_EQ(bits16(bx + by), (std::vector<uint16_t>{16454, 48973, 16461, 16308, 16677}));
  EXPECT_EQ(bits16(bx / by), (std::vector<uint16_t>{15625, 48717, 16015, 16490, 16113}));
  EXPECT_EQ(bits16(mv::exp(bx)), (std::vector<uint16_t>{16269, 16284, 16385, 16449, 16856}));
  // A fused chain rounds after each op (XLA), not once at the end (which would give
  // {16506, 16410, 16644, 16512, 17040}).
  EXPECT_EQ(bits16((bx * by + 1.0f) * 3.0f),
            (std::vector<uint16_t>{16505, 16410, 16644, 16511, 17041}));
  // Overflow to inf in the format; NaN stays.
  EXPECT_EQ(bits16(f16({300.0f}) * 300.0f), (std::vector<uint16_t>{0x7c00}));
  EXPECT_EQ(bits16(bf16({3e38f}) * 2.0f), (std::vector<uint16_t>{0x7f80}));
  EXPECT_TRUE(std::isnan(mv::astype(f16({kInf}) - kInf, DType::float32).to_host<float>()[0]));
  // Subnormal float16 results: 2^-14 / 3 -> 0x0155 (numpy)
  EXPECT_EQ(bits16(f16({0x1p-14f}) / 3.0f), (std::vector<uint16_t>{0x0155}));
  // maximum / minimum / comparisons / where on the values of the format
  EXPECT_EQ(bits16(mv::maximum(bx, by)), bits16(bf16({3.0f, 0.2f, 2.5f, 1.1f, 7.0f})));
  EXPECT_EQ(mv::astype(bx > by, DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(
      mv::astype(mv::isnan(mv::astype(f32({std::nanf(""), 1.0f}), DType::bfloat16)), DType::int32)
          .to_host<int32_t>(),
      (std::vector<int32_t>{1, 0}));
}

TEST(Dtypes16, BroadcastingAndMadeArraysKeepTheFormat) {
  // A broadcast operand takes the strided kernel; each result still rounds.
  std::vector<float> mv_(6), row = {0.1f, 1.7f, -3.3f};
  for (size_t i = 0; i < mv_.size(); ++i) mv_[i] = 0.37f * static_cast<float>(i) - 1.0f;
  for (const DType t : {DType::bfloat16, DType::float16}) {
    const Array m = mv::astype(f32(mv_).reshape(2, 3), t), r = mv::astype(f32(row), t);
    std::vector<uint16_t> want;
    for (size_t i = 0; i < 6; ++i) {
      const float p = mv::round_to(t, mv::round_to(t, mv_[i]) * mv::round_to(t, row[i % 3]));
      const float v = mv::round_to(t, p - 0.25f);
      want.push_back(t == DType::bfloat16 ? mv::bfloat16_bits(v) : mv::float16_bits(v));
    }
    EXPECT_EQ(bits16(m * r - 0.25f), want) << mv::dtype_name(t);
    EXPECT_EQ(mv::ones_like(m).dtype(), t);
    EXPECT_EQ(bits16(mv::ones({2}, t)), bits16(mv::astype(f32({1, 1}), t)));
    EXPECT_EQ(bits16(mv::full_like(m, 0.1)),
              std::vector<uint16_t>(6, bits16(mv::astype(f32({0.1f}), t))[0]));
    EXPECT_EQ(bits16(mv::pad(r, {{1, 0}}, 0.1f))[0], bits16(mv::astype(f32({0.1f}), t))[0]);
    EXPECT_EQ(mv::one_hot(mv::array({1, 0}), 3, t).dtype(), t);
    EXPECT_TRUE(
        std::isnan(mv::astype(mv::take(r, mv::array({5})), DType::float32).to_host<float>()[0]));
  }
}

TEST(Dtypes16, ReductionsAccumulateInFloat32) {
  // 1000 x bfloat16(0.01) = 1000 x 0.010009765625: a float32 sum of 10.0097..., rounded to 10.
  // Summing in bfloat16 would stop near 2.
  const Array b = mv::astype(mv::full({1000}, 0.01f), DType::bfloat16);
  const Array s = mv::sum(b);
  EXPECT_EQ(s.dtype(), DType::bfloat16);
  EXPECT_EQ(bits16(s), (std::vector<uint16_t>{0x4120}));
  const Array h = mv::astype(mv::full({1000}, 0.01f), DType::float16);
  EXPECT_EQ(bits16(mv::sum(h)), (std::vector<uint16_t>{0x4900}));  // numpy: float16(10.002136) = 10
  EXPECT_EQ(mv::mean(b).dtype(), DType::bfloat16);
  EXPECT_EQ(bits16(mv::mean(b)), (std::vector<uint16_t>{mv::bfloat16_bits(0.010009765625f)}));
  const Array m = bf16({1.0f, -7.5f, 3.25f, 2.0f}).reshape(2, 2);
  EXPECT_EQ(bits16(mv::max(m, 1)), bits16(bf16({1.0f, 3.25f})));
  EXPECT_EQ(bits16(mv::min(m)), bits16(bf16({-7.5f})));
  EXPECT_EQ(mv::argmax(m, 0).to_host<int32_t>(), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(mv::var(m).dtype(), DType::bfloat16);
  // prod and cumsum too: in float32, each result rounded once.
  EXPECT_EQ(bits16(mv::prod(bf16({1.015625f, 1.015625f, 1.015625f}))),
            (std::vector<uint16_t>{mv::bfloat16_bits(1.015625f * 1.015625f * 1.015625f)}));
  EXPECT_EQ(bits16(mv::cumsum(b, 0)).back(), 0x4120);
  EXPECT_EQ(mv::argsort(bf16({3.0f, -1.0f, 2.0f})).to_host<int32_t>(),
            (std::vector<int32_t>{1, 2, 0}));
}

TEST(Dtypes16, MatmulWithPreferredElementType) {
  // 256 x (bfloat16(0.01) * 1): summed in float32 (2.5625) then rounded for bfloat16 (2.5625
  // is a bfloat16 value: 0x4024); with preferred_element_type=float32 it is never rounded.
  const Array a = mv::astype(mv::full({2, 256}, 0.01f), DType::bfloat16);
  const Array b = mv::ones({256, 3}, DType::bfloat16);
  const Array c = mv::matmul(a, b);
  EXPECT_EQ(c.dtype(), DType::bfloat16);
  const float exact = 256 * 0.010009765625f;
  for (const uint16_t bits : bits16(c)) EXPECT_EQ(bits, mv::bfloat16_bits(exact));
  const Array c32 = mv::matmul(a, b, DType::float32);
  EXPECT_EQ(c32.dtype(), DType::float32);
  for (const float v : c32.to_host<float>()) EXPECT_EQ(v, exact);
  // 1000 terms: bfloat16 rounding of the result only (10.0097 -> 10), not of partial sums.
  const Array a2 = mv::astype(mv::full({1, 1000}, 0.01f), DType::bfloat16);
  const Array b2 = mv::ones({1000, 1}, DType::bfloat16);
  EXPECT_EQ(bits16(mv::matmul(a2, b2)), (std::vector<uint16_t>{0x4120}));
  EXPECT_NEAR(mv::matmul(a2, b2, DType::float32).to_host<float>()[0], 10.009766f, 1e-4f);
  EXPECT_EQ(mv::dot(a2, b2, DType::float32).dtype(), DType::float32);
  EXPECT_EQ(mv::einsum("ij,jk->ik", a2, b2, DType::float32).dtype(), DType::float32);
  EXPECT_EQ(mv::einsum("ij,jk->ik", a2, b2).dtype(), DType::bfloat16);
  EXPECT_EQ(mv::matmul(mv::astype(a2, DType::float16), mv::astype(b2, DType::float16)).dtype(),
            DType::float16);
  expect_error([&] { (void)mv::matmul(a, b, DType::int32); },
               "preferred_element_type int32 for floating operands");
}

TEST(Dtypes16, ShardedUnderJitAndShardMap) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i) - 2.0f;
  std::vector<mv::bfloat16> hv(v.begin(), v.end());
  const Array x = mv::device_put(std::span<const mv::bfloat16>(hv), {8, 8},
                                 mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(x.dtype(), DType::bfloat16);
  EXPECT_EQ(bits_of(x.to_host<mv::bfloat16>()), bits_of(hv));
  const auto f = mv::jit([](const Array& a) { return mv::sum(a * 2.0f + 1.0f, {0}); });
  const Array y = f(x);
  EXPECT_EQ(y.dtype(), DType::bfloat16);
  // Host reference: each op rounded to bfloat16, the column sums in float32 then rounded.
  std::vector<uint16_t> want;
  for (int c = 0; c < 8; ++c) {
    float s = 0;
    for (int r = 0; r < 8; ++r)
      s += mv::round_to(DType::bfloat16,
                        mv::round_to(DType::bfloat16, hv[r * 8 + c].to_float() * 2.0f) + 1.0f);
    want.push_back(mv::bfloat16_bits(s));
  }
  EXPECT_EQ(bits16(y), want);
  // Data movement keeps the bits: transpose, reshape, slice, concatenate, take, reshard.
  EXPECT_EQ(bits16(mv::transpose(x).T()), bits_of(hv));
  EXPECT_EQ(bits16(mv::device_put(x, mv::NamedSharding(mesh, P("y", "x"))).reshape(64)),
            bits_of(hv));
  EXPECT_EQ(bits16(mv::take(x.reshape(64), mv::array({3, 0}))),
            (std::vector<uint16_t>{hv[3].bits, hv[0].bits}));
  // psum of bfloat16 inside shard_map: summed in float32, rounded once.
  const auto psum_f = mv::shard_map([](const Array& a) { return mv::psum(a, "x"); }, mesh,
                                    {P("x", "y")}, P(mv::None, "y"));
  const Array ps = psum_f(x);
  EXPECT_EQ(ps.dtype(), DType::bfloat16);
  std::vector<uint16_t> want_ps;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 8; ++c)
      want_ps.push_back(
          mv::bfloat16_bits(hv[r * 8 + c].to_float() + hv[(r + 4) * 8 + c].to_float()));
  EXPECT_EQ(bits16(ps), want_ps);
  const auto pmean_f =
      mv::shard_map([](const Array& a) { return mv::pmean(a, "y"); }, mesh, {P("x", "y")}, P("x"));
  EXPECT_EQ(pmean_f(x).dtype(), DType::bfloat16);
  const auto gather_f = mv::shard_map(
      [](const Array& a) { return mv::all_gather(a, "y", 1, true); }, mesh, {P("x", "y")}, P("x"));
  EXPECT_EQ(bits16(gather_f(x)), bits_of(hv));
}

TEST(Dtypes16, GradThroughBfloat16) {
  // loss = sum(x * x * 3): d/dx = 6x in bfloat16 (cotangents in the primal's dtype, as JAX).
  const std::vector<float> xv = {0.1f, -1.3f, 2.7f, 5.0f};
  const Array x = bf16(xv);
  const auto [value, g] =
      mv::value_and_grad([](const Array& a) { return mv::sum(a * a * 3.0f); })(x);
  EXPECT_EQ(value.dtype(), DType::bfloat16);
  EXPECT_EQ(g.dtype(), DType::bfloat16);
  const auto xs = x.to_host<mv::bfloat16>();
  std::vector<uint16_t> want;
  for (const auto& xi : xs) {
    // ct(a*a*3) = 1 -> ct(a*a) = 1 * 3 -> each factor gets 3 * a, summed: rounded at each op.
    const float t = mv::round_to(DType::bfloat16, 3.0f * xi.to_float());
    want.push_back(mv::bfloat16_bits(t + t));
  }
  EXPECT_EQ(bits16(g), want);
  // A bfloat16 input used in float32 math gets a bfloat16 cotangent.
  const auto g2 =
      mv::grad([](const Array& a) { return mv::sum(mv::astype(a, DType::float32) * 2.0f); })(x);
  EXPECT_EQ(g2.dtype(), DType::bfloat16);
  EXPECT_EQ(bits16(g2), bits16(bf16({2.0f, 2.0f, 2.0f, 2.0f})));
  const auto g3 = mv::grad([](const Array& a) {
    return mv::sum(mv::matmul(a.reshape(2, 2), a.reshape(2, 2)));
  })(f16(xv));
  EXPECT_EQ(g3.dtype(), DType::float16);
}

TEST(Dtypes16, PrintsAsNumpyAndMlDtypes) {
  // numpy 1.24: str(np.array([...], np.float32).astype(np.float16))
  EXPECT_EQ(f16({0.1f, 0.2f, 0.3f}).to_string(), "[0.1 0.2 0.3]");
  EXPECT_EQ(f16({1, 2, 3}).to_string(), "[1. 2. 3.]");
  EXPECT_EQ(f16({0.1f, 1, 2.5f, 65504, 1e-3f, -0.0f, 3.14159f}).to_string(),
            "[ 1.00e-01  1.00e+00  2.50e+00  6.55e+04  1.00e-03 -0.00e+00  3.14e+00]");
  EXPECT_EQ(f16({1e-5f, 1, 60000}).to_string(), "[1.e-05 1.e+00 6.e+04]");
  EXPECT_EQ((f16({0.1f, 0.2f, 0.7f, 1.1f, 3.3f}) * f16({3, -1, 2.5f, 0.3f, 7})).to_string(),
            "[ 0.2998 -0.2     1.75    0.3298 23.11  ]");
  EXPECT_EQ(f16({65504, 1, 2}).to_string(), "[6.55e+04 1.00e+00 2.00e+00]");
  EXPECT_EQ(f16({0.333f, 0.6667f, 1e-4f}).to_string(), "[3.330e-01 6.665e-01 1.000e-04]");
  EXPECT_EQ(f16({1.5e-7f, 6e-8f}).to_string(), "[2.e-07 6.e-08]");
  EXPECT_EQ(f16({2049, 2051, 4097}).to_string(), "[2048. 2052. 4096.]");
  EXPECT_EQ(f16({-kInf, std::nanf(""), 0.5f}).to_string(), "[-inf  nan  0.5]");
  EXPECT_EQ(f16({1000.5f, 0.999f}).to_string(), "[1.0005e+03 9.9902e-01]");
  EXPECT_EQ(mv::astype(mv::scalar(65504.0f), DType::float16).to_string(), "65500.0");
  EXPECT_EQ(mv::astype(mv::scalar(1.0f / 3.0f), DType::float16).to_string(), "0.3333");
  EXPECT_EQ(mv::astype(mv::scalar(1e5f), DType::float16).to_string(), "inf");
  EXPECT_EQ(mv::astype(mv::scalar(0.1f), DType::float16).to_string(), "0.1");
  EXPECT_EQ(mv::astype(mv::scalar(1e-5f), DType::float16).to_string(), "1e-05");
  // ml_dtypes' bfloat16: each element's repr (C++'s ostream << float, 6 digits), unpadded.
  EXPECT_EQ((bf16({0.1f, 0.2f, 0.7f, 1.1f, 3.3f}) * bf16({3, -1, 2.5f, 0.3f, 7})).to_string(),
            "[0.300781 -0.200195 1.75 0.332031 23.125]");
  EXPECT_EQ(bf16({1, 2, 3, 0x1p32f, -kInf, std::nanf("")}).reshape(2, 3).to_string(),
            "[[1 2 3]\n [4.29497e+09 -inf nan]]");
  EXPECT_EQ(mv::astype(mv::scalar(2.5f), DType::bfloat16).to_string(), "2.5");
}

TEST(Dtypes16, NpyRoundTripAndBfloat16Refusal) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/f16_" + std::to_string(::getpid()) + ".npy";
  const Array h = f16({0.1f, -65504.0f, 0x1p-24f, kInf, 3.0f, -0.0f}).reshape(2, 3);
  mv::save_npy(path, h);
  const Array back = mv::load_npy(path);
  EXPECT_EQ(back.dtype(), DType::float16);
  EXPECT_EQ(back.shape(), (mv::Shape{2, 3}));
  EXPECT_EQ(bits16(back), bits16(h));
  // The file is numpy's '<f2': 2 bytes per element after the header.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  ASSERT_NE(file, nullptr);
  std::fseek(file, 0, SEEK_END);
  const long size = std::ftell(file);
  std::fclose(file);
  EXPECT_EQ(size, 128 + 12);
  std::remove(path.c_str());
  expect_error([&] { mv::save_npy(path, bf16({1.0f})); }, "astype(x, DType::float32)");
  const Array as32 = mv::astype(bf16({1.0f, 0.1f}), DType::float32);
  mv::save_npy(path, as32);
  EXPECT_EQ(bits16(mv::astype(mv::load_npy(path), DType::bfloat16)), bits16(bf16({1.0f, 0.1f})));
  std::remove(path.c_str());
}

TEST(Dtypes16, ErrorsNameTheWayOut) {
  const Array b = bf16({1.0f, 2.0f});
  expect_error([&] { (void)b.to_host<float>(); }, "to_host<meshvk::bfloat16>");
  expect_error([&] { (void)f16({1.0f}).to_host<mv::bfloat16>(); }, "to_host<meshvk::float16>");
  expect_error([&] { (void)(b & b); }, "bitwise_and: not defined for bfloat16");
  expect_error([&] { (void)mv::astype(b, static_cast<DType>(19)); }, "DType::bfloat16");
  expect_error(
      [&] {
        (void)mv::grad([](const Array& a) { return mv::astype(mv::sum(a), DType::int32); })(b);
      },
      "floating (float32, float64, bfloat16, float16) scalar");
  expect_runtime_usable();
}

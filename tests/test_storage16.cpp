// bfloat16 and float16 stored in 2 bytes per element: device memory halves, and every path that
// reads or writes those bytes (fused elementwise kernels, layout changes, collectives, reshards,
// jit replay, host transfers, .npy, printing) gives the values of the 16-bit formats, against
// host references computed with meshvk/dtype.hpp's conversions (float32 arithmetic rounded after
// every op, as XLA does). Sizes are odd wherever they can be: a piece's last 32-bit word then
// holds one element and half of nothing, and neighbouring elements share words.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::DType;
using mv::P;

namespace {

const DType kTypes[] = {DType::bfloat16, DType::float16};

float value_of(DType t, uint16_t h) {
  return t == DType::bfloat16 ? mv::bfloat16_to_float(h) : mv::float16_to_float(h);
}
uint16_t bits_of(DType t, float f) { return t == DType::bfloat16 ? mv::bfloat16_bits(f) : mv::float16_bits(f); }

// A 16-bit array from its bits, laid out by `sharding` straight from the host (no float32 copy).
Array put16(DType t, const std::vector<uint16_t>& bits, const mv::Shape& shape, const mv::Sharding& sharding) {
  if (t == DType::bfloat16) {
    std::vector<mv::bfloat16> v;
    for (const uint16_t b : bits) v.push_back(mv::bfloat16::from_bits(b));
    return mv::device_put(std::span<const mv::bfloat16>(v), shape, sharding);
  }
  std::vector<mv::float16> v;
  for (const uint16_t b : bits) v.push_back(mv::float16::from_bits(b));
  return mv::device_put(std::span<const mv::float16>(v), shape, sharding);
}

std::vector<uint16_t> bits16(const Array& x) {
  std::vector<uint16_t> out;
  if (x.dtype() == DType::bfloat16)
    for (const auto& h : x.to_host<mv::bfloat16>()) out.push_back(h.bits);
  else
    for (const auto& h : x.to_host<mv::float16>()) out.push_back(h.bits);
  return out;
}

// Any 16-bit pattern (NaN payloads, subnormals, infinities included): moves keep them all.
std::vector<uint16_t> any_bits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = static_cast<uint16_t>(rng());
  return v;
}

// Small integers: sums and products of them are exact in float32, in any order, so reductions
// and matmuls have one right answer whatever order the kernels add in.
std::vector<uint16_t> small_ints(DType t, size_t n, uint32_t seed, int lo = -8, int hi = 8) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = bits_of(t, static_cast<float>(d(rng)));
  return v;
}

// Finite values of moderate size, for arithmetic chains.
std::vector<uint16_t> moderate(DType t, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = bits_of(t, d(rng));
  return v;
}

mv::Mesh mesh_of(int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(8 - n + i);  // the last n devices: not device 0's
  return mv::make_mesh({n}, {"x"}, {}, ids);
}

uint64_t in_use(int device) { return test_runtime().memory_stats(device).bytes_in_use; }

}  // namespace

TEST(Storage16, DeviceMemoryIsTwoBytesPerElement) {
  auto& rt = test_runtime();
  const int64_t n = 100003;  // odd
  const mv::Mesh one = mv::make_mesh({1}, {"x"}, {}, {3});
  rt.synchronize();
  const uint64_t before = in_use(3);
  const Array f = mv::device_put(mv::zeros({n}), mv::NamedSharding(one, P()));
  rt.synchronize();
  const uint64_t f32_bytes = in_use(3) - before;
  EXPECT_GE(f32_bytes, static_cast<uint64_t>(n) * 4);
  for (const DType t : kTypes) {
    const uint64_t start = in_use(3);
    const Array h = put16(t, any_bits(n, 1), {n}, mv::NamedSharding(one, P()));
    rt.synchronize();
    const uint64_t used = in_use(3) - start;
    EXPECT_GE(used, static_cast<uint64_t>(n) * 2) << mv::dtype_name(t);
    EXPECT_LE(used, static_cast<uint64_t>(n) * 2 + 4096) << mv::dtype_name(t) << ": float32 took " << f32_bytes;
    // What ops make is 2 bytes per element too: a fused chain and a layout change.
    const uint64_t mid = in_use(3);
    const Array y = mv::astype(mv::astype(h, DType::float32) * 2.0f, t);
    const Array z = mv::transpose(mv::reshape(y, {1, n}));
    (void)bits16(z);
    rt.synchronize();
    EXPECT_LE(in_use(3) - mid, static_cast<uint64_t>(n) * 4 + 8192) << mv::dtype_name(t);
  }
  // Sharded over 8 devices: each piece of 1001 (odd) elements takes about 2002 bytes.
  const mv::Mesh eight = mesh_of(8);
  std::vector<uint64_t> was(8);
  for (int d = 0; d < 8; ++d) was[d] = in_use(d);
  const Array s = put16(DType::bfloat16, any_bits(8 * 1001, 2), {8 * 1001}, mv::NamedSharding(eight, P("x")));
  rt.synchronize();
  for (int d = 0; d < 8; ++d) {
    EXPECT_GE(in_use(d) - was[d], 2002u) << "device " << d;
    EXPECT_LE(in_use(d) - was[d], 2002u + 512) << "device " << d;
  }
}

TEST(Storage16, BitsSurviveEveryLayoutChange) {
  const mv::Shape shape{105, 15};  // divisible by 3, 5 (and 15); pieces of odd sizes
  const std::vector<mv::Sharding> layouts = {
      mv::NamedSharding(mesh_of(3), P("x")),       mv::NamedSharding(mesh_of(5), P(mv::None, "x")),
      mv::NamedSharding(mesh_of(5), P("x")),       mv::NamedSharding(mesh_of(3), P()),
      mv::NamedSharding(mesh_of(3), P(mv::None, "x")), mv::NamedSharding(mesh_of(8), P())};
  for (const DType t : kTypes) {
    const auto bits = any_bits(105 * 15, 3);
    Array x = put16(t, bits, shape, layouts[0]);
    EXPECT_EQ(bits16(x), bits) << mv::dtype_name(t);
    for (size_t k = 1; k < layouts.size(); ++k) {
      x = mv::device_put(x, layouts[k]);
      EXPECT_EQ(bits16(x), bits) << mv::dtype_name(t) << " after layout " << k;
    }
    // Each device's own piece, read on its own.
    const Array y = mv::device_put(x, layouts[2]);
    for (const auto& shard : y.addressable_shards()) {
      const auto got = bits16(shard.data);
      const int64_t row0 = shard.index[0].start;
      ASSERT_EQ(got.size(), 21u * 15u);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], bits[row0 * 15 + i]) << i;
    }
  }
}

TEST(Storage16, FusedElementwiseRoundsEveryOp) {
  const mv::Sharding layout = mv::NamedSharding(mesh_of(5), P("x"));
  for (const DType t : kTypes) {
    const auto xb = moderate(t, 105 * 15, 4), rb = moderate(t, 15, 5);
    const Array x = put16(t, xb, {105, 15}, layout);
    const Array row = put16(t, rb, {15}, mv::NamedSharding(mesh_of(5), P()));
    const Array y = (x * 1.5f + x * x - 0.25f) * row;  // `row` broadcast: the strided kernel
    const Array w = mv::astype(x, DType::float32) + x;   // float32 result of a 16-bit input
    const auto got = bits16(y);
    const auto got_w = w.to_host<float>();
    auto r = [t](float v) { return mv::round_to(t, v); };
    for (size_t i = 0; i < xb.size(); ++i) {
      const float a = value_of(t, xb[i]), b = value_of(t, rb[i % 15]);
      const float want = r(r(r(r(a * 1.5f) + r(a * a)) - 0.25f) * b);
      ASSERT_EQ(got[i], bits_of(t, want)) << mv::dtype_name(t) << " element " << i;
      ASSERT_EQ(got_w[i], a + a) << i;
    }
  }
}

TEST(Storage16, AstypeToAndFromEveryDtype) {
  for (const DType t : kTypes) {
    const auto hb = small_ints(t, 101, 6, -300, 300);
    const Array h = put16(t, hb, {101}, mv::NamedSharding(mesh_of(3), P()));
    const auto f = mv::astype(h, DType::float32).to_host<float>();
    const auto i = mv::astype(h, DType::int32).to_host<int32_t>();
    const auto b = mv::astype(mv::astype(h, DType::bool_), DType::int32).to_host<int32_t>();
    const DType other = t == DType::bfloat16 ? DType::float16 : DType::bfloat16;
    const auto o = bits16(mv::astype(h, other));
    for (size_t k = 0; k < hb.size(); ++k) {
      const float v = value_of(t, hb[k]);
      EXPECT_EQ(f[k], v);
      EXPECT_EQ(i[k], static_cast<int32_t>(v));
      EXPECT_EQ(b[k], v != 0.0f ? 1 : 0);
      EXPECT_EQ(o[k], bits_of(other, v));
    }
    // Into the 16-bit type from float32, int32, bool and uint32.
    std::vector<float> fv;
    std::vector<int32_t> iv;
    std::vector<uint32_t> uv;
    for (int k = 0; k < 101; ++k) {
      fv.push_back(std::ldexp(1.0f + k / 97.0f, k % 40 - 20));
      iv.push_back(k * 37 - 1800);
      uv.push_back(static_cast<uint32_t>(k * 1234567));
    }
    const auto from_f = bits16(mv::astype(mv::array(std::span<const float>(fv)), t));
    const auto from_i = bits16(mv::astype(mv::array(std::span<const int32_t>(iv)), t));
    const auto from_b = bits16(mv::astype(mv::array(std::span<const int32_t>(iv)) > 0, t));
    const auto from_u = bits16(mv::astype(mv::array(std::span<const uint32_t>(uv)), t));
    for (size_t k = 0; k < fv.size(); ++k) {
      EXPECT_EQ(from_f[k], bits_of(t, fv[k])) << k;
      EXPECT_EQ(from_i[k], bits_of(t, static_cast<float>(iv[k]))) << k;
      EXPECT_EQ(from_b[k], bits_of(t, iv[k] > 0 ? 1.0f : 0.0f)) << k;
      EXPECT_EQ(value_of(t, from_u[k]), mv::round_to(t, static_cast<float>(uv[k]))) << k;
    }
  }
}

TEST(Storage16, MatmulEinsumAndReductions) {
  for (const DType t : kTypes) {
    const int64_t m = 7, k = 10, n = 5;
    const auto ab = small_ints(t, m * k, 7), bb = small_ints(t, k * n, 8);
    // k split over 5 devices: partial products summed across them.
    const Array a = put16(t, ab, {m, k}, mv::NamedSharding(mesh_of(5), P(mv::None, "x")));
    const Array b = put16(t, bb, {k, n}, mv::NamedSharding(mesh_of(5), P("x")));
    const auto c16 = bits16(mv::matmul(a, b));
    const auto c32 = mv::matmul(a, b, DType::float32).to_host<float>();
    const auto e16 = bits16(mv::einsum("ij,jk->ki", a, b));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t q = 0; q < k; ++q) s += value_of(t, ab[i * k + q]) * value_of(t, bb[q * n + j]);
        EXPECT_EQ(c16[i * n + j], bits_of(t, s)) << mv::dtype_name(t) << " " << i << "," << j;
        EXPECT_EQ(c32[i * n + j], s);
        EXPECT_EQ(e16[j * m + i], bits_of(t, s));
      }
    // sum, mean, max over each axis of a (105, 15) array split over 3 devices.
    const auto xb = small_ints(t, 105 * 15, 9);
    const Array x = put16(t, xb, {105, 15}, mv::NamedSharding(mesh_of(3), P("x")));
    const auto s0 = bits16(mv::sum(x, {0})), s1 = bits16(mv::sum(x, {1}));
    const auto m1 = bits16(mv::mean(x, {1})), x0 = bits16(mv::max(x, {0}));
    for (int j = 0; j < 15; ++j) {
      float s = 0, mx = -1e30f;
      for (int i = 0; i < 105; ++i) {
        s += value_of(t, xb[i * 15 + j]);
        mx = std::max(mx, value_of(t, xb[i * 15 + j]));
      }
      EXPECT_EQ(s0[j], bits_of(t, s)) << j;
      EXPECT_EQ(x0[j], bits_of(t, mx)) << j;
    }
    for (int i = 0; i < 105; ++i) {
      float s = 0;
      for (int j = 0; j < 15; ++j) s += value_of(t, xb[i * 15 + j]);
      EXPECT_EQ(s1[i], bits_of(t, s)) << i;
      EXPECT_EQ(m1[i], bits_of(t, s / 15.0f)) << i;
    }
  }
}

TEST(Storage16, TakeOneHotAndLayoutOps) {
  for (const DType t : kTypes) {
    const auto xb = any_bits(35 * 9, 10);
    const mv::Sharding rows5 = mv::NamedSharding(mesh_of(5), P("x"));
    const Array x = put16(t, xb, {35, 9}, rows5);
    const std::vector<int32_t> idx = {34, 0, 17, 3, 3, 21, 9};
    const auto taken = bits16(mv::take(x, mv::array(std::span<const int32_t>(idx)), 0));
    for (size_t r = 0; r < idx.size(); ++r)
      for (int c = 0; c < 9; ++c) ASSERT_EQ(taken[r * 9 + c], xb[idx[r] * 9 + c]) << r << "," << c;
    const auto row = bits16(x[17]);
    for (int c = 0; c < 9; ++c) EXPECT_EQ(row[c], xb[17 * 9 + c]);
    const auto oh = bits16(mv::one_hot(mv::array(std::span<const int32_t>(idx)), 5, t));
    for (size_t r = 0; r < idx.size(); ++r)
      for (int c = 0; c < 5; ++c) EXPECT_EQ(oh[r * 5 + c], bits_of(t, idx[r] == c ? 1.0f : 0.0f));
    // transpose, strided slice, concatenate, reshape, pad (odd sizes, split arrays).
    const auto tr = bits16(mv::transpose(x));
    for (int i = 0; i < 35; ++i)
      for (int j = 0; j < 9; ++j) ASSERT_EQ(tr[j * 35 + i], xb[i * 9 + j]);
    const auto sl = bits16(mv::slice(x, {1, 2}, {34, 9}, {3, 2}));  // rows 1,4,..,31; cols 2,4,6,8
    size_t at = 0;
    for (int i = 1; i < 34; i += 3)
      for (int j = 2; j < 9; j += 2) ASSERT_EQ(sl[at++], xb[i * 9 + j]);
    ASSERT_EQ(at, sl.size());
    const auto yb = any_bits(35 * 3, 11);
    const Array y = put16(t, yb, {35, 3}, rows5);
    const auto cat = bits16(mv::concatenate({x, y}, 1));
    for (int i = 0; i < 35; ++i)
      for (int j = 0; j < 12; ++j) ASSERT_EQ(cat[i * 12 + j], j < 9 ? xb[i * 9 + j] : yb[i * 3 + j - 9]);
    const auto cat0 = bits16(mv::concatenate({mv::slice(x, {0, 0}, {3, 9}), x}, 0));
    for (size_t i = 0; i < cat0.size(); ++i) ASSERT_EQ(cat0[i], i < 27 ? xb[i] : xb[i - 27]);
    EXPECT_EQ(bits16(mv::reshape(x, {9, 35})), xb);
    const auto pd = bits16(mv::pad(x, {{1, 0}, {0, 2}}, 2.5f));
    for (int i = 0; i < 36; ++i)
      for (int j = 0; j < 11; ++j)
        ASSERT_EQ(pd[i * 11 + j], i == 0 || j >= 9 ? bits_of(t, 2.5f) : xb[(i - 1) * 9 + j]) << i << "," << j;
    const auto rl = bits16(mv::roll(x, 4, 0));
    for (int i = 0; i < 35; ++i)
      for (int j = 0; j < 9; ++j) ASSERT_EQ(rl[((i + 4) % 35) * 9 + j], xb[i * 9 + j]);
    // Filled arrays: odd lengths fill their half-used last word.
    for (const int64_t len : {1, 3, 257}) {
      const auto ones = bits16(mv::ones({len}, t));
      for (const uint16_t o : ones) ASSERT_EQ(o, bits_of(t, 1.0f));
      ASSERT_EQ(bits16(mv::full_like(mv::ones({len}, t), 3.0f)), std::vector<uint16_t>(len, bits_of(t, 3.0f)));
    }
  }
}

TEST(Storage16, EveryCollectiveInShardMapAtOddSizes) {
  for (const int n : {3, 5, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    for (const DType t : kTypes) {
      const int64_t local = 3 * n;  // odd for n = 3, 5; psum_scatter and all_to_all split it n ways
      const auto xb = small_ints(t, n * local, 12 + n);
      const Array x = put16(t, xb, {n * local}, mv::NamedSharding(mesh, P("x")));
      auto run = [&](const std::function<Array(const Array&)>& body, const mv::PartitionSpec& out) {
        return bits16(mv::shard_map(body, mesh, {P("x")}, out)(x));
      };
      auto v = [&](int p, int64_t i) { return value_of(t, xb[p * local + i]); };
      const auto ps = run([](const Array& a) { return mv::psum(a, "x"); }, P());
      for (int64_t i = 0; i < local; ++i) {
        float s = 0;
        for (int p = 0; p < n; ++p) s += v(p, i);
        ASSERT_EQ(ps[i], bits_of(t, s)) << n << " psum " << i;
      }
      const auto ag = run([](const Array& a) { return mv::all_gather(a, "x", 0, true); }, P());
      EXPECT_EQ(ag, xb) << n << " all_gather";
      std::vector<std::pair<int, int>> shift;
      for (int r = 0; r < n; ++r) shift.push_back({r, (r + 1) % n});
      const auto pp = run([&](const Array& a) { return mv::ppermute(a, "x", shift); }, P("x"));
      for (int p = 0; p < n; ++p)
        for (int64_t i = 0; i < local; ++i) ASSERT_EQ(pp[p * local + i], xb[((p + n - 1) % n) * local + i]) << n;
      // A permutation leaving member 0 without a source: zeros.
      const auto pz = run([&](const Array& a) { return mv::ppermute(a, "x", {{0, 1}}); }, P("x"));
      for (int64_t i = 0; i < local; ++i) ASSERT_EQ(pz[i], 0) << n;
      const auto sc = run([](const Array& a) { return mv::psum_scatter(a, "x", 0, true); }, P("x"));
      for (int p = 0; p < n; ++p)
        for (int64_t i = 0; i < 3; ++i) {
          float s = 0;
          for (int q = 0; q < n; ++q) s += v(q, p * 3 + i);
          ASSERT_EQ(sc[p * 3 + i], bits_of(t, s)) << n << " psum_scatter";
        }
      const auto a2a = run([](const Array& a) { return mv::all_to_all(a, "x", 0, 0, true); }, P("x"));
      for (int p = 0; p < n; ++p)
        for (int q = 0; q < n; ++q)
          for (int64_t i = 0; i < 3; ++i) ASSERT_EQ(a2a[p * local + q * 3 + i], xb[q * local + p * 3 + i]) << n;
    }
  }
}

TEST(Storage16, JitReplayAndGrad) {
  const mv::Sharding layout = mv::NamedSharding(mesh_of(3), P("x"));
  for (const DType t : kTypes) {
    const auto f = mv::jit([](const Array& a, const Array& b) {
      return mv::concatenate({a * b + 1.0f, mv::transpose(b)}, 0);
    });
    for (uint32_t call = 0; call < 3; ++call) {  // traced once, then replayed
      const auto ab = moderate(t, 9 * 9, 20 + call), bb = moderate(t, 9 * 9, 30 + call);
      const auto got = bits16(f(put16(t, ab, {9, 9}, layout), put16(t, bb, {9, 9}, layout)));
      ASSERT_EQ(got.size(), 18u * 9u);
      for (int i = 0; i < 9; ++i)
        for (int j = 0; j < 9; ++j) {
          const float a = value_of(t, ab[i * 9 + j]), b = value_of(t, bb[i * 9 + j]);
          ASSERT_EQ(got[i * 9 + j], bits_of(t, mv::round_to(t, a * b) + 1.0f)) << call;
          ASSERT_EQ(got[(9 + j) * 9 + i], bb[i * 9 + j]) << call;
        }
    }
    // A mixed-precision step: float32 weights cast to the 16-bit type for a matmul. The gradient
    // of sum(w16 @ x) with respect to w is the row sums of x (exact: small integers).
    const auto xb = small_ints(t, 3 * 5, 40);
    const Array x = put16(t, xb, {3, 5}, mv::NamedSharding(mesh_of(3), P("x")));
    const Array w = mv::zeros({4, 3});
    const auto g = mv::jit(mv::grad([&](const Array& wt) {
                     return mv::sum(mv::astype(mv::matmul(mv::astype(wt, t), x), DType::float32));
                   }))(w).to_host<float>();
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) {
        float s = 0;
        for (int k = 0; k < 5; ++k) s += value_of(t, xb[j * 5 + k]);
        EXPECT_EQ(g[i * 3 + j], s) << mv::dtype_name(t);
      }
  }
}

TEST(Storage16, PrintingAndNpy) {
  const Array h = mv::astype(mv::array({0.1f, 0.2f, 0.3f}), DType::float16);
  EXPECT_EQ(h.to_string(), "[0.1 0.2 0.3]");
  const Array b = mv::astype(mv::array({0.3f, -0.2f, 1.75f}), DType::bfloat16);
  EXPECT_EQ(b.to_string(), "[0.300781 -0.200195 1.75]");
  EXPECT_EQ(mv::device_put(b, mv::NamedSharding(mesh_of(3), P("x"))).to_string(), "[0.300781 -0.200195 1.75]");
  // float16 '<f2' round trip of every kind of value, at an odd length, split over 3 devices.
  std::vector<uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe3f};
  const auto more = any_bits(51 - bits.size(), 50);
  bits.insert(bits.end(), more.begin(), more.end());
  const Array x = put16(DType::float16, bits, {51}, mv::NamedSharding(mesh_of(3), P("x")));
  const std::string path = "/tmp/meshvk_storage16_" + std::to_string(getpid()) + ".npy";
  mv::save_npy(path, x);
  const Array back = mv::load_npy(path);
  std::remove(path.c_str());
  EXPECT_EQ(back.dtype(), DType::float16);
  EXPECT_EQ(bits16(back), bits);
}

TEST(Storage16, WindowedLayoutKernelsAndEmptyArrays) {
  // Bindings limited to 64 KiB: a transpose and a strided slice of 154 KB bfloat16 pieces take
  // the tiled kernels, whose windows start at aligned element offsets of 2-byte elements.
  const ScopedEnv small("MESHVK_TEST_BINDING_BYTES", "65536");
  for (const DType t : kTypes) {
    const int64_t r = 301, c = 257;
    const auto xb = any_bits(r * c, 60);
    const Array x = put16(t, xb, {r, c}, mv::NamedSharding(mesh_of(3), P()));
    const auto tr = bits16(mv::transpose(x));
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) ASSERT_EQ(tr[j * r + i], xb[i * c + j]) << i << "," << j;
    const auto sl = bits16(mv::slice(x, {3, 1}, {r, c}, {2, 3}));
    size_t at = 0;
    for (int64_t i = 3; i < r; i += 2)
      for (int64_t j = 1; j < c; j += 3) ASSERT_EQ(sl[at++], xb[i * c + j]);
  }
  for (const DType t : kTypes) {
    const Array e = mv::zeros({0, 3}, t);
    EXPECT_TRUE(bits16(e).empty());
    EXPECT_TRUE(bits16(e * 2.0f + 1.0f).empty());
    EXPECT_EQ(bits16(mv::concatenate({e, mv::ones({1, 3}, t)}, 0)), std::vector<uint16_t>(3, bits_of(t, 1.0f)));
    EXPECT_EQ(mv::device_put(e, mv::NamedSharding(mesh_of(3), P())).to_string(), "[]");
  }
}

TEST(Storage16, ScanCarriesAndStacksSixteenBitValues) {
  // The loop copies its 16-bit carry between iterations and stacks its ys (odd sizes: 7 steps of
  // 3 elements), inside jit too.
  for (const DType t : kTypes) {
    const auto xb = moderate(t, 7 * 3, 70);
    const Array xs = put16(t, xb, {7, 3}, mv::NamedSharding(mesh_of(3), P()));
    const auto body = [](const Array& c, const Array& x) { return std::make_pair(c + x, c * x); };
    const auto run = [&](const Array& x) {
      auto [total, ys] = mv::lax::scan(body, mv::zeros({3}, t), x);
      return mv::concatenate({mv::reshape(total, {1, 3}), ys}, 0);
    };
    std::vector<uint16_t> want;
    std::vector<float> c(3, 0.0f), ys;
    for (int k = 0; k < 7; ++k)
      for (int j = 0; j < 3; ++j) {
        const float x = value_of(t, xb[k * 3 + j]);
        ys.push_back(mv::round_to(t, c[j] * x));
        c[j] = mv::round_to(t, c[j] + x);
      }
    for (const float v : c) want.push_back(bits_of(t, v));
    for (const float v : ys) want.push_back(bits_of(t, v));
    EXPECT_EQ(bits16(run(xs)), want) << mv::dtype_name(t);
    EXPECT_EQ(bits16(mv::jit(run)(xs)), want) << mv::dtype_name(t) << " under jit";
  }
}

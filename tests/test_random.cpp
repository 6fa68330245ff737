// jax.random on the devices against a host reference: threefry2x32 known-answer vectors,
// JAX's key layouts and remembered JAX outputs, bits / uniform / normal for many shapes,
// statistics, sharded outputs against unsharded ones, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <numeric>
#include <set>

#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

// ---- host reference ------------------------------------------------------------------------

using Words = std::array<uint32_t, 2>;

uint32_t rotl(uint32_t x, int r) {
  return (x << r) | (x >> (32 - r));
}

// threefry2x32 with 20 rounds, written from the Random123 / jax description independently of
// the shader: five groups of four rounds, keys injected after each group.
Words threefry2x32(Words key, Words ctr) {
  static const int rotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  const uint32_t ks[3] = {key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDAu};
  uint32_t x0 = ctr[0] + ks[0], x1 = ctr[1] + ks[1];
  for (uint32_t group = 1; group <= 5; ++group) {
    for (const int r : rotations[(group - 1) % 2]) {
      x0 += x1;
      x1 = rotl(x1, r);
      x1 ^= x0;
    }
    x0 += ks[group % 3];
    x1 += ks[(group + 1) % 3] + group;
  }
  return {x0, x1};
}

// Partitionable 32-bit random bits of flat index i: counters (hi, lo) of the 64-bit index.
uint32_t bits_at(Words key, uint64_t i) {
  const Words b = threefry2x32(key, {static_cast<uint32_t>(i >> 32), static_cast<uint32_t>(i)});
  return b[0] ^ b[1];
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// jax.random.uniform's mapping (the test is compiled as ISO C++, so no FMA contraction).
float uniform_of(uint32_t bits, float minval, float maxval) {
  const float unit = from_bits((bits >> 9) | 0x3f800000u) - 1.0f;
  return std::max(minval, unit * (maxval - minval) + minval);
}

// musl's log1pf, the float32 log1p the shader uses.
float log1p_f32(float x) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f;
  const float lg1 = 0.66666662693f, lg2 = 0.40000972152f, lg3 = 0.28498786688f,
              lg4 = 0.24279078841f;
  const uint32_t ix = to_bits(x);
  int k = 1;
  float c = 0, f = x;
  if (ix < 0x3ed413d0u || ix >> 31) {
    if (ix >= 0xbf800000u) return x == -1.0f ? -INFINITY : NAN;
    if ((ix << 1) < (0x33800000u << 1)) return x;
    if (ix <= 0xbe95f619u) k = 0;
  } else if (ix >= 0x7f800000u) {
    return x;
  }
  if (k) {
    const float u = 1.0f + x;
    uint32_t iu = to_bits(u) + (0x3f800000u - 0x3f3504f3u);
    k = static_cast<int>(iu >> 23) - 0x7f;
    c = k < 25 ? (k >= 2 ? 1.0f - (u - x) : x - (u - 1.0f)) / u : 0.0f;
    iu = (iu & 0x007fffffu) + 0x3f3504f3u;
    f = from_bits(iu) - 1.0f;
  }
  const float s = f / (2.0f + f), z = s * s, w = z * z;
  const float t1 = w * (lg2 + w * lg4), t2 = z * (lg1 + w * lg3), r = t2 + t1;
  const float hfsq = 0.5f * f * f, dk = static_cast<float>(k);
  return s * (hfsq + r) + (dk * ln2_lo + c) - hfsq + f + dk * ln2_hi;
}

// Giles' single-precision polynomial for erfinv(x), given w = -log(1 - x^2), as XLA's ErfInv32.
float giles_erfinv(float w, float x) {
  static const float small[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                 -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                 -0.00417768164f,  0.246640727f,    1.50140941f};
  static const float large[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                 -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                 0.00943887047f,   1.00167406f,     2.83297682f};
  const bool lt = w < 5.0f;
  const float* c = lt ? small : large;
  w = lt ? w - 2.5f : std::sqrt(w) - 3.0f;
  float p = c[0];
  for (int i = 1; i < 9; ++i) p = c[i] + p * w;
  return p * x;
}

// XLA's ErfInv32: w through log1p(-x * x), and +-inf at +-1.
float erfinv_f32(float x) {
  return std::fabs(x) == 1.0f ? x * INFINITY : giles_erfinv(-log1p_f32(-x * x), x);
}

float normal_of(uint32_t bits) {
  const float lo = std::nextafter(-1.0f, 0.0f);
  return 1.41421354f * erfinv_f32(uniform_of(bits, lo, 1.0f));
}

// Double-precision erfinv by Newton steps on std::erf, to judge the float32 approximation.
double erfinv_double(double y) {
  double x = 0;
  for (int i = 0; i < 200; ++i) {
    const double step = (std::erf(x) - y) / (2 / std::sqrt(M_PI) * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) < 1e-17 * std::max(1.0, std::fabs(x))) break;
  }
  return x;
}

// ---- helpers -------------------------------------------------------------------------------

mv::Array key_of(Words w) { return mv::array(std::span<const uint32_t>(w.data(), 2)); }

Words words_of(const mv::Array& key) {
  EXPECT_EQ(key.dtype(), mv::DType::uint32) << "keys are uint32, as JAX's raw keys";
  const auto v = key.to_host<uint32_t>();
  return {v.at(0), v.at(1)};
}

std::vector<uint32_t> as_words(const std::vector<uint32_t>& v) { return v; }

std::vector<uint32_t> float_words(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), to_bits);
  return out;
}

// Distance in units in the last place between two finite floats of the same sign or near 0.
int64_t ulps(float a, float b) {
  auto ordered = [](float f) {
    const int64_t i = static_cast<int32_t>(to_bits(f));
    return i < 0 ? int64_t{INT32_MIN} - i : i;
  };
  return std::llabs(ordered(a) - ordered(b));
}

constexpr Words kKey{0x243f6a88u, 0x85a308d3u};  // an arbitrary key with a high bit set

uint64_t dispatches() {
  return test_runtime().state()->dispatches.load();
}

}  // namespace

// ---- threefry2x32 --------------------------------------------------------------------------

// Random123's known-answer vectors for threefry2x32_20 (kat_vectors).
const std::array<std::array<Words, 3>, 3> kKnownAnswers = {{
    {{{0u, 0u}, {0u, 0u}, {0x6b200159u, 0x99ba4efeu}}},
    {{{0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}, {0x1cb996fcu, 0xbb002be7u}}},
    {{{0x13198a2eu, 0x03707344u}, {0x243f6a88u, 0x85a308d3u}, {0xc4923a9cu, 0x483df7a0u}}},
}};

TEST(Threefry, HostReferenceMatchesKnownAnswers) {
  for (const auto& [key, ctr, want] : kKnownAnswers) EXPECT_EQ(threefry2x32(key, ctr), want);
}

TEST(Threefry, DeviceKernelMatchesKnownAnswersAndReference) {
  for (const auto& [key, ctr, want] : kKnownAnswers) {
    const uint32_t c[2] = {ctr[0], ctr[1]};
    const auto out =
        mv::detail::threefry2x32(key_of(key), mv::array(std::span(c, 2), mv::Shape{1, 2}));
    EXPECT_EQ(out.shape(), (mv::Shape{1, 2}));
    EXPECT_EQ(as_words(out.to_host<uint32_t>()), (std::vector<uint32_t>{want[0], want[1]}));
  }
  // Many counters with both words in use.
  std::vector<int32_t> counters;
  for (uint32_t i = 0; i < 1000; ++i) {
    counters.push_back(static_cast<int32_t>(i * 0x9e3779b9u));
    counters.push_back(static_cast<int32_t>(~i * 2654435761u));
  }
  const auto out =
      as_words(mv::detail::threefry2x32(
                   key_of(kKey), mv::array(std::span<const int32_t>(counters), mv::Shape{1000, 2}))
                   .to_host<uint32_t>());
  for (size_t i = 0; i < 1000; ++i) {
    const Words want = threefry2x32(
        kKey, {static_cast<uint32_t>(counters[2 * i]), static_cast<uint32_t>(counters[2 * i + 1])});
    ASSERT_EQ(out[2 * i], want[0]) << i;
    ASSERT_EQ(out[2 * i + 1], want[1]) << i;
  }
}

// ---- keys ----------------------------------------------------------------------------------

TEST(RandomKeys, RandomKeyIsZeroThenSeed) {
  const auto key = mv::random_key(42);
  EXPECT_EQ(mv::type_of(key), "uint32[2]");
  EXPECT_FALSE(key.committed());
  EXPECT_EQ(words_of(key), (Words{0, 42}));
  EXPECT_EQ(words_of(mv::random_key(0xdeadbeefu)), (Words{0, 0xdeadbeefu}));
}

// Outputs of JAX remembered from its documentation and tutorials; they pin down JAX's
// conventions beyond the threefry vectors.
TEST(RandomKeys, MatchRememberedJaxOutputs) {
  // jax.random.split(jax.random.PRNGKey(0)) before jax 0.5 (jax_threefry_partitionable=False):
  // threefry_2x32(key, iota(4)) splits the counters into halves (0, 1) and (2, 3), so key 0 is
  // the first words of threefry((0, 2)) and threefry((1, 3)). Host reference only: it checks
  // the word order of this threefry against JAX's.
  const Words a = threefry2x32({0, 0}, {0, 2}), b = threefry2x32({0, 0}, {1, 3});
  EXPECT_EQ((std::array<uint32_t, 4>{a[0], b[0], a[1], b[1]}),
            (std::array<uint32_t, 4>{4146024105u, 967050713u, 2718843009u, 1272950319u}));

  // jax.random.split(jax.random.key(0)) with partitionable threefry (jax >= 0.5).
  EXPECT_EQ(as_words(mv::split(mv::random_key(0)).to_host<uint32_t>()),
            (std::vector<uint32_t>{1797259609u, 2579123966u, 928981903u, 3453687069u}));

  // jax.random.normal(jax.random.key(0)) with partitionable threefry: 1.6226422.
  const float n = mv::normal(mv::random_key(0), {}).to_host<float>().at(0);
  EXPECT_LE(ulps(n, 1.6226422f), 2) << n;
}

TEST(RandomKeys, SplitMatchesReference) {
  const auto keys = mv::split(key_of(kKey), 7);
  EXPECT_EQ(keys.shape(), (mv::Shape{7, 2}));
  EXPECT_EQ(keys.dtype(), mv::DType::uint32);
  const auto got = as_words(keys.to_host<uint32_t>());
  for (uint32_t i = 0; i < 7; ++i) {
    const Words want = threefry2x32(kKey, {0, i});
    EXPECT_EQ(got[2 * i], want[0]);
    EXPECT_EQ(got[2 * i + 1], want[1]);
  }
  EXPECT_EQ(mv::split(key_of(kKey), 0).shape(), (mv::Shape{0, 2}));
  // One key of a split, picked on the device, is a key again.
  const auto third = mv::take(keys, mv::scalar(int32_t{2}));
  EXPECT_EQ(words_of(third), threefry2x32(kKey, {0, 2}));
  EXPECT_EQ(words_of(mv::fold_in(third, 9u)), threefry2x32(threefry2x32(kKey, {0, 2}), {0, 9}));
  // As JAX writes it: keys[2], keys[-1].
  EXPECT_EQ(words_of(keys[2]), threefry2x32(kKey, {0, 2}));
  EXPECT_EQ(words_of(keys[-1]), threefry2x32(kKey, {0, 6}));
  // Keys of the older int32 layout (the same words) are still keys.
  const int32_t old_words[2] = {0, 42};
  EXPECT_EQ(words_of(mv::split(mv::array(std::span<const int32_t>(old_words, 2)))[0]), threefry2x32({0, 42}, {0, 0}));
  // One dispatch makes all of them.
  const uint64_t before = dispatches();
  mv::split(key_of(kKey), 1000).to_host<uint32_t>();
  EXPECT_EQ(dispatches() - before, 1u);
}

TEST(RandomKeys, FoldInMatchesReference) {
  EXPECT_EQ(words_of(mv::fold_in(key_of(kKey), 12345u)), threefry2x32(kKey, {0, 12345}));
  EXPECT_EQ(words_of(mv::fold_in(key_of(kKey), 0xffffffffu)), threefry2x32(kKey, {0, 0xffffffffu}));
  // Data computed on the device (a pending elementwise result) reads the same.
  const auto data = mv::scalar(int32_t{40}) + 2;
  EXPECT_EQ(words_of(mv::fold_in(key_of(kKey), data)), threefry2x32(kKey, {0, 42}));
  EXPECT_EQ(words_of(mv::fold_in(key_of(kKey), mv::scalar(int32_t{-1}))),
            threefry2x32(kKey, {0, 0xffffffffu}));
}

TEST(RandomKeys, FoldInOfAxisLikeDataSeparatesStreams) {
  const auto key = mv::random_key(7);
  std::set<Words> seen;
  for (int32_t i = 0; i < 8; ++i) {
    const Words k = words_of(mv::fold_in(key, mv::scalar(i)));
    EXPECT_EQ(k, words_of(mv::fold_in(key, static_cast<uint32_t>(i))));
    EXPECT_EQ(k, words_of(mv::fold_in(key, mv::scalar(i))));  // equal data, equal key
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 8u);
  // Distinct keys give distinct streams.
  const auto u0 = mv::uniform(mv::fold_in(key, 0u), {16}).to_host<float>();
  const auto u1 = mv::uniform(mv::fold_in(key, 1u), {16}).to_host<float>();
  EXPECT_NE(u0, u1);
}

TEST(RandomKeys, ResultsLiveWhereTheKeyLives) {
  const auto on3 = mv::device_put(mv::random_key(1), mv::SingleDeviceSharding(3));
  const auto u = mv::uniform(on3, {5});
  EXPECT_EQ(u.devices(), std::vector<int>{3});
  EXPECT_TRUE(u.committed());
  EXPECT_EQ(mv::split(on3).devices(), std::vector<int>{3});

  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const auto replicated = mv::device_put(mv::random_key(1), mv::NamedSharding(mesh, P()));
  const auto n = mv::normal(replicated, {4, 3});
  EXPECT_TRUE(n.sharding().is_fully_replicated());
  EXPECT_EQ(n.devices().size(), 8u);
  EXPECT_EQ(float_words(n.to_host<float>()),
            float_words(mv::normal(mv::random_key(1), {4, 3}).to_host<float>()));
  // A key split over two devices (one word each) is gathered onto both first.
  const auto halves = mv::device_put(
      mv::random_key(1), mv::NamedSharding(mv::make_mesh({2}, {"x"}, {}, {4, 5}), P("x")));
  const auto from_halves = mv::uniform(halves, {6});
  EXPECT_EQ(from_halves.devices(), (std::vector<int>{4, 5}));
  EXPECT_TRUE(from_halves.sharding().is_fully_replicated());
  EXPECT_EQ(float_words(from_halves.to_host<float>()),
            float_words(mv::uniform(mv::random_key(1), {6}).to_host<float>()));
  // Data on the mesh, key uncommitted: the committed data decides.
  const auto data = mv::device_put(mv::scalar(int32_t{5}), mv::NamedSharding(mesh, P()));
  const auto folded = mv::fold_in(mv::random_key(1), data);
  EXPECT_EQ(folded.devices().size(), 8u);
  EXPECT_EQ(words_of(folded), threefry2x32({0, 1}, {0, 5}));
}

// ---- samplers against the reference --------------------------------------------------------

const std::vector<mv::Shape> kShapes = {{},        {1},       {5},        {63},   {64},
                                        {65},      {3, 7},    {2, 3, 4},  {1000}, {0},
                                        {3, 0, 2}, {1, 1, 1}, {17, 1, 9}, {4099}};

TEST(RandomSamplers, BitsAndUniformMatchReferenceBitForBit) {
  for (const mv::Shape& shape : kShapes) {
    SCOPED_TRACE(mv::shape_to_string(shape));
    const auto bits = as_words(mv::random_bits(key_of(kKey), shape).to_host<uint32_t>());
    const auto unit = float_words(mv::uniform(key_of(kKey), shape).to_host<float>());
    const auto ranged = float_words(mv::uniform(key_of(kKey), shape, -2.5f, 7.0f).to_host<float>());
    ASSERT_EQ(bits.size(), static_cast<size_t>(mv::shape_size(shape)));
    for (size_t i = 0; i < bits.size(); ++i) {
      const uint32_t b = bits_at(kKey, i);
      ASSERT_EQ(bits[i], b) << i;
      ASSERT_EQ(unit[i], to_bits(uniform_of(b, 0.0f, 1.0f))) << i;
      ASSERT_EQ(ranged[i], to_bits(uniform_of(b, -2.5f, 7.0f))) << i;
    }
  }
}

TEST(RandomSamplers, NormalMatchesReference) {
  int64_t worst = 0;
  for (const mv::Shape& shape : kShapes) {
    SCOPED_TRACE(mv::shape_to_string(shape));
    const auto got = mv::normal(key_of(kKey), shape).to_host<float>();
    ASSERT_EQ(got.size(), static_cast<size_t>(mv::shape_size(shape)));
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, ulps(got[i], normal_of(bits_at(kKey, i))));
  }
  // The shader repeats the reference's float32 operations; sqrt and division may round
  // differently on a device that does not round them correctly (lavapipe: 0 ulps; an NVIDIA
  // H200: 3 ulps in the tails below).
  EXPECT_LE(worst, 3);
  // The tails (|u| close to 1, where erfinv takes its second polynomial) over many samples.
  const auto many = mv::normal(mv::random_key(3), {200000}).to_host<float>();
  int tails = 0;
  for (size_t i = 0; i < many.size(); ++i) {
    const float want = normal_of(bits_at({0, 3}, i));
    tails += std::fabs(want) > 2.9f;
    ASSERT_LE(ulps(many[i], want), 3) << i << ": " << many[i] << " vs " << want;
  }
  EXPECT_GT(tails, 100);
}

// The erfinv coefficients: with w computed exactly, the polynomial is within 3e-7 of the true
// erfinv over the whole range normal() draws from (a wrong coefficient costs ~1e-3). In float32,
// XLA's w = -log1p(-x * x) loses accuracy as |x| -> 1 (x * x rounds), up to ~6e-6.
TEST(RandomSamplers, ErfinvApproximationIsAccurate) {
  double poly_worst = 0, f32_worst = 0;
  auto judge = [&](float u) {
    const double exact = erfinv_double(u);
    if (exact == 0) return;
    const float w = static_cast<float>(-std::log1p(-static_cast<double>(u) * u));
    poly_worst = std::max(poly_worst, std::fabs(giles_erfinv(w, u) - exact) / std::fabs(exact));
    f32_worst = std::max(f32_worst, std::fabs(erfinv_f32(u) - exact) / std::fabs(exact));
  };
  for (int i = -100000; i <= 100000; ++i) judge(static_cast<float>(i) / 100001.0f);
  for (float u = 0.99f; u < 1.0f; u = std::nextafter(u, 2.0f)) {  // every float of the tail
    judge(u);
    ASSERT_EQ(erfinv_f32(-u), -erfinv_f32(u));
  }
  EXPECT_LT(poly_worst, 3e-7);
  EXPECT_LT(f32_worst, 1e-5);
  EXPECT_EQ(erfinv_f32(1.0f), INFINITY);
  EXPECT_EQ(erfinv_f32(-1.0f), -INFINITY);
}

TEST(RandomSamplers, Statistics) {
  constexpr int64_t n = 1 << 20;
  const auto u = mv::uniform(mv::random_key(11), {n}).to_host<float>();
  const auto z = mv::normal(mv::random_key(12), {n}).to_host<float>();
  auto moments = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (const float x : v) s += x;
    const double mean = s / v.size();
    for (const float x : v) s2 += (x - mean) * (x - mean);
    return std::pair{mean, s2 / v.size()};
  };
  const auto [um, uv] = moments(u);
  const auto [zm, zv] = moments(z);
  // Five standard errors of the estimates.
  EXPECT_NEAR(um, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(uv, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / n));
  EXPECT_NEAR(zm, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(zv, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0f);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0f);
  // About 0.27% of a normal sample lies beyond 3 standard deviations.
  const auto beyond3 = std::count_if(z.begin(), z.end(), [](float x) { return std::fabs(x) > 3; });
  EXPECT_NEAR(static_cast<double>(beyond3) / n, 0.0027, 0.0005);
}

// An output larger than one binding may address (maxStorageBufferRange) takes several
// dispatches; elements on both sides of the seam and at the end match the reference.
TEST(RandomSamplers, LargeOutputSpansSeveralDispatches) {
  const uint64_t limit = test_runtime().state()->device_limits().maxStorageBufferRange;
  const uint64_t chunk = limit / 4 / 1024 * 1024;
  const int64_t n = static_cast<int64_t>(chunk + 4099);
  const uint64_t before = dispatches();
  const auto bits = as_words(mv::random_bits(mv::random_key(5), {n}).to_host<uint32_t>());
  EXPECT_EQ(dispatches() - before, 2u);
  auto check = [&](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) ASSERT_EQ(bits[i], bits_at({0, 5}, i)) << i;
  };
  check(0, 4096);
  check(chunk - 4096, chunk + 4096);
  check(static_cast<uint64_t>(n) - 4096, static_cast<uint64_t>(n));
}

// ---- sharded outputs -----------------------------------------------------------------------

struct ShardedCase {
  std::vector<int> mesh_shape;
  std::vector<std::string> axes;
  mv::PartitionSpec spec;
  mv::Shape shape;
};

TEST(RandomSharded, EachDeviceMakesItsPieceAndTheWholeEqualsTheUnsharded) {
  const std::vector<ShardedCase> cases = {
      {{8}, {"x"}, P("x"), {1024}},
      {{8}, {"x"}, P("x"), {8, 33}},
      {{8}, {"x"}, P(mv::None, "x"), {3, 16}},
      {{4, 2}, {"a", "b"}, P("a", "b"), {16, 12}},
      {{4, 2}, {"a", "b"}, P(mv::None, "a", "b"), {3, 8, 10}},
      {{4, 2}, {"a", "b"}, P({"a", "b"}), {40, 3}},
      {{4, 2}, {"a", "b"}, P("b"), {6, 5}},  // replicated over 'a'
      {{4, 2}, {"a", "b"}, P(), {7}},
      {{4, 2}, {"a", "b"}, P("a", "b"), {0, 4}},
  };
  const auto key = key_of(kKey);
  for (const ShardedCase& c : cases) {
    const mv::Sharding sharding = mv::NamedSharding(mv::make_mesh(c.mesh_shape, c.axes), c.spec);
    SCOPED_TRACE(sharding.to_string() + " " + mv::shape_to_string(c.shape));
    const auto bits = mv::random_bits(key, c.shape, sharding);
    const auto unit = mv::uniform(key, c.shape, sharding, -1.0f, 3.0f);
    const auto gauss = mv::normal(key, c.shape, sharding);
    for (const auto* a : {&bits, &unit, &gauss}) {
      EXPECT_EQ(a->sharding(), sharding);
      EXPECT_TRUE(a->committed());
      EXPECT_EQ(a->shape(), c.shape);
    }
    EXPECT_EQ(bits.to_host<uint32_t>(), mv::random_bits(key, c.shape).to_host<uint32_t>());
    EXPECT_EQ(float_words(unit.to_host<float>()),
              float_words(mv::uniform(key, c.shape, -1.0f, 3.0f).to_host<float>()));
    EXPECT_EQ(float_words(gauss.to_host<float>()),
              float_words(mv::normal(key, c.shape).to_host<float>()));
  }
}

TEST(RandomSharded, EveryReplicaOfAPieceIsRight) {
  // P('b') on a (4, 2) mesh: the four devices of each 'b' column each make the same piece.
  // Read every device's buffer itself, not just the one holder to_host() picks.
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const mv::Shape shape{6, 5};
  const auto u = mv::uniform(key_of(kKey), shape, mv::NamedSharding(mesh, P("b")));
  auto& rt = *test_runtime().state();
  std::lock_guard lock(rt.mutex());
  const mv::exec::ShardedValue& value = mv::detail::materialized(u);
  const auto pieces = u.sharding().devices_indices_map(shape);
  ASSERT_EQ(pieces.size(), 8u);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const mv::Index& box = pieces[k].index;
    const mv::Shape local{box[0].size(), box[1].size()};
    const mv::exec::ShardedValue piece{
        local, mv::DType::float32, mv::SingleDeviceSharding(pieces[k].device), {value.shards[k]}};
    std::vector<float> got(static_cast<size_t>(mv::shape_size(local)));
    mv::exec::download(rt, piece, got.data());
    for (int64_t r = 0; r < local[0]; ++r)
      for (int64_t c = 0; c < local[1]; ++c) {
        const uint64_t flat =
            static_cast<uint64_t>((box[0].start + r) * shape[1] + box[1].start + c);
        EXPECT_EQ(to_bits(got[r * local[1] + c]), to_bits(uniform_of(bits_at(kKey, flat), 0, 1)))
            << "device " << pieces[k].device << " element " << flat;
      }
  }
}

// ---- errors --------------------------------------------------------------------------------

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mv::Error& e) {
    return e.what();
  }
  return "(no error)";
}

::testing::AssertionResult mentions(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << message << "\" does not mention \"" << part << "\"";
}

TEST(RandomErrors, BadInputsNameWhatIsValid) {
  const auto key = mv::random_key(0);
  EXPECT_TRUE(mentions(error_of([&] {
                         mv::uniform(mv::array({1, 2, 3}), {2});
                       }),
                       "uniform: a key must be uint32[2]"));
  EXPECT_TRUE(mentions(error_of([&] { mv::uniform(mv::array({1, 2, 3}), {2}); }), "got int32[3]"));
  EXPECT_TRUE(mentions(error_of([&] {
                         mv::normal(mv::array({1.0f, 2.0f}), {2});
                       }),
                       "got float32[2]"));
  EXPECT_TRUE(
      mentions(error_of([&] { mv::split(mv::split(key, 3)); }), "take one key of a split()"));
  EXPECT_TRUE(mentions(error_of([&] { mv::fold_in(mv::Array(), 1u); }), "random_key(seed)"));
  EXPECT_TRUE(mentions(error_of([&] { mv::split(key, -1); }), "split: num must be >= 0; got -1"));
  EXPECT_TRUE(
      mentions(error_of([&] { mv::uniform(key, {2}, 1.0f, 1.0f); }), "finite minval < maxval"));
  EXPECT_TRUE(
      mentions(error_of([&] { mv::uniform(key, {2}, 2.0f, 1.0f); }), "got minval=2, maxval=1"));
  EXPECT_TRUE(
      mentions(error_of([&] { mv::uniform(key, {2}, NAN, 1.0f); }), "finite minval < maxval"));
  EXPECT_TRUE(mentions(error_of([&] { mv::normal(key, {2, -1}); }), "negative dimension"));
  EXPECT_TRUE(mentions(error_of([&] {
                         mv::fold_in(key, mv::array({1, 2}));
                       }),
                       "data must be an int32 or uint32 scalar array (shape ()); got int32[2]"));
  EXPECT_TRUE(mentions(error_of([&] { mv::fold_in(key, mv::scalar(1.0f)); }), "got float32[]"));
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  EXPECT_TRUE(mentions(error_of([&] { mv::uniform(key, {10}, mv::NamedSharding(mesh, P("x"))); }),
                       "divisible"));
  // The runtime stays usable.
  EXPECT_EQ(mv::uniform(key, {3}).size(), 3);
}

// jax.random.uniform / normal with dtype=: float32 is the plain call; bfloat16 and float16 follow
// jax's algorithm for them, checked here against the same steps on the host from random_bits.
TEST(RandomDtypes, UniformAndNormalIn16BitFormats) {
  const mv::Array key = mv::random_key(42);
  const mv::Shape shape{37, 5};  // 185 values: not a multiple of 4
  EXPECT_EQ(mv::uniform(key, shape, mv::DType::float32, -2.f, 3.f).to_host<float>(),
            mv::uniform(key, shape, -2.f, 3.f).to_host<float>());
  EXPECT_EQ(mv::normal(key, shape, mv::DType::float32).to_host<float>(), mv::normal(key, shape).to_host<float>());
  const std::vector<uint32_t> bits = mv::random_bits(key, shape).to_host<uint32_t>();
  for (const mv::DType dtype : {mv::DType::bfloat16, mv::DType::float16}) {
    SCOPED_TRACE(std::string(mv::dtype_name(dtype)));
    const bool bf16 = dtype == mv::DType::bfloat16;
    const int mantissa = bf16 ? 7 : 10, rng_bits = bf16 ? 8 : 16;
    const float lo = -2.f, hi = 3.f;
    const mv::Array u = mv::uniform(key, shape, dtype, lo, hi);
    EXPECT_EQ(u.dtype(), dtype);
    EXPECT_EQ(u.shape(), shape);
    const std::vector<float> got = mv::astype(u, mv::DType::float32).to_host<float>();
    for (size_t i = 0; i < bits.size(); ++i) {
      const uint32_t m = (bits[i] & ((1u << rng_bits) - 1)) >> (rng_bits - mantissa);
      const float floats = static_cast<float>(m) * std::ldexp(1.0f, -mantissa);
      const float scaled = mv::round_to(dtype, mv::round_to(dtype, floats * (hi - lo)) + lo);
      ASSERT_EQ(got[i], std::max(scaled, lo)) << i;
      ASSERT_GE(got[i], lo);
      ASSERT_LT(got[i], hi);
      ASSERT_EQ(got[i], mv::round_to(dtype, got[i]));
    }
    // normal: every value in the dtype, finite, and standard over 64k draws.
    const std::vector<float> n =
        mv::astype(mv::normal(key, {256, 256}, dtype), mv::DType::float32).to_host<float>();
    double sum = 0, squares = 0;
    for (const float v : n) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_EQ(v, mv::round_to(dtype, v));
      sum += v;
      squares += double(v) * v;
    }
    const double mean = sum / n.size(), var = squares / n.size() - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.02);
    EXPECT_NEAR(var, 1.0, 0.03);
  }
  // Integer dtypes are an Error naming the valid ones, as in jax.
  const std::string message = message_of([&] { mv::uniform(key, shape, mv::DType::int32); });
  EXPECT_NE(message.find("uniform: dtype int32 is not a floating type; give float32, bfloat16 or float16"),
            std::string::npos)
      << message;
  EXPECT_THROW(mv::normal(key, shape, mv::DType::uint32), mv::Error);
  EXPECT_THROW(mv::uniform(key, shape, mv::DType::bfloat16, 1.f, 1.001f), mv::Error);  // one bf16 value
}

namespace {
// tests/data/jax_random_16bit.txt: one line per name, the 16-bit patterns jax gave.
std::vector<uint16_t> jax_patterns(const std::string& name) {
  std::ifstream in(std::string(MESHVK_TEST_DATA_DIR) + "/jax_random_16bit.txt");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key != name) continue;
    std::vector<uint16_t> out;
    for (unsigned v; words >> v;) out.push_back(static_cast<uint16_t>(v));
    return out;
  }
  ADD_FAILURE() << "no " << name << " in jax_random_16bit.txt";
  return {};
}
}  // namespace

// Against jax 0.11.2 on its CPU backend (values in tests/data). XLA rounds bfloat16 after every
// op, as meshvk does: uniform and normal are equal bit for bit. For float16 it fused uniform's
// scale and shift in float32 with one rounding at the end (143 of these 185 values equal
// per-op rounding, all 185 equal one rounding), yet rounded per op inside normal: meshvk rounds
// per op, as numpy would, so float16 normal agrees and float16 uniform agrees where the two
// roundings do.
TEST(RandomDtypes, MatchJaxOnItsCpuBackend) {
  const mv::Array key = mv::random_key(42);
  const mv::Shape shape{37, 5};
  const auto bits_of = [](const mv::Array& x) {
    std::vector<uint16_t> out;
    for (const float v : mv::astype(x, mv::DType::float32).to_host<float>())
      out.push_back(x.dtype() == mv::DType::bfloat16 ? mv::bfloat16_bits(v) : mv::float16_bits(v));
    return out;
  };
  const auto equal_count = [](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    size_t n = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] == b[i];
    return n;
  };
  EXPECT_EQ(bits_of(mv::uniform(key, shape, mv::DType::bfloat16, -2.f, 3.f)), jax_patterns("uniform_bfloat16"));
  EXPECT_EQ(bits_of(mv::normal(key, shape, mv::DType::bfloat16)), jax_patterns("normal_bfloat16"));
  // float16 normal: meshvk's erfinv and XLA's may differ by an ulp of float32, which can move a
  // rounding to float16 by one ulp.
  const std::vector<uint16_t> normal16 = bits_of(mv::normal(key, shape, mv::DType::float16));
  const std::vector<uint16_t> jax_normal16 = jax_patterns("normal_float16");
  ASSERT_EQ(normal16.size(), jax_normal16.size());
  EXPECT_GE(equal_count(normal16, jax_normal16), 183u);
  for (size_t i = 0; i < normal16.size(); ++i)
    EXPECT_LE(std::abs(int(normal16[i]) - int(jax_normal16[i])), 1) << i;
  EXPECT_GE(equal_count(bits_of(mv::uniform(key, shape, mv::DType::float16, -2.f, 3.f)),
                        jax_patterns("uniform_float16")),
            140u);
}

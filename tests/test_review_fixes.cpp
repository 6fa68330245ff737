// Regression tests for bugs found reviewing the merge of issues 13 and 14: where the new pieces
// (uint32, take modes, jit replays, addressable_shards, ...) meet one another.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace meshvk {
namespace {

// jnp.take's default fill for an unsigned dtype is its largest value (NaN for floats, the most
// negative value for signed integers, True for bools).
TEST(ReviewFixes, TakeFillDefaultForUint32IsTheLargestValue) {
  const std::vector<uint32_t> v = {10, 20, 30};
  const Array x = array(std::span<const uint32_t>(v));
  const Array y = take(x, array({0, 7, -1, -9}));
  EXPECT_EQ(y.dtype(), DType::uint32);
  EXPECT_EQ(y.to_host<uint32_t>(), (std::vector<uint32_t>{10, 0xffffffffu, 30, 0xffffffffu}));
}

// A fill value for a uint32 array is cast to uint32, so 3e9 (past int32, within uint32) is fine.
TEST(ReviewFixes, TakeFillValueForUint32UsesTheUint32Range) {
  const std::vector<uint32_t> v = {1, 2};
  const Array x = array(std::span<const uint32_t>(v));
  const Array y = take(x, array({5, 1}), 0, TakeMode::fill, 3e9f);
  EXPECT_EQ(y.to_host<uint32_t>(), (std::vector<uint32_t>{3000000000u, 2}));
  const Array z = take(x, array({5}), 0, TakeMode::fill, 7);
  EXPECT_EQ(z.to_host<uint32_t>(), (std::vector<uint32_t>{7}));
  try {
    (void)take(x, array({5}), 0, TakeMode::fill, 5e9f);
    FAIL() << "a fill value past uint32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uint32"), std::string::npos) << e.what();
  }
}

// dynamic_update_slice moves data: with a start computed on the device it works on uint32 (keys)
// as it does with host starts.
TEST(ReviewFixes, DynamicUpdateSliceWithDeviceStartOnUint32) {
  const std::vector<uint32_t> v = {1, 2, 3, 4, 0xfffffff0u};
  const std::vector<uint32_t> u = {0x80000001u, 9};
  const Array x = array(std::span<const uint32_t>(v));
  const Array up = array(std::span<const uint32_t>(u));
  const Array host = dynamic_update_slice(x, up, {1});
  const Array dev = dynamic_update_slice(x, up, {scalar(int32_t{1})});
  const std::vector<uint32_t> want = {1, 0x80000001u, 9, 4, 0xfffffff0u};
  EXPECT_EQ(host.to_host<uint32_t>(), want);
  EXPECT_EQ(dev.dtype(), DType::uint32);
  EXPECT_EQ(dev.to_host<uint32_t>(), want);
}

// A Shard's data shares the jitted result's buffer; the next replay of the program must not
// change the values a Shard taken earlier holds.
TEST(ReviewFixes, AddressableShardsOfAJitResultSurviveTheNextReplay) {
  auto f = jit([](const Array& a) { return a * 2.0f; });
  const Array r1 = f(array({1.f, 2.f, 3.f, 4.f}));
  const std::vector<Shard> shards = r1.addressable_shards();
  ASSERT_EQ(shards.size(), 1u);
  const Array r2 = f(array({10.f, 20.f, 30.f, 40.f}));
  EXPECT_EQ(r2.to_host<float>(), (std::vector<float>{20.f, 40.f, 60.f, 80.f}));
  EXPECT_EQ(shards[0].data.to_host<float>(), (std::vector<float>{2.f, 4.f, 6.f, 8.f}));
  EXPECT_EQ(r1.to_host<float>(), (std::vector<float>{2.f, 4.f, 6.f, 8.f}));
}

// The same for a reshape of a jitted result (a reshape on one device shares the buffer).
TEST(ReviewFixes, ReshapeOfAJitResultSurvivesTheNextReplay) {
  auto f = jit([](const Array& a) { return a * 2.0f; });
  const Array r1 = f(array({1.f, 2.f, 3.f, 4.f}));
  const Array v = r1.reshape(2, 2);
  const Array r2 = f(array({10.f, 20.f, 30.f, 40.f}));
  EXPECT_EQ(v.to_host<float>(), (std::vector<float>{2.f, 4.f, 6.f, 8.f}));
}

// An empty float32 array whose other dimensions are as large as meshvk holds (their product
// times 4 bytes fits, as numpy requires for '<f4') saves and loads back: the reader bounded
// every file by 8-byte elements and refused what save_npy had written.
TEST(ReviewFixes, EmptyArrayWithLargeDimensionsRoundTripsThroughNpy) {
  const Shape shape{0, int64_t{1} << 30, int64_t{1} << 30};
  const std::string path =
      (std::filesystem::temp_directory_path() / "meshvk_review_empty_large.npy").string();
  save_npy(path, zeros(shape));
  const Array back = load_npy(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.shape(), shape);
  EXPECT_EQ(back.dtype(), DType::float32);
}

// concatenate promotes its operands whatever their order, as the elementwise ops do (since
// 2026-11-27; it had a table of its own that took float64 with float32 to float32): uint32 with
// int32 is int64 (JAX's table), bool with uint32 uint32; the first operand's uint32 used to win
// over int32.
TEST(ReviewFixes, ConcatenatePromotionWithUint32DoesNotDependOnOrder) {
  const std::vector<uint32_t> u = {7};
  const Array a = array(std::span<const uint32_t>(u));
  const Array b = array({-2});
  const Array ab = concatenate({a, b});
  const Array ba = concatenate({b, a});
  EXPECT_EQ(ab.dtype(), DType::int64);
  EXPECT_EQ(ba.dtype(), DType::int64);
  EXPECT_EQ(ab.to_host<int64_t>(), (std::vector<int64_t>{7, -2}));
  EXPECT_EQ(ba.to_host<int64_t>(), (std::vector<int64_t>{-2, 7}));
  const Array t = astype(array({1}), DType::bool_);
  EXPECT_EQ(concatenate({t, a}).dtype(), DType::uint32);
  EXPECT_EQ(concatenate({a, t}).to_host<uint32_t>(), (std::vector<uint32_t>{7, 1}));
}

// uint32 host arrays check their shapes as float32 and int32 ones do (overflow-safe, naming the
// op), not with an int64 product that overflows first.
TEST(ReviewFixes, Uint32HostArraysCheckTheirShapes) {
  const Shape huge{int64_t{1} << 40, int64_t{1} << 40, 0};
  for (const auto& make : {+[](const Shape& s) { return array(std::span<const uint32_t>(), s); },
                           +[](const Shape& s) {
                             return device_put(std::span<const uint32_t>(), s,
                                               SingleDeviceSharding(0));
                           }}) {
    try {
      (void)make(huge);
      FAIL() << "a shape past int64 bytes was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.rfind("array:", 0) == 0 || what.rfind("device_put:", 0) == 0) << what;
      EXPECT_NE(what.find("too large"), std::string::npos) << what;
    }
  }
  const std::vector<uint32_t> v = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(array(std::span<const uint32_t>(v), Shape{2, 3}).shape(), (Shape{2, 3}));
}

// A shard_map whose body returns its input piece shares the input's buffers: a jitted result
// fed to it must not change under the shard_map's result at the function's next call.
TEST(ReviewFixes, ShardMapOfAJitResultSurvivesTheNextReplay) {
  const Mesh mesh = make_mesh({8}, {"x"});
  const NamedSharding s(mesh, PartitionSpec({"x"}));
  auto f = jit([](const Array& a) { return a * 2.0f; });
  std::vector<float> h(16), h2(16), want(16);
  for (int i = 0; i < 16; ++i) {
    h[i] = static_cast<float>(i);
    h2[i] = 100.0f + static_cast<float>(i);
    want[i] = 2.0f * h[i];
  }
  const Array r1 = f(device_put(std::span<const float>(h), {16}, s));
  const auto same = shard_map([](const Array& piece) { return piece; }, mesh, {PartitionSpec({"x"})},
                              PartitionSpec({"x"}));
  const Array y = same(r1);
  const Array r2 = f(device_put(std::span<const float>(h2), {16}, s));
  EXPECT_EQ(y.to_host<float>(), want);
}

// pad's value is cast to the array's dtype within its range: 3e9 pads a uint32 array (was cast
// through int32, undefined past it), and an int32 array refuses it (and NaN) with an Error.
TEST(ReviewFixes, PadValueIsCastToTheArraysDtypeWithinItsRange) {
  const std::vector<uint32_t> v = {5};
  const Array u = pad(array(std::span<const uint32_t>(v)), {{1, 0}}, 3e9f);
  EXPECT_EQ(u.to_host<uint32_t>(), (std::vector<uint32_t>{3000000000u, 5}));
  EXPECT_THROW((void)pad(array({1, 2}), {{1, 0}}, 3e9f), Error);
  EXPECT_THROW((void)pad(array({1, 2}), {{1, 0}}, std::numeric_limits<float>::quiet_NaN()), Error);
  EXPECT_EQ(pad(array({1, 2}), {{1, 1}}, -7.0f).to_host<int32_t>(),
            (std::vector<int32_t>{-7, 1, 2, -7}));
  EXPECT_THROW((void)pad(array(std::span<const uint32_t>(v)), {{1, 0}}, -1.0f), Error);
}

// A jitted step given in_shardings, fed its own previous results (lent, placed without a copy):
// every step's values are right, and results kept from earlier steps keep theirs.
TEST(ReviewFixes, JitStepWithInShardingsFedItsOwnResults) {
  const Mesh mesh = make_mesh({8}, {"x"});
  JitOptions options;
  options.in_shardings = {NamedSharding(mesh, P("x", None))};
  auto step = jit([](const Array& a) { return a + 1.0f; }, options);
  std::vector<float> h(16, 0.0f);
  Array p = device_put(std::span<const float>(h), {16, 1}, NamedSharding(mesh, P("x")));
  std::vector<Array> kept;
  for (int i = 0; i < 4; ++i) {
    p = step(p);
    kept.push_back(p.reshape(16));
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(kept[i].to_host<float>(), std::vector<float>(16, static_cast<float>(i + 1))) << i;
  EXPECT_EQ(step.traces(), 1u);
}

// An integer scalar past int32 is an Error (JAX: OverflowError), not silently wrapped: with
// int64_t{1} << 33 the product was x * 0. A uint32_t is taken as its 32 bits.
TEST(ReviewFixes, IntegerScalarsPastInt32AreAnError) {
  const Array x = array({1, 2});
  EXPECT_THROW((void)(x * (int64_t{1} << 33)), Error);
  EXPECT_THROW((void)(x + size_t{3000000000}), Error);
  EXPECT_THROW((void)((int64_t{-1} << 40) - x), Error);
  EXPECT_EQ((x + int64_t{5}).to_host<int32_t>(), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ((x + size_t{2}).to_host<int32_t>(), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ((x & 0xffffffffu).to_host<int32_t>(), (std::vector<int32_t>{1, 2}));
  const std::vector<uint32_t> v = {4};
  EXPECT_EQ(take(array(std::span<const uint32_t>(v)), array({3}), 0, TakeMode::fill, 0xfffffffeu)
                .to_host<uint32_t>(),
            (std::vector<uint32_t>{0xfffffffeu}));
}

// Mesh::to_string quotes axis names as PartitionSpec does: two different meshes, with names
// holding quotes, printed (and keyed jit's cache) alike.
TEST(ReviewFixes, MeshToStringQuotesAxisNames) {
  const Mesh a = make_mesh({2, 4}, {"a': 2, 'b", "c"});
  const Mesh b = make_mesh({2, 4}, {"a", "b': 2, 'c"});
  EXPECT_NE(a.to_string(), b.to_string());
  EXPECT_EQ(make_mesh({8}, {"it's"}).to_string(), "Mesh(\"it's\": 8, axis_types=(Auto,))");
  EXPECT_EQ(make_mesh({2, 4}, {"x", "y"}).to_string(), "Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto))");
}

// A new file written by save_npy gets 0666 less the umask, as np.save's open() gives it: under
// umask 077 it is 0600 (it was always 0644, readable by everyone).
TEST(ReviewFixes, NewFilesFollowTheUmask) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "meshvk_review_umask.npy").string();
  std::filesystem::remove(path);
  const mode_t old = ::umask(077);
  try {
    save_npy(path, zeros({2}));
  } catch (...) {
    ::umask(old);
    throw;
  }
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  std::filesystem::remove(path);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// value_and_grad of a function returning its argument, a jitted result: the value keeps its
// values across the jitted function's next call.
TEST(ReviewFixes, ValueAndGradOfAJitResultSurvivesTheNextReplay) {
  auto f = jit([](const Array& a) { return sum(a); });
  const Array r = f(array({1.f, 2.f}));
  const auto [value, grad] = value_and_grad([](const Array& a) { return a; })(r);
  const Array r2 = f(array({10.f, 20.f}));
  EXPECT_EQ(r2.to_host<float>(), std::vector<float>{30.f});
  EXPECT_EQ(value.to_host<float>(), std::vector<float>{3.f});
  EXPECT_EQ(grad.to_host<float>(), std::vector<float>{1.f});
}

// jit keys its cache by each argument's C++ type as well as its structure: a std::pair and a
// std::tuple of two Arrays share the structure "(AA)", and a generic function may return
// different types for them (the tuple call reused the pair's entry and its result skeleton).
TEST(ReviewFixes, JitTellsAPairFromATupleOfArrays) {
  auto f = jit([]<class T>(const T& t)
                 requires(!std::is_same_v<T, Array>)
               {
    if constexpr (requires { t.first; })
      return t.first + t.second;
    else
      return std::make_pair(std::get<1>(t), std::get<0>(t));
  });
  const Array a = array({1.f}), b = array({2.f});
  EXPECT_EQ(f(std::make_pair(a, b)).to_host<float>(), std::vector<float>{3.f});
  const auto [x, y] = f(std::make_tuple(a, b));
  EXPECT_EQ(x.to_host<float>(), std::vector<float>{2.f});
  EXPECT_EQ(y.to_host<float>(), std::vector<float>{1.f});
  EXPECT_EQ(f.traces(), 2u);
}

}  // namespace
}  // namespace meshvk

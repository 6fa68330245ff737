// uint32 arrays (JAX's raw random keys and bits) and integer indexing x[i]: split(key) then
// keys[0], keys[1] as a JAX user writes it; uint32 creation, printing as numpy, data movement over
// sharded layouts, .npy '<u4', astype to and from the other dtypes, and the clear errors of the
// ops uint32 does not compute with.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

Array u32(const std::vector<uint32_t>& v, mv::Shape shape) {
  return mv::array(std::span<const uint32_t>(v), shape);
}

std::vector<uint32_t> iota_u32(size_t n, uint32_t base) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<uint32_t>(i) * 0x01000193u;
  return v;
}

}  // namespace

// ---- indexing -----------------------------------------------------------------------------------

TEST(JaxIndexing, IntegerIndexTakesARowOfAxisZero) {
  const Array x = mv::arange(24.f).reshape({4, 3, 2});
  const Array r = x[1];
  EXPECT_EQ(r.shape(), (mv::Shape{3, 2}));
  EXPECT_EQ(r.to_host<float>(), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(x[-1].to_host<float>(),
            (std::vector<float>{18, 19, 20, 21, 22, 23}));  // negative wraps
  EXPECT_EQ(x[2][1].to_host<float>(), (std::vector<float>{14, 15}));
  const Array e = x[3][2][1];
  EXPECT_EQ(e.shape(), mv::Shape{});
  EXPECT_EQ(e.to_host<float>(), std::vector<float>{23});
  EXPECT_EQ(mv::arange(5)[-5].to_host<int32_t>(), std::vector<int32_t>{0});
  // Out of range and 0-d are errors naming the valid range.
  const std::string oob = message_of([&] { x[4]; });
  EXPECT_NE(oob.find("index 4 is out of bounds for axis 0 of size 4"), std::string::npos) << oob;
  EXPECT_NE(oob.find("valid indices are -4..3"), std::string::npos) << oob;
  EXPECT_NE(message_of([&] { x[-5]; }).find("out of bounds"), std::string::npos);
  EXPECT_NE(message_of([&] { e[0]; }).find("is 0-d"), std::string::npos);
  EXPECT_NE(message_of([&] {
              mv::zeros({0, 2})[0];
            }).find("none (the axis is empty)"),
            std::string::npos);
}

TEST(JaxIndexing, ShardedJitAndGrad) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Array x =
      mv::device_put(mv::arange(64.f).reshape({8, 8}), mv::NamedSharding(mesh, P("x", "y")));
  for (int i = 0; i < 8; ++i) {
    std::vector<float> want;
    for (int j = 0; j < 8; ++j) want.push_back(static_cast<float>(i * 8 + j));
    ASSERT_EQ(x[i].to_host<float>(), want) << i;
  }
  const auto f = mv::jit([](const Array& a) { return a[5] * 2; });
  EXPECT_EQ(f(x).to_host<float>()[3], 2.f * 43);
  // d/dx sum(x[2]) is one in row 2, zero elsewhere.
  const Array g = mv::grad([](const Array& a) { return mv::sum(a[2]); })(x);
  const auto gv = g.to_host<float>();
  for (int k = 0; k < 64; ++k) ASSERT_EQ(gv[static_cast<size_t>(k)], k / 8 == 2 ? 1.f : 0.f) << k;
}

// ---- uint32 keys --------------------------------------------------------------------------------

TEST(JaxUint32, KeysAreUint32AndSplitKeysIndexLikeJax) {
  const Array key = mv::random_key(0);  // jax.random.PRNGKey(0)
  EXPECT_EQ(mv::type_of(key), "uint32[2]");
  EXPECT_EQ(key.to_host<uint32_t>(), (std::vector<uint32_t>{0, 0}));
  const Array keys = mv::split(key);
  EXPECT_EQ(mv::type_of(keys), "uint32[2,2]");
  // jax.random.split(jax.random.key(0)) with partitionable threefry, remembered from JAX.
  EXPECT_EQ(keys.to_host<uint32_t>(),
            (std::vector<uint32_t>{1797259609u, 2579123966u, 928981903u, 3453687069u}));
  EXPECT_EQ(keys[0].to_host<uint32_t>(), (std::vector<uint32_t>{1797259609u, 2579123966u}));
  EXPECT_EQ(keys[1].to_host<uint32_t>(), (std::vector<uint32_t>{928981903u, 3453687069u}));
  // numpy prints uint32 as unsigned integers.
  EXPECT_EQ(keys.to_string(), "[[1797259609 2579123966]\n [ 928981903 3453687069]]");
  const Array a = mv::uniform(keys[0], {4}), b = mv::uniform(keys[1], {4});
  EXPECT_EQ(a.to_host<float>(),
            mv::uniform(mv::take(keys, mv::scalar(int32_t{0})), {4}).to_host<float>());
  EXPECT_NE(a.to_host<float>(), b.to_host<float>());
  // random_bits are uint32 as jax.random.bits.
  EXPECT_EQ(mv::random_bits(keys[0], {3}).dtype(), mv::DType::uint32);
  // Keys on a mesh, split there.
  const auto mesh = mv::make_mesh({8}, {"d"});
  const Array placed = mv::device_put(key, mv::NamedSharding(mesh, P()));
  EXPECT_EQ(mv::split(placed, 8)[7].to_host<uint32_t>(), mv::split(key, 8)[7].to_host<uint32_t>());
}

TEST(JaxUint32, CreationPrintingAndHostTransfers) {
  const Array x = u32({0, 4294967295u, 7}, {3});
  EXPECT_EQ(mv::type_of(x), "uint32[3]");
  EXPECT_EQ(x.to_host<uint32_t>(), (std::vector<uint32_t>{0, 4294967295u, 7}));
  EXPECT_EQ(x.to_string(),
            "[         0 4294967295          7]");  // numpy: str(np.array(..., np.uint32))
  EXPECT_EQ(u32({5}, {}).to_string(), "5");
  EXPECT_NE(message_of([&] { x.to_host<int32_t>(); }).find("to_host<uint32_t>"), std::string::npos);
  EXPECT_EQ(mv::zeros({2}, mv::DType::uint32).to_host<uint32_t>(), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(mv::ones({2}, mv::DType::uint32).to_host<uint32_t>(), (std::vector<uint32_t>{1, 1}));
  const auto mesh = mv::make_mesh({8}, {"d"});
  const auto v = iota_u32(16, 0xfffffff0u);
  const Array d =
      mv::device_put(std::span<const uint32_t>(v), {16}, mv::NamedSharding(mesh, P("d")));
  EXPECT_EQ(d.to_host<uint32_t>(), v);
  EXPECT_EQ(d.addressable_shards()[3].data.to_host<uint32_t>(),
            (std::vector<uint32_t>{v[6], v[7]}));
  // .npy '<u4' both ways.
  const std::string path = ::testing::TempDir() + "/meshvk_u32.npy";
  mv::save_npy(path, d);
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  EXPECT_NE(bytes.str().find("'descr': '<u4'"), std::string::npos);
  const Array loaded = mv::load_npy(path);
  EXPECT_EQ(loaded.dtype(), mv::DType::uint32);
  EXPECT_EQ(loaded.to_host<uint32_t>(), v);
  std::remove(path.c_str());
}

TEST(JaxUint32, DataMovementOverShardedLayouts) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto v = iota_u32(64, 0x80000000u);
  const Array host = u32(v, {8, 8});
  const Array x = mv::device_put(host, mv::NamedSharding(mesh, P("x", "y")));
  const auto at = [&](int r, int c) { return v[static_cast<size_t>(r * 8 + c)]; };
  EXPECT_EQ(x.to_host<uint32_t>(), v);
  // Another layout, a transpose, a reshape, a slice, a row.
  EXPECT_EQ(mv::device_put(x, mv::NamedSharding(mesh, P("y", "x"))).to_host<uint32_t>(), v);
  const auto t = mv::transpose(x).to_host<uint32_t>();
  EXPECT_EQ(t[1], at(1, 0));
  EXPECT_EQ(x.reshape({64}).to_host<uint32_t>(), v);
  EXPECT_EQ(mv::slice(x, {2, 4}, {4, 6}).to_host<uint32_t>(),
            (std::vector<uint32_t>{at(2, 4), at(2, 5), at(3, 4), at(3, 5)}));
  EXPECT_EQ(x[7][7].to_host<uint32_t>(), std::vector<uint32_t>{at(7, 7)});
  // concatenate, stack, take, roll, copy, broadcast_to.
  const Array c = mv::concatenate({x, x}, 0);
  EXPECT_EQ(c.dtype(), mv::DType::uint32);
  EXPECT_EQ(c[9].to_host<uint32_t>(), x[1].to_host<uint32_t>());
  EXPECT_EQ(mv::stack({x[0], x[1]}).shape(), (mv::Shape{2, 8}));
  EXPECT_EQ(mv::take(x, mv::array({3, 0}), 1).to_host<uint32_t>()[1], at(0, 0));
  EXPECT_EQ(mv::roll(x, 1, 1).to_host<uint32_t>()[1], at(0, 0));
  EXPECT_EQ(mv::copy(x).to_host<uint32_t>(), v);
  EXPECT_EQ(mv::broadcast_to(x[0], {2, 8}).to_host<uint32_t>()[8], at(0, 0));
  // Collectives that move data: all_gather inside shard_map.
  const auto gathered =
      mv::shard_map([](const Array& p) { return mv::all_gather(p, "x", 0, true); }, mesh,
                    {P("x", "y")}, P(mv::None, "y"))(x);
  EXPECT_EQ(gathered.to_host<uint32_t>(), v);
}

TEST(JaxUint32, AstypeToAndFromTheOtherDtypes) {
  const Array x = u32({0, 3, 4294967295u, 2147483648u}, {4});
  EXPECT_EQ(mv::astype(x, mv::DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{0, 3, -1, INT32_MIN}));  // same bits
  EXPECT_EQ(mv::astype(x, mv::DType::float32).to_host<float>(),
            (std::vector<float>{0.f, 3.f, 4294967295.f, 2147483648.f}));
  EXPECT_EQ(mv::astype(x, mv::DType::bool_).to_string(), "[False  True  True  True]");
  EXPECT_EQ(mv::astype(mv::array({0, 5, -1}), mv::DType::uint32).to_host<uint32_t>(),
            (std::vector<uint32_t>{0, 5, 4294967295u}));
  EXPECT_EQ(mv::astype(mv::array({0.f, 3.7f, 4e9f}), mv::DType::uint32).to_host<uint32_t>(),
            (std::vector<uint32_t>{0, 3, 4000000000u}));
  // Computing with them then works as with any int32.
  EXPECT_EQ((mv::astype(x, mv::DType::int32) + 1).to_host<int32_t>()[1], 4);
}

TEST(JaxUint32, ComputesInInt64AndRefusesWhatDoesNot) {
  // Elementwise ops, reductions and sorts compute (in int64, wrapping back modulo 2^32).
  const Array x = u32({1, 2, 3, 4294967295u}, {2, 2});
  EXPECT_EQ((x + 1).to_host<uint32_t>(), (std::vector<uint32_t>{2, 3, 4, 0}));
  EXPECT_EQ(mv::exp(u32({0}, {1})).to_host<float>(), (std::vector<float>{1.0f}));
  EXPECT_EQ(mv::astype(x == x, mv::DType::int32).to_host<int32_t>(), (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(mv::max(x, {0}).to_host<uint32_t>(), (std::vector<uint32_t>{3, 4294967295u}));
  EXPECT_EQ(mv::argsort(u32({5, 4294967295u, 0}, {3})).to_host<int32_t>(), (std::vector<int32_t>{2, 0, 1}));
  // The rest names what to do.
  const auto names_astype = [](const std::string& m) {
    EXPECT_NE(m.find("uint32[2,2]"), std::string::npos) << m;
    EXPECT_NE(m.find("astype(x, DType::int64)"), std::string::npos) << m;
  };
  names_astype(message_of([&] { mv::matmul(x, x); }));
  EXPECT_NE(message_of([&] { mv::matmul(x, x); }).find("matmul:"), std::string::npos);
  // Still usable.
  EXPECT_EQ(x[1].to_host<uint32_t>(), (std::vector<uint32_t>{3, 4294967295u}));
}

// Arrays on virtual devices: creation, device_put between shardings (device to device), reading
// back, typeof, .npy files and the error paths.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <random>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

TEST(Array, ArangeIsUncommittedOnDeviceZero) {
  const auto x = mv::arange(32.f).reshape({4, 8});
  EXPECT_EQ(x.shape(), (mv::Shape{4, 8}));
  EXPECT_EQ(x.dtype(), mv::DType::float32);
  EXPECT_FALSE(x.committed());
  EXPECT_EQ(x.devices(), std::vector<int>{0});
  EXPECT_EQ(x.sharding().to_string(),
            "SingleDeviceSharding(device=" + mv::device_repr(0, test_runtime().platform()) +
                ", memory_kind=" + (test_runtime().platform() == "CPU" ? "unpinned_host" : "device") + ")");
  const auto v = x.to_host<float>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
}

TEST(Array, CreationFunctions) {
  EXPECT_EQ(mv::arange(5).to_host<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(mv::arange(2, 11, 3).to_host<int32_t>(), (std::vector<int32_t>{2, 5, 8}));
  EXPECT_EQ(mv::arange(5, 0, -2).to_host<int32_t>(), (std::vector<int32_t>{5, 3, 1}));
  EXPECT_EQ(mv::arange(0.5f, 2.0f, 0.5f).to_host<float>(), (std::vector<float>{0.5f, 1.0f, 1.5f}));
  EXPECT_EQ(mv::arange(0).size(), 0);
  EXPECT_EQ(mv::zeros({2, 3}).to_host<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(mv::ones({3}, mv::DType::int32).to_host<int32_t>(), std::vector<int32_t>(3, 1));
  EXPECT_EQ(mv::full({2, 2}, 7.5f).to_host<float>(), std::vector<float>(4, 7.5f));
  EXPECT_EQ(mv::full({4}, int32_t{-3}).to_host<int32_t>(), std::vector<int32_t>(4, -3));
  const auto s = mv::scalar(3.f);
  EXPECT_EQ(s.ndim(), 0u);
  EXPECT_EQ(s.to_host<float>(), std::vector<float>{3.f});
  // Beyond maxStorageBufferRange on lavapipe (128 MiB): 40M int32 = 160 MiB.
  const auto big = mv::arange(40'000'000);
  const auto host = big.to_host<int32_t>();
  EXPECT_EQ(host[0], 0);
  EXPECT_EQ(host[33'554'431], 33'554'431);
  EXPECT_EQ(host[33'554'432], 33'554'432);
  EXPECT_EQ(host.back(), 39'999'999);
}

TEST(Array, DevicePutLaysOutEveryShard) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto arr = mv::arange(32.f).reshape({4, 8});
  const auto xs = mv::device_put(arr, mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_TRUE(xs.committed());
  EXPECT_EQ(xs.sharding().shard_shape(xs.shape()), (mv::Shape{2, 2}));
  EXPECT_EQ(xs.to_host<float>(), arr.to_host<float>());
  EXPECT_EQ(xs.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x", "y"))));
}

// Random arrays survive chains of random reshardings bit for bit.
TEST(Array, RandomReshardChainsAreBitExact) {
  std::mt19937 rng(1234);
  struct MeshDef {
    std::vector<int> shape;
    std::vector<std::string> names;
  };
  const std::vector<MeshDef> meshes = {{{8}, {"a"}}, {{4, 2}, {"a", "b"}}, {{2, 4}, {"a", "b"}},
                                       {{2, 2, 2}, {"a", "b", "c"}}, {{1, 8}, {"a", "b"}}};
  auto random_spec = [&](const MeshDef& m, size_t rank) {
    std::vector<std::string> axes = m.names;
    std::shuffle(axes.begin(), axes.end(), rng);
    std::vector<mv::SpecEntry> entries(rank);
    for (const auto& axis : axes) {
      const int where = static_cast<int>(rng() % (rank + 1));  // rank means unused
      if (where < static_cast<int>(rank)) entries[where].axes.push_back(axis);
    }
    return mv::PartitionSpec(entries);
  };
  for (int trial = 0; trial < 12; ++trial) {
    const size_t rank = 1 + rng() % 3;
    mv::Shape shape(rank);
    for (auto& d : shape) d = 8 * (1 + rng() % 3);
    std::vector<float> values(mv::shape_size(shape));
    for (auto& v : values) v = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0x7f7fffffu);
    auto x = mv::array(std::span<const float>(values), shape);
    for (int step = 0; step < 6; ++step) {
      const MeshDef& m = meshes[rng() % meshes.size()];
      const auto mesh = mv::make_mesh(m.shape, m.names);
      const auto spec = random_spec(m, rank);
      x = mv::device_put(x, mv::NamedSharding(mesh, spec));
      if (rng() % 3 == 0) x = mv::device_put(x, mv::SingleDeviceSharding(rng() % 8, mesh.platform()));
    }
    const auto back = x.to_host<float>();
    ASSERT_EQ(std::memcmp(back.data(), values.data(), values.size() * 4), 0)
        << "trial " << trial << " ended as " << x.sharding().to_string();
  }
}

TEST(Array, DevicePutFromHostOverSubsetMesh) {
  const auto mesh = mv::make_mesh({4}, {"x"}, {}, {4, 5, 6, 7});
  std::vector<int32_t> v(16);
  for (int i = 0; i < 16; ++i) v[i] = i * i;
  const auto x = mv::device_put(std::span<const int32_t>(v), {16}, mv::NamedSharding(mesh, P("x")));
  EXPECT_EQ(x.devices(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(x.to_host<int32_t>(), v);
}

TEST(Array, ReshapeOfShardedArrayKeepsValues) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto x = mv::device_put(mv::arange(64), mv::NamedSharding(mesh, P(mv::SpecEntry({"a", "b"}))));
  const auto y = x.reshape({8, -1});
  EXPECT_EQ(y.shape(), (mv::Shape{8, 8}));
  EXPECT_EQ(y.to_host<int32_t>(), mv::arange(64).to_host<int32_t>());
  EXPECT_THROW(x.reshape({7, 9}), mv::Error);
}

TEST(Array, TypeofShowsExplicitAxesOnly) {
  const auto explicit_mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const auto x = mv::arange(8).reshape({4, 2});
  EXPECT_EQ(mv::type_of(x), "int32[4,2]");
  EXPECT_EQ(mv::type_of(mv::device_put(x, mv::NamedSharding(explicit_mesh, P("X", mv::None)))), "int32[4@X,2]");
  const auto y = mv::device_put(mv::arange(32).reshape({4, 8}), mv::NamedSharding(explicit_mesh, P("X", "Y")));
  EXPECT_EQ(mv::type_of(y), "int32[4@X,8@Y]");
  const auto z = mv::device_put(mv::arange(32.f), mv::NamedSharding(explicit_mesh, P({"X", "Y"})));
  EXPECT_EQ(mv::type_of(z), "float32[32@(X,Y)]");
  const auto auto_mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  EXPECT_EQ(mv::type_of(mv::device_put(x, mv::NamedSharding(auto_mesh, P("X")))), "int32[4,2]");
}

TEST(Array, NpyRoundTripAndGoldenLayerInputs) {
  const std::string path = testing::TempDir() + "/meshvk_roundtrip.npy";
  const auto x = mv::device_put(mv::arange(24.f).reshape({2, 3, 4}),
                                mv::NamedSharding(mv::make_mesh({2, 4}, {"a", "b"}), P("a")));
  mv::save_npy(path, x);
  const auto y = mv::load_npy(path);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.to_host<float>(), x.to_host<float>());
  std::remove(path.c_str());
  EXPECT_THROW(mv::load_npy(path), mv::Error);
  const auto w = mv::load_npy(golden_dir() + "/layer/weights.npy");
  EXPECT_EQ(w.shape(), (mv::Shape{32, 4}));
  EXPECT_EQ(w.dtype(), mv::DType::float32);
}

TEST(Array, PrintsLikeNumpy) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto xs = mv::device_put(mv::arange(32.f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  EXPECT_EQ(xs.to_string(),
            "[[ 0.  1.  2.  3.  4.  5.  6.  7.]\n [ 8.  9. 10. 11. 12. 13. 14. 15.]\n"
            " [16. 17. 18. 19. 20. 21. 22. 23.]\n [24. 25. 26. 27. 28. 29. 30. 31.]]");
  EXPECT_EQ((mv::arange(8) ).to_string(), "[0 1 2 3 4 5 6 7]");
}

TEST(ArrayErrors, BadShardingsAndShapes) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto x = mv::arange(40.f).reshape({10, 4});
  auto expect_error = [](auto&& f, std::initializer_list<const char*> parts) {
    try {
      f();
      ADD_FAILURE() << "no error";
    } catch (const mv::Error& e) {
      for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  expect_error([&] { mv::device_put(x, mv::NamedSharding(mesh, P("a"))); },
               {"dimension 0", "size 10", "not divisible by 4"});
  expect_error([&] { mv::device_put(x, mv::NamedSharding(mesh, P("a", "b", mv::None))); },
               {"3 entries", "rank 2"});
  expect_error([&] { mv::NamedSharding(mesh, P("z")); }, {"'z'", "'a', 'b'"});
  expect_error([&] { mv::NamedSharding(mesh, P("a", "a")); }, {"'a'", "more than once"});
  expect_error([&] { x.to_host<int32_t>(); }, {"float32", "to_host<float>"});
  expect_error([&] { mv::array({1.f, 2.f, 3.f}, mv::Shape{2, 2}); }, {"3 values", "(2, 2)"});
  expect_error([&] { mv::device_put(x, mv::SingleDeviceSharding(9, "CPU")); }, {"device 9", "0..7"});
  expect_error([&] { mv::Array().shape(); }, {"empty meshvk::Array"});
  // The runtime is still fine afterwards.
  EXPECT_EQ(mv::device_put(x, mv::NamedSharding(mesh, P(mv::None, "b"))).to_host<float>(), x.to_host<float>());
}

// Explicit mode refuses what would change a type without being asked, as JAX's sharding rules
// do (found by the second outside review): a reshape that cannot keep the sharding, operands of
// concatenate sharded differently, a product whose result would use one mesh axis twice.
TEST(Array, ExplicitModeRefusesSilentReshards) {
  const auto em = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const auto a = mv::device_put(mv::arange(128.f).reshape({16, 8}), mv::NamedSharding(em, P("X", "Y")));
  expect_error([&] { (void)a.reshape({128}); }, "reshard");
  expect_error([&] { (void)a.reshape({16, 2, 4}); }, "explicit mode");
  const auto jitted = mv::jit([](const mv::Array& u) { return u.reshape({128}); });
  expect_error([&] { (void)jitted(a); }, "reshape");
  // What keeps the sharding still works: the leading split dimension merged with a whole one.
  const auto rows = mv::device_put(mv::arange(128.f).reshape({16, 8}), mv::NamedSharding(em, P("X")));
  EXPECT_EQ(mv::type_of(rows.reshape({128})), "float32[128@X]");
  const auto ay = mv::device_put(mv::arange(128.f).reshape({16, 8}), mv::NamedSharding(em, P(mv::None, "Y")));
  expect_error([&] { (void)mv::concatenate({a, ay}, 0); }, "sharded differently");
  expect_error([&] { (void)mv::stack({a, ay}, 0); }, "sharded differently");
  EXPECT_EQ(mv::type_of(mv::concatenate({a, a}, 0)), "float32[32@X,8@Y]");
  EXPECT_EQ(mv::concatenate({a, mv::zeros({16, 8})}, 0).shape(), (mv::Shape{32, 8}));  // uncommitted: any layout
  const auto ax = mv::device_put(mv::arange(128.f).reshape({16, 8}), mv::NamedSharding(em, P("X", mv::None)));
  const auto bx = mv::device_put(mv::arange(128.f).reshape({8, 16}), mv::NamedSharding(em, P(mv::None, "X")));
  expect_error([&] { (void)mv::matmul(ax, bx); }, "out_sharding");
  const auto c = mv::matmul(ax, bx, mv::Sharding(mv::NamedSharding(em, P("X", mv::None))));
  EXPECT_EQ(mv::type_of(c), "float32[16@X,16]");
  EXPECT_EQ(c.to_host<float>(), mv::matmul(mv::arange(128.f).reshape({16, 8}), mv::arange(128.f).reshape({8, 16})).to_host<float>());
  expect_runtime_usable();
}

// A reshape that cannot keep every split dimension gathers only what it must (automatic mode):
// (16@x, 8@y) -> (16, 2, 4) gathers 'y' and keeps 'x', as XLA's partitioner would (it gathered
// both before; found by an outside review).
TEST(Array, ReshapeGathersOnlyWhatItMust) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto a = mv::device_put(mv::arange(128.f).reshape({16, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto b = a.reshape({16, 2, 4});
  EXPECT_TRUE(b.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("x")), 3));
  EXPECT_EQ(b.to_host<float>(), mv::arange(128.f).to_host<float>());
  const auto f = mv::jit([](const mv::Array& u) { return u.reshape({16, 2, 4}) * 2.f; });
  const std::string text = f.program_text(a);
  EXPECT_NE(text.find("all-gather over ('y',)"), std::string::npos) << text;
  EXPECT_EQ(text.find("'x', 'y') -> PartitionSpec()"), std::string::npos) << text;
  EXPECT_EQ(f(a).to_host<float>(), (mv::arange(128.f) * 2.f).to_host<float>());
}

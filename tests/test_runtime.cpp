// The virtual devices: listing, memory budgets, out-of-memory isolation and errors.
#include <gtest/gtest.h>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;

TEST(Runtime, ListsEightVirtualDevices) {
  const auto devs = mv::devices();
  ASSERT_EQ(devs.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(devs[i].id, i);
    EXPECT_TRUE(devs[i].platform == "CPU" || devs[i].platform == "GPU");
    EXPECT_FALSE(devs[i].adapter.empty());
    EXPECT_GT(devs[i].memory_budget, 0u);
    EXPECT_EQ(devs[i].repr(), (devs[i].platform == "CPU" ? "CpuDevice(id=" : "GpuDevice(id=") +
                                  std::to_string(i) + ")");
  }
  EXPECT_EQ(test_runtime().num_devices(), 8);
}

TEST(Runtime, ValidationLayerIsOnUnderCtest) {
  const char* want = std::getenv("MESHVK_VALIDATION");
  if (!want || std::string(want) != "1") GTEST_SKIP() << "MESHVK_VALIDATION is not 1";
  EXPECT_TRUE(test_runtime().validation_enabled());
}

TEST(Runtime, MemoryIsAccountedAndReturned) {
  const uint64_t before = mv::devices()[3].memory_used;
  {
    const auto mesh = mv::make_mesh({8}, {"x"});
    const auto x = mv::device_put(mv::zeros({8, 1024}), mv::NamedSharding(mesh, mv::P("x")));
    EXPECT_GE(mv::devices()[3].memory_used, before + 4096);
  }
  test_runtime().synchronize();
  EXPECT_EQ(mv::devices()[3].memory_used, before);
}

TEST(Runtime, OutOfMemoryOnOneDeviceLeavesTheOthersUsable) {
  // A second runtime with a tiny budget, so the test does not depend on the machine's memory.
  mv::Runtime small({.num_devices = 4, .memory_per_device = 1 << 20});
  // Environment overrides may change the device count; the test needs only device 0 and 1.
  const auto keep = mv::array({1.f, 2.f, 3.f, 4.f});
  try {
    const auto big = mv::zeros({1 << 19});  // 2 MiB on device 0
    FAIL() << "expected an out-of-memory error";
  } catch (const mv::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory on device 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested 2.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("budget"), std::string::npos) << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  }
  // Device 0 still works, the earlier array is intact, and other devices are unaffected.
  EXPECT_EQ(keep.to_host<float>(), (std::vector<float>{1, 2, 3, 4}));
  const auto again = mv::zeros({1 << 16});
  EXPECT_EQ(again.to_host<float>()[0], 0.0f);
  const auto on1 = mv::device_put(keep, mv::SingleDeviceSharding(1, small.platform()));
  EXPECT_EQ(on1.to_host<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Runtime, MemoryFreedByOneArrayIsReusedByTheNext) {
  mv::Runtime small({.num_devices = 2, .memory_per_device = 4 << 20});
  for (int i = 0; i < 20; ++i) {
    const auto x = mv::full({3 << 18}, static_cast<float>(i));  // 3 MiB of a 4 MiB budget
    EXPECT_EQ(x.to_host<float>().back(), static_cast<float>(i));
  }
}

TEST(Runtime, MeshMustMatchDeviceCount) {
  EXPECT_THROW(mv::make_mesh({2, 2}, {"x", "y"}), mv::Error);
  try {
    mv::make_mesh({3, 2}, {"x", "y"});
  } catch (const mv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("runtime has 8"), std::string::npos) << e.what();
  }
  // A subset of devices is fine when named.
  const auto mesh = mv::make_mesh({2, 2}, {"x", "y"}, {}, {4, 5, 6, 7});
  EXPECT_EQ(mesh.device_ids(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_THROW(mv::make_mesh({2}, {"x"}, {}, {7, 8}), mv::Error);
}

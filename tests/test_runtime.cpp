// The virtual devices: listing, memory budgets, out-of-memory isolation and errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
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
  const ScopedEnv unset("MESHVK_MEMORY_PER_DEVICE", nullptr);  // it would override the option
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
  const ScopedEnv unset("MESHVK_MEMORY_PER_DEVICE", nullptr);
  mv::Runtime small({.num_devices = 2, .memory_per_device = 4 << 20});
  for (int i = 0; i < 20; ++i) {
    const auto x = mv::full({3 << 18}, static_cast<float>(i));  // 3 MiB of a 4 MiB budget
    EXPECT_EQ(x.to_host<float>().back(), static_cast<float>(i));
  }
}

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Holds `bytes` on `device` in pieces of at most 256 MiB, never written: on lavapipe that is
// address space, not pages.
std::vector<std::shared_ptr<mv::detail::DeviceBuffer>> hold(mv::Runtime& rt, int device,
                                                            uint64_t bytes) {
  std::vector<std::shared_ptr<mv::detail::DeviceBuffer>> pieces;
  for (uint64_t held = 0; held < bytes; held += 256 * kMiB)
    pieces.push_back(rt.state()->allocate(device, std::min(bytes - held, 256 * kMiB)));
  return pieces;
}

}  // namespace

// By default the devices of an adapter share its memory, as JAX's CPU devices share the host's:
// one device may take far more than an equal share (the tutorial's 8192x8192 arrays, replicated or
// on one device, did not fit an eighth of a 24 GB machine's half).
TEST(Runtime, OneDeviceMayHoldMoreThanAnEqualShareByDefault) {
  if (std::getenv("MESHVK_MEMORY_PER_DEVICE")) GTEST_SKIP() << "MESHVK_MEMORY_PER_DEVICE is set";
  auto& rt = test_runtime();
  const auto& dev = rt.state()->device();
  uint64_t memory = dev.device_heap_size();
  if (dev.adapter().is_cpu())
    memory = std::max<uint64_t>(
        memory, static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / 2);
  // More than an eighth of it, and more than the 4 GiB an equal share was capped at.
  const uint64_t want = std::max<uint64_t>(4608 * kMiB, memory / 8 + 512 * kMiB);
  if (memory * 9 / 10 < want + 1024 * kMiB)
    GTEST_SKIP() << "the adapter has " << memory / kMiB << " MiB";
  const auto devs = rt.devices();
  EXPECT_TRUE(devs[0].memory_shared);
  EXPECT_EQ(devs[0].memory_budget, devs[7].memory_budget);
  const uint64_t before = devs[0].memory_used;
  {
    const auto pieces = hold(rt, 0, want);
    EXPECT_GE(mv::devices()[0].memory_used, before + want);
    expect_runtime_usable();
  }
  rt.synchronize();
  EXPECT_EQ(mv::devices()[0].memory_used, before);
}

// What one device holds is what the others of its adapter cannot: the error names both sums, the
// budget and how to raise it, and the runtime goes on.
TEST(Runtime, DevicesOfAnAdapterShareItsMemory) {
  if (std::getenv("MESHVK_MEMORY_PER_DEVICE")) GTEST_SKIP() << "MESHVK_MEMORY_PER_DEVICE is set";
  auto& rt = test_runtime();
  const uint64_t shared = rt.devices()[1].memory_budget;
  const auto keep =
      mv::device_put(mv::array({1.f, 2.f, 3.f}), mv::SingleDeviceSharding(1, rt.platform()));
  const auto held = hold(rt, 0, 512 * kMiB);
  // Fits the adapter's memory alone, not beside device 0's 512 MiB.
  const std::string msg = message_of([&] { rt.state()->allocate(1, shared - 256 * kMiB); });
  for (const char* part :
       {"out of memory on device 1: requested", "device 1 holds", "devices of adapter", "together",
        "shared", "MESHVK_MEMORY_PER_DEVICE", "RuntimeOptions::memory_per_device", "fewer devices"})
    EXPECT_NE(msg.find(part), std::string::npos) << "no '" << part << "' in: " << msg;
  EXPECT_EQ(keep.to_host<float>(), (std::vector<float>{1, 2, 3}));
  expect_runtime_usable();
}

TEST(Runtime, MemoryPerDeviceFromTheEnvironmentBoundsEachDevice) {
  const ScopedEnv budget("MESHVK_MEMORY_PER_DEVICE", "2MiB");
  mv::Runtime small({.num_devices = 2, .memory_per_device = 64 * kMiB});  // the variable wins
  for (const auto& d : small.devices()) {
    EXPECT_EQ(d.memory_budget, 2 * kMiB);
    EXPECT_FALSE(d.memory_shared);
  }
  const auto keep = mv::full({1024}, 5.0f);                                   // 4 KiB on device 0
  const std::string msg = message_of([] { (void)mv::zeros({768 * 1024}); });  // 3 MiB
  for (const char* part :
       {"out of memory on device 0: requested 3.00 MiB", "free of its 2.00 MiB budget",
        "MESHVK_MEMORY_PER_DEVICE=2MiB", "raise", "RuntimeOptions::memory_per_device"})
    EXPECT_NE(msg.find(part), std::string::npos) << "no '" << part << "' in: " << msg;
  // Still usable: the device's earlier array, a fitting one, and another device.
  EXPECT_EQ(keep.to_host<float>()[1023], 5.0f);
  EXPECT_EQ(mv::full({256 * 1024}, 2.0f).to_host<float>()[0], 2.0f);  // 1 MiB
  expect_runtime_usable();
  EXPECT_EQ(mv::device_put(keep, mv::SingleDeviceSharding(1, small.platform())).to_host<float>()[0],
            5.0f);
}

TEST(Runtime, MemoryPerDeviceOptionBoundsEachDevice) {
  const ScopedEnv unset("MESHVK_MEMORY_PER_DEVICE", nullptr);
  mv::Runtime small({.num_devices = 2, .memory_per_device = 3 * kMiB});
  EXPECT_EQ(small.devices()[1].memory_budget, 3 * kMiB);
  // 2 MiB on device 1 (made on device 0 and moved), then 2 MiB on device 0: each has its own 3 MiB.
  const auto on1 =
      mv::device_put(mv::zeros({512 * 1024}), mv::SingleDeviceSharding(1, small.platform()));
  const auto on0 = mv::zeros({512 * 1024});
  const std::string msg = message_of([] { (void)mv::zeros({512 * 1024}); });
  for (const char* part :
       {"out of memory on device 0: requested 2.00 MiB", "1.00 MiB free of its 3.00 MiB budget",
        "RuntimeOptions::memory_per_device", "MESHVK_MEMORY_PER_DEVICE"})
    EXPECT_NE(msg.find(part), std::string::npos) << "no '" << part << "' in: " << msg;
  expect_runtime_usable();
}

TEST(Runtime, MalformedMemoryPerDeviceIsAnError) {
  for (const char* bad : {"512MB", "2 GiB", "1.5GiB", "-1", "abc", "GiB", "0", "1000", "2gib",
                          "99999999999999999999", "17179869184TiB"}) {
    const ScopedEnv value("MESHVK_MEMORY_PER_DEVICE", bad);
    expect_error([] { mv::Runtime rt({.num_devices = 2}); },
                 std::string("MESHVK_MEMORY_PER_DEVICE=") + bad + " is not a number of bytes");
  }
  for (const char* good : {"1048576", "1024KiB", "64MiB", "1GiB"}) {
    const ScopedEnv value("MESHVK_MEMORY_PER_DEVICE", good);
    mv::Runtime rt({.num_devices = 2});
    EXPECT_GE(rt.devices()[0].memory_budget, kMiB) << good;
  }
  expect_runtime_usable();
}

// MESHVK_QUEUES caps the queues each adapter's streams use: 1 puts every device on one queue
// (NVIDIA's default) and so leaves no queue for transfer streams; malformed values are Errors.
TEST(Runtime, QueueCapSharesOneQueue) {
  for (const char* bad : {"0", "65", "-1", "two", "1.5"}) {
    const ScopedEnv value("MESHVK_QUEUES", bad);
    expect_error([] { mv::Runtime rt({.num_devices = 2}); },
                 std::string("MESHVK_QUEUES=") + bad + " is not a number of queues");
  }
  const ScopedEnv one("MESHVK_QUEUES", "1");
  mv::Runtime rt({.num_devices = 3});
  for (const auto& d : rt.devices()) {
    EXPECT_EQ(d.queue_index, 0) << d.id;
    EXPECT_LT(d.transfer_queue_index, 0) << d.id;
  }
  const int n = static_cast<int>(rt.devices().size());
  const auto x = mv::device_put(mv::arange(static_cast<float>(4 * n)),
                                mv::NamedSharding(mv::make_mesh({n}, {"x"}), mv::P("x")));
  EXPECT_EQ(mv::sum(x).to_host<float>()[0], static_cast<float>(2 * n * (4 * n - 1)));
  expect_runtime_usable();
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

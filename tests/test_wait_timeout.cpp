// Waits that time out (issue 13, item 2): the error names the stall, whatever the queued commands
// use stays alive until they finish, and the runtime goes on working once the device does. And
// MESHVK_* settings that are not what the variable takes are errors naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;

namespace {

// A float32 array of `count` copies of `value` on device 1, written by a submission that waits
// for a value timeline 7 was never asked to signal: every read of it stalls until the test
// signals timeline 7 from the host.
mv::Array stalled_array(mv::Runtime& rt, uint64_t count, float value) {
  auto& state = *rt.state();
  auto buffer = state.allocate(1, count * 4);
  const mv::detail::Fence never{7, state.last_submitted(7) + 1};
  auto rec = state.begin(1);
  rec.wait_for(never);
  uint32_t word = 0;
  std::memcpy(&word, &value, 4);
  vkCmdFillBuffer(rec.cb, buffer->vk_buffer(), buffer->offset(), count * 4, word);
  buffer->written_by(state.submit(std::move(rec)));
  mv::exec::ShardedValue v{mv::Shape{static_cast<int64_t>(count)},
                           mv::DType::float32,
                           mv::SingleDeviceSharding(1, rt.platform()),
                           {std::move(buffer)}};
  return mv::detail::make_array(rt.state(), std::move(v), true);
}

// Runs `body`; whatever it throws, releases the stalled device first (a runtime destroyed with
// a device stuck would wait for it forever).
void with_stall_released(mv::Runtime& rt, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    try {
      rt.state()->signal_from_host(7);
    } catch (const mv::Error&) {
    }
    ADD_FAILURE() << "threw: " << e.what();
  }
}

void expect_timeout(const std::function<void()>& f, const char* during) {
  try {
    f();
    ADD_FAILURE() << "the wait returned";
  } catch (const mv::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("timed out after 200 ms during " + std::string(during)), std::string::npos)
        << m;
    EXPECT_NE(m.find("MESHVK_WAIT_TIMEOUT_MS"), std::string::npos) << m;
  }
}

}  // namespace

// The read-back's staging buffers were freed when its wait threw, while the copies into them
// were still queued: the device later wrote into freed memory (sharded_matmul with
// MESHVK_WAIT_TIMEOUT_MS=1 exited 139; here the validation layer reports the destroyed buffer).
TEST(WaitTimeout, ReadBackThatTimesOutKeepsItsStagingUntilTheCopiesRan) {
  std::optional<mv::Runtime> rt;
  {
    const ScopedEnv timeout("MESHVK_WAIT_TIMEOUT_MS", "200");
    rt.emplace();
  }
  with_stall_released(*rt, [&] {
    constexpr uint64_t kCount = 1 << 16;
    const mv::Array x = stalled_array(*rt, kCount, 2.5f);
    // A sharded value too, whose piece on device 1 is the stalled one: some pieces' copies may
    // complete, device 1's stays queued. On devices 0..3 only: device 7 must have nothing queued
    // when the test signals it from the host.
    const mv::Mesh mesh = mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3});
    const mv::Array sharded =
        mv::device_put(mv::concatenate({mv::zeros({kCount}), x, mv::zeros({2 * kCount})}),
                       mv::NamedSharding(mesh, mv::P("x")));
    expect_timeout([&] { (void)x.to_host<float>(); }, "to_host");
    expect_timeout([&] { (void)sharded.to_host<float>(); }, "to_host");
    for (int i = 0; i < 3; ++i)
      expect_timeout([&] { (void)(x + 1.0f).to_host<float>(); }, "to_host");
    // The device goes on: the queued copies run into their live staging buffers.
    rt->state()->signal_from_host(7);
    rt->synchronize();
    const auto host = x.to_host<float>();
    for (uint64_t i = 0; i < kCount; i += 997) EXPECT_EQ(host[i], 2.5f) << i;
    EXPECT_EQ((x * 2.0f).to_host<float>()[kCount - 1], 5.0f);
    EXPECT_EQ(mv::sum(sharded).to_host<float>()[0], 2.5f * kCount);
  });
  rt.reset();
}

// A kernel that runs longer than the timeout on a CPU adapter is not a hang: lavapipe computes in
// this process, which keeps the CPU busy, so the wait goes on (the tutorial's 8192^3 matmul on
// one device took ~3 minutes against the default 2-minute timeout and failed).
TEST(WaitTimeout, LongKernelOnTheCpuIsWaitedFor) {
  std::optional<mv::Runtime> rt;
  {
    const ScopedEnv timeout("MESHVK_WAIT_TIMEOUT_MS", "100");
    rt.emplace();
  }
  if (rt->platform() != "cpu" && rt->platform() != "CPU") GTEST_SKIP() << "not a CPU adapter";
  // 137 GFLOP on one device: over a second on lavapipe, ten timeouts and more.
  const mv::Array a = mv::ones({4096, 4096});
  const auto c = mv::matmul(a, a).to_host<float>();
  EXPECT_EQ(c[0], 4096.0f);
  EXPECT_EQ(c.back(), 4096.0f);
  rt.reset();
}

// A jit program destroyed while a device still runs it (its wait timed out) hands what its
// command buffers use over to the runtime instead of freeing it.
TEST(WaitTimeout, JitProgramReleasedWhileItsDeviceIsStalled) {
  std::optional<mv::Runtime> rt;
  {
    const ScopedEnv timeout("MESHVK_WAIT_TIMEOUT_MS", "200");
    rt.emplace();
  }
  with_stall_released(*rt, [&] {
    constexpr uint64_t kCount = 1 << 12;
    const mv::Array x = stalled_array(*rt, kCount, 1.5f);
    std::optional<mv::Array> y;
    {
      const auto f = mv::jit([](const mv::Array& a) { return mv::exp(a * 0.0f) + a * 2.0f; });
      y = f(x);  // traced: the program's commands wait for the stalled fill
    }            // the program goes; its wait times out
    rt->state()->signal_from_host(7);
    rt->synchronize();
    const auto host = y->to_host<float>();
    for (uint64_t i = 0; i < kCount; i += 101) EXPECT_EQ(host[i], 4.0f) << i;
    y.reset();
  });
  rt.reset();
}

TEST(WaitTimeout, SettingThatIsNotAWholeNumberOfMillisecondsIsAnError) {
  for (const char* bad : {"abc", "5000ms", "-1", "0", " 5", "1e3", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    const ScopedEnv timeout("MESHVK_WAIT_TIMEOUT_MS", bad);
    try {
      mv::Runtime rt;
      ADD_FAILURE() << "MESHVK_WAIT_TIMEOUT_MS=" << bad << " was accepted";
    } catch (const mv::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("MESHVK_WAIT_TIMEOUT_MS=") + bad), std::string::npos) << m;
      EXPECT_NE(m.find("milliseconds"), std::string::npos) << m;
    }
  }
  const ScopedEnv timeout("MESHVK_WAIT_TIMEOUT_MS", "1500");
  mv::Runtime rt;
  EXPECT_EQ(rt.state()->wait_timeout_ns(), 1500ull * 1000000);
}

TEST(WaitTimeout, OtherSettingsThatAreNotWhatTheyTakeAreErrors) {
  const struct {
    const char* name;
    const char* value;
    const char* says;
  } cases[] = {
      {"MESHVK_VALIDATION", "yes", "give 0 or 1"},
      {"MESHVK_NUM_DEVICES", "8devices", "give an integer from 1 to 64"},
      {"MESHVK_TRANSFER_QUEUE", "true", "give 0 or 1"},
      {"MESHVK_PROFILE", "on", "give 0 or 1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const ScopedEnv bad(c.name, c.value);
    try {
      mv::Runtime rt;
      ADD_FAILURE() << c.name << "=" << c.value << " was accepted";
    } catch (const mv::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string(c.name) + "=" + c.value), std::string::npos) << m;
      EXPECT_NE(m.find(c.says), std::string::npos) << m;
    }
  }
  {
    const ScopedEnv bad("MESHVK_TEST_BINDING_BYTES", "64KiB");
    try {
      (void)mv::sum(mv::arange(16.f)).to_host<float>();
      ADD_FAILURE() << "MESHVK_TEST_BINDING_BYTES=64KiB was accepted";
    } catch (const mv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("MESHVK_TEST_BINDING_BYTES=64KiB"), std::string::npos)
          << e.what();
    }
  }
  {
    const ScopedEnv bad("MESHVK_MATMUL_BLOCK", "big");
    try {
      (void)mv::matmul(mv::ones({8, 8}), mv::ones({8, 8})).to_host<float>();
      ADD_FAILURE() << "MESHVK_MATMUL_BLOCK=big was accepted";
    } catch (const mv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("MESHVK_MATMUL_BLOCK=big"), std::string::npos)
          << e.what();
    }
  }
  {
    // Read by every runtime's instance, before the driver is loaded.
    const ScopedEnv bad("MESHVK_LAVAPIPE_LANES", "32");
    try {
      mv::Runtime rt({.num_devices = 1});
      ADD_FAILURE() << "MESHVK_LAVAPIPE_LANES=32 was accepted";
    } catch (const mv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("MESHVK_LAVAPIPE_LANES=32"), std::string::npos)
          << e.what();
    }
  }
  // The shared runtime still works.
  EXPECT_EQ((mv::arange(4.f) * 2.0f).to_host<float>(), (std::vector<float>{0, 2, 4, 6}));
}

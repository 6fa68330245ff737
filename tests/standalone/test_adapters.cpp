// Several adapters in one process (issue 16, item 1): the same programs on 1 adapter x 8 devices
// and on 2 adapters x 4 devices (lavapipe opened twice, as CI has it) give bit-identical results,
// with the devices of different adapters exchanging data through shared device memory (an
// opaque fd) and, forced, staged through host memory. Every collective at one-shot and ring
// sizes, reshards, a jit replayed 3 times and the MLP training step in dp and tp.
//
// A binary of its own: a Runtime's devices and adapters are fixed when it is made, so each case
// makes its runtimes one after another.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"  // the hold of submissions across adapters
#include "workload.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

using meshvk::testing::random_floats;
using meshvk::testing::Results;
using meshvk::testing::workload;

// Sets environment variables for its lifetime (nullptr: unset), restoring them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      if (value)
        setenv(name, value, 1);
      else
        unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Runs the workload on a fresh runtime of 8 devices on `adapters` (empty: the default adapter).
Results run_on(const std::vector<std::string>& adapters, const char* transport,
               std::vector<mv::DeviceInfo>* devices = nullptr) {
  const ScopedEnv env({{"MESHVK_NUM_DEVICES", "8"},
                       {"MESHVK_ADAPTERS", nullptr},
                       {"MESHVK_ADAPTER", nullptr},
                       {"MESHVK_ADAPTER_TRANSPORT", transport}});
  mv::Runtime rt({.adapters = adapters});
  if (devices) *devices = rt.devices();
  const uint64_t before = mv::Runtime::validation_messages_in_process();
  Results r = workload();
  rt.synchronize();
  EXPECT_EQ(mv::Runtime::validation_messages_in_process(), before) << "validation messages";
  return r;
}

std::string default_adapter() {
  const ScopedEnv env({{"MESHVK_NUM_DEVICES", "1"}, {"MESHVK_ADAPTERS", nullptr}});
  mv::Runtime rt;
  return rt.adapter_name();
}

void expect_bit_identical(const Results& want, const Results& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, values] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    ASSERT_EQ(values.size(), it->second.size()) << name;
    size_t differ = 0;
    for (size_t i = 0; i < values.size(); ++i)
      differ += std::memcmp(&values[i], &it->second[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << what << ": " << name << " differs in " << differ << " of "
                          << values.size() << " elements";
  }
}

// The reference, computed once: 1 adapter x 8 devices.
const Results& one_adapter() {
  static const Results r = run_on({}, nullptr);
  return r;
}

TEST(Adapters, TwoAdaptersSharingMemoryMatchOneAdapterBitForBit) {
  const std::string name = default_adapter();
  std::vector<mv::DeviceInfo> devices;
  const Results two = run_on({name, name}, "shared", &devices);
  ASSERT_EQ(devices.size(), 8u);
  for (const auto& d : devices) EXPECT_EQ(d.adapter_index, d.id / 4) << d.id;
  expect_bit_identical(one_adapter(), two, "2 adapters x 4 devices, shared memory");
}

TEST(Adapters, TwoAdaptersStagedThroughHostMatchOneAdapterBitForBit) {
  const std::string name = default_adapter();
  expect_bit_identical(one_adapter(), run_on({name, name}, "staged"),
                       "2 adapters x 4 devices, staged through host memory");
}

// The collectives at sizes that are not multiples of 4, in every dtype, over 3 adapters (3, 3
// and 2 devices) staged through host memory: bit for bit as on one adapter.
TEST(Adapters, CollectiveSweepOverThreeAdaptersMatchesOneAdapter) {
  const auto sweep_on = [](const char* adapters, const char* transport) {
    const ScopedEnv env({{"MESHVK_NUM_DEVICES", "8"},
                         {"MESHVK_ADAPTERS", adapters},
                         {"MESHVK_ADAPTER", nullptr},
                         {"MESHVK_ADAPTER_TRANSPORT", transport}});
    mv::Runtime rt;
    const uint64_t before = mv::Runtime::validation_messages_in_process();
    Results r = meshvk::testing::collective_sweep();
    rt.synchronize();
    EXPECT_EQ(mv::Runtime::validation_messages_in_process(), before) << "validation messages";
    return r;
  };
  const Results one = sweep_on(nullptr, nullptr);
  for (const auto& [name, values] : one) EXPECT_NE(name.rfind("MISMATCH", 0), 0u) << name;
  expect_bit_identical(one, sweep_on("0,0,0", "staged"), "3 adapters, staged");
}

TEST(Adapters, UnevenSplitGivesTheFirstAdaptersOneMore) {
  const ScopedEnv env(
      {{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", "0,0,0"}, {"MESHVK_ADAPTER", nullptr}});
  mv::Runtime rt;
  const std::vector<int> want = {0, 0, 0, 1, 1, 1, 2, 2};
  const auto devices = rt.devices();
  ASSERT_EQ(devices.size(), want.size());
  for (size_t d = 0; d < want.size(); ++d) EXPECT_EQ(devices[d].adapter_index, want[d]) << d;
  // A psum whose group spans all three adapters still sums in rank order.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto host = random_floats(8 * 64, 3);
  const auto x =
      mv::device_put(std::span<const float>(host), {8 * 64}, mv::NamedSharding(mesh, P("x")));
  const auto got =
      mv::shard_map([](const Array& v) { return mv::psum(v, "x"); }, mesh, {P("x")}, P("x"))(x)
          .to_host<float>();
  for (int i = 0; i < 64; ++i) {
    float s = host[i];
    for (int q = 1; q < 8; ++q) s += host[q * 64 + i];
    for (int p = 0; p < 8; ++p) EXPECT_EQ(got[p * 64 + i], s) << i;
  }
}

// What a bad setting says: the variable, what was wrong, and the adapters there are.
std::string error_of(std::initializer_list<std::pair<const char*, const char*>> vars,
                     mv::RuntimeOptions options = {}) {
  const ScopedEnv env(vars);
  try {
    mv::Runtime rt(options);
  } catch (const mv::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Adapters, BadSettingsNameTheValidAdapters) {
  const std::string name = default_adapter();
  const std::string n8 = "8";
  std::string e = error_of({{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", "0,99"}});
  EXPECT_NE(e.find("MESHVK_ADAPTERS=0,99"), std::string::npos) << e;
  EXPECT_NE(e.find("\"99\""), std::string::npos) << e;
  EXPECT_NE(e.find("0: " + name), std::string::npos) << e;
  e = error_of({{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", "0,no-such-gpu"}});
  EXPECT_NE(e.find("no-such-gpu"), std::string::npos) << e;
  EXPECT_NE(e.find("0: " + name), std::string::npos) << e;
  e = error_of({{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", "0,,0"}});
  EXPECT_NE(e.find("adapter 2 of 3 is empty"), std::string::npos) << e;
  EXPECT_NE(e.find("0: " + name), std::string::npos) << e;
  e = error_of({{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", ","}});
  EXPECT_NE(e.find("is empty"), std::string::npos) << e;
  e = error_of({{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", nullptr}},
               {.adapters = {"0", ""}});
  EXPECT_NE(e.find("RuntimeOptions::adapters: adapter 2 of 2 is empty"), std::string::npos) << e;
  e = error_of({{"MESHVK_NUM_DEVICES", "2"}, {"MESHVK_ADAPTERS", "0,0,0"}});
  EXPECT_NE(e.find("names 3 adapters but the runtime has 2 virtual devices"), std::string::npos)
      << e;
  e = error_of({{"MESHVK_NUM_DEVICES", "8"},
                {"MESHVK_ADAPTERS", "0,0"},
                {"MESHVK_ADAPTER_TRANSPORT", "mpi"}});
  EXPECT_NE(e.find("MESHVK_ADAPTER_TRANSPORT=mpi"), std::string::npos) << e;
  EXPECT_NE(e.find("shared"), std::string::npos) << e;
  // After all that, a runtime still starts.
  const ScopedEnv env({{"MESHVK_NUM_DEVICES", "8"},
                       {"MESHVK_ADAPTERS", "0,0"},
                       {"MESHVK_ADAPTER_TRANSPORT", nullptr}});
  mv::Runtime rt;
  EXPECT_EQ(rt.num_devices(), 8);
}

// Work that depends on another adapter's data is held on the host, not queued behind a wait
// that would stall lavapipe's queue; a wait on it times out with an Error while the input never
// comes, and it runs once the input arrives.
TEST(Adapters, HeldWorkRunsWhenItsInputArrivesAndTimesOutCleanly) {
  const ScopedEnv env(
      {{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", "0,0"}, {"MESHVK_WAIT_TIMEOUT_MS", "500"}});
  mv::Runtime rt;
  auto& state = *rt.state();
  ASSERT_EQ(state.num_adapters(), 2);
  ASSERT_NE(state.adapter_of(0), state.adapter_of(4));
  // Device 4 (adapter 1) waits for device 3's (adapter 0) next value, not submitted yet.
  const mv::detail::Fence input{3, state.last_submitted(3) + 1};
  mv::detail::Recording rec = state.begin(4);
  rec.wait_for(input);
  const mv::detail::Fence held = state.submit(std::move(rec));
  // Device 4's queue is not stalled: other work of adapter 1 still runs (device 5 shares no
  // stream with it; lavapipe would block the whole queue on an unsatisfied wait).
  const auto five = mv::device_put(mv::arange(4.f), mv::SingleDeviceSharding(5, rt.platform()));
  EXPECT_EQ((five * 2.0f).to_host<float>(), (std::vector<float>{0, 2, 4, 6}));
  try {
    state.wait(held, "the test's held submission");
    ADD_FAILURE() << "the held submission ran before its input";
  } catch (const mv::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("timed out"), std::string::npos) << what;
    EXPECT_NE(what.find("held on the host"), std::string::npos) << what;
    EXPECT_NE(what.find("device 3 value"), std::string::npos) << what;
  }
  EXPECT_FALSE(state.reached(held));
  state.signal_from_host(3);  // the input arrives
  state.wait(held, "the test's held submission");
  EXPECT_TRUE(state.reached(held));
}

// A runtime destroyed while held work can never run (its input never comes) and after an
// exception still shuts down: the communication thread stops, nothing leaks into validation.
TEST(Adapters, ShutdownWithWorkHeldForeverAndAfterAThrow) {
  const uint64_t before = mv::Runtime::validation_messages_in_process();
  {
    const ScopedEnv env({{"MESHVK_NUM_DEVICES", "8"},
                         {"MESHVK_ADAPTERS", "0,0"},
                         {"MESHVK_WAIT_TIMEOUT_MS", "300"}});
    mv::Runtime rt;
    auto& state = *rt.state();
    mv::detail::Recording rec = state.begin(6);
    rec.wait_for(mv::detail::Fence{1, state.last_submitted(1) + 1});
    state.submit(std::move(rec));
  }
  try {
    const ScopedEnv env({{"MESHVK_NUM_DEVICES", "8"}, {"MESHVK_ADAPTERS", "0,0"}});
    mv::Runtime rt;
    const auto mesh = mv::make_mesh({8}, {"x"});
    const auto x = mv::device_put(mv::arange(8.f * 4096), mv::NamedSharding(mesh, P("x")));
    const auto y =
        mv::shard_map([](const Array& v) { return mv::psum(v, "x"); }, mesh, {P("x")}, P("x"))(x);
    throw std::runtime_error("thrown while the psum may still run");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(mv::Runtime::validation_messages_in_process(), before);
}

}  // namespace

namespace {

// Timing, not checking, so not run by default:
//   build/bin/test_adapters --gtest_also_run_disabled_tests --gtest_filter='*CopySpeed*'
// 64 MiB from device 0 to device 1 (same VkDevice) and to device 4 (the other adapter).
TEST(Adapters, DISABLED_CopySpeed64MiB) {
  for (const char* transport : {"shared", "staged"}) {
    const ScopedEnv env({{"MESHVK_NUM_DEVICES", "8"},
                         {"MESHVK_ADAPTERS", "0,0"},
                         {"MESHVK_ADAPTER_TRANSPORT", transport}});
    mv::Runtime rt;
    const auto x =
        mv::zeros({16 << 20}, mv::DType::float32, mv::SingleDeviceSharding(0, rt.platform()));
    rt.synchronize();
    for (const int to : {1, 4}) {
      std::vector<double> ms;
      for (int rep = 0; rep < 7; ++rep) {
        const auto start = std::chrono::steady_clock::now();
        const auto y = mv::device_put(x, mv::SingleDeviceSharding(to, rt.platform()));
        rt.synchronize();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf("64 MiB device 0 -> device %d (%s, %s): median %.2f ms, best %.2f ms\n", to,
                  to < 4 ? "same VkDevice" : "other adapter", transport, ms[ms.size() / 2],
                  ms.front());
    }
  }
}

}  // namespace

// profile::Options::sample_replays (and MESHVK_PROFILE_SAMPLE): one jit replay in N of each
// function is profiled. Replays 1, N+1, 2N+1, ... carry exactly the device spans and submits of
// an unsampled profile's replay; the others only a "replay (not sampled)" host span, and every
// replay's host span carries its number.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "meshvk/error.hpp"
#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace prof = meshvk::profile;
using mv::Array;
using mv::P;

namespace {

int64_t monotonic_ns() {  // the profile's host clock: CLOCK_MONOTONIC
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The tests set these while lavapipe's threads run (and read the environment). Adding a variable
// may move glibc's environ array under a reader (a crash seen under ASan in other tests);
// replacing an existing one's value does not. So both exist, empty (= unset), from the start.
const bool variables_exist = [] {
  setenv("MESHVK_PROFILE_SAMPLE", "", 0);
  setenv("MESHVK_MERGE_REPLAYS", "", 0);
  return true;
}();

constexpr const char* kProgram = "jit(sampled)";

// What one replay left in the profile: device spans and host submits of the jit function.
struct Replay {
  std::map<std::string, int> device;  // "kind name" -> count
  int submits = 0;
  std::string host_name;  // its "replay" host span
  uint64_t number = 0;    // that span's value
  bool operator==(const Replay&) const = default;
};

// Traces a program with a collective (profiling on, so its command buffers carry timestamps),
// then replays it `replays` times under `options`; what each replay's call window holds.
std::vector<Replay> profile_replays(const prof::Options& options, int replays) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  auto f = mv::jit(
      [mesh](const Array& x) {
        return mv::shard_map([](const Array& v) { return mv::psum(2.f * mv::sin(v) + 1.f, "x"); },
                             mesh, {P("x")}, P())(x);
      },
      mv::JitOptions{.name = "sampled"});
  const Array x = mv::device_put(host_array(random_floats(8 * 256, 5), {8 * 256}),
                                 mv::NamedSharding(mesh, P("x")));
  prof::start();
  f(x).to_host<float>();  // the trace
  test_runtime().synchronize();
  prof::stop();

  prof::start(options);
  std::vector<std::pair<int64_t, int64_t>> calls;
  for (int i = 0; i < replays; ++i) {
    const int64_t t0 = monotonic_ns();
    f(x).to_host<float>();
    calls.push_back({t0, monotonic_ns()});
  }
  prof::stop();
  EXPECT_EQ(prof::counters().dropped_spans, 0u);

  std::vector<Replay> out(calls.size());
  for (const auto& e : prof::events()) {
    const auto* s = std::get_if<prof::Span>(&e);
    if (!s || std::string(s->program) != kProgram) continue;
    int in = -1;
    for (size_t i = 0; i < calls.size(); ++i)
      if (s->start_ns >= calls[i].first && s->end_ns <= calls[i].second) in = static_cast<int>(i);
    EXPECT_GE(in, 0) << s->name << " lies outside every replay";
    if (in < 0) continue;
    Replay& r = out[in];
    if (s->device >= 0) {
      r.device[std::string(prof::kind_name(s->kind)) + " " + s->name] += 1;
    } else if (std::string(s->name) == "submit") {
      ++r.submits;
    } else if (std::string(s->name).rfind("replay", 0) == 0) {
      EXPECT_TRUE(r.host_name.empty()) << "two replay spans in replay " << in + 1;
      r.host_name = s->name;
      r.number = s->value;
    }
  }
  return out;
}

}  // namespace

// Replays as one submission and stream by stream (engine/src/runtime/merged_submit.cpp).
class ProfileSampling : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(MergedOrNot, ProfileSampling, ::testing::Values("1", "0"));

TEST_P(ProfileSampling, ReplaysOneInNCarryExactlyTheSpansOfAnUnsampledProfile) {
  const ScopedEnv merge("MESHVK_MERGE_REPLAYS", GetParam());
  constexpr int kReplays = 7;
  const auto every = profile_replays(prof::Options{.sample_replays = 1}, kReplays);
  const auto sampled = profile_replays(prof::Options{.sample_replays = 3}, kReplays);
  ASSERT_EQ(every.size(), size_t{kReplays});
  ASSERT_EQ(sampled.size(), size_t{kReplays});
  ASSERT_FALSE(every[0].device.empty());
  EXPECT_GT(every[0].device.size(), 2u) << "kernels, copies and the psum's steps";
  EXPECT_GT(every[0].submits, 0);
  for (int i = 0; i < kReplays; ++i) {
    const uint64_t number = static_cast<uint64_t>(i) + 1;
    EXPECT_EQ(every[i].number, number);
    EXPECT_EQ(every[i].host_name, "replay");
    EXPECT_EQ(every[i].device, every[0].device) << "replay " << number;
    EXPECT_EQ(sampled[i].number, number);
    if (i % 3 == 0) {  // replays 1, 4, 7
      EXPECT_EQ(sampled[i], every[i]) << "replay " << number << " is sampled";
    } else {
      EXPECT_EQ(sampled[i].host_name, "replay (not sampled)") << "replay " << number;
      EXPECT_TRUE(sampled[i].device.empty()) << "replay " << number;
      EXPECT_EQ(sampled[i].submits, 0) << "replay " << number;
    }
  }
  // The Chrome trace (and so the inspector) shows which replays were left out, by number.
  const std::string json = prof::chrome_trace_json();
  EXPECT_NE(json.find("replay (not sampled)"), std::string::npos);
  EXPECT_NE(json.find("\"value\":6"), std::string::npos);
}

TEST(ProfileSamplingOptions, TheEnvironmentSetsNAndABadValueIsAnError) {
  {
    const ScopedEnv env("MESHVK_PROFILE_SAMPLE", "2");
    const auto sampled = profile_replays(prof::Options{}, 4);
    ASSERT_EQ(sampled.size(), 4u);
    EXPECT_EQ(sampled[0].host_name, "replay");
    EXPECT_EQ(sampled[1].host_name, "replay (not sampled)");
    EXPECT_EQ(sampled[2].host_name, "replay");
    EXPECT_EQ(sampled[3].host_name, "replay (not sampled)");
    // Options win over the environment.
    const auto every = profile_replays(prof::Options{.sample_replays = 1}, 2);
    EXPECT_EQ(every.at(1).host_name, "replay");
  }
  for (const char* bad : {"0", "x", "-3", "1000001"}) {
    const ScopedEnv env("MESHVK_PROFILE_SAMPLE", bad);
    try {
      prof::start();
      ADD_FAILURE() << "MESHVK_PROFILE_SAMPLE=" << bad << " was taken";
      prof::stop();
    } catch (const mv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("MESHVK_PROFILE_SAMPLE"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(prof::enabled()) << "a refused start() leaves the profiler off";
  }
}

TEST(ProfileSamplingOptions, NumbersRestartWithEachSession) {
  // Two sessions of 2 replays at N = 2: each session's first replay is sampled.
  for (int session = 0; session < 2; ++session) {
    const auto r = profile_replays(prof::Options{.sample_replays = 2}, 2);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].number, 1u);
    EXPECT_EQ(r[0].host_name, "replay");
    EXPECT_FALSE(r[0].device.empty());
    EXPECT_EQ(r[1].host_name, "replay (not sampled)");
  }
}

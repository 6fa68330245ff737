// Replays as one submission on CPU adapters whose streams share one queue
// (engine/src/runtime/merged_submit.cpp): the same bits as stream-by-stream submission, with and
// without transfer streams, and profiles with the same spans, each inside its replay.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"
#include "runtime/runtime_state.hpp"
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

// Collectives of every kind between kernels: submissions on every stream that wait on each other.
auto program(const mv::Mesh& mesh) {
  return mv::jit([mesh](const Array& x) {
    const auto body = [](const Array& v) {
      const Array s = mv::psum(mv::sin(v) * 2.0f + 1.0f, "a");
      const Array g = mv::all_gather(s, "b", 0, true);
      const Array r = mv::psum_scatter(g, "b", 0, true);
      return mv::ppermute(r, "a", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}) + v;
    };
    return mv::shard_map(body, mesh, {P("a", "b")}, P("a", "b"))(x);
  });
}

std::vector<std::vector<float>> replays(const mv::Mesh& mesh, int calls) {
  auto f = program(mesh);
  std::vector<std::vector<float>> out;
  for (int call = 0; call < calls; ++call) {
    const auto host = random_floats(64 * 256, 90 + call, -10.f, 10.f);
    const Array x =
        mv::device_put(host_array(host, {64, 256}), mv::NamedSharding(mesh, P("a", "b")));
    out.push_back(f(x).to_host<float>());
  }
  return out;
}

}  // namespace

TEST(MergedReplay, SameBitsAsStreamByStreamWithAndWithoutTransferStreams) {
  if (std::getenv("MESHVK_TRANSFER_QUEUE"))
    GTEST_SKIP() << "MESHVK_TRANSFER_QUEUE overrides the option";
  for (const bool transfer : {false, true}) {
    mv::Runtime rt({.transfer_queue = transfer});
    auto& state = *rt.state();
    const mv::Mesh mesh = mv::make_mesh({4, 2}, {"a", "b"});
    std::vector<std::vector<float>> separate;
    {
      const ScopedEnv off("MESHVK_MERGE_REPLAYS", "0");
      EXPECT_FALSE(state.merges_replays());
      separate = replays(mesh, 4);
    }
    ASSERT_TRUE(state.merges_replays()) << "lavapipe: one queue, a CPU adapter";
    const uint64_t before = state.merged_replays.load();
    const auto merged = replays(mesh, 4);
    EXPECT_EQ(state.merged_replays.load() - before, 3u) << "a trace, then 3 replays";
    ASSERT_EQ(merged.size(), separate.size());
    for (size_t c = 0; c < merged.size(); ++c) {
      ASSERT_EQ(merged[c].size(), separate[c].size());
      EXPECT_EQ(std::memcmp(merged[c].data(), separate[c].data(), merged[c].size() * 4), 0)
          << "call " << c << ", transfer streams " << transfer;
    }
  }
}

// Where replays merge, captured work is recorded in secondary command buffers and a replay runs
// them from one primary; a replay that goes out stream by stream (MESHVK_MERGE_REPLAYS=0 after
// the trace) or profiled (profiling started after the trace) runs the same secondaries, each in
// a primary of its own: the same bits every way.
TEST(MergedReplay, SecondariesReplayEveryWay) {
  auto& state = *test_runtime().state();
  ASSERT_TRUE(state.merges_replays());
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"a", "b"});
  std::vector<std::vector<float>> reference;
  {
    const ScopedEnv off("MESHVK_MERGE_REPLAYS", "0");
    reference = replays(mesh, 4);  // primaries throughout
  }
  auto f = program(mesh);
  auto call = [&](int c) {
    const auto host = random_floats(64 * 256, 90 + c, -10.f, 10.f);
    const Array x =
        mv::device_put(host_array(host, {64, 256}), mv::NamedSharding(mesh, P("a", "b")));
    const auto got = f(x).to_host<float>();
    ASSERT_EQ(got.size(), reference[c].size());
    EXPECT_EQ(std::memcmp(got.data(), reference[c].data(), got.size() * 4), 0) << "call " << c;
  };
  const uint64_t secondaries = state.captured_secondaries.load();
  const uint64_t merged = state.merged_replays.load();
  call(0);  // the trace
  EXPECT_GT(state.captured_secondaries.load(), secondaries) << "the trace records secondaries";
  {
    const ScopedEnv off("MESHVK_MERGE_REPLAYS", "0");
    call(1);
  }
  EXPECT_EQ(state.merged_replays.load(), merged) << "call 1 went out stream by stream";
  prof::start();
  call(2);
  prof::stop();
  call(3);
  EXPECT_EQ(state.merged_replays.load(), merged + 2) << "calls 2 and 3 merged";
}

// A profiled merged replay has the device spans of a stream-by-stream one, and every span lies
// inside its own replay's call.
TEST(MergedReplay, ProfilesKeepEverySpan) {
  auto& state = *test_runtime().state();
  ASSERT_TRUE(state.merges_replays());
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"a", "b"});
  auto spans_of_replays = [&](const char* merge) {
    const ScopedEnv env("MESHVK_MERGE_REPLAYS", merge);
    prof::start();
    auto f = program(mesh);
    const Array x = mv::device_put(host_array(random_floats(64 * 256, 3), {64, 256}),
                                   mv::NamedSharding(mesh, P("a", "b")));
    f(x).to_host<float>();  // trace
    test_runtime().synchronize();
    prof::stop();
    prof::start();
    std::vector<std::pair<int64_t, int64_t>> calls;
    for (int i = 0; i < 3; ++i) {
      const int64_t t0 = monotonic_ns();
      f(x).to_host<float>();
      calls.push_back({t0, monotonic_ns()});
    }
    prof::stop();
    std::map<std::string, int> kinds;
    for (const auto& e : prof::events())
      if (const auto* s = std::get_if<prof::Span>(&e); s && s->device >= 0) {
        kinds[std::string(prof::kind_name(s->kind)) + " " + s->name] += 1;
        bool inside = false;
        for (const auto& [a, b] : calls) inside |= s->start_ns >= a && s->end_ns <= b;
        EXPECT_TRUE(inside) << s->name << " on device " << s->device
                            << " lies outside every replay";
      }
    return kinds;
  };
  const auto separate = spans_of_replays("0");
  const auto merged = spans_of_replays("1");
  EXPECT_FALSE(merged.empty());
  EXPECT_EQ(merged, separate);
}

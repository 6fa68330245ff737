// Issue 26 (inspector v3), through the inspector's model functions without a window: the bytes
// and GB/s of one-shot collectives, invocations of a job's processes grouped into the right
// rows, and the warning a trace with dropped spans gets.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include <meshvk/meshvk.hpp>
#include <meshvk/profile.hpp>

#include "test_support.hpp"
#include "timeline_model.hpp"
#include "trace_json.hpp"

namespace ins = inspector;
using ins::SpanKind;

namespace {

// One event of a meshvk Chrome trace: an "X" span on lane `tid` of process `pid`.
std::string x_event(const std::string& name, const char* cat, int tid, double ts, double dur,
                    const std::string& op, uint64_t bytes = 0) {
  std::string s = R"({"ph":"X","name":")" + name + R"(","cat":")" + cat + R"(","pid":1,"tid":)" +
                  std::to_string(tid) + R"(,"ts":)" + std::to_string(ts) + R"(,"dur":)" +
                  std::to_string(dur) + R"(,"args":{"op":")" + op + "\"";
  if (bytes) s += R"(,"bytes":)" + std::to_string(bytes);
  return s + "}}";
}

// A trace as process `process` of a job writes it: devices `first`..`first + 3`, each running
// `invocations` one-shot all-reduces (a step holding a peer_fold kernel that says its bytes, as
// the engine recorded them before the step carried them) with a kernel of another op between
// them. Invocation k on device d starts at offset + k * 100 + d us.
std::string one_shot_trace(int process, int first, int invocations, double offset,
                           const std::string& other_data = "") {
  std::string t = R"({"otherData":{"clock_origin_ns":0)" + other_data + R"(},"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"meshvk process )" +
                  std::to_string(process) + R"(, runtime 1: llvmpipe"}})";
  for (int d = first; d < first + 4; ++d)
    t += ",\n" + std::string(R"({"name":"thread_name","ph":"M","pid":1,"tid":)") +
         std::to_string(d) + R"(,"args":{"name":"CPU )" + std::to_string(d) + R"("}})";
  for (int k = 0; k < invocations; ++k)
    for (int d = first; d < first + 4; ++d) {
      const double at = offset + k * 100 + d;
      t += ",\n" + x_event("fusion", "kernel", d, at, 10, "add");
      t += ",\n" + x_event("all_reduce(one_shot)", "collective", d, at + 20, 30, "all-reduce");
      t += ",\n" + x_event("peer_fold", "kernel", d, at + 21, 28, "all-reduce", 5 * 4096);
    }
  return t + "\n]}";
}

}  // namespace

// Issue 26.1: a one-shot all-reduce copies nothing; its fold kernel reads its peers' buffers.
// Traces written before the step carried its bytes still give them, from the fold inside it.
TEST(InspectorV3, OneShotCollectivesHaveBytesAndBandwidth) {
  const ins::TraceLoad load = ins::load_chrome_trace(one_shot_trace(0, 0, 2, 0));
  ASSERT_EQ(load.error, "");
  const auto invocations = ins::collective_invocations(load.data);
  ASSERT_EQ(invocations.size(), 2u);
  for (const auto& inv : invocations) {
    EXPECT_EQ(inv.spans.size(), 4u);
    EXPECT_EQ(inv.bytes, 4u * 5 * 4096);
    EXPECT_GT(inv.gbps(), 0);
  }
  const auto rows = load.data.collectives();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].bytes, 8u * 5 * 4096);
  EXPECT_GT(rows[0].gbps(), 0);
}

// The engine's own steps: a psum over 'b' folds its peers in place (no copies), and its step
// spans carry the bytes of the fold, live and in the trace file.
TEST(InspectorV3, ProfiledOneShotPsumStepsCarryTheirBytes) {
  ScopedEnv algo("MESHVK_COLLECTIVE_ALGO", nullptr);
  meshvk::profile::start();
  const auto mesh = meshvk::make_mesh({4, 2}, {"a", "b"});
  const auto x = meshvk::device_put(meshvk::arange(64.f).reshape({8, 8}),
                                    meshvk::NamedSharding(mesh, meshvk::P("a", "b")));
  const auto y = meshvk::shard_map([](const meshvk::Array& v) { return meshvk::psum(v, "b"); },
                                   mesh, {meshvk::P("a", "b")}, meshvk::P("a", meshvk::None))(x);
  y.to_host<float>();
  meshvk::profile::stop();
  const auto events = meshvk::profile::events();
  const std::string json = meshvk::profile::chrome_trace_json();
  meshvk::profile::clear();
  size_t steps = 0;
  for (const auto& e : events)
    if (const auto* s = std::get_if<meshvk::profile::Span>(&e);
        s && s->kind == meshvk::profile::Kind::collective) {
      EXPECT_GT(s->bytes, 0u) << s->name << " on device " << s->device;
      ++steps;
    }
  EXPECT_GE(steps, 8u);
  const ins::TraceLoad load = ins::load_chrome_trace(json);
  ASSERT_EQ(load.error, "");
  const auto invocations = ins::collective_invocations(load.data);
  ASSERT_EQ(invocations.size(), 1u);
  EXPECT_GT(invocations[0].bytes, 0u);
  EXPECT_GT(invocations[0].gbps(), 0);
}

// Issue 26.1: the traces of a job's two processes on one timeline. Process 1 runs a whole
// invocation and a half behind process 0 (its groups exchange nothing with process 0's), so
// their steps interleave; each invocation is still one row of the 8 devices.
TEST(InspectorV3, TwoProcessTracesGroupInvocationsAcrossProcesses) {
  std::vector<ins::TraceLoad> loads;
  loads.push_back(ins::load_chrome_trace(one_shot_trace(0, 0, 4, 0)));
  loads.push_back(ins::load_chrome_trace(one_shot_trace(1, 4, 4, 150)));
  ASSERT_EQ(loads[0].error, "");
  ASSERT_EQ(loads[1].error, "");
  const ins::TraceLoad merged = ins::merge_trace_loads(std::move(loads));
  ASSERT_EQ(merged.error, "");
  const auto invocations = ins::collective_invocations(merged.data);
  ASSERT_EQ(invocations.size(), 4u);
  for (size_t k = 0; k < invocations.size(); ++k) {
    const auto& inv = invocations[k];
    EXPECT_EQ(inv.spans.size(), 8u) << "invocation " << k;
    EXPECT_EQ(inv.devices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})) << "invocation " << k;
    EXPECT_EQ(inv.start_ns, static_cast<int64_t>((k * 100 + 20) * 1000)) << "invocation " << k;
    EXPECT_EQ(inv.bytes, 8u * 5 * 4096);
  }
}

// Issue 26.2: a trace whose otherData says the profiler dropped spans gets a warning saying how
// many and what that means; a job's traces add up; a complete trace gets none.
TEST(InspectorV3, DroppedSpansGiveAWarning) {
  const ins::TraceLoad load =
      ins::load_chrome_trace(one_shot_trace(0, 0, 1, 0, R"(,"dropped_spans":44492)"));
  ASSERT_EQ(load.error, "");
  EXPECT_EQ(load.data.losses.device_spans, 44492u);
  const std::string warning = ins::losses_warning(load.data.losses);
  EXPECT_NE(warning.find("44,492 device spans dropped"), std::string::npos) << warning;
  EXPECT_NE(warning.find("not drawn"), std::string::npos) << warning;

  std::vector<ins::TraceLoad> loads;
  loads.push_back(ins::load_chrome_trace(
      one_shot_trace(0, 0, 1, 0, R"(,"dropped_spans":2,"dropped_events":1000,"dropped_flows":3)")));
  loads.push_back(ins::load_chrome_trace(one_shot_trace(1, 4, 1, 0, R"(,"dropped_spans":5)")));
  const ins::TraceLoad merged = ins::merge_trace_loads(std::move(loads));
  ASSERT_EQ(merged.error, "");
  EXPECT_EQ(merged.data.losses.device_spans, 7u);
  EXPECT_EQ(merged.data.losses.events, 1000u);
  EXPECT_EQ(merged.data.losses.flows, 3u);
  EXPECT_NE(ins::losses_warning(merged.data.losses).find("1,000 events overwritten"),
            std::string::npos);

  const ins::TraceLoad clean =
      ins::load_chrome_trace(one_shot_trace(0, 0, 1, 0, R"(,"dropped_spans":0)"));
  EXPECT_EQ(ins::losses_warning(clean.data.losses), "");
  // Not a count: left alone, as other otherData entries are.
  const ins::TraceLoad odd =
      ins::load_chrome_trace(one_shot_trace(0, 0, 1, 0, R"(,"dropped_spans":"many")"));
  EXPECT_EQ(odd.error, "");
  EXPECT_EQ(odd.data.losses.device_spans, 0u);
  EXPECT_EQ(ins::thousands(1234567), "1,234,567");
  EXPECT_EQ(ins::thousands(999), "999");
}

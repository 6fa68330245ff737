// Issue 26 (inspector v3), through the inspector's model functions without a window: the bytes
// and GB/s of one-shot collectives, invocations of a job's processes grouped into the right
// rows, the warning a trace with dropped spans gets, and the picture of a value inside
// shard_map (each device's own block).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <meshvk/meshvk.hpp>
#include <meshvk/profile.hpp>
#include <meshvk/shard_map_watch.hpp>

#include "scenario_runner.hpp"
#include "sharding_picture.hpp"
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

// Issue 26.3 (jax-ml/jax#23936): inside shard_map a value is each device's own block. Its
// sharding (manual axes, spec P()) says every device holds the whole local shape, which the
// picture once drew as one tile replicated on all 8 devices; it is one block per device.
TEST(InspectorV3, ShardMapLocalValuesAreOneBlockPerDevice) {
  const auto mesh = meshvk::make_mesh({4, 2}, {"a", "b"});
  const auto x = meshvk::arange(64.f).reshape({8, 8});
  meshvk::Array local;
  meshvk::shard_map(
      [&](const meshvk::Array& v) {
        local = v;
        return v * 2.f;
      },
      mesh, {meshvk::P("a", "b")}, meshvk::P("a", "b"))(x);
  ASSERT_TRUE(local.valid());
  const ins::ShardingPicture pic =
      ins::make_sharding_picture(local.shape(), local.sharding(), local.dtype());
  ASSERT_EQ(pic.error, "");
  ASSERT_EQ(pic.tiles.size(), 8u) << "one block per device, not one replicated tile";
  ASSERT_EQ(pic.slices.size(), 8u);
  std::set<uint32_t> colors;
  for (int d = 0; d < 8; ++d) {
    const ins::PictureTile& t = pic.tiles[d];
    EXPECT_EQ(t.devices, std::vector<int>{d});
    EXPECT_EQ(t.label, "CPU " + std::to_string(d) + " local");
    EXPECT_EQ(pic.slices[t.slice].header, "CPU " + std::to_string(d) +
                                              " local block (a=" + std::to_string(d / 2) +
                                              ", b=" + std::to_string(d % 2) + ")");
    EXPECT_EQ(meshvk::index_to_string(t.index), "[0:2, 0:4]") << "the whole local block";
    colors.insert(t.rgb);
  }
  EXPECT_EQ(colors.size(), 8u) << "different data, different colours";
  // Each device's block holds that device's data: its piece of x.
  const auto shards = local.addressable_shards();
  ASSERT_EQ(shards.size(), 8u);
  for (const auto& shard : shards) {
    const int a = shard.device / 2, b = shard.device % 2;
    std::vector<float> want;
    for (int r = 2 * a; r < 2 * a + 2; ++r)
      for (int c = 4 * b; c < 4 * b + 4; ++c) want.push_back(static_cast<float>(r * 8 + c));
    EXPECT_EQ(shard.data.to_host<float>(), want) << "device " << shard.device;
  }

  // Manual over 'a' only: devices at one 'a' coordinate share a picture, laid out along 'b'.
  meshvk::shard_map(
      [&](const meshvk::Array& v) {
        local = v;
        return v;
      },
      mesh, {meshvk::P("a")}, meshvk::P("a"), {"a"})(x);
  const ins::ShardingPicture part =
      ins::make_sharding_picture(local.shape(), local.sharding(), local.dtype());
  ASSERT_EQ(part.error, "");
  EXPECT_EQ(part.slices.size(), 4u);
  for (const auto& t : part.tiles)
    EXPECT_EQ(t.devices.size(), 2u) << "replicated along the automatic 'b': " << t.label;
  EXPECT_EQ(part.slices[1].header.substr(0, 22), "CPU 2,3 local block (a");

  // An array outside shard_map draws as before.
  const ins::ShardingPicture outside = ins::make_sharding_picture(
      x.shape(), meshvk::NamedSharding(mesh, meshvk::P()), meshvk::DType::float32);
  ASSERT_EQ(outside.tiles.size(), 1u);
  EXPECT_EQ(outside.tiles[0].devices.size(), 8u);
  EXPECT_EQ(outside.slices[0].header, "");
}

// Issue 26.5: search matches are marked in the lanes and never lost in a run of thin spans:
// each is an item of its own, at least min_match_px wide.
TEST(InspectorV3, SearchMatchesStandOutInTheLanes) {
  ins::TraceData t;
  const int lane = t.lane(1, 0, 0, "CPU 0");
  for (int k = 0; k < 100; ++k) {
    ins::TraceSpan s;
    s.lane = lane;
    s.kind = SpanKind::kernel;
    s.name = k == 50 ? "matmul" : "fusion";
    s.start_ns = k * 10;
    s.end_ns = k * 10 + 5;
    t.add_span(s);
  }
  t.finish();
  ins::TrackGeometry g;
  g.view_start_ns = 0;
  g.view_span_ns = 1000;
  g.track_w = 100;  // a span is 0.5 px: every one merges into runs
  const auto plain = ins::layout_lane(t, lane, g, 16, {});
  for (const auto& it : plain.items) EXPECT_FALSE(it.matched);
  const auto matches = ins::search_spans(t, "matmul");
  ASSERT_EQ(matches.size(), 1u);
  const auto layout = ins::layout_lane(t, lane, g, 16, {}, ins::match_mask(t, matches));
  int found = 0;
  for (const auto& it : layout.items) {
    if (!it.matched) continue;
    ++found;
    EXPECT_EQ(it.count, 1u);
    EXPECT_EQ(it.span, matches[0]);
    EXPECT_GE(it.x1 - it.x0, g.min_match_px);
    EXPECT_NEAR((it.x0 + it.x1) / 2, 50.5f, 0.01f) << "widened about its (1 px) middle";
  }
  EXPECT_EQ(found, 1);
  EXPECT_TRUE(ins::match_mask(t, {}).empty());
}

// Issue 26.2, live: replays run while the device is behind keep their ticks in saved slots
// (kSlotsPerBuffer runs to a buffer, up to kMaxSlots; 64 were passed within 20 s of a 3,000-step
// scenario while the inspector drew, when the machine stalled). A run of many replays without
// waiting loses none, and every replay's kernels come back with their own times (not another
// slot's). The device falls that far behind only under load, so this checks the slots' reading
// and writing, not the limit itself.
TEST(InspectorV3, ProfilerKeepsEveryReplayOfALongRun) {
  const auto mesh = meshvk::make_mesh({8}, {"x"});
  const auto x = meshvk::device_put(meshvk::arange(8192.f).reshape({64, 128}),
                                    meshvk::NamedSharding(mesh, meshvk::P("x")));
  const auto f = meshvk::jit([](const meshvk::Array& a) { return meshvk::tanh(a * 2.f + 1.f); },
                             {.name = "long_run"});
  meshvk::profile::start();
  f(x).to_host<float>();  // the trace: its captured buffers carry timestamps
  constexpr int kReplays = 300;
  meshvk::Array y;
  for (int i = 0; i < kReplays; ++i) y = f(x);
  y.to_host<float>();
  meshvk::profile::stop();
  const auto counters = meshvk::profile::counters();
  const auto events = meshvk::profile::events();
  meshvk::profile::clear();
  EXPECT_EQ(counters.dropped_spans, 0u);
  std::map<int, std::vector<int64_t>> starts;  // kernel starts per device
  for (const auto& e : events)
    if (const auto* s = std::get_if<meshvk::profile::Span>(&e);
        s && s->kind == meshvk::profile::Kind::kernel &&
        std::string(s->program) == "jit(long_run)") {
      EXPECT_LE(s->start_ns, s->end_ns);
      starts[s->device].push_back(s->start_ns);
    }
  ASSERT_EQ(starts.size(), 8u);
  for (auto& [device, times] : starts) {
    EXPECT_EQ(times.size() % (kReplays + 1), 0u) << "device " << device << ": " << times.size();
    EXPECT_GE(times.size(), static_cast<size_t>(kReplays + 1));
    std::sort(times.begin(), times.end());
    EXPECT_EQ(std::adjacent_find(times.begin(), times.end()), times.end())
        << "two replays with the same ticks on device " << device;
  }
}

// Issue 26.6: a range's totals by op name (whatever lane ran it), the ruler's unit for the
// cursor's time, and the view arithmetic of Perfetto's keys.
TEST(InspectorV3, RangeTotalsByOpAndTheRulersUnit) {
  std::string t = R"({"otherData":{"clock_origin_ns":0},"traceEvents":[
{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"CPU 0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"CPU 1"}})";
  for (int d = 0; d < 2; ++d) {
    t += ",\n" + x_event("fusion", "kernel", d, 0, 10, "add");
    t += ",\n" + x_event("matmul", "kernel", d, 20, 30, "dot");
    t += ",\n" + x_event("all_reduce(ring)", "collective", d, 60, 20, "all-reduce", 1024);
    t += ",\n" + x_event("copy", "copy", d, 62, 5, "all-reduce", 1024);  // nested in the step
  }
  const auto load = ins::load_chrome_trace(t + "\n]}");
  ASSERT_TRUE(load.error.empty()) << load.error;
  // 5..70 us: half of each add, every dot, 10 us of each all-reduce step (its copy nested).
  const auto rows = ins::range_totals_by_op(load.data, 5000, 70000);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].op, "dot");  // most time first
  EXPECT_EQ(rows[0].count, 2u);
  EXPECT_EQ(rows[0].devices, 2);
  EXPECT_NEAR(rows[0].seconds, 60e-6, 1e-9);
  EXPECT_EQ(rows[1].op, "all-reduce");
  EXPECT_EQ(rows[1].count, 2u) << "the nested copies are inside their steps' time";
  EXPECT_NEAR(rows[1].seconds, 20e-6, 1e-9);
  EXPECT_EQ(rows[1].bytes, 2048u);
  EXPECT_EQ(rows[2].op, "add");
  EXPECT_NEAR(rows[2].seconds, 10e-6, 1e-9);

  // Ticks 0.1 ms apart: the cursor's time in ms, two decimals finer (it was "3117326 us"
  // beside a ruler in ms).
  EXPECT_EQ(ins::format_ruler_time(3117326e3, 1e8), "3.1 s");
  EXPECT_EQ(ins::format_ruler_time(3117326e3, 1e5, 2), "3117.326 ms");
  EXPECT_EQ(ins::format_ruler_time(12.3456e6, 5e4, 2), "12345.60 us");
  EXPECT_EQ(ins::format_ruler_time(1500, 200), "1.5 us");

  // W keeps the time under the pointer where it is; F leaves a tenth either side.
  const ins::TimeView v{1000, 1000};
  const auto in = ins::zoom_view(v, 1250, 0.5);
  EXPECT_DOUBLE_EQ(in.span_ns, 500);
  EXPECT_DOUBLE_EQ((1250 - in.start_ns) / in.span_ns, 0.25);
  EXPECT_DOUBLE_EQ(ins::pan_view(v, 0.2).start_ns, 1200);
  const auto fit = ins::fit_view(10000, 20000);
  EXPECT_DOUBLE_EQ(fit.start_ns, 9000);
  EXPECT_DOUBLE_EQ(fit.span_ns, 12000);
}

// Issue 26.8: a shard_map's program is named by the user's function, from the call site its
// first collective line records; a lambda by its line; a body without collectives by nothing.
TEST(InspectorV3, ShardMapProgramsAreNamedByTheUsersFunction) {
  EXPECT_EQ(ins::shard_map_program_name(
                "shard_map on mesh (8,) ('x',)\n"
                "  in0: float32[32] PartitionSpec('x',) -> local float32[4]\n"
                "  collective-permute (ppermute) over ('x',): pairs, local float32[4], 16 B per "
                "device  # ppermute (explicit, in shard_map) - scaling_shard_map.cpp:83 "
                "(collective_matmul_allgather_lhs_contracting)\n"),
            "shard_map(collective_matmul_allgather_lhs_contracting)");
  EXPECT_EQ(ins::shard_map_program_name(
                "shard_map on mesh (8,) ('x',)\n"
                "  all-reduce (psum) over ('x',): replica_groups={{0,...,7}}  # psum (explicit, in "
                "shard_map) - manual_parallelism.cpp:84 (operator) [backward]\n"),
            "shard_map(lambda at manual_parallelism.cpp:84)");
  EXPECT_EQ(ins::shard_map_program_name("shard_map on mesh (8,) ('x',)\n  fusion sin(x)\n"), "");

  // A program run live, named from its collective's call site (this file's test function).
  const auto mesh = meshvk::make_mesh({8}, {"x"});
  std::vector<std::string> texts;
  const meshvk::ShardMapWatch watch([&](const std::string& text) { texts.push_back(text); });
  meshvk::shard_map([](const meshvk::Array& v) { return meshvk::psum(v, "x"); }, mesh,
                    {meshvk::P("x")}, meshvk::P())(meshvk::arange(32.0f));
  ASSERT_EQ(texts.size(), 1u);
  EXPECT_EQ(
      ins::shard_map_program_name(texts[0]).rfind("shard_map(lambda at test_inspector_v3.cpp:", 0),
      0u)
      << texts[0];
}

// Issue 26.8: live follow keeps the devices' latest work inside the window, a little left of
// its edge (the host's later spans do not push it out).
TEST(InspectorV3, LiveFollowKeepsDeviceWorkInTheWindow) {
  std::string t = R"({"otherData":{"clock_origin_ns":0},"traceEvents":[
{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"CPU 0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":99,"args":{"name":"host"}})";
  t += ",\n" + x_event("matmul", "kernel", 0, 1000, 50, "dot");
  t += ",\n" + x_event("submit", "host", 99, 1000, 30000, "");
  const auto load = ins::load_chrome_trace(t + "\n]}");
  ASSERT_TRUE(load.error.empty()) << load.error;
  const auto v = ins::follow_view(load.data, 20e3);  // a 20 us window
  EXPECT_LT(v.start_ns, 1000e3 + 50e3 - 1);
  EXPECT_GT(v.start_ns + v.span_ns, 1050e3) << "the kernel's end is inside, not on the edge";
}

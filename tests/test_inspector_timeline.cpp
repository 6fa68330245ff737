// The inspector's timeline logic without a window: culling by the visible range, thin spans
// merging into runs coloured by their dominant kind, hit-testing, search, range totals, the
// flows of a span, collective steps grouped into invocations (with their mesh axes), sorting,
// and where live follow puts the view.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <variant>

#include <meshvk/meshvk.hpp>
#include <meshvk/profile.hpp>

#include "panel_layout.hpp"
#include "projection.hpp"
#include "test_support.hpp"
#include "timeline_model.hpp"
#include "trace_json.hpp"

namespace ins = inspector;
using ins::SpanKind;

namespace {

ins::TraceSpan span(int lane, SpanKind kind, const std::string& name, int64_t start, int64_t end,
                    const std::string& op = "", uint64_t bytes = 0) {
  ins::TraceSpan s;
  s.lane = lane;
  s.kind = kind;
  s.name = name;
  s.op = op;
  s.start_ns = start;
  s.end_ns = end;
  s.bytes = bytes;
  return s;
}

ins::TrackGeometry geometry(double start, double span_ns, float width) {
  ins::TrackGeometry g;
  g.view_start_ns = start;
  g.view_span_ns = span_ns;
  g.track_x = 0;
  g.track_w = width;
  return g;
}

}  // namespace

TEST(InspectorTimeline, VisibleRangeFindsOnlySpansReachingIntoView) {
  ins::TraceData t;
  const int lane = t.lane(1, 0, 0, "CPU 0");
  for (int i = 0; i < 1000; ++i)
    t.add_span(span(lane, SpanKind::kernel, "k", i * 100, i * 100 + 50));
  t.add_span(span(lane, SpanKind::kernel, "long", 0, 60000));  // reaches far right
  t.finish();
  // [50000, 50300]: the spans starting at 50000, 50100, 50200, 50300, plus "long" (starts at 0)
  // and the one starting at 49900 which ends at 49950 (before the view; culled later).
  const auto [first, last] = ins::visible_range(t, lane, 50000, 50300);
  const auto& ids = t.lanes()[lane].spans;
  int long_seen = 0, in_view = 0;
  for (size_t p = first; p < last; ++p) {
    const auto& s = t.spans()[ids[p]];
    long_seen += s.name == "long";
    in_view += s.end_ns >= 50000 && s.start_ns <= 50300;
  }
  EXPECT_EQ(long_seen, 1);
  EXPECT_EQ(in_view, 5);
  EXPECT_LT(last - first, 700u) << "the binary search bounds the work";
  // Nothing for a view past the end, or a bad lane.
  const auto past = ins::visible_range(t, lane, 1e9, 2e9);
  EXPECT_EQ(past.first, past.second);
  const auto bad = ins::visible_range(t, 7, 0, 1e9);
  EXPECT_EQ(bad.first, bad.second);
}

TEST(InspectorTimeline, ThinSpansMergeColouredByDominantKindAndKeepTheHighlight) {
  ins::TraceData t;
  const int lane = t.lane(1, 0, 0, "CPU 0");
  // 100 thin touching spans in [0, 1000): 70 ns of copy and 30 ns of kernel per 100 ns, one of
  // the kernels from the highlighted op; then one wide kernel.
  for (int i = 0; i < 10; ++i) {
    t.add_span(span(lane, SpanKind::copy, "copy", i * 100, i * 100 + 70));
    t.add_span(span(lane, SpanKind::kernel, "k", i * 100 + 70, i * 100 + 100,
                    i == 4 ? "dot_general" : "fusion"));
  }
  t.add_span(span(lane, SpanKind::kernel, "wide", 5000, 9000, "fusion"));
  t.finish();
  // 10000 ns over 100 px: 100 ns per px, so each span is under a pixel.
  const auto highlight = [](const ins::TraceSpan& s) { return s.op == "dot_general"; };
  auto one_run = geometry(0, 10000, 100);
  one_run.max_run_px = 1000;  // no limit on a run's width here
  const ins::LaneLayout layout = ins::layout_lane(t, lane, one_run, 16, highlight);
  ASSERT_EQ(layout.items.size(), 2u);
  const ins::LaneItem& run = layout.items[0];
  EXPECT_EQ(run.count, 20u);
  EXPECT_EQ(run.kind, SpanKind::copy) << "a merged run takes the kind holding most of its time";
  EXPECT_TRUE(run.highlighted) << "one highlighted span keeps the run highlighted";
  EXPECT_NEAR(run.x0, 0, 1e-3);
  EXPECT_NEAR(run.x1, 10.7, 1e-3);  // the last span is drawn at least a pixel wide
  const ins::LaneItem& wide = layout.items[1];
  EXPECT_EQ(wide.count, 1u);
  EXPECT_EQ(t.spans()[wide.span].name, "wide");
  EXPECT_FALSE(wide.highlighted);
  // Runs end once they are a few pixels wide, so a long stretch of thin spans shows where
  // each kind dominates: 1000 ns per px here, the whole 10 us is 10 px, two runs or more.
  const ins::LaneLayout far = ins::layout_lane(t, lane, geometry(0, 100000, 100), 16, highlight);
  EXPECT_EQ(far.items.size(), 2u) << "1 px of thin spans is one run";
  auto wide_runs = geometry(0, 10000, 100);
  wide_runs.max_run_px = 3;
  const ins::LaneLayout split = ins::layout_lane(t, lane, wide_runs, 16, highlight);
  EXPECT_GE(split.items.size(), 4u) << "a 10 px stretch splits into runs of about 3 px";
  // Zoomed in, nothing merges.
  const ins::LaneLayout near = ins::layout_lane(t, lane, geometry(0, 1000, 1000), 16, highlight);
  EXPECT_EQ(near.items.size(), 20u);
  // Clicking: the item under a pixel.
  EXPECT_EQ(ins::item_at(layout, 5, 0), 0);
  EXPECT_EQ(ins::item_at(layout, 70, 0), 1);
  EXPECT_EQ(ins::item_at(layout, 30, 0), -1);
  EXPECT_EQ(ins::item_at(layout, 5, 1), -1);
}

TEST(InspectorTimeline, LaneDepthComesFromTheVisibleSpansAndCollapsedLanesShowTheTopRow) {
  ins::TraceData t;
  const int host = t.lane(1, -1, 0, "host");
  // Deep nesting early on, a flat stretch later.
  for (int d = 0; d < 8; ++d) t.add_span(span(host, SpanKind::host, "nest", d, 1000 - d));
  for (int i = 0; i < 10; ++i)
    t.add_span(span(host, SpanKind::host, "flat", 2000 + i * 100, 2050 + i * 100));
  t.finish();
  EXPECT_EQ(t.lanes()[host].depth, 8);
  EXPECT_EQ(ins::layout_lane(t, host, geometry(0, 1000, 1000), 16, {}).depth, 8);
  EXPECT_EQ(ins::layout_lane(t, host, geometry(2000, 1000, 1000), 16, {}).depth, 1)
      << "a view of flat spans needs one row whatever the lane held elsewhere";
  const ins::LaneLayout collapsed = ins::layout_lane(t, host, geometry(0, 1000, 1000), 1, {});
  EXPECT_EQ(collapsed.depth, 1);
  ASSERT_EQ(collapsed.items.size(), 1u);
  EXPECT_EQ(collapsed.items[0].depth, 0);
}

TEST(InspectorTimeline, SearchMatchesNameOrOpAndStepsBothWays) {
  ins::TraceData t;
  const int lane = t.lane(1, 0, 0, "CPU 0");
  t.add_span(span(lane, SpanKind::kernel, "matmul_blocked", 300, 400, "dot_general"));
  t.add_span(span(lane, SpanKind::collective, "all_reduce(ring)", 100, 200, "all-reduce"));
  t.add_span(span(lane, SpanKind::kernel, "elementwise", 500, 600, "fusion"));
  t.add_span(span(lane, SpanKind::copy, "copy", 700, 800, "All-Reduce"));
  t.finish();
  const auto by_op = ins::search_spans(t, "ALL-reduce");
  ASSERT_EQ(by_op.size(), 2u);
  EXPECT_EQ(t.spans()[by_op[0]].start_ns, 100) << "matches come in time order";
  EXPECT_EQ(t.spans()[by_op[1]].start_ns, 700);
  EXPECT_EQ(ins::search_spans(t, "matmul").size(), 1u);
  EXPECT_EQ(ins::search_spans(t, "DOT_").size(), 1u);
  EXPECT_TRUE(ins::search_spans(t, "").empty());
  EXPECT_TRUE(ins::search_spans(t, "nothing").empty());
  EXPECT_EQ(ins::step_match(3, -1, 1), 0);
  EXPECT_EQ(ins::step_match(3, -1, -1), 2);
  EXPECT_EQ(ins::step_match(3, 2, 1), 0);
  EXPECT_EQ(ins::step_match(3, 0, -1), 2);
  EXPECT_EQ(ins::step_match(3, 1, 1), 2);
  EXPECT_EQ(ins::step_match(0, 0, 1), -1);
}

TEST(InspectorTimeline, RangeTotalsClipToTheRangePerLaneAndKind) {
  ins::TraceData t;
  const int d0 = t.lane(1, 0, 0, "CPU 0");
  const int d1 = t.lane(1, 1, 0, "CPU 1");
  const int host = t.lane(1, -1, 0, "host");
  t.add_span(span(d0, SpanKind::kernel, "k", 0, 1000));     // half inside [500, 1500]
  t.add_span(span(d0, SpanKind::kernel, "k", 1000, 1200));  // inside
  t.add_span(span(d0, SpanKind::copy, "copy", 1100, 1300, "", 4096));
  t.add_span(span(d1, SpanKind::kernel, "k", 2000, 3000));     // outside
  t.add_span(span(host, SpanKind::host, "jit", 0, 2000));      // top row: counts
  t.add_span(span(host, SpanKind::host, "submit", 600, 700));  // nested: does not
  t.finish();
  const auto rows = ins::range_totals(t, 1500, 500);  // either order
  double kernel_s = 0, copy_s = 0, host_s = 0;
  uint64_t kernels = 0, bytes = 0, hosts = 0;
  for (const auto& r : rows) {
    EXPECT_NE(r.lane, d1);
    if (r.kind == SpanKind::kernel) kernel_s += r.seconds, kernels += r.count;
    if (r.kind == SpanKind::copy) copy_s += r.seconds, bytes += r.bytes;
    if (r.kind == SpanKind::host) host_s += r.seconds, hosts += r.count;
  }
  EXPECT_EQ(kernels, 2u);
  EXPECT_NEAR(kernel_s, 700e-9, 1e-12);
  EXPECT_NEAR(copy_s, 200e-9, 1e-12);
  EXPECT_EQ(bytes, 4096u);
  EXPECT_EQ(hosts, 1u);
  EXPECT_NEAR(host_s, 1000e-9, 1e-12);
}

TEST(InspectorTimeline, FlowsOfASpan) {
  ins::TraceData t;
  const int d0 = t.lane(1, 0, 0, "CPU 0");
  const int d1 = t.lane(1, 1, 0, "CPU 1");
  const size_t a = t.add_span(span(d0, SpanKind::kernel, "k", 0, 10));
  const size_t b = t.add_span(span(d1, SpanKind::copy, "copy", 20, 30));
  const size_t c = t.add_span(span(d0, SpanKind::copy, "copy", 40, 50));
  t.add_flow({a, b, false});
  t.add_flow({b, c, true});
  t.finish();
  EXPECT_EQ(ins::flows_of(t, a), (std::vector<size_t>{0}));
  EXPECT_EQ(ins::flows_of(t, b), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(ins::flows_of(t, c), (std::vector<size_t>{1}));
  // A span enclosing another on its lane (a collective step and its copy) has the inner
  // span's flows too, unless asked for its own only.
  const size_t step = t.add_span(span(d1, SpanKind::collective, "ppermute", 15, 35));
  t.finish();
  EXPECT_EQ(ins::flows_of(t, step), (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(ins::flows_of(t, step, false).empty());
}

namespace {

// Two psums over 'b' of a (4, 2) mesh ('a', 'b'), each a ring of two steps per device with a
// copy inside each step fed by the partner device, then a ppermute around all 8 devices; a
// kernel of another op separates the psums on every device.
ins::TraceData collective_trace() {
  ins::TraceData t;
  std::vector<int> lanes;
  for (int d = 0; d < 8; ++d) lanes.push_back(t.lane(1, d, 0, "CPU " + std::to_string(d)));
  std::vector<std::vector<size_t>> last_kernel(8);
  const auto psum = [&](int64_t base) {
    std::vector<size_t> producers(8);
    for (int d = 0; d < 8; ++d)
      producers[d] =
          t.add_span(span(lanes[d], SpanKind::kernel, "reduce", base, base + 10, "reduce_sum"));
    for (int step = 0; step < 2; ++step)
      for (int d = 0; d < 8; ++d) {
        const int64_t s0 = base + 100 + step * 100 + d * 5;
        t.add_span(span(lanes[d], SpanKind::collective, "all_reduce(ring)", s0, s0 + 50,
                        "all-reduce", 64));
        const size_t copy =
            t.add_span(span(lanes[d], SpanKind::copy, "copy", s0 + 1, s0 + 20, "all-reduce", 64));
        t.add_flow({producers[d ^ 1], copy, false});  // from the partner along 'b'
      }
  };
  psum(0);
  psum(1000);
  std::vector<size_t> producers(8);
  for (int d = 0; d < 8; ++d)
    producers[d] = t.add_span(span(lanes[d], SpanKind::kernel, "k", 2000, 2010, "fusion"));
  for (int d = 0; d < 8; ++d) {
    t.add_span(span(lanes[d], SpanKind::collective, "ppermute", 2100 + d, 2110 + d,
                    "collective-permute", 32));
    const size_t copy = t.add_span(
        span(lanes[d], SpanKind::copy, "copy", 2101 + d, 2105 + d, "collective-permute", 32));
    t.add_flow({producers[(d + 7) % 8], copy, false});
  }
  t.finish();
  return t;
}

}  // namespace

TEST(InspectorTimeline, CollectiveStepsGroupIntoInvocationsWithTheirMeshAxes) {
  const ins::TraceData t = collective_trace();
  auto invocations = ins::collective_invocations(t);
  ASSERT_EQ(invocations.size(), 3u) << "one row per invocation, not per ring step";
  const auto& first = invocations[0];
  EXPECT_EQ(first.name, "all_reduce(ring)");
  EXPECT_EQ(first.spans.size(), 16u);  // 2 steps on 8 devices
  EXPECT_EQ(first.bytes, 16u * 64);
  EXPECT_EQ(first.start_ns, 100);
  EXPECT_EQ(first.end_ns, 200 + 35 + 50);
  EXPECT_EQ(first.devices.size(), 8u);
  EXPECT_EQ(first.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(invocations[1].start_ns, 1100);
  EXPECT_EQ(invocations[2].name, "ppermute");
  EXPECT_EQ(invocations[2].groups.size(), 1u);

  const meshvk::Mesh mesh({4, 2}, {"a", "b"});
  EXPECT_EQ(ins::mesh_axes_for_groups(mesh, first.groups), "'b'");
  EXPECT_EQ(ins::mesh_axes_for_groups(mesh, invocations[2].groups), "('a', 'b')");
  EXPECT_EQ(ins::mesh_axes_for_groups(mesh, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}), "'a'")
      << "groups of the first axis hold devices 2 apart";
  EXPECT_EQ(ins::mesh_axes_for_groups(mesh, {{0}, {1}}), "") << "nothing moved";
  EXPECT_EQ(ins::mesh_axes_for_groups(mesh, {{0, 9}}), "") << "a device outside the mesh";

  for (auto& inv : invocations) inv.axes = ins::mesh_axes_for_groups(mesh, inv.groups);
  ins::sort_invocations(invocations, ins::InvocationColumn::bytes, false);
  EXPECT_EQ(invocations[0].bytes, 16u * 64);
  EXPECT_EQ(invocations[2].name, "ppermute");
  ins::sort_invocations(invocations, ins::InvocationColumn::axes, false);
  EXPECT_EQ(invocations[0].axes, "('a', 'b')");
  EXPECT_EQ(invocations[2].axes, "'b'");
  ins::sort_invocations(invocations, ins::InvocationColumn::start, true);
  EXPECT_EQ(invocations[0].start_ns, 100);
  EXPECT_EQ(invocations[1].start_ns, 1100);
}

// The real thing: a psum over 'b' of a (4, 2) mesh, profiled, loaded as the inspector's live
// source would see it. `staged`: the collective copies pieces between devices (flows into its
// copies); otherwise it folds its peers' buffers in place (waits into its steps).
void expect_profiled_psum_groups_by_axis(bool staged) {
  ScopedEnv algo("MESHVK_COLLECTIVE_ALGO", staged ? "staged" : nullptr);
  meshvk::profile::start();
  const auto mesh = meshvk::make_mesh({4, 2}, {"a", "b"});
  const auto x = meshvk::device_put(meshvk::arange(64.f).reshape({8, 8}),
                                    meshvk::NamedSharding(mesh, meshvk::P("a", "b")));
  const auto y = meshvk::shard_map([](const meshvk::Array& v) { return meshvk::psum(v, "b"); },
                                   mesh, {meshvk::P("a", "b")}, meshvk::P("a", meshvk::None))(x);
  y.to_host<float>();
  meshvk::profile::stop();
  const auto events = meshvk::profile::events();
  meshvk::profile::clear();
  ins::TraceData t;
  std::map<uint64_t, size_t> index;
  for (const auto& e : events) {
    if (const auto* s = std::get_if<meshvk::profile::Span>(&e)) {
      ins::TraceSpan span;
      span.lane = t.lane(s->runtime, s->device,
                         s->device < 0 ? 0 : s->queue + (s->transfer ? 1000 : 0), "lane");
      span.kind = s->kind == meshvk::profile::Kind::collective ? SpanKind::collective
                  : s->kind == meshvk::profile::Kind::copy     ? SpanKind::copy
                  : s->kind == meshvk::profile::Kind::kernel   ? SpanKind::kernel
                                                               : SpanKind::host;
      span.name = s->name;
      span.op = s->op;
      span.start_ns = s->start_ns;
      span.end_ns = s->end_ns;
      span.bytes = s->bytes;
      index[s->id] = t.add_span(span);
    }
  }
  for (const auto& e : events)
    if (const auto* f = std::get_if<meshvk::profile::Flow>(&e))
      if (index.count(f->from) && index.count(f->to))
        t.add_flow({index[f->from], index[f->to], f->kind == meshvk::profile::FlowKind::wait});
  t.finish();
  const auto invocations = ins::collective_invocations(t);
  ASSERT_EQ(invocations.size(), 1u);
  EXPECT_EQ(invocations[0].devices.size(), 8u);
  EXPECT_EQ(ins::mesh_axes_for_groups(mesh, invocations[0].groups), "'b'")
      << "groups " << invocations[0].groups.size();
  // The whole trace as a range: every device did collective work in it.
  std::set<int> collective_devices;
  for (const auto& r : ins::range_totals(t, t.min_ns(), t.max_ns()))
    if (r.kind == SpanKind::collective && r.seconds > 0) collective_devices.insert(r.device);
  EXPECT_EQ(collective_devices.size(), 8u);
  const size_t step = invocations[0].spans.front();
  if (staged) {
    // A collective step's flows are those of the copies inside it.
    EXPECT_TRUE(ins::flows_of(t, step, false).empty()) << "the step span itself has none";
    EXPECT_FALSE(ins::flows_of(t, step).empty()) << "its copies have them";
  } else {
    EXPECT_FALSE(ins::flows_of(t, step, false).empty()) << "the fold waits for its peers";
  }
}

TEST(InspectorTimeline, CollectivesOfAProfiledShardMapGroupByAxis) {
  expect_profiled_psum_groups_by_axis(false);
}

TEST(InspectorTimeline, StagedCollectivesOfAProfiledShardMapGroupByAxis) {
  expect_profiled_psum_groups_by_axis(true);
}

// A collective traced in jit carries the rule that inserted it and the user's line, in the
// profiler's events and through a Chrome trace into the inspector's spans (the details panel
// shows them as "rule" and "source").
TEST(InspectorTimeline, CollectiveSpansCarryTheirRuleAndSourceLine) {
  meshvk::profile::start();
  const auto mesh = meshvk::make_mesh({2, 4}, {"a", "b"});
  const auto x = meshvk::device_put(meshvk::arange(96.f).reshape({8, 12}),
                                    meshvk::NamedSharding(mesh, meshvk::P("a", "b")));
  const auto w = meshvk::device_put(meshvk::arange(36.f).reshape({12, 3}),
                                    meshvk::NamedSharding(mesh, meshvk::P("b")));
  uint32_t line = 0;
  const auto f = meshvk::jit([&line](const meshvk::Array& a, const meshvk::Array& b) {
    line = __LINE__ + 1;
    return meshvk::matmul(a, b);
  });
  f(x, w).to_host<float>();
  f(x, w).to_host<float>();  // a replay: its spans keep what the trace recorded
  meshvk::profile::stop();
  const std::string json = meshvk::profile::chrome_trace_json();
  const auto events = meshvk::profile::events();
  meshvk::profile::clear();
  const std::string want_source = "test_inspector_timeline.cpp:" + std::to_string(line);
  const std::string want_rule = "dot_general contracts dim 1 sharded on 'b'";
  size_t live = 0;
  for (const auto& e : events)
    if (const auto* s = std::get_if<meshvk::profile::Span>(&e); s && s->kind == meshvk::profile::Kind::collective) {
      const ins::Provenance p = ins::split_provenance(s->rule);
      EXPECT_EQ(p.rule, want_rule) << s->rule;
      EXPECT_EQ(p.source.substr(0, want_source.size()), want_source) << s->rule;
      ++live;
    }
  EXPECT_GE(live, 2u * 8) << "every device's step, in the trace and the replay";
  const ins::TraceLoad load = ins::load_chrome_trace(json);
  ASSERT_EQ(load.error, "");
  size_t loaded = 0;
  for (const auto& s : load.data.spans())
    if (s.kind == SpanKind::collective) {
      EXPECT_EQ(ins::split_provenance(s.rule).rule, want_rule) << s.rule;
      ++loaded;
    }
  EXPECT_EQ(loaded, live);
  // Work that no rule inserted has none.
  for (const auto& s : load.data.spans()) {
    if (s.op == "dot_general") {
      EXPECT_EQ(s.rule, "") << s.name;
    }
  }
  // A rule holding " - ", and none with no line recorded.
  EXPECT_EQ(ins::split_provenance("out_shardings[0] - a - b - f.cpp:7 (g)").rule, "out_shardings[0] - a - b");
  EXPECT_EQ(ins::split_provenance("out_shardings[0] - a - b - f.cpp:7 (g)").source, "f.cpp:7 (g)");
  EXPECT_EQ(ins::split_provenance("reshard").source, "");
}

TEST(InspectorTimeline, LiveFollowTracksTheLatestDeviceTimestamp) {
  ins::TraceData t;
  const int host = t.lane(1, -1, 0, "host");
  t.add_span(span(host, SpanKind::host, "submit", 0, 5000));
  t.finish();
  EXPECT_EQ(ins::follow_edge_ns(t), 5000) << "no device spans yet: the host's edge";
  const int d0 = t.lane(1, 0, 0, "CPU 0");
  const int d1 = t.lane(1, 1, 0, "CPU 1");
  t.add_span(span(d0, SpanKind::kernel, "k", 100, 1200));
  t.add_span(span(d1, SpanKind::kernel, "k", 100, 900));
  t.add_span(span(d1, SpanKind::kernel, "k", 150, 300));
  t.finish();
  EXPECT_EQ(ins::follow_edge_ns(t), 1200) << "device lanes lag the host; follow them";
}

TEST(InspectorPanels, LayoutTilesTheWindowAndCollapsedPanelsGiveWayToTheirNeighbours) {
  ins::PanelState state;
  const float W = 1600, H = 1000, title = 19;
  const auto area = [](const ins::PanelRect& r) { return r.shown ? r.w * r.h : 0.0f; };
  ins::PanelLayout l = ins::layout_panels(W, H, state, title);
  float total = 0;
  for (const auto& r : l.panel) {
    EXPECT_TRUE(r.shown);
    total += area(r);
  }
  EXPECT_NEAR(total, W * H, 1) << "the panels tile the window";
  EXPECT_TRUE(l.left_splitter.shown && l.top_splitter.shown && l.arrays_splitter.shown);

  // Collapsing the program view gives the arrays view (almost) the whole row.
  state.collapsed[ins::kProgramPanel] = true;
  l = ins::layout_panels(W, H, state, title);
  EXPECT_GT(l.panel[ins::kArraysPanel].w, l.panel[ins::kProgramPanel].w * 3);
  EXPECT_FALSE(l.arrays_splitter.shown);
  // Collapsing both top panels gives the timeline all but a title bar of the height.
  state.collapsed[ins::kArraysPanel] = true;
  l = ins::layout_panels(W, H, state, title);
  EXPECT_EQ(l.panel[ins::kTimelinePanel].y, title);
  EXPECT_EQ(l.panel[ins::kTimelinePanel].h, H - title);
  // Collapsing the scenario panel gives the mesh view the column.
  state.collapsed[ins::kScenarioPanel] = true;
  l = ins::layout_panels(W, H, state, title);
  EXPECT_EQ(l.panel[ins::kMeshPanel].h, H - title);

  // Maximised: the timeline alone, over the whole window.
  state.maximise_timeline = true;
  l = ins::layout_panels(W, H, state, title);
  for (int p = 0; p < ins::kTimelinePanel; ++p) EXPECT_FALSE(l.panel[p].shown);
  EXPECT_EQ(area(l.panel[ins::kTimelinePanel]), W * H);
  EXPECT_FALSE(l.left_splitter.shown);
}

TEST(InspectorPanels, SplitsStayWhereEveryPanelIsUsable) {
  EXPECT_FLOAT_EQ(ins::clamp_split(0.5f, 1000, 100), 0.5f);
  EXPECT_FLOAT_EQ(ins::clamp_split(0.01f, 1000, 100), 0.1f);
  EXPECT_FLOAT_EQ(ins::clamp_split(2.0f, 1000, 100), 0.9f);
  EXPECT_FLOAT_EQ(ins::clamp_split(0.9f, 150, 100), 0.5f) << "too small for both: halves";
  ins::PanelState state;
  state.splits.left = -3;  // dragged far off
  const ins::PanelLayout l = ins::layout_panels(640, 400, state, 19);
  EXPECT_GE(l.panel[ins::kScenarioPanel].w, 120);
  EXPECT_GE(l.panel[ins::kArraysPanel].w, 1);
}

TEST(InspectorTimeline, LayoutOf300KSpansAtFitCostsPixelsNotSpans) {
  // 300K spans on 9 lanes, laid out at "fit" over 1450 px as the timeline does each frame: the
  // items drawn are bounded by the width (runs of thin spans), whatever the span count.
  ins::TraceData t;
  std::vector<int> lanes;
  for (int d = -1; d < 8; ++d)
    lanes.push_back(t.lane(1, d, 0, d < 0 ? "host" : "CPU " + std::to_string(d)));
  const SpanKind kinds[] = {SpanKind::kernel, SpanKind::copy, SpanKind::collective,
                            SpanKind::kernel};
  for (size_t l = 0; l < lanes.size(); ++l)
    for (int i = 0; i < 300000 / 9; ++i)
      t.add_span(span(lanes[l], l == 0 ? SpanKind::host : kinds[i % 4], "k", int64_t{i} * 4000,
                      int64_t{i} * 4000 + 1000 + (i % 7) * 300, i % 3 ? "fusion" : "dot_general"));
  t.finish();
  const auto g =
      geometry(static_cast<double>(t.min_ns()), static_cast<double>(t.max_ns() - t.min_ns()), 1450);
  const auto highlight = [](const ins::TraceSpan& s) { return s.op == "dot_general"; };
  const auto start = std::chrono::steady_clock::now();
  constexpr int kFrames = 20;
  size_t items = 0;
  for (int f = 0; f < kFrames; ++f)
    for (const int lane : lanes) items += ins::layout_lane(t, lane, g, 16, highlight).items.size();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  items /= kFrames;
  EXPECT_LE(items, lanes.size() * 1450u) << "at most an item per pixel per lane";
  EXPECT_GE(items, lanes.size() * 1450u / 8) << "runs of a few pixels, not one bar per lane";
  std::printf("layout of %zu spans at fit: %zu items, %.2f ms per frame\n", t.spans().size(), items,
              ms / kFrames);
  // Zoomed to 1/1000 of the trace: the binary search skips the rest.
  auto zoom = g;
  zoom.view_start_ns = static_cast<double>(t.max_ns()) / 2;
  zoom.view_span_ns = static_cast<double>(t.max_ns() - t.min_ns()) / 1000;
  const auto zstart = std::chrono::steady_clock::now();
  size_t zitems = 0;
  for (int f = 0; f < kFrames; ++f)
    for (const int lane : lanes)
      zitems += ins::layout_lane(t, lane, zoom, 16, highlight).items.size();
  const double zms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - zstart).count();
  EXPECT_LE(zitems / kFrames, lanes.size() * 40u);
  std::printf("zoomed to 1/1000: %zu items, %.3f ms per frame\n", zitems / kFrames, zms / kFrames);
}

// The traces of a job's processes (each writes its own: trace.process1.json) on one timeline:
// lanes named by process, the empty lanes of other processes' devices left out, times lined up
// by the files' clock origins, flows kept.
namespace {
std::string process_trace(int process, int64_t origin_ns, int device, const std::string& other_data = "") {
  const std::string p = std::to_string(process), d = std::to_string(device);
  return R"({"displayTimeUnit":"ns","otherData":{"clock_origin_ns":)" + std::to_string(origin_ns) +
         other_data + R"(,"events":3},"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"meshvk process )" +
         p +
         R"(, runtime 1: llvmpipe"}},
{"name":"thread_name","ph":"M","pid":1,"tid":)" +
         d + R"(,"args":{"name":"CPU )" + d + R"("}},
{"name":"thread_name","ph":"M","pid":1,"tid":9,"args":{"name":"CPU 9"}},
{"name":"thread_name","ph":"M","pid":1,"tid":1000,"args":{"name":"host"}},
{"name":"fold","cat":"kernel","ph":"X","pid":1,"tid":)" +
         d +
         R"(,"ts":10,"dur":5,"args":{"id":1}},
{"name":"send","cat":"copy","ph":"X","pid":1,"tid":)" +
         d +
         R"(,"ts":20,"dur":5,"args":{"id":2}},
{"name":"flow","cat":"copy","ph":"s","id":1,"pid":1,"tid":)" +
         d +
         R"(,"ts":12,"args":{"from":1,"to":2}},
{"name":"record","cat":"host","ph":"X","pid":1,"tid":1000,"ts":0,"dur":30,"args":{"id":3}}
]})";
}
}  // namespace

TEST(InspectorMerge, ProcessTracesShareOneTimeline) {
  std::vector<ins::TraceLoad> loads;
  loads.push_back(ins::load_chrome_trace(process_trace(0, 5'000'000, 0)));
  loads.push_back(ins::load_chrome_trace(process_trace(1, 5'002'000, 4)));
  ASSERT_EQ(loads[0].error, "");
  ASSERT_EQ(loads[1].error, "");
  EXPECT_EQ(loads[1].process, "process 1");
  ASSERT_EQ(loads[1].clock_origin_ns, 5'002'000);
  const ins::TraceLoad merged = ins::merge_trace_loads(std::move(loads));
  ASSERT_EQ(merged.error, "");
  std::set<std::string> names;
  for (const ins::TraceLane& l : merged.data.lanes()) names.insert(l.name);
  EXPECT_EQ(names, (std::set<std::string>{"process 0 / CPU 0", "process 0 / host",
                                          "process 1 / CPU 4", "process 1 / host"}));
  // Process 1's clock started 2 us later: its spans move 2 us along.
  std::map<std::string, std::vector<int64_t>> starts;
  for (const ins::TraceSpan& s : merged.data.spans())
    starts[merged.data.lanes()[s.lane].name].push_back(s.start_ns);
  EXPECT_EQ(starts["process 0 / CPU 0"], (std::vector<int64_t>{10'000, 20'000}));
  EXPECT_EQ(starts["process 1 / CPU 4"], (std::vector<int64_t>{12'000, 22'000}));
  for (const ins::TraceLane& l : merged.data.lanes()) {
    if (l.name.find("CPU 4") != std::string::npos) {
      EXPECT_EQ(l.device, 4);
    }
  }
  ASSERT_EQ(merged.data.flows().size(), 2u);
  for (const ins::TraceFlow& f : merged.data.flows())
    EXPECT_EQ(merged.data.spans()[f.from].lane, merged.data.spans()[f.to].lane);
  // One trace stays as it was; an error in any ends the merge with it.
  EXPECT_EQ(
      ins::merge_trace_loads({ins::load_chrome_trace(process_trace(0, 1, 0))}).data.lanes().size(),
      3u);
  // Origins no clock has (past +-1e18 ns) are not lined up: moving by their difference would
  // overflow.
  std::vector<ins::TraceLoad> far;
  far.push_back(ins::load_chrome_trace(process_trace(0, INT64_MIN, 0)));
  far.push_back(ins::load_chrome_trace(process_trace(1, INT64_MAX, 4)));
  ASSERT_EQ(far[0].clock_origin_ns, INT64_MIN);
  const ins::TraceLoad apart = ins::merge_trace_loads(std::move(far));
  for (const ins::TraceSpan& s : apart.data.spans()) EXPECT_LT(s.start_ns, 100'000);
  std::vector<ins::TraceLoad> bad;
  bad.push_back(ins::load_chrome_trace(process_trace(0, 1, 0)));
  bad.push_back(ins::load_chrome_trace("{\"traceEvents\": 3}"));
  EXPECT_NE(ins::merge_trace_loads(std::move(bad)).error, "");
}

// Traces from two hosts, whose monotonic clocks differ by 15 minutes: each file says how far
// process 0's clock is ahead of its writer's (clock_offset_ns), and the merge lines them up on
// process 0's clock.
TEST(InspectorMerge, TracesFromSeveralHostsLineUpByTheirClockOffsets) {
  std::vector<ins::TraceLoad> loads;
  loads.push_back(ins::load_chrome_trace(process_trace(0, 5'000'000, 0, R"(,"clock_offset_ns":0)")));
  // Process 1's clock reads 900 s less than process 0's; its origin, 900 s - 5 ms less than
  // process 0's on its own clock, is 2 us after process 0's on process 0's.
  loads.push_back(ins::load_chrome_trace(
      process_trace(1, 5'002'000 - 900'000'000'000, 4, R"(,"clock_offset_ns":900000000000,"clock_offset_uncertainty_ns":40000)")));
  ASSERT_EQ(loads[1].error, "");
  ASSERT_EQ(loads[1].clock_offset_ns, 900'000'000'000);
  const ins::TraceLoad merged = ins::merge_trace_loads(std::move(loads));
  ASSERT_EQ(merged.error, "");
  std::map<std::string, std::vector<int64_t>> starts;
  for (const ins::TraceSpan& s : merged.data.spans())
    starts[merged.data.lanes()[s.lane].name].push_back(s.start_ns);
  EXPECT_EQ(starts["process 0 / CPU 0"], (std::vector<int64_t>{10'000, 20'000}));
  EXPECT_EQ(starts["process 1 / CPU 4"], (std::vector<int64_t>{12'000, 22'000}));
  // An offset that is not a whole number of ns is an error naming it.
  const ins::TraceLoad bad = ins::load_chrome_trace(process_trace(1, 0, 4, R"(,"clock_offset_ns":1.5)"));
  EXPECT_NE(bad.error.find("'clock_offset_ns' 1.5"), std::string::npos) << bad.error;
  // An offset no clock has is left out of the lining up, as an origin past +-1e18 ns is.
  std::vector<ins::TraceLoad> far;
  far.push_back(ins::load_chrome_trace(process_trace(0, 0, 0)));
  far.push_back(ins::load_chrome_trace(process_trace(1, 0, 4, R"(,"clock_offset_ns":9000000000000000000)")));
  const ins::TraceLoad apart = ins::merge_trace_loads(std::move(far));
  ASSERT_EQ(apart.error, "");
  for (const ins::TraceSpan& s : apart.data.spans()) EXPECT_LT(s.start_ns, 100'000);
}

// "Project onto": a traced program's projected timeline as lanes beside the measured ones, one
// compute and one communication lane per device, starting where the program's measured spans do.
TEST(InspectorProjection, TracedProgramOntoV5eAsLanesPerDevice) {
  namespace mv = meshvk;
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const mv::Array a = mv::device_put(mv::zeros({64, 128}), mv::NamedSharding(mesh, mv::P("X", "Y")));
  const mv::Array w = mv::device_put(mv::zeros({128, 256}), mv::NamedSharding(mesh, mv::P(mv::None, "Y")));
  const auto f = mv::jit([](const mv::Array& x, const mv::Array& y) { return mv::matmul(x, y); },
                         {.out_shardings = {mv::NamedSharding(mesh, mv::P("X", "Y"))}, .name = "projected_matmul"});
  (void)f.lower(a, w);
  const auto traced = mv::traced_programs();
  ASSERT_FALSE(traced.empty());
  ASSERT_EQ(traced.back().name, "projected_matmul");
  const mv::Estimate e = mv::estimate(*traced.back().graph, mv::load_hardware("tpu_v5e"));

  inspector::TraceData trace;
  inspector::TraceSpan measured;
  measured.lane = trace.lane(0, 0, 0, "CPU 0 · queue 0");
  measured.name = "matmul";
  measured.program = "projected_matmul";
  measured.start_ns = 5000;
  measured.end_ns = 9000;
  trace.add_span(measured);
  trace.finish();
  const int64_t start = inspector::program_start(trace, "projected_matmul");
  EXPECT_EQ(start, 5000);
  EXPECT_EQ(inspector::add_projection(trace, e, "projected_matmul", start), e.timeline.size());
  // The measured lane, then each device's compute lane and (the all-gather) communication lane.
  EXPECT_EQ(trace.lanes().size(), 1u + 2u * 8u);
  int64_t last_end = 0;
  for (size_t i = 1; i < trace.spans().size(); ++i) {
    const auto& s = trace.spans()[i];
    EXPECT_GE(s.start_ns, start);
    EXPECT_NE(trace.lanes()[s.lane].name.find("projected on tpu_v5e: projected_matmul · device "), std::string::npos);
    last_end = std::max(last_end, s.end_ns);
  }
  EXPECT_NEAR(static_cast<double>(last_end - start), e.step_time * 1e9, 2);
}

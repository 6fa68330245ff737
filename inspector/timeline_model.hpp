#pragma once
// What the timeline works out before it draws, as plain functions over the trace model (no
// Dear ImGui), so each is tested on its own: which spans of a lane are in view (binary search),
// how spans too thin to see merge into runs, hit-testing, search, the totals of a selected time
// range, the flows of a span, and collective steps grouped into invocations.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <meshvk/mesh.hpp>

#include "trace_model.hpp"

namespace inspector {

// The spans of `lane` that can reach into [t0, t1] ns, as [first, last) positions in
// TraceLane::spans (sorted by start): a span starts before t1 and at most the lane's longest
// span before t0. O(log n).
std::pair<size_t, size_t> visible_range(const TraceData& trace, int lane, double t0, double t1);

// One rectangle the timeline draws: a span, or a run of spans too thin to see that merged.
struct LaneItem {
  float x0 = 0, x1 = 0;  // window pixels, clamped to the track (plus a 2 px margin)
  int depth = 0;
  size_t span = 0;                  // the span itself, or the longest span of a run
  uint32_t count = 1;               // spans merged (1: a single span)
  SpanKind kind = SpanKind::other;  // the span's, or the run's dominant kind by time
  bool highlighted = false;         // the span, or any span of the run, matches the op highlight
  bool matched = false;             // the span matches the search (never merged into a run)
};

struct LaneLayout {
  std::vector<LaneItem> items;  // by depth of first appearance, then by x
  int depth = 1;                // rows the visible spans need (at least 1)
};

struct TrackGeometry {
  double view_start_ns = 0;
  double view_span_ns = 1;
  float track_x = 0;  // where the track starts and how wide it is, in pixels
  float track_w = 1;
  float merge_px = 2;  // spans narrower than this merge with a touching neighbour
  // A run ends once this wide, so a lane at "fit" shows where each kind of work dominates
  // rather than one bar of a single colour.
  float max_run_px = 6;
  // A search match is drawn at least this wide, on its own, so that it can be seen and
  // clicked at any zoom.
  float min_match_px = 4;
};

// The rectangles of the lane's visible spans. Spans deeper than `max_depth` rows are left out
// (a collapsed lane shows its top row). `highlight` (may be empty) says which spans the op
// highlight lights; a run is lit when any of its spans is. `matched` (may be empty; indexed by
// span) says which spans match the search: each is an item of its own, at least min_match_px
// wide.
LaneLayout layout_lane(const TraceData& trace, int lane, const TrackGeometry& geometry,
                       int max_depth, const std::function<bool(const TraceSpan&)>& highlight,
                       const std::vector<char>& matched = {});

// The item under pixel (x, row) of a layout, or -1: the index into layout.items.
int item_at(const LaneLayout& layout, float x, int row);

// Spans whose name or op contains `query` (case-insensitive), by start time then index.
std::vector<size_t> search_spans(const TraceData& trace, const std::string& query);
// The match after (dir > 0) or before (dir < 0) position `current` of `count` matches,
// wrapping; the first (or last) when current is -1.
int step_match(size_t count, int current, int dir);
// `matches` (span indices) as a mask over the trace's spans, for layout_lane.
std::vector<char> match_mask(const TraceData& trace, const std::vector<size_t>& matches);

// Work inside a time range, per lane and kind: how many spans touch it and how long they run
// inside it. Nested host spans count once (only a lane's top row counts for the host).
struct RangeTotal {
  int lane = 0;
  int device = -1;
  SpanKind kind = SpanKind::other;
  uint64_t count = 0;
  double seconds = 0;  // inside the range
  uint64_t bytes = 0;  // of the spans touching it, whole
  uint64_t flops = 0;
};
std::vector<RangeTotal> range_totals(const TraceData& trace, int64_t t0, int64_t t1);

// The same work by op (a span's op, or its name when it has none), most time first: which ops
// took a range, whatever lane they ran on.
struct OpTotal {
  std::string op;
  uint64_t count = 0;
  double seconds = 0;
  uint64_t bytes = 0;
  int devices = 0;  // lanes of devices it ran on
};
std::vector<OpTotal> range_totals_by_op(const TraceData& trace, int64_t t0, int64_t t1);

// The view after Perfetto's keys: zoom by `factor` (< 1 in) keeping time `at_ns` where it is
// on screen; pan by `fraction` of the view; zoom to [t0, t1] with a margin either side.
struct TimeView {
  double start_ns = 0, span_ns = 1;
};
TimeView zoom_view(TimeView v, double at_ns, double factor);
TimeView pan_view(TimeView v, double fraction);
TimeView fit_view(int64_t t0, int64_t t1);

// A ruler time `ns` in the unit of its ticks `step` ns apart ("12.35 ms" for ticks 50 us
// apart), with `extra` decimals more (the cursor's finer time in the same unit).
std::string format_ruler_time(double ns, double step, int extra = 0);

// The flows into or out of a span (indices into TraceData::flows), and with `nested` those of
// the spans nested inside it on its lane (a collective step's copies carry its flows).
std::vector<size_t> flows_of(const TraceData& trace, size_t span, bool nested = true);

// One run of a collective op: its steps on every device that took part (the profiler makes a
// span per device per step), the device groups that exchanged data (from the flows into its
// copies) and, when a mesh is known, the mesh axes those groups are.
struct CollectiveInvocation {
  std::string name;  // "all_reduce(ring)", "ppermute"
  std::string op;    // the program op ("all-reduce")
  std::string program;
  int64_t start_ns = 0, end_ns = 0;
  std::vector<size_t> spans;             // its step spans, by start
  std::vector<int> devices;              // sorted
  std::vector<std::vector<int>> groups;  // devices linked by data, each sorted; singletons too
  uint64_t bytes = 0;                    // over its steps
  std::string axes;                      // "'b'", "('a', 'b')"; "" when unknown
  double seconds() const { return static_cast<double>(end_ns - start_ns) * 1e-9; }
  double gbps() const {
    return end_ns > start_ns ? static_cast<double>(bytes) / (end_ns - start_ns) : 0;
  }
};
// Collective step spans grouped into invocations, by start. A device's consecutive steps of one
// collective (until it runs work of another op) are its run of an invocation, and the n-th run
// of a collective on every device makes its n-th invocation: the processes of a job, whose
// spans interleave on one timeline, group alike. A device that skips an invocation (takes no
// step in it) would shift its later runs by one.
std::vector<CollectiveInvocation> collective_invocations(const TraceData& trace);
// The smallest set of the mesh's axes whose device groups hold each group (size > 1) of
// `groups`: "'b'", "('a', 'b')"; "" when no set does or no group moved data.
std::string mesh_axes_for_groups(const meshvk::Mesh& mesh,
                                 const std::vector<std::vector<int>>& groups);

enum class InvocationColumn { name, axes, start, duration, steps, bytes, gbps };
void sort_invocations(std::vector<CollectiveInvocation>& rows, InvocationColumn column,
                      bool ascending);

// A collective's provenance (TraceSpan::rule, "<rule> - file:line (function) [backward]") as the
// details panel shows it: the rule, and the source line ("" when no line was recorded).
struct Provenance {
  std::string rule, source;
};
Provenance split_provenance(const std::string& text);

// The warning the timeline shows above its lanes when work was lost before it got there (how
// much, and what that means for what is drawn); "" when nothing was.
std::string losses_warning(const TraceLosses& losses);
// 44492 -> "44,492".
std::string thousands(uint64_t n);

// Where live follow keeps the view's right edge: the latest device timestamp once there is one
// (device spans arrive after their timestamps are read back, so the host runs ahead of them),
// else the latest host one.
double follow_edge_ns(const TraceData& trace);
// The live view of `span_ns` ns that follows the devices: their latest work (follow_edge_ns)
// is in it, a little left of its right edge; it never starts before the trace.
TimeView follow_view(const TraceData& trace, double span_ns);

}  // namespace inspector

#pragma once
// What the timeline draws: spans on lanes (a virtual device's stream, per queue, or the host)
// and flows between spans, whether they came live from meshvk::profile or from a Chrome trace
// file. Plain data, owned by the UI thread.
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace inspector {

enum class SpanKind : uint8_t { kernel, copy, collective, host, other };
const char* span_kind_name(SpanKind kind);
SpanKind span_kind_from(const std::string& name);

struct TraceSpan {
  uint64_t id = 0;  // the profiler's id, or the file's order; 0 when unknown
  int lane = 0;     // index into TraceData::lanes
  SpanKind kind = SpanKind::other;
  std::string name;
  std::string op;       // the program op it came from, "" when unknown
  std::string program;  // the jit function, "" outside jit
  std::string rule;     // a collective's provenance ("<rule> - file:line (function)"), "" when none
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t bytes = 0;
  uint64_t flops = 0;
  int peer = -1;
  int depth = 0;  // nesting level inside its lane (host spans nest)

  double seconds() const { return static_cast<double>(end_ns - start_ns) * 1e-9; }
};

struct TraceFlow {
  size_t from = 0;  // indices into TraceData::spans
  size_t to = 0;
  bool wait = false;  // a timeline wait rather than data moved
};

struct TraceLane {
  std::string name;  // "CPU 0 · queue 0", "host"
  int runtime = 0;
  int device = -1;  // -1: the host or unknown
  int queue = 0;
  int depth = 1;                // rows the lane needs
  int64_t max_duration_ns = 0;  // of its spans: how far back a span may start and still show
  int64_t max_end_ns = 0;       // where its latest span ends (live follow)
  std::vector<size_t> spans;    // indices into TraceData::spans, by start time
};

// Collective time and traffic, one row per collective name.
struct CollectiveRow {
  std::string name;
  uint64_t count = 0;
  double seconds = 0;
  uint64_t bytes = 0;
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

// What was lost before the trace reached the timeline: work that ran but is not drawn, so lanes
// have gaps there and counts and totals fall short. From a file's otherData, or live from
// meshvk::profile's counters and the inspector's reader.
struct TraceLosses {
  uint64_t device_spans = 0;  // dropped_spans: device work whose timestamps were not kept
  uint64_t events = 0;        // dropped_events: overwritten in the profiler's ring buffer
  uint64_t flows = 0;         // dropped_flows: flows whose source span was never seen
  uint64_t missed = 0;        // live: events the reader fell too far behind to read
  uint64_t not_kept = 0;      // live: spans past what the inspector holds (TraceData's cap)
  bool any() const { return device_spans || events || missed || not_kept; }
  TraceLosses& operator+=(const TraceLosses& o) {
    device_spans += o.device_spans;
    events += o.events;
    flows += o.flows;
    missed += o.missed;
    not_kept += o.not_kept;
    return *this;
  }
};

class TraceData {
 public:
  // The lane for a (runtime, device, queue) key, made on first use; device -1 is the host.
  int lane(int runtime, int device, int queue, const std::string& name);
  // A lane named by a trace file's (pid, tid); -1 once there are kMaxLanes (a file with a
  // thread per event would otherwise make a window nobody can read).
  static constexpr size_t kMaxLanes = 1024;
  int lane_for_thread(int64_t pid, int64_t tid);
  void set_lane_name(int lane, const std::string& name) { lanes_[lane].name = name; }
  void set_lane_device(int lane, int device) { lanes_[lane].device = device; }

  size_t add_span(TraceSpan span);
  // Closes a span opened without an end (a "B" event), before finish() places it.
  void set_span_end(size_t span, int64_t end_ns);
  void add_flow(TraceFlow flow) { flows_.push_back(flow); }
  // Puts the spans added since the last call into their lanes, sorted by start, and works out
  // nesting depths; a collective step that says no bytes gets those of the copies (or, with
  // none, the kernels) nested inside it. Call after adding a batch.
  void finish();
  // Adds another trace's lanes that hold spans (named `lane_prefix` + their name), its spans
  // `shift_ns` later, and its flows, then finish()es: several processes' traces on one timeline.
  void append(const TraceData& other, int64_t shift_ns, const std::string& lane_prefix);
  void clear();

  const std::vector<TraceLane>& lanes() const { return lanes_; }
  const std::vector<TraceSpan>& spans() const { return spans_; }
  const std::vector<TraceFlow>& flows() const { return flows_; }
  int64_t min_ns() const { return min_ns_; }
  int64_t max_ns() const { return max_ns_; }
  bool empty() const { return spans_.empty(); }
  std::vector<CollectiveRow> collectives() const;

  // The source, for the window title: "live" or a file path.
  std::string source;
  TraceLosses losses;

 private:
  void fill_step_bytes(size_t step);

  std::vector<TraceLane> lanes_;
  std::vector<TraceSpan> spans_;
  std::vector<TraceFlow> flows_;
  std::map<std::tuple<int, int, int>, int> lane_keys_;
  std::map<std::pair<int64_t, int64_t>, int> thread_lanes_;
  size_t sorted_spans_ = 0;  // spans already placed in their lanes
  int64_t min_ns_ = 0;
  int64_t max_ns_ = 0;
};

}  // namespace inspector

#pragma once
// The timeline's live source: meshvk::profile's event stream, read on the UI thread each frame
// and appended to a TraceData.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include <meshvk/profile.hpp>

#include "trace_model.hpp"

namespace inspector {

class LiveTrace {
 public:
  // Turns the profiler on (it is off by default) and subscribes from now on.
  void start();
  bool started() const { return subscription_.has_value(); }
  // Appends the events published since the last poll; returns how many arrived.
  size_t poll(TraceData& data);
  uint64_t missed() const { return subscription_ ? subscription_->missed() : 0; }
  // Forgets what was read (a restart clears the timeline) but keeps the subscription; what was
  // lost until now no longer counts against the timeline.
  void reset();
  // The spans this live trace holds at most; later ones are counted in TraceLosses::not_kept.
  static constexpr size_t kMaxSpans = size_t{1} << 21;

 private:
  void add_span(TraceData& data, const meshvk::profile::Span& span);
  bool add_flow(TraceData& data, const meshvk::profile::Flow& flow);

  // What had been lost at the last reset(): the profiler's counters and the reader's misses run
  // on across restarts of a scenario.
  uint64_t dropped_spans_at_reset_ = 0, dropped_flows_at_reset_ = 0, missed_at_reset_ = 0;
  uint64_t not_kept_ = 0;
  std::optional<meshvk::profile::Subscription> subscription_;
  std::vector<meshvk::profile::Event> buffer_;
  std::unordered_map<uint64_t, size_t> span_index_;  // profiler span id -> TraceData index
  // Flows whose spans have not arrived yet: device spans come after their timestamps are read
  // back, so a flow can precede them.
  std::vector<meshvk::profile::Flow> pending_flows_;
};

}  // namespace inspector

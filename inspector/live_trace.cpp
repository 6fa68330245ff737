#include "live_trace.hpp"

#include <algorithm>
#include <string>

namespace inspector {

namespace profile = meshvk::profile;

namespace {

constexpr size_t kMaxPendingFlows = 1 << 16;

SpanKind kind_of(profile::Kind kind) {
  switch (kind) {
    case profile::Kind::kernel:
      return SpanKind::kernel;
    case profile::Kind::copy:
      return SpanKind::copy;
    case profile::Kind::collective:
      return SpanKind::collective;
    case profile::Kind::host:
      return SpanKind::host;
  }
  return SpanKind::other;
}

}  // namespace

void LiveTrace::start() {
  if (!profile::enabled()) profile::start();
  if (!subscription_) subscription_ = profile::subscribe();
}

void LiveTrace::reset() {
  span_index_.clear();
  pending_flows_.clear();
  const profile::Counters c = profile::counters();
  dropped_spans_at_reset_ = c.dropped_spans;
  dropped_flows_at_reset_ = c.dropped_flows;
  missed_at_reset_ = missed();
  not_kept_ = 0;
}

void LiveTrace::add_span(TraceData& data, const profile::Span& s) {
  if (data.spans().size() >= kMaxSpans) {
    ++not_kept_;
    return;
  }
  std::string lane_name = profile::lane_name(s.runtime, s.device);
  if (s.device >= 0)
    lane_name += " / q" + std::to_string(s.queue) + (s.transfer ? " transfer" : "");
  TraceSpan span;
  span.id = s.id;
  // A transfer stream gets a lane of its own even where it shares its device's queue.
  constexpr int kTransferLane = 1000;
  const int queue_key = s.device < 0 ? 0 : s.queue + (s.transfer ? kTransferLane : 0);
  span.lane = data.lane(s.runtime, s.device, queue_key, lane_name);
  span.kind = kind_of(s.kind);
  span.name = s.name ? s.name : "";
  span.op = s.op ? s.op : "";
  span.program = s.program ? s.program : "";
  span.rule = s.rule ? s.rule : "";
  span.start_ns = s.start_ns;
  span.end_ns = s.end_ns;
  span.bytes = s.bytes;
  span.flops = s.flops;
  span.peer = s.peer;
  span_index_[s.id] = data.add_span(std::move(span));
}

bool LiveTrace::add_flow(TraceData& data, const profile::Flow& f) {
  const auto from = span_index_.find(f.from);
  const auto to = span_index_.find(f.to);
  if (from == span_index_.end() || to == span_index_.end()) return false;
  data.add_flow({from->second, to->second, f.kind == profile::FlowKind::wait});
  return true;
}

size_t LiveTrace::poll(TraceData& data) {
  if (!subscription_) return 0;
  buffer_.clear();
  // Bounded per frame, so a burst of events costs a few frames rather than one long one.
  const size_t n = subscription_->read(buffer_, 200000);
  for (const profile::Event& e : buffer_) {
    if (const auto* span = std::get_if<profile::Span>(&e)) {
      add_span(data, *span);
    } else if (const auto* flow = std::get_if<profile::Flow>(&e)) {
      if (!add_flow(data, *flow) && pending_flows_.size() < kMaxPendingFlows)
        pending_flows_.push_back(*flow);
    }
  }
  if (n > 0 && !pending_flows_.empty()) {
    std::erase_if(pending_flows_, [&](const profile::Flow& f) { return add_flow(data, f); });
  }
  if (n > 0) data.finish();
  // The profiler's counters restart with it (clear(), a new start()): never below the baseline.
  const profile::Counters c = profile::counters();
  const auto since = [](uint64_t now, uint64_t& at_reset) {
    if (now < at_reset) at_reset = 0;
    return now - at_reset;
  };
  data.losses.device_spans = since(c.dropped_spans, dropped_spans_at_reset_);
  data.losses.flows = since(c.dropped_flows, dropped_flows_at_reset_);
  data.losses.missed = since(missed(), missed_at_reset_);
  data.losses.not_kept = not_kept_;
  return n;
}

}  // namespace inspector

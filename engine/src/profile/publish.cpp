// Reading device timestamps back: submissions whose timeline value was reached become spans on
// the host clock, in timeline order per device, and flows link them to the spans they read from.
#include <algorithm>
#include <cstring>
#include <limits>

#include "meshvk/error.hpp"
#include "profile/device_profiler.hpp"
#include "profile/recorder.hpp"
#include "vk/check.hpp"

namespace meshvk::profile {

namespace {
constexpr size_t kHistory = 4096;  // per device: submissions flows can still start from
constexpr size_t kMaxPendingFlows = 1 << 16;
constexpr int64_t kRecalibrateNs = 1'000'000'000;
constexpr uint64_t kFlushTimeoutNs = 60'000'000'000ull;
}  // namespace

void DeviceProfiler::poll_if_idle() {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock) return;
  for (size_t d = 0; d < lanes_.size(); ++d) poll_device(static_cast<int>(d));
  if (!flows_.empty()) resolve_flows();
}

void DeviceProfiler::poll() {
  std::lock_guard lock(mutex_);
  for (size_t d = 0; d < lanes_.size(); ++d) poll_device(static_cast<int>(d));
  if (!flows_.empty()) resolve_flows();
}

void DeviceProfiler::flush() {
  std::lock_guard lock(mutex_);
  for (size_t d = 0; d < lanes_.size(); ++d) {
    Lane& lane = lanes_[d];
    uint64_t last = 0;
    for (const Submitted& s : lane.in_flight) {
      last = std::max(last, s.value);
      // Ticks saved by another lane's submission (the device's compute stream) wait for it.
      if (s.saved_on >= 0 && !lanes_[s.saved_on].timeline->wait(s.saved_by, kFlushTimeoutNs))
        throw Error("profile: device " + std::to_string(lane.device) +
                    " did not reach timeline value " + std::to_string(s.saved_by) +
                    " within 60 s while reading back timestamps");
    }
    if (last && !lane.timeline->wait(last, kFlushTimeoutNs))
      throw Error("profile: device " + std::to_string(lane.device) +
                  (lane.transfer ? "'s transfer stream" : "") + " did not reach timeline value " +
                  std::to_string(last) + " within 60 s while reading back timestamps");
    poll_device(static_cast<int>(d));
  }
  resolve_flows();
}

void DeviceProfiler::poll_device(int device) {
  Lane& lane = lanes_[device];
  if (!lane.in_flight.empty()) {
    if (calibrator_->calibrated_extension() && now_ns() - calibrated_at_ > kRecalibrateNs)
      setup_clock();
    const uint64_t reached = lane.timeline->value();
    while (!lane.in_flight.empty() && lane.in_flight.front().value <= reached) {
      const Submitted& s = lane.in_flight.front();
      if (s.slot >= 0 && s.saved_by > lanes_[s.saved_on].timeline->value())
        break;  // its ticks are still being copied out
      if (!publish(device, s)) break;
      lane.in_flight.pop_front();
    }
  }
}

bool DeviceProfiler::publish(int device, const Submitted& s) {
  Slice& slice = *s.slice;
  Recorder& rec = Recorder::get();
  if (s.lost) {
    rec.dropped_spans.fetch_add(slice.spans_.size() + (*slice.collective_ ? 1 : 0),
                                std::memory_order_relaxed);
    return true;
  }
  ticks_.resize(slice.used_);
  if (s.slot >= 0) {
    std::memcpy(
        ticks_.data(),
        static_cast<const char*>(slice.slot_buffer(s.slot).mapped()) + slice.slot_offset(s.slot),
        slice.slot_bytes());
    slice.slot_used_[s.slot] = 0;
  } else {
    for (size_t b = 0; b < slice.blocks_.size(); ++b) {
      const uint32_t first = static_cast<uint32_t>(b) * kBlockQueries;
      const uint32_t n = std::min(kBlockQueries, slice.used_ - first);
      const VkResult r =
          vkGetQueryPoolResults(device_.handle(), lanes_[device].blocks[slice.blocks_[b]]->handle(),
                                0, n, n * 8, ticks_.data() + first, 8, VK_QUERY_RESULT_64_BIT);
      if (r == VK_NOT_READY) return false;  // the timeline says done; try again on the next poll
      vk::check(r, "vkGetQueryPoolResults");
    }
    if (slice.in_pools_ == s.value) {  // read before a next run: nothing left to save
      slice.in_pools_ = 0;
      --unsaved_;
    }
  }
  auto at = [&](uint32_t q) { return clock_.to_host(ticks_[q]); };
  Span base;
  base.runtime = runtime_;
  base.device = lanes_[device].device;
  base.queue = lanes_[device].queue;
  base.transfer = lanes_[device].transfer;
  base.program = slice.program_;

  uint64_t first = 0, last = 0;
  if (*slice.collective_) {
    // The step runs from its first command to its last.
    Span step = base;
    step.kind = Kind::collective;
    step.name = slice.collective_;
    step.op = *slice.op_ ? slice.op_ : slice.collective_;
    step.rule = slice.rule_;
    step.start_ns = std::numeric_limits<int64_t>::max();
    step.end_ns = std::numeric_limits<int64_t>::min();
    // Its bytes are what its copies moved; a step that copies nothing (a one-shot fold reading
    // its peers' buffers in place) moved what its kernels read and wrote.
    uint64_t kernel_bytes = 0;
    for (const SpanRecord& r : slice.spans_) {
      if (r.begin == kNoQuery || r.end == kNoQuery) continue;
      step.start_ns = std::min(step.start_ns, at(r.begin));
      step.end_ns = std::max(step.end_ns, at(r.end));
      if (r.kind == Kind::copy) step.bytes += r.bytes;
      if (r.kind == Kind::kernel) kernel_bytes += r.bytes;
    }
    if (step.bytes == 0) step.bytes = kernel_bytes;
    if (step.start_ns <= step.end_ns) {
      step.id = rec.next_span_id();
      rec.emit(step);
      first = last = step.id;
    }
  }
  std::vector<int>& sent_from = sent_from_;
  sent_from.clear();
  for (const SpanRecord& r : slice.spans_) {
    if (r.begin == kNoQuery || r.end == kNoQuery) continue;
    Span span = base;
    span.id = rec.next_span_id();
    span.kind = r.kind;
    span.name = r.name;
    span.op = r.op;
    span.rule = r.rule;
    span.start_ns = at(r.begin);
    span.end_ns = at(r.end);
    span.bytes = r.bytes;
    span.flops = r.flops;
    rec.emit(span);
    if (!first) first = span.id;
    if (!*slice.collective_) last = span.id;
    // A transfer flow links devices; a copy of the device's own data shows as a wait flow.
    if (r.src_device < 0 || lanes_[r.src_device].device == lanes_[device].device) continue;
    int from_lane = r.src_device;
    uint64_t from_value = r.src_value;
    if (s.replay) {
      // The traced value means nothing in a replay; the submission's wait on that lane does, or
      // on another lane of the device (a replay waits for work from before the trace through
      // the refresh on the device's compute stream).
      from_value = 0;
      for (const auto& [l, v] : s.waits)
        if (l == r.src_device) from_value = v;
      for (const auto& [l, v] : s.waits)
        if (!from_value && lanes_[l].device == lanes_[r.src_device].device) {
          from_lane = l;
          from_value = v;
        }
    }
    if (from_value) flows_.push_back({from_lane, from_value, span.id, FlowKind::transfer});
    sent_from.push_back(from_lane);
  }
  if (first)
    for (const auto& [d, v] : s.waits)
      if (std::find(sent_from.begin(), sent_from.end(), d) == sent_from.end())
        flows_.push_back({d, v, first, FlowKind::wait});
  if (last) {
    auto& history = lanes_[device].history;
    history.push_back({s.value, last});
    if (history.size() > kHistory) history.pop_front();
  }
  if (flows_.size() > kMaxPendingFlows) {
    const size_t extra = flows_.size() - kMaxPendingFlows;
    rec.dropped_flows.fetch_add(extra, std::memory_order_relaxed);
    flows_.erase(flows_.begin(), flows_.begin() + static_cast<std::ptrdiff_t>(extra));
  }
  return true;
}

void DeviceProfiler::resolve_flows() {
  Recorder& rec = Recorder::get();
  auto keep = std::remove_if(flows_.begin(), flows_.end(), [&](const PendingFlow& f) {
    const Lane& src = lanes_[f.src_device];
    // Submissions are read back in timeline order: once none at or below the value is left in
    // flight, the span that ended last at that value is known.
    if (!src.in_flight.empty() && src.in_flight.front().value <= f.src_value) return false;
    const auto it = std::upper_bound(src.history.begin(), src.history.end(), f.src_value,
                                     [](uint64_t v, const auto& h) { return v < h.first; });
    if (it == src.history.begin()) {
      rec.dropped_flows.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    Flow flow;
    flow.id = rec.next_flow_id();
    flow.runtime = runtime_;
    flow.kind = f.kind;
    flow.from = std::prev(it)->second;
    flow.to = f.to;
    rec.emit(flow);
    return true;
  });
  flows_.erase(keep, flows_.end());
}

}  // namespace meshvk::profile

#include "trace_model.hpp"

#include <algorithm>
#include <cstdint>

namespace inspector {

const char* span_kind_name(SpanKind kind) {
  switch (kind) {
    case SpanKind::kernel:
      return "kernel";
    case SpanKind::copy:
      return "copy";
    case SpanKind::collective:
      return "collective";
    case SpanKind::host:
      return "host";
    default:
      return "other";
  }
}

SpanKind span_kind_from(const std::string& name) {
  if (name == "kernel") return SpanKind::kernel;
  if (name == "copy") return SpanKind::copy;
  if (name == "collective") return SpanKind::collective;
  if (name == "host") return SpanKind::host;
  return SpanKind::other;
}

int TraceData::lane(int runtime, int device, int queue, const std::string& name) {
  const auto key = std::make_tuple(runtime, device, queue);
  if (const auto it = lane_keys_.find(key); it != lane_keys_.end()) return it->second;
  TraceLane l;
  l.name = name;
  l.runtime = runtime;
  l.device = device;
  l.queue = queue;
  lanes_.push_back(std::move(l));
  const int index = static_cast<int>(lanes_.size()) - 1;
  lane_keys_.emplace(key, index);
  return index;
}

int TraceData::lane_for_thread(int64_t pid, int64_t tid) {
  const auto key = std::make_pair(pid, tid);
  if (const auto it = thread_lanes_.find(key); it != thread_lanes_.end()) return it->second;
  if (lanes_.size() >= kMaxLanes) return -1;
  TraceLane l;
  l.name = "pid " + std::to_string(pid) + " tid " + std::to_string(tid);
  l.runtime = static_cast<int>(pid);
  l.device = -1;
  l.queue = static_cast<int>(tid);
  lanes_.push_back(std::move(l));
  const int index = static_cast<int>(lanes_.size()) - 1;
  thread_lanes_.emplace(key, index);
  return index;
}

size_t TraceData::add_span(TraceSpan span) {
  if (span.end_ns < span.start_ns) span.end_ns = span.start_ns;
  if (spans_.empty()) {
    min_ns_ = span.start_ns;
    max_ns_ = span.end_ns;
  } else {
    min_ns_ = std::min(min_ns_, span.start_ns);
    max_ns_ = std::max(max_ns_, span.end_ns);
  }
  spans_.push_back(std::move(span));
  return spans_.size() - 1;
}

void TraceData::set_span_end(size_t span, int64_t end_ns) {
  TraceSpan& s = spans_[span];
  s.end_ns = std::max(s.start_ns, end_ns);
  max_ns_ = std::max(max_ns_, s.end_ns);
}

void TraceData::finish() {
  // Place the new spans, then re-sort only the lanes that got some.
  std::vector<bool> touched(lanes_.size(), false);
  const size_t first_new = sorted_spans_;
  for (size_t i = sorted_spans_; i < spans_.size(); ++i) {
    const int l = spans_[i].lane;
    if (l < 0 || l >= static_cast<int>(lanes_.size())) continue;
    lanes_[l].spans.push_back(i);
    touched[l] = true;
  }
  sorted_spans_ = spans_.size();
  for (size_t l = 0; l < lanes_.size(); ++l) {
    if (!touched[l]) continue;
    auto& ids = lanes_[l].spans;
    std::stable_sort(ids.begin(), ids.end(), [&](size_t a, size_t b) {
      if (spans_[a].start_ns != spans_[b].start_ns) return spans_[a].start_ns < spans_[b].start_ns;
      return spans_[a].end_ns > spans_[b].end_ns;  // the enclosing span first
    });
    // Depth: how many earlier spans in the lane still enclose this one.
    std::vector<int64_t> open_ends;
    int depth = 1;
    for (const size_t i : ids) {
      while (!open_ends.empty() && open_ends.back() <= spans_[i].start_ns) open_ends.pop_back();
      spans_[i].depth = static_cast<int>(std::min<size_t>(open_ends.size(), 15));
      depth = std::max(depth, spans_[i].depth + 1);
      lanes_[l].max_duration_ns =
          std::max(lanes_[l].max_duration_ns, spans_[i].end_ns - spans_[i].start_ns);
      lanes_[l].max_end_ns = std::max(lanes_[l].max_end_ns, spans_[i].end_ns);
      if (open_ends.size() < 64) open_ends.push_back(spans_[i].end_ns);
    }
    lanes_[l].depth = depth;
  }
  for (size_t i = first_new; i < spans_.size(); ++i)
    if (spans_[i].kind == SpanKind::collective && spans_[i].bytes == 0) fill_step_bytes(i);
}

void TraceData::fill_step_bytes(size_t step) {
  // Traces of earlier engines left a one-shot step's bytes on the fold kernel inside it: the
  // step moved what its copies did, or with none, what its kernels read and wrote.
  TraceSpan& s = spans_[step];
  if (s.lane < 0 || s.lane >= static_cast<int>(lanes_.size())) return;
  const auto& ids = lanes_[s.lane].spans;
  auto p = std::lower_bound(ids.begin(), ids.end(), s.start_ns,
                            [&](size_t i, int64_t t) { return spans_[i].start_ns < t; });
  uint64_t copies = 0, kernels = 0;
  for (; p != ids.end() && spans_[*p].start_ns <= s.end_ns; ++p) {
    const TraceSpan& c = spans_[*p];
    if (*p == step || c.depth <= s.depth || c.end_ns > s.end_ns) continue;
    if (c.kind == SpanKind::copy) copies += c.bytes;
    if (c.kind == SpanKind::kernel) kernels += c.bytes;
  }
  s.bytes = copies ? copies : kernels;
}

void TraceData::append(const TraceData& other, int64_t shift_ns, const std::string& lane_prefix) {
  std::vector<int> lane_of(other.lanes_.size(), -1);
  for (size_t l = 0; l < other.lanes_.size(); ++l) {
    const TraceLane& from = other.lanes_[l];
    if (from.spans.empty()) continue;  // another process's devices: nothing ran there
    TraceLane lane;
    lane.name = lane_prefix + from.name;
    lane.runtime = from.runtime;
    lane.device = from.device;
    lane.queue = from.queue;
    lane_of[l] = static_cast<int>(lanes_.size());
    lanes_.push_back(std::move(lane));
  }
  const size_t first = spans_.size();
  std::vector<size_t> span_of(other.spans_.size(), SIZE_MAX);
  for (size_t i = 0; i < other.spans_.size(); ++i) {
    TraceSpan span = other.spans_[i];
    if (span.lane < 0 || span.lane >= static_cast<int>(lane_of.size()) || lane_of[span.lane] < 0)
      continue;
    span.lane = lane_of[span.lane];
    span.start_ns += shift_ns;
    span.end_ns += shift_ns;
    span_of[i] = add_span(std::move(span));
  }
  for (const TraceFlow& f : other.flows_)
    if (f.from < span_of.size() && f.to < span_of.size() && span_of[f.from] != SIZE_MAX &&
        span_of[f.to] != SIZE_MAX)
      flows_.push_back({span_of[f.from], span_of[f.to], f.wait});
  if (spans_.size() > first) finish();
}

void TraceData::clear() {
  lanes_.clear();
  spans_.clear();
  flows_.clear();
  lane_keys_.clear();
  thread_lanes_.clear();
  sorted_spans_ = 0;
  min_ns_ = max_ns_ = 0;
  losses = {};
}

std::vector<CollectiveRow> TraceData::collectives() const {
  std::map<std::string, CollectiveRow> rows;
  for (const TraceSpan& s : spans_) {
    if (s.kind != SpanKind::collective) continue;
    CollectiveRow& r = rows[s.name];
    r.name = s.name;
    r.count += 1;
    r.seconds += s.seconds();
    r.bytes += s.bytes;
  }
  std::vector<CollectiveRow> out;
  for (auto& [name, row] : rows) out.push_back(std::move(row));
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace inspector

#include "timeline_model.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace inspector {

std::pair<size_t, size_t> visible_range(const TraceData& trace, int lane, double t0, double t1) {
  if (lane < 0 || lane >= static_cast<int>(trace.lanes().size())) return {0, 0};
  const TraceLane& l = trace.lanes()[lane];
  const auto& ids = l.spans;
  const auto& spans = trace.spans();
  const double first = t0 - static_cast<double>(l.max_duration_ns);
  const auto begin = std::lower_bound(ids.begin(), ids.end(), first, [&](size_t i, double t) {
    return static_cast<double>(spans[i].start_ns) < t;
  });
  const auto end = std::upper_bound(begin, ids.end(), t1, [&](double t, size_t i) {
    return t < static_cast<double>(spans[i].start_ns);
  });
  return {static_cast<size_t>(begin - ids.begin()), static_cast<size_t>(end - ids.begin())};
}

namespace {

// A run of thin spans being merged at one depth.
struct Run {
  bool open = false;
  float x0 = 0, x1 = 0;
  size_t longest = 0;
  int64_t longest_ns = -1;
  uint32_t count = 0;
  std::array<int64_t, 5> kind_ns{};  // time per SpanKind
  bool highlighted = false;
};

SpanKind dominant(const std::array<int64_t, 5>& kind_ns) {
  // Ties go to the earlier kind; a run of zero-length spans still gets a kind.
  size_t best = 0;
  for (size_t k = 1; k < kind_ns.size(); ++k)
    if (kind_ns[k] > kind_ns[best]) best = k;
  return static_cast<SpanKind>(best);
}

}  // namespace

LaneLayout layout_lane(const TraceData& trace, int lane, const TrackGeometry& g, int max_depth,
                       const std::function<bool(const TraceSpan&)>& highlight,
                       const std::vector<char>& matched) {
  LaneLayout out;
  const double v0 = g.view_start_ns, v1 = g.view_start_ns + g.view_span_ns;
  const auto [first, last] = visible_range(trace, lane, v0, v1);
  if (first >= last) return out;
  const auto& ids = trace.lanes()[lane].spans;
  const auto& spans = trace.spans();
  const double scale = g.track_w / g.view_span_ns;
  const float lo = g.track_x - 2, hi = g.track_x + g.track_w + 2;
  constexpr int kMaxDepth = 16;
  const int depths = std::clamp(max_depth, 1, kMaxDepth);
  std::array<Run, kMaxDepth> runs;
  const auto flush = [&](int depth) {
    Run& r = runs[depth];
    if (!r.open) return;
    LaneItem item;
    item.x0 = r.x0;
    item.x1 = r.x1;
    item.depth = depth;
    item.span = r.longest;
    item.count = r.count;
    item.kind = r.count == 1 ? spans[r.longest].kind : dominant(r.kind_ns);
    item.highlighted = r.highlighted;
    out.items.push_back(item);
    r = Run{};
  };
  for (size_t p = first; p < last; ++p) {
    const size_t i = ids[p];
    const TraceSpan& s = spans[i];
    if (s.depth >= depths) continue;
    if (static_cast<double>(s.end_ns) < v0) continue;  // an earlier span that ends before view
    float x0 = static_cast<float>(
        std::max<double>(lo, g.track_x + (static_cast<double>(s.start_ns) - v0) * scale));
    float x1 = std::max(static_cast<float>(std::min<double>(
                            hi, g.track_x + (static_cast<double>(s.end_ns) - v0) * scale)),
                        x0 + 1);
    const bool match = i < matched.size() && matched[i];
    if (match && x1 - x0 < g.min_match_px) {
      // Widened about its middle, so that a match in a crowd of thin spans shows.
      const float mid = (x0 + x1) / 2;
      x0 = mid - g.min_match_px / 2;
      x1 = mid + g.min_match_px / 2;
    }
    out.depth = std::max(out.depth, s.depth + 1);
    const bool lit = highlight && highlight(s);
    const int64_t ns = s.end_ns - s.start_ns;
    Run& r = runs[s.depth];
    if (x1 - x0 < g.merge_px && !match) {
      // Thin: joins the run at its depth when it touches it, else starts one.
      if (!(r.open && x0 <= r.x1 + 1 && r.x1 - r.x0 < g.max_run_px)) {
        flush(s.depth);
        r.open = true;
        r.x0 = x0;
      }
      r.x1 = std::max(r.x1, x1);
      r.count += 1;
      r.kind_ns[static_cast<size_t>(s.kind)] += std::max<int64_t>(ns, 1);
      if (ns > r.longest_ns) r.longest = i, r.longest_ns = ns;
      r.highlighted = r.highlighted || lit;
      continue;
    }
    flush(s.depth);
    LaneItem item;
    item.x0 = x0;
    item.x1 = x1;
    item.depth = s.depth;
    item.span = i;
    item.kind = s.kind;
    item.highlighted = lit;
    item.matched = match;
    out.items.push_back(item);
  }
  for (int d = 0; d < depths; ++d) flush(d);
  return out;
}

int item_at(const LaneLayout& layout, float x, int row) {
  // Thin items get a pixel either side so they can be clicked.
  int best = -1;
  for (size_t k = 0; k < layout.items.size(); ++k) {
    const LaneItem& it = layout.items[k];
    if (it.depth != row) continue;
    const float pad = it.x1 - it.x0 < 3 ? 1.0f : 0.0f;
    if (x >= it.x0 - pad && x < it.x1 + pad) {
      // Prefer the item whose own extent holds x over a padded neighbour.
      if (best < 0 || (x >= it.x0 && x < it.x1)) best = static_cast<int>(k);
    }
  }
  return best;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains_ci(const std::string& text, const std::string& lowered_query) {
  if (lowered_query.size() > text.size()) return false;
  const auto it =
      std::search(text.begin(), text.end(), lowered_query.begin(), lowered_query.end(),
                  [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return it != text.end();
}

}  // namespace

std::vector<size_t> search_spans(const TraceData& trace, const std::string& query) {
  std::vector<size_t> out;
  const std::string q = lower(query);
  if (q.empty()) return out;
  const auto& spans = trace.spans();
  for (size_t i = 0; i < spans.size(); ++i)
    if (contains_ci(spans[i].name, q) || contains_ci(spans[i].op, q)) out.push_back(i);
  std::stable_sort(out.begin(), out.end(),
                   [&](size_t a, size_t b) { return spans[a].start_ns < spans[b].start_ns; });
  return out;
}

int step_match(size_t count, int current, int dir) {
  if (count == 0) return -1;
  const int n = static_cast<int>(count);
  if (current < 0 || current >= n) return dir < 0 ? n - 1 : 0;
  return ((current + (dir < 0 ? -1 : 1)) % n + n) % n;
}

std::vector<char> match_mask(const TraceData& trace, const std::vector<size_t>& matches) {
  std::vector<char> mask(matches.empty() ? 0 : trace.spans().size(), 0);
  for (const size_t i : matches)
    if (i < mask.size()) mask[i] = 1;
  return mask;
}

namespace {

// Calls f(lane index, lane, span, seconds inside [t0, t1]) for every span that overlaps the range.
template <class F>
void for_each_span_in(const TraceData& trace, int64_t t0, int64_t t1, F&& f) {
  for (size_t l = 0; l < trace.lanes().size(); ++l) {
    const TraceLane& lane = trace.lanes()[l];
    const auto [first, last] =
        visible_range(trace, static_cast<int>(l), static_cast<double>(t0), static_cast<double>(t1));
    for (size_t p = first; p < last; ++p) {
      const TraceSpan& s = trace.spans()[lane.spans[p]];
      if (s.end_ns < t0 || s.start_ns > t1) continue;
      f(static_cast<int>(l), lane, s,
        static_cast<double>(std::min(s.end_ns, t1) - std::max(s.start_ns, t0)) * 1e-9);
    }
  }
}

}  // namespace

std::vector<RangeTotal> range_totals(const TraceData& trace, int64_t t0, int64_t t1) {
  if (t1 < t0) std::swap(t0, t1);
  std::map<std::pair<int, int>, RangeTotal> rows;
  for_each_span_in(trace, t0, t1, [&](int l, const TraceLane& lane, const TraceSpan& s, double seconds) {
    if (lane.device < 0 && s.depth > 0) return;
    RangeTotal& r = rows[{l, static_cast<int>(s.kind)}];
    r.lane = l;
    r.device = lane.device;
    r.kind = s.kind;
    r.count += 1;
    r.seconds += seconds;
    r.bytes += s.bytes;
    r.flops += s.flops;
  });
  std::vector<RangeTotal> out;
  for (auto& [key, row] : rows) out.push_back(row);
  return out;
}

std::vector<OpTotal> range_totals_by_op(const TraceData& trace, int64_t t0, int64_t t1) {
  if (t1 < t0) std::swap(t0, t1);
  std::map<std::string, OpTotal> rows;
  std::map<std::string, std::set<int>> lanes;
  for_each_span_in(trace, t0, t1, [&](int, const TraceLane& lane, const TraceSpan& s, double seconds) {
    // A device's nested spans (a step's copies) are inside their parent's time already.
    if (s.depth > 0) return;
    const std::string& op = s.op.empty() ? s.name : s.op;
    OpTotal& r = rows[op];
    r.op = op;
    r.count += 1;
    r.seconds += seconds;
    r.bytes += s.bytes;
    if (lane.device >= 0) lanes[op].insert(lane.device);
  });
  std::vector<OpTotal> out;
  for (auto& [op, row] : rows) {
    row.devices = static_cast<int>(lanes[op].size());
    out.push_back(row);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpTotal& a, const OpTotal& b) { return a.seconds > b.seconds; });
  return out;
}

TimeView zoom_view(TimeView v, double at_ns, double factor) {
  const double span = std::clamp(v.span_ns * factor, 100.0, 1e13);
  const double where = v.span_ns > 0 ? (at_ns - v.start_ns) / v.span_ns : 0.5;
  return {at_ns - where * span, span};
}

TimeView pan_view(TimeView v, double fraction) {
  return {v.start_ns + fraction * v.span_ns, v.span_ns};
}

TimeView fit_view(int64_t t0, int64_t t1) {
  if (t1 < t0) std::swap(t0, t1);
  const double length = std::max(1e3, static_cast<double>(t1 - t0));
  // A tenth of the selection either side, as Perfetto's F leaves.
  return {static_cast<double>(t0) - length * 0.1, length * 1.2};
}

std::string format_ruler_time(double ns, double step, int extra) {
  const char* unit = "ns";
  double div = 1;
  if (step >= 1e8)
    unit = "s", div = 1e9;
  else if (step >= 1e5)
    unit = "ms", div = 1e6;
  else if (step >= 1e2)
    unit = "us", div = 1e3;
  int decimals = 0;
  for (double s = step / div; s < 1 - 1e-9 && decimals < 6; s *= 10) ++decimals;
  decimals = std::min(decimals + extra, 9);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, ns / div, unit);
  return buf;
}

std::vector<size_t> flows_of(const TraceData& trace, size_t span, bool nested) {
  std::vector<size_t> out;
  if (span >= trace.spans().size()) return out;
  std::vector<size_t> members = {span};
  const TraceSpan& s = trace.spans()[span];
  if (nested) {
    const auto [first, last] = visible_range(trace, s.lane, static_cast<double>(s.start_ns),
                                             static_cast<double>(s.end_ns));
    const auto& ids = trace.lanes()[s.lane].spans;
    for (size_t p = first; p < last; ++p) {
      const TraceSpan& o = trace.spans()[ids[p]];
      if (ids[p] != span && o.depth > s.depth && o.start_ns >= s.start_ns && o.end_ns <= s.end_ns)
        members.push_back(ids[p]);
    }
    std::sort(members.begin(), members.end());
  }
  const auto member = [&](size_t i) {
    return std::binary_search(members.begin(), members.end(), i);
  };
  const auto& flows = trace.flows();
  for (size_t f = 0; f < flows.size(); ++f)
    if (member(flows[f].from) || member(flows[f].to)) out.push_back(f);
  return out;
}

namespace {

// Union-find over device numbers.
struct Groups {
  std::map<int, int> parent;
  int find(int d) {
    auto it = parent.find(d);
    if (it == parent.end()) return parent[d] = d;
    if (it->second == d) return d;
    return it->second = find(it->second);
  }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

}  // namespace

std::vector<CollectiveInvocation> collective_invocations(const TraceData& trace) {
  const auto& spans = trace.spans();
  const auto& lanes = trace.lanes();
  // Device spans by start: the collective steps and whatever else the devices ran.
  std::vector<size_t> order;
  for (const TraceLane& lane : lanes)
    if (lane.device >= 0) order.insert(order.end(), lane.spans.begin(), lane.spans.end());
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return spans[a].start_ns < spans[b].start_ns; });
  std::vector<CollectiveInvocation> out;
  std::vector<int> invocation_of(spans.size(), -1);
  const auto device_of = [&](const TraceSpan& s) { return lanes[s.lane].device; };
  // A device's run: its consecutive steps of one collective, until it does work of another op.
  // The n-th run of a collective on each device belongs to the n-th invocation of that
  // collective: devices are matched by how many times they ran it, not by when, since the
  // processes of a job (and groups that exchange nothing with each other) run ahead of each
  // other by whole invocations and interleave on the timeline.
  using Key = std::tuple<std::string, std::string, std::string>;  // name, op, program
  struct DeviceState {
    int run = -1;             // the invocation of its open run; -1: none open
    std::map<Key, int> runs;  // runs so far, per collective
  };
  std::map<std::pair<int, int>, DeviceState> devices;    // by (runtime, device)
  std::map<std::pair<Key, int>, int> invocation_of_run;  // (collective, n) -> index into out
  for (const size_t i : order) {
    const TraceSpan& s = spans[i];
    DeviceState& dev = devices[{lanes[s.lane].runtime, device_of(s)}];
    if (s.kind == SpanKind::collective) {
      if (dev.run >= 0) {
        const CollectiveInvocation& cur = out[dev.run];
        if (cur.name != s.name || cur.op != s.op || cur.program != s.program) dev.run = -1;
      }
      if (dev.run < 0) {
        Key key{s.name, s.op, s.program};
        const int n = dev.runs[key]++;
        const auto [it, made] =
            invocation_of_run.try_emplace({std::move(key), n}, static_cast<int>(out.size()));
        if (made) {
          out.emplace_back();
          out.back().name = s.name;
          out.back().op = s.op;
          out.back().program = s.program;
          out.back().start_ns = s.start_ns;
          out.back().end_ns = s.end_ns;
        }
        dev.run = it->second;
      }
      CollectiveInvocation& cur = out[dev.run];
      cur.spans.push_back(i);
      cur.start_ns = std::min(cur.start_ns, s.start_ns);
      cur.end_ns = std::max(cur.end_ns, s.end_ns);
      cur.bytes += s.bytes;
      const int d = device_of(s);
      if (!std::binary_search(cur.devices.begin(), cur.devices.end(), d))
        cur.devices.insert(std::lower_bound(cur.devices.begin(), cur.devices.end(), d), d);
      invocation_of[i] = dev.run;
      continue;
    }
    // Work of another op on the device ends its run. (The copies and folds inside a collective
    // step carry the collective's op.)
    if (dev.run >= 0 && s.op != out[dev.run].op) dev.run = -1;
  }
  if (out.empty()) return out;
  // Groups: devices linked by a flow into a copy that runs inside one of the invocation's steps,
  // or by a wait into the step itself (a fold that reads its peers' buffers in place waits for
  // their producers and copies nothing).
  std::vector<Groups> groups(out.size());
  {
    // Per lane, the steps by start, to find the step enclosing a copy.
    std::map<int, std::vector<size_t>> steps_by_lane;
    for (const auto& inv : out)
      for (const size_t i : inv.spans) steps_by_lane[spans[i].lane].push_back(i);
    for (auto& [lane, steps] : steps_by_lane)
      std::sort(steps.begin(), steps.end(),
                [&](size_t a, size_t b) { return spans[a].start_ns < spans[b].start_ns; });
    for (const TraceFlow& f : trace.flows()) {
      if (f.from >= spans.size() || f.to >= spans.size()) continue;
      if (f.wait && invocation_of[f.to] < 0) continue;
      const TraceSpan& to = spans[f.to];
      const int from_device = device_of(spans[f.from]);
      const int to_device = device_of(to);
      if (from_device < 0 || to_device < 0 || from_device == to_device) continue;
      int inv = invocation_of[f.to];
      if (inv < 0) {
        const auto it = steps_by_lane.find(to.lane);
        if (it == steps_by_lane.end()) continue;
        const auto& steps = it->second;
        auto s = std::upper_bound(steps.begin(), steps.end(), to.start_ns,
                                  [&](int64_t t, size_t k) { return t < spans[k].start_ns; });
        if (s == steps.begin()) continue;
        --s;
        if (spans[*s].end_ns < to.end_ns) continue;
        inv = invocation_of[*s];
      }
      if (inv >= 0) groups[inv].join(from_device, to_device);
    }
  }
  for (size_t k = 0; k < out.size(); ++k) {
    std::map<int, std::vector<int>> by_root;
    for (const int d : out[k].devices) by_root[groups[k].find(d)].push_back(d);
    for (auto& [root, members] : by_root) out[k].groups.push_back(std::move(members));
    std::sort(out[k].groups.begin(), out[k].groups.end());
    std::stable_sort(out[k].spans.begin(), out[k].spans.end(),
                     [&](size_t a, size_t b) { return spans[a].start_ns < spans[b].start_ns; });
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::string mesh_axes_for_groups(const meshvk::Mesh& mesh,
                                 const std::vector<std::vector<int>>& groups) {
  bool moved = false;
  for (const auto& g : groups) moved = moved || g.size() > 1;
  const int n = mesh.ndim();
  if (!moved || n <= 0 || n > 16) return "";
  // Subsets of axes, fewest axes first, then in mesh order.
  std::vector<unsigned> subsets;
  for (unsigned m = 1; m < (1u << n); ++m) subsets.push_back(m);
  std::stable_sort(subsets.begin(), subsets.end(), [](unsigned a, unsigned b) {
    return __builtin_popcount(a) < __builtin_popcount(b);
  });
  for (const unsigned m : subsets) {
    // Two devices share a group of these axes when their coordinates agree on every other axis.
    const auto key = [&](int device) -> std::vector<int> {
      const int p = mesh.position_of(device);
      if (p < 0) return {-1};
      std::vector<int> c = mesh.coords(p);
      for (int a = 0; a < n; ++a)
        if (m & (1u << a)) c[a] = 0;
      return c;
    };
    bool fits = true;
    for (const auto& g : groups) {
      if (g.size() < 2) continue;
      const auto k0 = key(g.front());
      if (k0.size() == 1 && k0[0] == -1) return "";  // a device outside the mesh
      for (const int d : g) fits = fits && key(d) == k0;
    }
    if (!fits) continue;
    std::vector<std::string> names;
    for (int a = 0; a < n; ++a)
      if (m & (1u << a)) names.push_back("'" + mesh.axis_names()[a] + "'");
    if (names.size() == 1) return names.front();
    std::string s = "(";
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
    return s + ")";
  }
  return "";
}

void sort_invocations(std::vector<CollectiveInvocation>& rows, InvocationColumn column,
                      bool ascending) {
  const auto less = [&](const CollectiveInvocation& a, const CollectiveInvocation& b) {
    switch (column) {
      case InvocationColumn::name:
        return a.name < b.name;
      case InvocationColumn::axes:
        return a.axes < b.axes;
      case InvocationColumn::start:
        return a.start_ns < b.start_ns;
      case InvocationColumn::duration:
        return a.end_ns - a.start_ns < b.end_ns - b.start_ns;
      case InvocationColumn::steps:
        return a.spans.size() < b.spans.size();
      case InvocationColumn::bytes:
        return a.bytes < b.bytes;
      case InvocationColumn::gbps:
        return a.gbps() < b.gbps();
    }
    return false;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    return ascending ? less(a, b) : less(b, a);
  });
}

double follow_edge_ns(const TraceData& trace) {
  bool device = false;
  int64_t edge = 0;
  for (const TraceLane& lane : trace.lanes()) {
    if (lane.device < 0 || lane.spans.empty()) continue;
    edge = device ? std::max(edge, lane.max_end_ns) : lane.max_end_ns;
    device = true;
  }
  return static_cast<double>(device ? edge : trace.max_ns());
}

TimeView follow_view(const TraceData& trace, double span_ns) {
  // The devices' latest work a twentieth of the window from its right edge: in view, and not
  // hidden under the edge (the host runs ahead of it, its spans arriving first).
  const double edge = follow_edge_ns(trace);
  return {std::max(edge - span_ns * 0.95, static_cast<double>(trace.min_ns())), span_ns};
}

std::string thousands(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string losses_warning(const TraceLosses& losses) {
  if (!losses.any()) return "";
  std::vector<std::string> parts;
  if (losses.device_spans)
    parts.push_back(thousands(losses.device_spans) +
                    " device spans dropped by the profiler (the device ran too far behind for "
                    "their timestamps to be kept)");
  if (losses.events)
    parts.push_back(thousands(losses.events) +
                    " events overwritten in the profiler's ring buffer (the oldest)");
  if (losses.missed)
    parts.push_back(thousands(losses.missed) + " events the inspector fell too far behind to read");
  if (losses.not_kept)
    parts.push_back(thousands(losses.not_kept) +
                    " spans past the most the inspector holds (restart the run to see new ones)");
  std::string text = "Incomplete trace: ";
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? "; " : "") + parts[i];
  text +=
      ". That work ran but is not drawn: lanes have gaps, and the collectives table and range "
      "totals count less than ran.";
  if (losses.device_spans)
    text += " MESHVK_PROFILE_SAMPLE=N (Options::sample_replays) profiles 1 jit replay in N.";
  return text;
}

Provenance split_provenance(const std::string& text) {
  // The source is the last " - " part when it names a line ("file:12"); a rule may hold " - " too.
  const size_t dash = text.rfind(" - ");
  if (dash != std::string::npos) {
    const std::string source = text.substr(dash + 3);
    const size_t colon = source.find(':');
    if (colon != std::string::npos && colon + 1 < source.size() &&
        std::isdigit(static_cast<unsigned char>(source[colon + 1])))
      return {text.substr(0, dash), source};
  }
  return {text, ""};
}

}  // namespace inspector

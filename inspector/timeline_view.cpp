// The timeline, after the Tracy profiler's: one lane per virtual device and queue (and the
// host), spans coloured by kind with their names inside, arrows for data moved between devices.
// The wheel zooms around the cursor, dragging pans; hovering a span tells its duration, bytes,
// GB/s and GFLOP/s. A second tab sums up the collectives.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "app.hpp"

namespace inspector {
namespace {

constexpr float kLabelWidth = 130;
constexpr float kRowHeight = 18;
constexpr float kLaneGap = 5;
constexpr float kRulerHeight = 20;

// Lanes top to bottom: the host, then devices in order, then anything else.
std::vector<size_t> lane_order(const TraceData& trace) {
  std::vector<size_t> order(trace.lanes().size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TraceLane& x = trace.lanes()[a];
    const TraceLane& y = trace.lanes()[b];
    const auto rank = [](const TraceLane& l) {
      return l.device < 0 && l.name.rfind("host", 0) == 0 ? 0 : 1;
    };
    if (rank(x) != rank(y)) return rank(x) < rank(y);
    if (x.runtime != y.runtime) return x.runtime < y.runtime;
    if (x.device != y.device) return x.device < y.device;
    return x.queue < y.queue;
  });
  return order;
}

// A tick spacing of 1, 2 or 5 times a power of ten that gives ticks about `target` ns apart.
double nice_step(double target) {
  const double p = std::pow(10.0, std::floor(std::log10(std::max(target, 1.0))));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= target) return m * p;
  return 10 * p;
}

// A tick label in a unit a decade above the tick spacing, with the decimals the spacing needs:
// "12.35 ms" for ticks 50 us apart.
std::string format_tick(double ns, double step) {
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
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, ns / div, unit);
  return buf;
}

void span_tooltip(const TraceSpan& s, const TraceData& trace) {
  ImGui::BeginTooltip();
  ImGui::Text("%s", s.name.c_str());
  ImGui::TextDisabled("%s on %s", span_kind_name(s.kind), trace.lanes()[s.lane].name.c_str());
  if (!s.op.empty()) ImGui::Text("op %s", s.op.c_str());
  if (!s.program.empty()) ImGui::Text("program %s", s.program.c_str());
  const double seconds = s.seconds();
  ImGui::Text("duration %s", format_duration(seconds).c_str());
  if (s.bytes) {
    ImGui::Text("bytes %s", format_bytes(s.bytes).c_str());
    if (seconds > 0) ImGui::Text("%.2f GB/s", s.bytes / seconds / 1e9);
  }
  if (s.flops) {
    ImGui::Text("flops %.3g", static_cast<double>(s.flops));
    if (seconds > 0) ImGui::Text("%.2f GFLOP/s", s.flops / seconds / 1e9);
  }
  if (s.peer >= 0) ImGui::Text("peer device %d", s.peer);
  ImGui::EndTooltip();
}

void draw_lanes(App& app) {
  TraceData& trace = app.trace;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiIO& io = ImGui::GetIO();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float track_x = origin.x + kLabelWidth;
  const float track_w = std::max(10.0f, avail.x - kLabelWidth);

  const std::vector<size_t> order = lane_order(trace);
  float content_h = kRulerHeight;
  for (const size_t l : order) content_h += trace.lanes()[l].depth * kRowHeight + kLaneGap;

  // The canvas takes the mouse: wheel zooms around the cursor, dragging pans.
  ImGui::InvisibleButton("canvas", ImVec2(avail.x, std::max(avail.y, content_h)),
                         ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
  const bool hovered = ImGui::IsItemHovered();
  const double min_ns = static_cast<double>(trace.min_ns());
  const double max_ns = static_cast<double>(trace.max_ns());
  if (app.live_mode && app.follow && !trace.empty()) {
    // Keep the newest events in view at the current zoom.
    app.view_start_ns = std::max(min_ns, max_ns - app.view_span_ns * 0.98);
    if (max_ns - min_ns < app.view_span_ns) app.view_start_ns = min_ns;
  }
  if (hovered && io.MouseWheel != 0 && !io.KeyCtrl) {
    const double at = app.view_start_ns + (io.MousePos.x - track_x) / track_w * app.view_span_ns;
    const double factor = std::pow(0.8, io.MouseWheel);
    app.view_span_ns = std::clamp(app.view_span_ns * factor, 100.0, 1e13);
    app.view_start_ns = at - (io.MousePos.x - track_x) / track_w * app.view_span_ns;
    app.follow = false;
  }
  if (ImGui::IsItemActive() && (ImGui::IsMouseDragging(ImGuiMouseButton_Left) ||
                                ImGui::IsMouseDragging(ImGuiMouseButton_Right))) {
    app.view_start_ns -= io.MouseDelta.x / track_w * app.view_span_ns;
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
    if (io.MouseDelta.x != 0) app.follow = false;
  }
  const double v0 = app.view_start_ns;
  const double scale = track_w / app.view_span_ns;  // pixels per ns
  const auto x_of = [&](double ns) { return static_cast<float>(track_x + (ns - v0) * scale); };

  // Ruler.
  const double step = nice_step(app.view_span_ns / 8);
  dl->AddRectFilled(origin, ImVec2(origin.x + avail.x, origin.y + kRulerHeight),
                    IM_COL32(30, 32, 38, 255));
  for (double t = std::floor((v0 - min_ns) / step) * step; min_ns + t < v0 + app.view_span_ns;
       t += step) {
    const float x = x_of(min_ns + t);
    if (x < track_x) continue;
    dl->AddLine(ImVec2(x, origin.y + 12), ImVec2(x, origin.y + kRulerHeight),
                IM_COL32(150, 150, 150, 255));
    dl->AddText(ImVec2(x + 3, origin.y + 2), IM_COL32(170, 170, 170, 255),
                format_tick(t, step).c_str());
  }

  const std::string op_key_selected = op_key(app.selected_op);
  const bool op_filter = !op_key_selected.empty();
  int hovered_span = -1;
  std::vector<float> lane_y(trace.lanes().size(), -1);
  float y = origin.y + kRulerHeight;
  const float clip_top = ImGui::GetWindowPos().y, clip_bottom = clip_top + ImGui::GetWindowHeight();
  dl->PushClipRect(ImVec2(origin.x, origin.y + kRulerHeight),
                   ImVec2(origin.x + avail.x, origin.y + std::max(avail.y, content_h)), true);
  for (const size_t l : order) {
    const TraceLane& lane = trace.lanes()[l];
    const float h = lane.depth * kRowHeight;
    lane_y[l] = y;
    const bool lit = lane.device >= 0 && app.device_hovered(lane.device);
    dl->AddRectFilled(ImVec2(origin.x, y), ImVec2(origin.x + avail.x, y + h),
                      lit ? IM_COL32(70, 70, 110, 255) : IM_COL32(36, 38, 46, 255));
    // Lane label; hovering it lights the device in the other views.
    dl->AddText(ImVec2(origin.x + 4, y + 2), IM_COL32(220, 220, 220, 255), lane.name.c_str());
    if (io.MousePos.x >= origin.x && io.MousePos.x < track_x && io.MousePos.y >= y &&
        io.MousePos.y < y + h && hovered && lane.device >= 0)
      app.hovered_devices_next = {lane.device};
    if (y + h >= clip_top && y <= clip_bottom) {
      dl->PushClipRect(ImVec2(track_x, y), ImVec2(track_x + track_w, y + h), true);
      // Spans that can reach into view: starting after view start minus the lane's longest span.
      const auto& ids = lane.spans;
      const double first = v0 - static_cast<double>(lane.max_duration_ns);
      auto it = std::lower_bound(ids.begin(), ids.end(), first,
                                 [&](size_t i, double t) { return trace.spans()[i].start_ns < t; });
      std::vector<float> merged_end(16, -1e9f);  // per depth: where the last tiny span drawn ends
      for (; it != ids.end(); ++it) {
        const TraceSpan& s = trace.spans()[*it];
        if (s.start_ns > v0 + app.view_span_ns) break;
        const float x0 = std::max(x_of(static_cast<double>(s.start_ns)), track_x - 2);
        const float x1 =
            std::min(std::max(x_of(static_cast<double>(s.end_ns)), x0 + 1), track_x + track_w + 2);
        if (x1 < track_x) continue;
        const int depth = std::min(s.depth, 15);
        const float sy = y + depth * kRowHeight + 1;
        // Spans under two pixels that touch the previous one merge into it, as Tracy does.
        if (x1 - x0 < 2 && x0 <= merged_end[depth] + 1) {
          merged_end[depth] = std::max(merged_end[depth], x1);
          dl->AddRectFilled(ImVec2(x0, sy), ImVec2(x1, sy + kRowHeight - 2),
                            IM_COL32(150, 150, 150, 200));
          continue;
        }
        merged_end[depth] = x1;
        ImU32 color = kind_color(s.kind);
        const bool matches = op_filter && span_matches_op(s, op_key_selected);
        if (op_filter && !matches) color = (color & 0x00FFFFFF) | 0x50000000;
        dl->AddRectFilled(ImVec2(x0, sy), ImVec2(x1, sy + kRowHeight - 2), color);
        if (matches || static_cast<int>(*it) == app.selected_span)
          dl->AddRect(ImVec2(x0, sy), ImVec2(x1, sy + kRowHeight - 2), IM_COL32(255, 255, 255, 255),
                      0, 0, 2);
        if (x1 - x0 > 24) {
          const ImVec2 text = ImGui::CalcTextSize(s.name.c_str());
          if (text.x < x1 - x0 - 4 || x1 - x0 > 40) {
            dl->PushClipRect(ImVec2(x0, sy), ImVec2(x1, sy + kRowHeight), true);
            dl->AddText(ImVec2(std::max(x0, track_x) + 3, sy + 1), IM_COL32(255, 255, 255, 255),
                        s.name.c_str());
            dl->PopClipRect();
          }
        }
        if (hovered && io.MousePos.x >= x0 && io.MousePos.x < x1 && io.MousePos.y >= sy &&
            io.MousePos.y < sy + kRowHeight - 2)
          hovered_span = static_cast<int>(*it);
      }
      dl->PopClipRect();
    }
    y += h + kLaneGap;
  }

  // Flows: an arrow from the end of the producing span to the start of the consuming one.
  int drawn = 0;
  for (const TraceFlow& f : trace.flows()) {
    if (drawn > 4000) break;
    const TraceSpan& a = trace.spans()[f.from];
    const TraceSpan& b = trace.spans()[f.to];
    if (std::max(a.end_ns, b.start_ns) < v0 ||
        std::min(a.end_ns, b.start_ns) > v0 + app.view_span_ns)
      continue;
    if (lane_y[a.lane] < 0 || lane_y[b.lane] < 0) continue;
    const ImVec2 p0(x_of(static_cast<double>(a.end_ns)),
                    lane_y[a.lane] + (a.depth + 0.5f) * kRowHeight);
    const ImVec2 p1(x_of(static_cast<double>(b.start_ns)),
                    lane_y[b.lane] + (b.depth + 0.5f) * kRowHeight);
    const ImU32 color = f.wait ? IM_COL32(180, 180, 180, 140) : IM_COL32(255, 220, 120, 220);
    dl->AddLine(p0, p1, color, 1.5f);
    // The head.
    const float dx = p1.x - p0.x, dy = p1.y - p0.y;
    const float len = std::max(1.0f, std::sqrt(dx * dx + dy * dy));
    const float ux = dx / len, uy = dy / len;
    dl->AddTriangleFilled(p1, ImVec2(p1.x - 7 * ux + 3.5f * uy, p1.y - 7 * uy - 3.5f * ux),
                          ImVec2(p1.x - 7 * ux - 3.5f * uy, p1.y - 7 * uy + 3.5f * ux), color);
    ++drawn;
  }
  dl->PopClipRect();

  if (hovered_span >= 0) {
    const TraceSpan& s = trace.spans()[hovered_span];
    span_tooltip(s, trace);
    if (trace.lanes()[s.lane].device >= 0)
      app.hovered_devices_next = {trace.lanes()[s.lane].device};
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) app.selected_span = hovered_span;
  }
}

void draw_collectives(App& app) {
  const auto rows = app.trace.collectives();
  if (rows.empty()) {
    ImGui::TextDisabled("no collective spans in this trace");
    return;
  }
  const ImGuiTableFlags flags =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY;
  if (!ImGui::BeginTable("collectives", 6, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("collective");
  ImGui::TableSetupColumn("count");
  ImGui::TableSetupColumn("total time");
  ImGui::TableSetupColumn("mean");
  ImGui::TableSetupColumn("bytes");
  ImGui::TableSetupColumn("GB/s");
  ImGui::TableHeadersRow();
  for (const CollectiveRow& r : rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.name.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%llu", static_cast<unsigned long long>(r.count));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_duration(r.seconds).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_duration(r.count ? r.seconds / r.count : 0).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_bytes(r.bytes).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.2f", r.gbps());
  }
  ImGui::EndTable();
}

}  // namespace

void draw_timeline_view(App& app) {
  TraceData& trace = app.trace;
  ImGui::Text("%s", app.live_mode ? "live (meshvk::profile)" : trace.source.c_str());
  ImGui::SameLine();
  ImGui::TextDisabled("%zu spans, %zu flows, %zu lanes", trace.spans().size(), trace.flows().size(),
                      trace.lanes().size());
  if (app.live_mode && app.live.missed() > 0) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1, 0.7f, 0.3f, 1), "%llu events missed",
                       static_cast<unsigned long long>(app.live.missed()));
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("fit")) {
    app.view_start_ns = static_cast<double>(trace.min_ns());
    app.view_span_ns = std::max(1e3, static_cast<double>(trace.max_ns() - trace.min_ns()) * 1.02);
    app.follow = false;
  }
  if (app.live_mode) {
    ImGui::SameLine();
    ImGui::Checkbox("follow", &app.follow);
  }
  ImGui::SameLine();
  if (ImGui::SmallButton("open trace...")) app.show_open_dialog = true;
  // Legend.
  for (const SpanKind k :
       {SpanKind::kernel, SpanKind::copy, SpanKind::collective, SpanKind::host}) {
    ImGui::SameLine();
    ImGui::ColorButton(span_kind_name(k), ImGui::ColorConvertU32ToFloat4(kind_color(k)),
                       ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
    ImGui::SameLine(0, 3);
    ImGui::TextDisabled("%s", span_kind_name(k));
  }
  if (!app.trace_error.empty()) {
    ImGui::PushTextWrapPos();
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", app.trace_error.c_str());
    ImGui::PopTextWrapPos();
  }
  if (!ImGui::BeginTabBar("timeline tabs")) return;
  if (ImGui::BeginTabItem("Timeline")) {
    if (trace.empty()) {
      ImGui::TextDisabled(app.live_mode ? "waiting for profiler events (run a scenario)"
                                        : "the trace has no spans");
    } else {
      ImGui::BeginChild("lanes", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollWithMouse);
      draw_lanes(app);
      ImGui::EndChild();
    }
    ImGui::EndTabItem();
  }
  if (ImGui::BeginTabItem("Collectives")) {
    draw_collectives(app);
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

}  // namespace inspector

// The timeline's lanes, after Tracy and Perfetto: a time ruler pinned above the lanes with the
// cursor's time, one lane per virtual device and stream (and the host), spans coloured by kind
// with their names inside, thin spans merged into runs of their dominant kind. The wheel zooms
// around the cursor, dragging pans, Shift+drag (or a drag on the ruler) selects a time range,
// clicking a span selects it (its flows are drawn), clicking a lane's name collapses it.
// What is drawn is worked out by timeline_model.cpp; this file only draws and reads the mouse.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <climits>
#include <numeric>
#include <tuple>

#include "app.hpp"
#include "projection.hpp"

namespace inspector {
namespace {

constexpr float kLabelWidth = 150;
constexpr float kRowHeight = 18;
constexpr float kLaneGap = 4;
// Two rows: the ticks' times, and under them the cursor's time, a range's length and the
// marks (the cursor's time once covered a tick's label).
constexpr float kTickRowHeight = 20;
constexpr float kRulerHeight = 36;

// Lanes top to bottom: the host, then devices in order, then anything else. With a projection
// (Project onto), each device's lanes are together: measured first, then projected.
std::vector<size_t> lane_order(const TraceData& trace) {
  std::vector<size_t> order(trace.lanes().size());
  std::iota(order.begin(), order.end(), 0);
  bool projected = false;
  for (const TraceLane& l : trace.lanes()) projected = projected || is_projected(l);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TraceLane& x = trace.lanes()[a];
    const TraceLane& y = trace.lanes()[b];
    const auto rank = [](const TraceLane& l) {
      // "host", or "process 1 / host" in the traces of several processes.
      const size_t slash = l.name.rfind(" / ");
      const size_t name = slash == std::string::npos ? 0 : slash + 3;
      return l.device < 0 && l.name.compare(name, 4, "host") == 0 ? 0 : 1;
    };
    if (rank(x) != rank(y)) return rank(x) < rank(y);
    if (projected) {
      // Devices in order (anything else last), each measured then projected.
      const auto key = [](const TraceLane& l) {
        return std::make_tuple(l.device < 0 ? INT_MAX : l.device, is_projected(l), l.runtime, l.queue);
      };
      return key(x) < key(y);
    }
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

void span_tooltip(const TraceSpan& s, const TraceData& trace, uint32_t merged) {
  ImGui::BeginTooltip();
  if (merged > 1) ImGui::TextDisabled("%u spans merged at this zoom; the longest:", merged);
  ImGui::Text("%s", s.name.c_str());
  ImGui::TextDisabled("%s on %s", span_kind_name(s.kind), trace.lanes()[s.lane].name.c_str());
  if (!s.op.empty()) ImGui::Text("op %s", s.op.c_str());
  const double seconds = s.seconds();
  ImGui::Text("duration %s", format_duration(seconds).c_str());
  if (s.bytes)
    ImGui::Text("%s, %.2f GB/s", format_bytes(s.bytes).c_str(),
                seconds > 0 ? s.bytes / seconds / 1e9 : 0);
  if (s.flops)
    ImGui::Text("%.3g flop, %.2f GFLOP/s", static_cast<double>(s.flops),
                seconds > 0 ? s.flops / seconds / 1e9 : 0);
  ImGui::TextDisabled("click for details");
  ImGui::EndTooltip();
}

void draw_arrow(ImDrawList* dl, ImVec2 p0, ImVec2 p1, ImU32 color, float thickness, bool head) {
  dl->AddLine(p0, p1, color, thickness);
  if (!head) return;
  const float dx = p1.x - p0.x, dy = p1.y - p0.y;
  const float len = std::max(1.0f, std::sqrt(dx * dx + dy * dy));
  const float ux = dx / len, uy = dy / len;
  dl->AddTriangleFilled(p1, ImVec2(p1.x - 7 * ux + 3.5f * uy, p1.y - 7 * uy - 3.5f * ux),
                        ImVec2(p1.x - 7 * ux - 3.5f * uy, p1.y - 7 * uy + 3.5f * ux), color);
}

bool lane_collapsed(const App& app, const TraceLane& lane) {
  const auto it = app.tl.lane_collapsed.find(lane.name);
  // Host lanes start collapsed: their nesting is deep and mostly empty, and would push the
  // devices off screen.
  return it == app.tl.lane_collapsed.end() ? lane.device < 0 : it->second;
}

}  // namespace

void select_span(App& app, size_t span, bool center) {
  const TraceData& trace = app.trace;
  if (span >= trace.spans().size()) return;
  app.selected_span = static_cast<int>(span);
  const TraceSpan& s = trace.spans()[span];
  app.tl.scroll_to_lane = s.lane;
  if (!center) return;
  const double duration = static_cast<double>(s.end_ns - s.start_ns);
  if (duration > app.view_span_ns * 0.8) app.view_span_ns = std::max(1e3, duration * 1.25);
  app.view_start_ns = (s.start_ns + s.end_ns) / 2.0 - app.view_span_ns / 2;
  app.follow = false;
}

void draw_timeline_lanes(App& app) {
  TraceData& trace = app.trace;
  App::TimelineUi& tl = app.tl;
  const ImGuiIO& io = ImGui::GetIO();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  // Wide enough for the longest lane name ("process 1 / CPU 4 transfer"), up to a third of the
  // panel.
  float label_w = kLabelWidth;
  for (const TraceLane& lane : trace.lanes())
    label_w = std::max(label_w, ImGui::CalcTextSize(lane.name.c_str()).x + 24.0f);
  label_w = std::min(label_w, std::max(kLabelWidth, avail.x / 3));
  const float track_x = origin.x + label_w;
  const float track_w = std::max(10.0f, avail.x - label_w);
  const double min_ns = static_cast<double>(trace.min_ns());
  if (app.live_mode && app.follow && !trace.empty()) {
    // Device spans arrive after their timestamps are read back: follow the latest device
    // timestamp so the device lanes stay in view rather than the host running ahead of them.
    const TimeView v = follow_view(trace, app.view_span_ns);
    app.view_start_ns = v.start_ns;
  }
  const auto time_at = [&](float x) {
    return app.view_start_ns + (x - track_x) / track_w * app.view_span_ns;
  };
  const auto x_of = [&](double ns) {
    return static_cast<float>(track_x + (ns - app.view_start_ns) * track_w / app.view_span_ns);
  };

  // The ruler, outside the scrolling lanes so it stays put. Dragging on it selects a range.
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::InvisibleButton("ruler", ImVec2(avail.x, kRulerHeight));
  const bool ruler_hovered = ImGui::IsItemHovered();
  if (ImGui::IsItemActivated() && io.MousePos.x >= track_x) {
    tl.range_dragging = true;
    tl.range_t0 = tl.range_t1 = time_at(io.MousePos.x);
  }
  const double step = nice_step(app.view_span_ns / std::max(2.0f, track_w / 110));
  tl.ruler_unit = format_ruler_time(0, step);
  tl.ruler_unit = tl.ruler_unit.substr(tl.ruler_unit.rfind(' ') + 1);
  dl->AddRectFilled(origin, ImVec2(origin.x + avail.x, origin.y + kRulerHeight),
                    IM_COL32(30, 32, 38, 255));
  dl->PushClipRect(ImVec2(track_x, origin.y), ImVec2(track_x + track_w, origin.y + kRulerHeight),
                   true);
  for (double t = std::floor((app.view_start_ns - min_ns) / step) * step;
       min_ns + t < app.view_start_ns + app.view_span_ns; t += step) {
    const float x = x_of(min_ns + t);
    if (x < track_x) continue;
    dl->AddLine(ImVec2(x, origin.y + 14), ImVec2(x, origin.y + kTickRowHeight),
                IM_COL32(150, 150, 150, 255));
    dl->AddText(ImVec2(x + 3, origin.y + 2), IM_COL32(170, 170, 170, 255),
                format_ruler_time(t, step).c_str());
  }
  dl->PopClipRect();

  // The lanes scroll under it.
  ImGui::BeginChild("lanes", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollWithMouse);
  ImDrawList* ldl = ImGui::GetWindowDrawList();
  const ImVec2 lanes_origin = ImGui::GetCursorScreenPos();
  const ImVec2 lanes_avail = ImGui::GetContentRegionAvail();
  const std::vector<size_t> order = lane_order(trace);
  // Lay out every lane first: its height comes from the spans in view.
  TrackGeometry g;
  g.view_start_ns = app.view_start_ns;
  g.view_span_ns = app.view_span_ns;
  g.track_x = track_x;
  g.track_w = track_w;
  const std::string key = op_key(app.selected_op);
  std::function<bool(const TraceSpan&)> highlight;
  if (!key.empty()) highlight = [&key](const TraceSpan& s) { return span_matches_op(s, key); };
  std::string layouts_for;
  {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.17g %.17g %.3f %.3f %zu %zu|", g.view_start_ns,
                  g.view_span_ns, g.track_x, g.track_w, trace.spans().size(), trace.lanes().size());
    layouts_for = buf + key + "|" + tl.searched_for + "|";
    for (const TraceLane& lane : trace.lanes())
      layouts_for += lane_collapsed(app, lane) ? '1' : '0';
  }
  if (layouts_for != tl.layouts_for) {
    tl.layouts.assign(trace.lanes().size(), LaneLayout{});
    for (size_t l = 0; l < trace.lanes().size(); ++l)
      tl.layouts[l] =
          layout_lane(trace, static_cast<int>(l), g, lane_collapsed(app, trace.lanes()[l]) ? 1 : 16,
                      highlight, tl.match_mask);
    tl.layouts_for = std::move(layouts_for);
  }
  const std::vector<LaneLayout>& layouts = tl.layouts;
  std::vector<float> lane_y(trace.lanes().size(), -1), lane_h(trace.lanes().size(), 0);
  float content_h = 0;
  for (const size_t l : order) {
    lane_y[l] = lanes_origin.y + content_h;
    lane_h[l] = layouts[l].depth * kRowHeight;
    content_h += lane_h[l] + kLaneGap;
  }
  ImGui::InvisibleButton("canvas", ImVec2(lanes_avail.x, std::max(lanes_avail.y, content_h)),
                         ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
  const bool hovered = ImGui::IsItemHovered();
  app.widgets["track"] = {ImVec2(track_x, lanes_origin.y),
                          ImVec2(track_x + track_w, lanes_origin.y + lanes_avail.y)};
  const bool over_track = (hovered || ruler_hovered) && io.MousePos.x >= track_x;
  tl.cursor_ns = over_track ? time_at(io.MousePos.x) : -1;

  // Wheel (or Ctrl+wheel, as Perfetto): zoom around the cursor; Shift+wheel (or a sideways
  // wheel) pans. Drag: pan, or with Shift select a range.
  if ((hovered || ruler_hovered) && (io.MouseWheel != 0 || io.MouseWheelH != 0)) {
    TimeView v{app.view_start_ns, app.view_span_ns};
    if (io.KeyShift || io.MouseWheelH != 0)
      v = pan_view(v, -0.1 * (io.KeyShift ? io.MouseWheel : 0) + 0.1 * io.MouseWheelH);
    else
      v = zoom_view(v, time_at(io.MousePos.x), std::pow(0.8, io.MouseWheel));
    app.view_start_ns = v.start_ns;
    app.view_span_ns = v.span_ns;
    app.follow = false;
  }
  if (ImGui::IsItemActivated() && io.KeyShift && io.MousePos.x >= track_x) {
    tl.range_dragging = true;
    tl.range_t0 = tl.range_t1 = time_at(io.MousePos.x);
  }
  if (tl.range_dragging) {
    tl.range_t1 = time_at(io.MousePos.x);
    tl.range_set = std::abs(x_of(tl.range_t1) - x_of(tl.range_t0)) >= 3;
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) tl.range_dragging = false;
  } else if (ImGui::IsItemActive() && (ImGui::IsMouseDragging(ImGuiMouseButton_Left) ||
                                       ImGui::IsMouseDragging(ImGuiMouseButton_Right))) {
    app.view_start_ns -= io.MouseDelta.x / track_w * app.view_span_ns;
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
    if (io.MouseDelta.x != 0) app.follow = false;
  }
  // A click, not a drag: select what is under the mouse (nothing clears the selection).
  const bool clicked = ImGui::IsItemDeactivated() && !tl.range_dragging &&
                       ImGui::GetMouseDragDelta(ImGuiMouseButton_Left).x == 0 &&
                       ImGui::GetMouseDragDelta(ImGuiMouseButton_Left).y == 0 && !io.KeyShift;

  const float clip_top = ImGui::GetWindowPos().y;
  const float clip_bottom = clip_top + ImGui::GetWindowHeight();
  int hovered_item_lane = -1, hovered_item = -1;
  ldl->PushClipRect(
      lanes_origin,
      ImVec2(lanes_origin.x + lanes_avail.x, lanes_origin.y + std::max(lanes_avail.y, content_h)),
      true);
  for (const size_t l : order) {
    const TraceLane& lane = trace.lanes()[l];
    const float y = lane_y[l], h = lane_h[l];
    if (static_cast<int>(l) == tl.scroll_to_lane) {
      const float local = y - lanes_origin.y;
      if (local < ImGui::GetScrollY() || local + h > ImGui::GetScrollY() + lanes_avail.y)
        ImGui::SetScrollY(std::max(0.0f, local - lanes_avail.y / 3));
      tl.scroll_to_lane = -1;
    }
    if (y + h < clip_top || y > clip_bottom) continue;
    const bool lit = lane.device >= 0 && app.device_hovered(lane.device);
    ldl->AddRectFilled(ImVec2(lanes_origin.x, y), ImVec2(lanes_origin.x + lanes_avail.x, y + h),
                       lit ? IM_COL32(70, 70, 110, 255) : IM_COL32(36, 38, 46, 255));
    // The lane's name; a lane that nests (anywhere) gets a collapse arrow.
    const bool collapsed = lane_collapsed(app, lane);
    const bool nests = lane.depth > 1;
    std::string label = (nests ? (collapsed ? "+ " : "- ") : "  ") + lane.name;
    ldl->PushClipRect(ImVec2(lanes_origin.x, y), ImVec2(track_x - 2, y + h), true);
    ldl->AddText(ImVec2(lanes_origin.x + 4, y + 2), IM_COL32(220, 220, 220, 255), label.c_str());
    ldl->PopClipRect();
    const bool over_label = hovered && io.MousePos.x >= lanes_origin.x && io.MousePos.x < track_x &&
                            io.MousePos.y >= y && io.MousePos.y < y + h;
    if (over_label) {
      if (lane.device >= 0) app.hovered_devices_next = {lane.device};
      ImGui::SetTooltip(
          "%s%s", lane.name.c_str(),
          nests ? (collapsed ? "\nclick to show every row" : "\nclick to show the top row only")
                : "");
      if (clicked && nests) tl.lane_collapsed[lane.name] = !collapsed;
    }
    ldl->PushClipRect(ImVec2(track_x, y), ImVec2(track_x + track_w, y + h), true);
    const LaneLayout& layout = layouts[l];
    for (size_t k = 0; k < layout.items.size(); ++k) {
      const LaneItem& it = layout.items[k];
      const float sy = y + it.depth * kRowHeight + 1;
      const ImVec2 a(it.x0, sy), b(it.x1, sy + kRowHeight - 2);
      ImU32 color = kind_color(it.kind);
      if (!key.empty() && !it.highlighted) color = (color & 0x00FFFFFF) | 0x50000000;
      ldl->AddRectFilled(a, b, color);
      if (it.count > 1) {
        // A merged run: a darker top edge tells it from one long span.
        ldl->AddLine(ImVec2(a.x, sy), ImVec2(b.x, sy), IM_COL32(0, 0, 0, 120), 2);
      }
      if (it.highlighted) ldl->AddRect(a, b, IM_COL32(255, 255, 255, 255), 0, 0, 2);
      // Search matches: a bright frame and a tick above the row, seen at any zoom.
      if (it.matched) {
        ldl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1),
                     IM_COL32(80, 230, 255, 255), 0, 0, 2);
        ldl->AddLine(ImVec2((a.x + b.x) / 2, sy - 1), ImVec2((a.x + b.x) / 2, sy + 3),
                     IM_COL32(80, 230, 255, 255), 2);
      }
      if (it.count == 1 &&
          (static_cast<int>(it.span) == app.selected_span ||
           std::binary_search(tl.selected_steps.begin(), tl.selected_steps.end(), it.span)))
        ldl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1),
                     IM_COL32(255, 230, 80, 255), 0, 0, 2);
      if (it.count == 1 && it.x1 - it.x0 > 24) {
        const std::string& name = trace.spans()[it.span].name;
        ldl->PushClipRect(a, ImVec2(b.x - 2, b.y), true);
        ldl->AddText(ImVec2(std::max(it.x0, track_x) + 3, sy), IM_COL32(255, 255, 255, 255),
                     name.c_str());
        ldl->PopClipRect();
      }
    }
    ldl->PopClipRect();
    if (hovered && io.MousePos.x >= track_x && io.MousePos.y >= y && io.MousePos.y < y + h) {
      const int row = static_cast<int>((io.MousePos.y - y) / kRowHeight);
      const int k = item_at(layout, io.MousePos.x, row);
      if (k >= 0) hovered_item_lane = static_cast<int>(l), hovered_item = k;
    }
  }

  // The selected range, shaded, with its length.
  if (tl.range_set) {
    const float x0 = std::max(track_x, x_of(std::min(tl.range_t0, tl.range_t1)));
    const float x1 = std::min(track_x + track_w, x_of(std::max(tl.range_t0, tl.range_t1)));
    if (x1 > x0) {
      ldl->AddRectFilled(ImVec2(x0, lanes_origin.y),
                         ImVec2(x1, lanes_origin.y + std::max(lanes_avail.y, content_h)),
                         IM_COL32(120, 160, 255, 40));
      dl->AddRectFilled(ImVec2(x0, origin.y + kTickRowHeight), ImVec2(x1, origin.y + kRulerHeight),
                        IM_COL32(120, 160, 255, 90));
      const std::string len = format_duration(std::abs(tl.range_t1 - tl.range_t0) * 1e-9);
      dl->AddText(ImVec2(x0 + 3, origin.y + kTickRowHeight + 1), IM_COL32(255, 255, 255, 255),
                  len.c_str());
    }
  }

  // Marks (M): a band through the lanes and a flag on the ruler's lower row.
  for (const auto& [m0, m1] : tl.marks) {
    const float x0 = std::max(track_x, x_of(m0));
    const float x1 = std::min(track_x + track_w, x_of(m1));
    if (x1 < x0) continue;
    const float w = std::max(x1 - x0, 1.0f);
    ldl->AddRectFilled(ImVec2(x0, lanes_origin.y),
                       ImVec2(x0 + w, lanes_origin.y + std::max(lanes_avail.y, content_h)),
                       IM_COL32(255, 120, 200, 30));
    ldl->AddLine(ImVec2(x0, lanes_origin.y),
                 ImVec2(x0, lanes_origin.y + std::max(lanes_avail.y, content_h)),
                 IM_COL32(255, 120, 200, 160));
    dl->AddRectFilled(ImVec2(x0, origin.y + kTickRowHeight),
                      ImVec2(x0 + w, origin.y + kRulerHeight), IM_COL32(255, 120, 200, 110));
  }

  // Flows: the selected span's (always), or every flow in view when "all flows" is on. Flows
  // are culled by time, never capped by count, so what is drawn does not depend on the order
  // they were recorded in.
  const auto draw_flow = [&](const TraceFlow& f, bool bold) {
    const TraceSpan& a = trace.spans()[f.from];
    const TraceSpan& b = trace.spans()[f.to];
    if (lane_y[a.lane] < 0 || lane_y[b.lane] < 0) return;
    const float ya =
        lane_y[a.lane] + (std::min(a.depth, layouts[a.lane].depth - 1) + 0.5f) * kRowHeight;
    const float yb =
        lane_y[b.lane] + (std::min(b.depth, layouts[b.lane].depth - 1) + 0.5f) * kRowHeight;
    const ImU32 color = f.wait ? IM_COL32(180, 180, 180, bold ? 230 : 110)
                               : IM_COL32(255, 220, 120, bold ? 255 : 160);
    draw_arrow(ldl, ImVec2(x_of(static_cast<double>(a.end_ns)), ya),
               ImVec2(x_of(static_cast<double>(b.start_ns)), yb), color, bold ? 2.0f : 1.0f, true);
  };
  ldl->PushClipRect(ImVec2(track_x, lanes_origin.y),
                    ImVec2(track_x + track_w, lanes_origin.y + std::max(lanes_avail.y, content_h)),
                    true);
  const double v0 = app.view_start_ns, v1 = app.view_start_ns + app.view_span_ns;
  if (tl.all_flows) {
    for (const TraceFlow& f : trace.flows()) {
      const TraceSpan& a = trace.spans()[f.from];
      const TraceSpan& b = trace.spans()[f.to];
      if (std::max(a.end_ns, b.start_ns) < v0 || std::min(a.end_ns, b.start_ns) > v1) continue;
      draw_flow(f, false);
    }
  }
  if (app.selected_span >= 0 && app.selected_span < static_cast<int>(trace.spans().size()))
    for (const size_t f : flows_of(trace, static_cast<size_t>(app.selected_span)))
      draw_flow(trace.flows()[f], true);
  ldl->PopClipRect();

  // The cursor's time: a line through the lanes and the time on the ruler.
  if (tl.cursor_ns >= 0) {
    const float x = io.MousePos.x;
    ldl->AddLine(ImVec2(x, lanes_origin.y),
                 ImVec2(x, lanes_origin.y + std::max(lanes_avail.y, content_h)),
                 IM_COL32(255, 255, 255, 70));
    // In the ticks' unit, two decimals finer, on the row under their labels.
    const std::string t = format_ruler_time(tl.cursor_ns - min_ns, step, 2);
    tl.cursor_label = t;
    const ImVec2 ts = ImGui::CalcTextSize(t.c_str());
    const float tx = std::min(x + 4, track_x + track_w - ts.x - 2);
    dl->AddLine(ImVec2(x, origin.y + kTickRowHeight), ImVec2(x, origin.y + kRulerHeight),
                IM_COL32(255, 255, 255, 160));
    dl->AddRectFilled(ImVec2(tx - 2, origin.y + kTickRowHeight),
                      ImVec2(tx + ts.x + 2, origin.y + kRulerHeight - 1),
                      IM_COL32(60, 70, 100, 255));
    dl->AddText(ImVec2(tx, origin.y + kTickRowHeight + 1), IM_COL32(255, 255, 255, 255), t.c_str());
  }
  ldl->PopClipRect();

  if (hovered_item >= 0) {
    const LaneItem& it = layouts[hovered_item_lane].items[hovered_item];
    const TraceSpan& s = trace.spans()[it.span];
    span_tooltip(s, trace, it.count);
    if (trace.lanes()[s.lane].device >= 0)
      app.hovered_devices_next = {trace.lanes()[s.lane].device};
    if (clicked) {
      app.selected_span = static_cast<int>(it.span);
      tl.selected_steps.clear();
      tl.range_set = false;
    }
  } else if (clicked && io.MousePos.x >= track_x) {
    app.selected_span = -1;
    tl.selected_steps.clear();
    tl.range_set = false;
  }
  ImGui::EndChild();
}

}  // namespace inspector

// The timeline view: a toolbar (fit, follow, flows, maximise, search with next/previous), the
// lanes (timeline_lanes.cpp) beside the details of the selection (timeline_details.cpp), and a
// second tab with the collectives, one row per invocation.
#include <imgui.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "app.hpp"

namespace inspector {
namespace {

void draw_search(App& app) {
  App::TimelineUi& tl = app.tl;
  ImGui::SetNextItemWidth(180);
  char buf[256];
  const size_t n = std::min(tl.search.size(), sizeof buf - 1);
  tl.search.copy(buf, n);
  buf[n] = 0;
  const bool enter = ImGui::InputTextWithHint("##search", "search name or op", buf, sizeof buf,
                                              ImGuiInputTextFlags_EnterReturnsTrue);
  tl.search_active = ImGui::IsItemActive();
  app.record_widget("search");
  // Enter lets go of the field; take it back, so that Enter and Shift+Enter keep stepping.
  if (enter) ImGui::SetKeyboardFocusHere(-1);
  tl.search = buf;
  // Searching looks at every span: redo it when the query changed or the trace grew. A grown
  // trace keeps the current match where it was.
  if (tl.search != tl.searched_for || tl.searched_spans != app.trace.spans().size()) {
    const bool same_query = tl.search == tl.searched_for;
    const size_t current = tl.match >= 0 && tl.match < static_cast<int>(tl.matches.size())
                               ? tl.matches[tl.match]
                               : SIZE_MAX;
    tl.matches = search_spans(app.trace, tl.search);
    tl.match_mask = match_mask(app.trace, tl.matches);
    tl.searched_for = tl.search;
    tl.searched_spans = app.trace.spans().size();
    tl.match = -1;
    if (same_query && current != SIZE_MAX) {
      const auto it = std::find(tl.matches.begin(), tl.matches.end(), current);
      if (it != tl.matches.end()) tl.match = static_cast<int>(it - tl.matches.begin());
    }
  }
  int dir = 0;
  ImGui::SameLine();
  if (ImGui::ArrowButton("##previous", ImGuiDir_Left)) dir = -1;
  ImGui::SameLine();
  if (ImGui::ArrowButton("##next", ImGuiDir_Right) || enter) dir = ImGui::GetIO().KeyShift ? -1 : 1;
  if (dir != 0 && !tl.matches.empty()) {
    tl.match = step_match(tl.matches.size(), tl.match, dir);
    select_span(app, tl.matches[tl.match], true);
  }
  ImGui::SameLine();
  if (tl.search.empty())
    ImGui::TextDisabled("     ");
  else if (tl.matches.empty())
    ImGui::TextColored(ImVec4(1, 0.6f, 0.4f, 1), "no match");
  else if (tl.match < 0)
    ImGui::TextDisabled("%zu matches", tl.matches.size());
  else
    ImGui::TextDisabled("%d of %zu", tl.match + 1, tl.matches.size());
}

// Perfetto's keys while the timeline has the pointer or the focus and no field the keyboard:
// W/S zoom in and out around the cursor (else the middle), A/D pan, F zooms to the selection
// (a range, the selected steps, a span), M marks it (again: unmarks it).
void timeline_keys(App& app) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl || io.KeyAlt || io.KeySuper || ImGui::IsAnyItemActive()) return;
  if (!ImGui::IsWindowHovered(ImGuiHoveredFlags_RootAndChildWindows) &&
      !ImGui::IsWindowFocused(ImGuiFocusedFlags_RootAndChildWindows))
    return;
  App::TimelineUi& tl = app.tl;
  TimeView v{app.view_start_ns, app.view_span_ns};
  const double at = tl.cursor_ns >= 0 ? tl.cursor_ns : v.start_ns + v.span_ns / 2;
  // Dear ImGui 1.86 indexes keys by GLFW's codes: ASCII for letters. Held keys repeat.
  bool moved = false;
  if (ImGui::IsKeyPressed('W', true)) v = zoom_view(v, at, 0.8), moved = true;
  if (ImGui::IsKeyPressed('S', true)) v = zoom_view(v, at, 1.25), moved = true;
  if (ImGui::IsKeyPressed('A', true)) v = pan_view(v, -0.2), moved = true;
  if (ImGui::IsKeyPressed('D', true)) v = pan_view(v, 0.2), moved = true;
  // The selection's time: a range, else the selected steps, else the selected span.
  int64_t t0 = 0, t1 = -1;
  const auto& spans = app.trace.spans();
  if (tl.range_set) {
    t0 = static_cast<int64_t>(std::min(tl.range_t0, tl.range_t1));
    t1 = static_cast<int64_t>(std::max(tl.range_t0, tl.range_t1));
  } else if (!tl.selected_steps.empty()) {
    t0 = INT64_MAX, t1 = INT64_MIN;
    for (const size_t s : tl.selected_steps)
      if (s < spans.size())
        t0 = std::min(t0, spans[s].start_ns), t1 = std::max(t1, spans[s].end_ns);
  } else if (app.selected_span >= 0 && app.selected_span < static_cast<int>(spans.size())) {
    t0 = spans[app.selected_span].start_ns;
    t1 = spans[app.selected_span].end_ns;
  }
  if (t1 >= t0 && ImGui::IsKeyPressed('F', false)) v = fit_view(t0, t1), moved = true;
  if (t1 >= t0 && ImGui::IsKeyPressed('M', false)) {
    const std::pair<double, double> mark(static_cast<double>(t0), static_cast<double>(t1));
    const auto it = std::find(tl.marks.begin(), tl.marks.end(), mark);
    if (it == tl.marks.end())
      tl.marks.push_back(mark);
    else
      tl.marks.erase(it);
  }
  if (moved) {
    app.view_start_ns = v.start_ns;
    app.view_span_ns = v.span_ns;
    app.follow = false;
  }
}

// The lanes over the details of the selection, with a bar between them to drag. The details sit
// below, not beside, the lanes: the track keeps its width, so a clicked span stays under the
// pointer (beside them, the track narrowed and the span jumped away).
void draw_lanes_and_details(App& app) {
  App::TimelineUi& tl = app.tl;
  const bool details = app.selected_span >= 0 || tl.range_set || !tl.selected_steps.empty();
  const float avail_h = ImGui::GetContentRegionAvail().y;
  const float splitter_h = 6;
  if (tl.details_h <= 0) tl.details_h = 13 * ImGui::GetFontSize();
  // The lanes keep at least a few rows, the details at least their first lines.
  tl.details_h = std::clamp(tl.details_h, 3 * ImGui::GetFontSize(),
                            std::max(3 * ImGui::GetFontSize(), avail_h - 120));
  const float details_h = details ? tl.details_h : 0;
  ImGui::BeginChild("track", ImVec2(0, details ? -(details_h + splitter_h) : 0), false,
                    ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  draw_timeline_lanes(app);
  ImGui::EndChild();
  if (!details) return;
  ImGui::InvisibleButton("details splitter", ImVec2(-1, splitter_h));
  app.record_widget("details_splitter");
  if (ImGui::IsItemHovered() || ImGui::IsItemActive())
    ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeNS);
  if (ImGui::IsItemActive()) tl.details_h -= ImGui::GetIO().MouseDelta.y;
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  ImGui::GetWindowDrawList()->AddRectFilled(
      ImVec2(a.x, a.y + 2), ImVec2(b.x, b.y - 2),
      ImGui::GetColorU32(ImGui::IsItemActive() ? ImGuiCol_SeparatorActive : ImGuiCol_Separator));
  ImGui::BeginChild("details", ImVec2(0, 0), true);
  draw_span_details(app);
  ImGui::EndChild();
  app.record_widget("details");
}

}  // namespace

void draw_timeline_view(App& app) {
  timeline_keys(app);
  TraceData& trace = app.trace;
  ImGui::Text("%s", app.live_mode ? "live (meshvk::profile)" : trace.source.c_str());
  char counts[96];
  std::snprintf(counts, sizeof counts, "%zu spans, %zu flows, %zu lanes", trace.spans().size(),
                trace.flows().size(), trace.lanes().size());
  same_line_if_fits(ImGui::CalcTextSize(counts).x);
  ImGui::TextDisabled("%s", counts);
  same_line_if_fits(button_width("fit"));
  if (ImGui::SmallButton("fit")) {
    app.view_start_ns = static_cast<double>(trace.min_ns());
    app.view_span_ns = std::max(1e3, static_cast<double>(trace.max_ns() - trace.min_ns()) * 1.02);
    app.follow = false;
  }
  if (app.live_mode) {
    same_line_if_fits(checkbox_width("follow"));
    ImGui::Checkbox("follow", &app.follow);
  }
  same_line_if_fits(checkbox_width("all flows"));
  ImGui::Checkbox("all flows", &app.tl.all_flows);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("every flow in view; off: only the selected span's flows");
  const char* maximise = app.panels.maximise_timeline ? "restore panels" : "maximise";
  same_line_if_fits(button_width(maximise));
  if (ImGui::SmallButton(maximise)) app.panels.maximise_timeline = !app.panels.maximise_timeline;
  same_line_if_fits(button_width("open trace..."));
  if (ImGui::SmallButton("open trace...")) app.show_open_dialog = true;
  if (!app.tl.marks.empty()) {
    same_line_if_fits(button_width("clear marks"));
    if (ImGui::SmallButton("clear marks")) app.tl.marks.clear();
  }
  same_line_if_fits(ImGui::CalcTextSize("(?)").x);
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "W/S or the wheel: zoom at the cursor; A/D or Shift+wheel: pan; drag: pan\n"
        "F: zoom to the selection; M: mark it (again: unmark)\n"
        "click: select a span; Shift+drag or drag on the ruler: a time range's totals\n"
        "F11: maximise the timeline");
  // Legend.
  for (const SpanKind k :
       {SpanKind::kernel, SpanKind::copy, SpanKind::collective, SpanKind::host}) {
    same_line_if_fits(13 + ImGui::CalcTextSize(span_kind_name(k)).x);
    ImGui::ColorButton(span_kind_name(k), ImGui::ColorConvertU32ToFloat4(kind_color(k)),
                       ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
    ImGui::SameLine(0, 3);
    ImGui::TextDisabled("%s", span_kind_name(k));
    app.check_fits("timeline toolbar");
  }
  draw_search(app);
  // Lost work is said above the lanes, where the gaps it leaves are seen.
  if (const std::string lost = losses_warning(trace.losses); !lost.empty()) {
    ImGui::PushTextWrapPos();
    ImGui::TextColored(ImVec4(1, 0.7f, 0.3f, 1), "%s", lost.c_str());
    ImGui::PopTextWrapPos();
    app.record_widget("timeline_warning");
  }
  if (!app.trace_error.empty()) {
    ImGui::PushTextWrapPos();
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", app.trace_error.c_str());
    ImGui::PopTextWrapPos();
  }
  if (!ImGui::BeginTabBar("timeline tabs")) return;
  const ImGuiTabItemFlags timeline_flags =
      app.tl.show_timeline_tab ? ImGuiTabItemFlags_SetSelected : 0;
  app.tl.show_timeline_tab = false;
  if (ImGui::BeginTabItem("Timeline", nullptr, timeline_flags)) {
    if (trace.empty()) {
      ImGui::TextDisabled(app.live_mode ? "waiting for profiler events (run a scenario)"
                                        : "the trace has no spans");
    } else {
      draw_lanes_and_details(app);
    }
    ImGui::EndTabItem();
  }
  const bool collectives = ImGui::BeginTabItem("Collectives");
  app.record_widget("tab:collectives");
  if (collectives) {
    draw_collective_invocations(app);
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

}  // namespace inspector

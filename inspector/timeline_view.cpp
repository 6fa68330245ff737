// The timeline view: a toolbar (fit, follow, flows, maximise, search with next/previous), the
// lanes (timeline_lanes.cpp) beside the details of the selection (timeline_details.cpp), and a
// second tab with the collectives, one row per invocation.
#include <imgui.h>

#include <algorithm>
#include <cstdint>

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

}  // namespace

void draw_timeline_view(App& app) {
  TraceData& trace = app.trace;
  ImGui::Text("%s", app.live_mode ? "live (meshvk::profile)" : trace.source.c_str());
  ImGui::SameLine();
  ImGui::TextDisabled("%zu spans, %zu flows, %zu lanes", trace.spans().size(), trace.flows().size(),
                      trace.lanes().size());
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
  ImGui::Checkbox("all flows", &app.tl.all_flows);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("every flow in view; off: only the selected span's flows");
  ImGui::SameLine();
  if (ImGui::SmallButton(app.panels.maximise_timeline ? "restore panels" : "maximise"))
    app.panels.maximise_timeline = !app.panels.maximise_timeline;
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
      // The lanes, and beside them the details of what is selected.
      const bool details = app.selected_span >= 0 || app.tl.range_set;
      const float details_w =
          details ? std::min(340.0f, ImGui::GetContentRegionAvail().x * 0.35f) : 0;
      ImGui::BeginChild("track", ImVec2(-details_w, 0), false,
                        ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
      draw_timeline_lanes(app);
      ImGui::EndChild();
      if (details) {
        ImGui::SameLine();
        ImGui::BeginChild("details", ImVec2(0, 0), true);
        draw_span_details(app);
        ImGui::EndChild();
      }
    }
    ImGui::EndTabItem();
  }
  if (ImGui::BeginTabItem("Collectives")) {
    draw_collective_invocations(app);
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

}  // namespace inspector

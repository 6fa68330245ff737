// Beside and below the lanes: the selected span's details (as Perfetto's panel: op, program
// line, device and stream, start, duration, bytes, GB/s, FLOPs and its flows, with a jump to
// the program line), the totals of a selected time range, and the collectives table (one row
// per invocation, sortable, with the mesh axes it ran over; a row selects its spans).
#include <imgui.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <tuple>

#include "app.hpp"

namespace inspector {
namespace {

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::string s;
  for (const auto& g : groups) {
    if (g.size() < 2) continue;
    if (!s.empty()) s += " ";
    s += "{";
    for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
    s += "}";
    if (s.size() > 40) return s + " ...";
  }
  return s.empty() ? "-" : s;
}

// The mesh the scenario's inputs (or else its arrays) are laid out on, to name collective axes.
const meshvk::Mesh* scenario_mesh(const App& app) {
  for (const InputInfo& in : app.snap.inputs)
    if (in.mesh && in.mesh->size() > 1) return &*in.mesh;
  for (const ArrayInfo& a : app.snap.arrays)
    if (a.sharding)
      if (const meshvk::NamedSharding* n = a.sharding->named(); n && n->mesh().size() > 1)
        return &n->mesh();
  return nullptr;
}

void labeled(const char* label, const std::string& value) {
  ImGui::TextDisabled("%s", label);
  ImGui::SameLine(90);
  ImGui::TextWrapped("%s", value.c_str());
}

// A collectives row's steps, one line per device: a line selects that step alone.
void draw_selected_steps(App& app) {
  const TraceData& trace = app.trace;
  App::TimelineUi& tl = app.tl;
  std::vector<size_t> steps;
  for (const size_t s : tl.selected_steps)
    if (s < trace.spans().size()) steps.push_back(s);
  if (steps.empty()) return;
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  uint64_t bytes = 0;
  std::vector<int> devices;
  for (const size_t s : steps) {
    const TraceSpan& span = trace.spans()[s];
    t0 = std::min(t0, span.start_ns);
    t1 = std::max(t1, span.end_ns);
    bytes += span.bytes;
    const int d = trace.lanes()[span.lane].device;
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  const TraceSpan& first = trace.spans()[steps.front()];
  ImGui::Text("%s: %zu steps on %zu devices", first.name.c_str(), steps.size(), devices.size());
  ImGui::TextDisabled("%s from +%s, %s", format_duration((t1 - t0) * 1e-9).c_str(),
                      format_duration((t0 - trace.min_ns()) * 1e-9).c_str(),
                      bytes ? format_bytes(bytes).c_str() : "no bytes");
  if (!first.rule.empty()) {
    const Provenance p = split_provenance(first.rule);
    labeled("rule", p.rule);
    if (!p.source.empty()) labeled("source", p.source);
  }
  std::sort(steps.begin(), steps.end(), [&](size_t a, size_t b) {
    const TraceSpan& x = trace.spans()[a];
    const TraceSpan& y = trace.spans()[b];
    return std::tie(x.lane, x.start_ns) < std::tie(y.lane, y.start_ns);
  });
  for (size_t k = 0; k < steps.size() && k < 256; ++k) {
    const TraceSpan& s = trace.spans()[steps[k]];
    char label[256];
    std::snprintf(label, sizeof label, "%s  +%s  %s%s%s##step%zu",
                  trace.lanes()[s.lane].name.c_str(),
                  format_duration((s.start_ns - trace.min_ns()) * 1e-9).c_str(),
                  format_duration(s.seconds()).c_str(), s.bytes ? "  " : "",
                  s.bytes ? format_bytes(s.bytes).c_str() : "", k);
    if (ImGui::Selectable(label, static_cast<int>(steps[k]) == app.selected_span))
      app.selected_span = static_cast<int>(steps[k]);
  }
  ImGui::Separator();
}

// A range's totals by op name: which ops took the range, whatever lane they ran on.
void draw_op_totals(const TraceData& trace, int64_t t0, int64_t t1, double seconds) {
  const std::vector<OpTotal> rows = range_totals_by_op(trace, t0, t1);
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY;
  if (!ImGui::BeginTable("op totals", 5, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("op");
  ImGui::TableSetupColumn("n");
  ImGui::TableSetupColumn("devices");
  ImGui::TableSetupColumn("busy (summed over lanes)");
  ImGui::TableSetupColumn("bytes");
  ImGui::TableHeadersRow();
  for (const OpTotal& r : rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.op.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%llu", static_cast<unsigned long long>(r.count));
    ImGui::TableNextColumn();
    ImGui::Text("%d", r.devices);
    ImGui::TableNextColumn();
    ImGui::Text("%s (%.0f%% of one lane)", format_duration(r.seconds).c_str(),
                seconds > 0 ? 100 * r.seconds / seconds : 0.0);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.bytes ? format_bytes(r.bytes).c_str() : "-");
  }
  ImGui::EndTable();
}

}  // namespace

void draw_span_details(App& app) {
  const TraceData& trace = app.trace;
  App::TimelineUi& tl = app.tl;
  if (!tl.selected_steps.empty()) draw_selected_steps(app);
  if (app.selected_span >= 0 && app.selected_span < static_cast<int>(trace.spans().size())) {
    const TraceSpan& s = trace.spans()[app.selected_span];
    const TraceLane& lane = trace.lanes()[s.lane];
    ImGui::TextWrapped("%s", s.name.c_str());
    ImGui::Separator();
    labeled("kind", span_kind_name(s.kind));
    labeled("op", s.op.empty() ? "-" : s.op);
    if (!s.program.empty()) labeled("program", s.program);
    // Why the partitioner put a collective here, and the user's line that asked for it.
    if (!s.rule.empty()) {
      const Provenance p = split_provenance(s.rule);
      labeled("rule", p.rule);
      if (!p.source.empty()) labeled("source", p.source);
    }
    labeled("device", lane.device >= 0 ? std::to_string(lane.device) : "host");
    labeled("stream", lane.name);
    labeled("start",
            "+" + format_duration(static_cast<double>(s.start_ns - trace.min_ns()) * 1e-9));
    labeled("duration", format_duration(s.seconds()));
    if (s.bytes) {
      labeled("bytes", format_bytes(s.bytes));
      char gbps[32];
      std::snprintf(gbps, sizeof gbps, "%.2f GB/s",
                    s.seconds() > 0 ? s.bytes / s.seconds() / 1e9 : 0);
      labeled("bandwidth", gbps);
    }
    if (s.flops) {
      char f[48];
      std::snprintf(f, sizeof f, "%.3g (%.2f GFLOP/s)", static_cast<double>(s.flops),
                    s.seconds() > 0 ? s.flops / s.seconds() / 1e9 : 0);
      labeled("FLOPs", f);
    }
    if (s.peer >= 0) labeled("peer", "device " + std::to_string(s.peer));
    const auto [program, line] = program_line_of(app, s);
    if (program >= 0 && lane.device >= 0) {
      // The program's peak memory on this span's device (Lowered::memory_analysis).
      if (const int64_t peak = peak_memory_on(app.snap.programs[program], lane.device); peak >= 0)
        labeled("peak mem", format_bytes(static_cast<uint64_t>(peak)) + " (" +
                                app.snap.programs[program].name + " on device " +
                                std::to_string(lane.device) + ")");
    }
    if (program >= 0) {
      const std::string& text = app.snap.programs[program].text;
      size_t at = 0;
      for (int n = 0; n < line && at != std::string::npos; ++n) at = text.find('\n', at) + 1;
      const std::string l =
          at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
      ImGui::TextDisabled("program line");
      ImGui::PushTextWrapPos();
      ImGui::TextUnformatted(l.c_str());
      ImGui::PopTextWrapPos();
      if (ImGui::SmallButton("jump to program line")) {
        app.program = program;
        app.program_scroll_line = line;
        app.selected_op =
            l.substr(l.find_first_not_of(' '), l.find(": ") - l.find_first_not_of(' '));
        app.panels.maximise_timeline = false;
        app.panels.collapsed[kProgramPanel] = false;
      }
    }
    const std::vector<size_t> flows = flows_of(trace, static_cast<size_t>(app.selected_span));
    if (!flows.empty()) {
      ImGui::Separator();
      ImGui::TextDisabled("flows (%zu)", flows.size());
      for (size_t k = 0; k < flows.size() && k < 64; ++k) {
        const TraceFlow& f = trace.flows()[flows[k]];
        // Outgoing when its source is the span or inside it (a step's copy).
        const TraceSpan& from = trace.spans()[f.from];
        const bool out =
            from.lane == s.lane && from.start_ns >= s.start_ns && from.end_ns <= s.end_ns;
        const size_t other = out ? f.to : f.from;
        const TraceSpan& o = trace.spans()[other];
        char label[256];
        std::snprintf(label, sizeof label, "%s %s: %s (%s)##flow%zu", out ? "to" : "from",
                      trace.lanes()[o.lane].name.c_str(), o.name.c_str(), f.wait ? "wait" : "data",
                      k);
        if (ImGui::Selectable(label)) select_span(app, other, true);
      }
    }
    ImGui::Separator();
  }
  if (tl.range_set) {
    const int64_t t0 = static_cast<int64_t>(std::min(tl.range_t0, tl.range_t1));
    const int64_t t1 = static_cast<int64_t>(std::max(tl.range_t0, tl.range_t1));
    const double seconds = static_cast<double>(t1 - t0) * 1e-9;
    ImGui::Text("range %s", format_duration(seconds).c_str());
    ImGui::SameLine();
    if (ImGui::SmallButton("clear")) tl.range_set = false;
    ImGui::TextDisabled("+%s to +%s",
                        format_duration(static_cast<double>(t0 - trace.min_ns()) * 1e-9).c_str(),
                        format_duration(static_cast<double>(t1 - trace.min_ns()) * 1e-9).c_str());
    const std::vector<RangeTotal> rows = range_totals(trace, t0, t1);
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                  ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY;
    // Two tables side by side: by op name, and by lane and kind.
    const float half = ImGui::GetContentRegionAvail().x / 2 - 4;
    ImGui::BeginChild("by op", ImVec2(half, 0));
    draw_op_totals(trace, t0, t1, seconds);
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("by lane", ImVec2(0, 0));
    if (ImGui::BeginTable("range totals", 5, flags)) {
      ImGui::TableSetupScrollFreeze(0, 1);
      ImGui::TableSetupColumn("lane");
      ImGui::TableSetupColumn("kind");
      ImGui::TableSetupColumn("n");
      ImGui::TableSetupColumn("busy");
      ImGui::TableSetupColumn("bytes");
      ImGui::TableHeadersRow();
      for (const RangeTotal& r : rows) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(trace.lanes()[r.lane].name.c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(span_kind_name(r.kind));
        ImGui::TableNextColumn();
        ImGui::Text("%llu", static_cast<unsigned long long>(r.count));
        ImGui::TableNextColumn();
        ImGui::Text("%s (%.0f%%)", format_duration(r.seconds).c_str(),
                    seconds > 0 ? 100 * r.seconds / seconds : 0.0);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(r.bytes ? format_bytes(r.bytes).c_str() : "-");
      }
      ImGui::EndTable();
    }
    ImGui::EndChild();
  }
  if (app.selected_span < 0 && !tl.range_set)
    ImGui::TextDisabled(
        "click a span for its details; Shift+drag (or drag on the ruler) for "
        "the totals of a time range");
}

void draw_collective_invocations(App& app) {
  App::TimelineUi& tl = app.tl;
  const TraceData& trace = app.trace;
  // Grouping looks at every span: redo it only when the trace grew, and while a live trace
  // grows, at most twice a second.
  const double now = ImGui::GetTime();
  if (tl.invocations_for != trace.spans().size() &&
      (tl.invocations_for == 0 || now - tl.invocations_at > 0.5)) {
    tl.invocations_at = now;
    tl.invocations = collective_invocations(trace);
    tl.invocations_for = trace.spans().size();
    if (const meshvk::Mesh* mesh = scenario_mesh(app))
      for (auto& inv : tl.invocations) inv.axes = mesh_axes_for_groups(*mesh, inv.groups);
    tl.sort_dirty = true;
  }
  auto& rows = tl.invocations;
  if (rows.empty()) {
    ImGui::TextDisabled("no collective spans in this trace");
    return;
  }
  ImGui::TextDisabled("%zu invocations; click a row to select its steps on every device",
                      rows.size());
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_Sortable |
                                ImGuiTableFlags_Resizable;
  if (!ImGui::BeginTable("invocations", 9, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("collective", 0, 0, static_cast<ImGuiID>(InvocationColumn::name));
  ImGui::TableSetupColumn("mesh axes / groups", 0, 0, static_cast<ImGuiID>(InvocationColumn::axes));
  ImGui::TableSetupColumn("start", ImGuiTableColumnFlags_DefaultSort, 0,
                          static_cast<ImGuiID>(InvocationColumn::start));
  ImGui::TableSetupColumn("duration", 0, 0, static_cast<ImGuiID>(InvocationColumn::duration));
  ImGui::TableSetupColumn("steps", 0, 0, static_cast<ImGuiID>(InvocationColumn::steps));
  ImGui::TableSetupColumn("devices", ImGuiTableColumnFlags_NoSort, 0, 100);
  ImGui::TableSetupColumn("bytes", 0, 0, static_cast<ImGuiID>(InvocationColumn::bytes));
  ImGui::TableSetupColumn("GB/s", 0, 0, static_cast<ImGuiID>(InvocationColumn::gbps));
  // Where the collective comes from: the user's line that asked for it, and the rule.
  ImGui::TableSetupColumn("source (rule)", ImGuiTableColumnFlags_NoSort, 0, 101);
  ImGui::TableHeadersRow();
  if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs()) {
    if (specs->SpecsDirty || tl.sort_dirty) {
      if (specs->SpecsCount > 0) {
        tl.sort_column = static_cast<int>(specs->Specs[0].ColumnUserID);
        tl.sort_ascending = specs->Specs[0].SortDirection == ImGuiSortDirection_Ascending;
      }
      sort_invocations(rows, static_cast<InvocationColumn>(tl.sort_column), tl.sort_ascending);
      specs->SpecsDirty = false;
      tl.sort_dirty = false;
    }
  }
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(rows.size()));
  while (clipper.Step()) {
    for (int r = clipper.DisplayStart; r < clipper.DisplayEnd; ++r) {
      const CollectiveInvocation& inv = rows[r];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(r);
      const bool chosen =
          !tl.selected_steps.empty() && tl.selected_steps.size() == inv.spans.size() &&
          std::is_permutation(inv.spans.begin(), inv.spans.end(), tl.selected_steps.begin());
      const bool pressed =
          ImGui::Selectable(inv.name.c_str(), chosen, ImGuiSelectableFlags_SpanAllColumns);
      // For --script: the row's start (its middle can be a column's resize edge).
      if (r < 4)
        app.widgets["collective_row:" + std::to_string(r)] = {
            ImGui::GetItemRectMin(),
            ImVec2(ImGui::GetItemRectMin().x + 40, ImGui::GetItemRectMax().y)};
      if (pressed && !inv.spans.empty()) {
        // Show the whole invocation and select its first step.
        const double length = static_cast<double>(inv.end_ns - inv.start_ns);
        app.view_span_ns = std::max(1e3, length * 1.3);
        app.view_start_ns = inv.start_ns - length * 0.15;
        app.follow = false;
        // Every device's step is selected (framed in the lanes, listed in the details).
        select_span(app, inv.spans.front(), false);
        tl.selected_steps = inv.spans;
        std::sort(tl.selected_steps.begin(), tl.selected_steps.end());
        tl.range_set = false;
        tl.show_timeline_tab = true;
      }
      ImGui::PopID();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(inv.axes.empty() ? groups_text(inv.groups).c_str() : inv.axes.c_str());
      ImGui::TableNextColumn();
      ImGui::Text(
          "+%s",
          format_duration(static_cast<double>(inv.start_ns - trace.min_ns()) * 1e-9).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_duration(inv.seconds()).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%zu", inv.spans.size());
      ImGui::TableNextColumn();
      ImGui::Text("%zu", inv.devices.size());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(inv.bytes).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%.2f", inv.gbps());
      ImGui::TableNextColumn();
      const std::string rule = inv.spans.empty() ? "" : trace.spans()[inv.spans.front()].rule;
      if (rule.empty()) {
        ImGui::TextDisabled("-");
      } else {
        const Provenance p = split_provenance(rule);
        ImGui::Text("%s (%s)", p.source.empty() ? "-" : p.source.c_str(), p.rule.c_str());
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", rule.c_str());
      }
    }
  }
  ImGui::EndTable();
}

}  // namespace inspector

// The program view: the partitioned per-device program of each jit function the scenario ran
// (JitFunction::program_text), collectives highlighted. Clicking an op selects it; the timeline
// then highlights the spans that op produced.
#include <imgui.h>

#include <algorithm>
#include <cctype>

#include "app.hpp"

namespace inspector {
namespace {

// Words that mark communication between devices in program text and in span names.
constexpr const char* kCollectives[] = {
    "all-reduce",         "all_reduce",   "all-gather", "all_gather", "reduce-scatter",
    "reduce_scatter",     "psum_scatter", "all-to-all", "all_to_all", "ppermute",
    "collective-permute", "psum",         "pmean",      "pmax",       "pmin",
    "pbroadcast",         "reshard",      "broadcast"};

bool is_collective_line(const std::string& line) {
  for (const char* word : kCollectives)
    if (line.find(word) != std::string::npos) return true;
  return false;
}

// The op a program line describes: "  all-reduce(sum) over ('b',): ..." -> "all-reduce(sum) over
// ('b',)"; lines without an op (the header, inputs, outputs) give "".
std::string op_of(const std::string& line) {
  const size_t start = line.find_first_not_of(' ');
  if (start == std::string::npos || start == 0) return "";
  const size_t colon = line.find(": ", start);
  if (colon == std::string::npos) return "";
  std::string op = line.substr(start, colon - start);
  if (op.rfind("in", 0) == 0 || op.rfind("out", 0) == 0) {
    bool digits = true;
    for (size_t i = op[0] == 'i' ? 2 : 3; i < op.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(op[i]));
    if (digits) return "";
  }
  return op;
}

}  // namespace

// The first word of an op, normalized ("all-reduce(sum) over ..." -> "all_reduce"), which is
// how spans are matched to ops: by their op's key, or else by their name containing it.
std::string op_key(const std::string& op) {
  std::string key;
  for (const char c : op) {
    if (c == '(' || c == ' ' || c == ':') break;
    key += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

bool span_matches_op(const TraceSpan& span, const std::string& key) {
  if (key.empty()) return false;
  // The engine tags each span with the op of the program line it came from, named as that line
  // starts ("dot_general", "fusion", "all-gather", ...): when it is there, it decides exactly.
  if (!span.op.empty()) return op_key(span.op) == key;
  // Otherwise (traces from elsewhere, or without ops), guess from the span's name.
  const auto norm = [](std::string s) {
    for (char& c : s)
      c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string name = norm(span.name);
  const auto has = [&](const std::string& word) { return name.find(word) != std::string::npos; };
  if (has(key)) return true;
  // Program text names ops as XLA does; kernels are named for what they run, so a few kernel
  // names stand in for their ops.
  if (key == "dot_general" || key == "dot" || key == "einsum") return has("matmul") || has("dot");
  if (key == "fusion") return has("elementwise");
  return false;
}

std::pair<int, int> program_line_of(const App& app, const TraceSpan& span) {
  const std::string key = op_key(span.op);
  if (key.empty()) return {-1, -1};
  // The span's own jit program first (its text starts "jit(NAME)"), then any other.
  std::vector<int> order;
  for (size_t p = 0; p < app.snap.programs.size(); ++p) {
    const std::string& text = app.snap.programs[p].text;
    const bool own = !span.program.empty() && (text.rfind(span.program, 0) == 0 ||
                                               text.rfind("jit(" + span.program + ")", 0) == 0);
    order.insert(own ? order.begin() : order.end(), static_cast<int>(p));
  }
  for (const int p : order) {
    const std::string& text = app.snap.programs[p].text;
    size_t start = 0;
    for (int n = 0; start < text.size(); ++n) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string op = op_of(text.substr(start, end - start));
      if (!op.empty() && op_key(op) == key) return {p, n};
      start = end + 1;
    }
  }
  return {-1, -1};
}

std::string peak_memory_text(const ProgramInfo& program) {
  const auto& peaks = program.peak_per_device;
  if (peaks.empty()) return "";
  uint64_t lo = peaks.front().second, hi = lo;
  for (const auto& [device, bytes] : peaks) lo = std::min(lo, bytes), hi = std::max(hi, bytes);
  const std::string n = std::to_string(peaks.size());
  if (lo == hi)
    return "peak memory " + format_bytes(hi) + " on each of " + n + " device" +
           (peaks.size() == 1 ? "" : "s");
  std::string each;
  for (const auto& [device, bytes] : peaks)
    each += (each.empty() ? "" : ", ") + std::to_string(device) + ": " + format_bytes(bytes);
  return "peak memory " + format_bytes(lo) + " to " + format_bytes(hi) + " per device (" + each +
         ")";
}

void draw_program_view(App& app) {
  if (app.snap.programs.empty()) {
    ImGui::PushTextWrapPos();
    ImGui::TextDisabled(
        "no jit program yet: scenarios that call jit show their partitioned program here");
    ImGui::PopTextWrapPos();
    return;
  }
  int& current = app.program;
  current = std::clamp(current, 0, static_cast<int>(app.snap.programs.size()) - 1);
  if (app.snap.programs.size() > 1) {
    // As wide as the program's name (shard_map's say their function or line), up to most of the
    // panel.
    const char* name = app.snap.programs[current].name.c_str();
    ImGui::SetNextItemWidth(std::clamp(ImGui::CalcTextSize(name).x + ImGui::GetFrameHeight() +
                                           2 * ImGui::GetStyle().FramePadding.x,
                                       120.0f, ImGui::GetContentRegionAvail().x * 0.75f));
    if (ImGui::BeginCombo("program", name)) {
      for (size_t i = 0; i < app.snap.programs.size(); ++i)
        if (ImGui::Selectable(app.snap.programs[i].name.c_str(), current == static_cast<int>(i)))
          current = static_cast<int>(i);
      ImGui::EndCombo();
    }
    ImGui::SameLine();
  }
  ImGui::PushTextWrapPos();
  // Lowered::memory_analysis: what the program's buffers take on each device at their peak.
  if (const std::string peak = peak_memory_text(app.snap.programs[current]); !peak.empty()) {
    ImGui::TextUnformatted(peak.c_str());
    app.record_widget("program_memory");
  }
  ImGui::TextDisabled("collectives in red; click an op to find its spans in the timeline");
  ImGui::PopTextWrapPos();
  if (!app.selected_op.empty()) {
    size_t spans = 0;
    const std::string key = op_key(app.selected_op);
    for (const TraceSpan& s : app.trace.spans()) spans += span_matches_op(s, key);
    ImGui::Text("selected: %s (%zu spans)", app.selected_op.c_str(), spans);
    ImGui::SameLine();
    if (ImGui::SmallButton("clear")) app.selected_op.clear();
  }
  ImGui::Checkbox("wrap", &app.program_wrap);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("wrap long lines at the panel's edge");
  ImGui::Separator();
  ImGui::BeginChild("text", ImVec2(0, 0), false,
                    app.program_wrap ? 0 : ImGuiWindowFlags_HorizontalScrollbar);
  const std::string& text = app.snap.programs[current].text;
  size_t start = 0;
  int n = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (n == app.program_scroll_line) {
      ImGui::SetScrollHereY(0.3f);
      app.program_scroll_line = -1;
    }
    ImGui::PushID(n++);
    const std::string op = op_of(line);
    if (!app.options.select_op.empty() && !op.empty() && op.rfind(app.options.select_op, 0) == 0) {
      app.selected_op = op;
      app.options.select_op.clear();
    }
    const bool collective = is_collective_line(line) && !op.empty();
    const bool colored = collective || op.empty();
    if (collective)
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.45f, 1));
    else if (op.empty())
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    if (app.program_wrap) {
      // Wrapped at the panel's edge: a narrow panel (1024x700) cuts nothing off. The line is
      // drawn over its Selectable, as tall as its wrapped rows.
      const float wrap_w = std::max(50.0f, ImGui::GetContentRegionAvail().x);
      const ImVec2 size = ImGui::CalcTextSize(line.c_str(), nullptr, false, wrap_w);
      const ImVec2 at = ImGui::GetCursorScreenPos();
      if (!op.empty()) {
        if (ImGui::Selectable("##line", app.selected_op == op, 0, ImVec2(wrap_w, size.y)))
          app.selected_op = app.selected_op == op ? std::string() : op;
      } else {
        ImGui::Dummy(ImVec2(wrap_w, size.y));
      }
      ImGui::GetWindowDrawList()->AddText(nullptr, 0.0f, at, ImGui::GetColorU32(ImGuiCol_Text),
                                          line.c_str(), nullptr, wrap_w);
    } else if (!op.empty()) {
      if (ImGui::Selectable(line.c_str(), app.selected_op == op))
        app.selected_op = app.selected_op == op ? std::string() : op;
    } else {
      ImGui::TextUnformatted(line.c_str());
    }
    if (colored) ImGui::PopStyleColor();
    if (ImGui::CalcTextSize(line.c_str()).x > ImGui::GetItemRectSize().x + 1 && !app.program_wrap)
      app.clipped_next.insert("program line");
    // A line running past the panel's visible edge shows whole in a tooltip (the panel also
    // scrolls sideways, but a hover is quicker than a scroll).
    if (ImGui::IsItemHovered()) {
      const float text_right = ImGui::GetItemRectMin().x + ImGui::CalcTextSize(line.c_str()).x;
      const ImVec2 clip = ImGui::GetWindowDrawList()->GetClipRectMax();
      const float clip_left = ImGui::GetWindowDrawList()->GetClipRectMin().x;
      if (text_right > clip.x || ImGui::GetItemRectMin().x < clip_left)
        ImGui::SetTooltip("%s", line.c_str());
    }
    ImGui::PopID();
  }
  ImGui::EndChild();
}

}  // namespace inspector

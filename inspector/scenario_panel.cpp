// The scenario panel: which scenario, its arguments, the mesh and per-input PartitionSpecs;
// play, pause, step, restart; what it printed.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <set>

#include "app.hpp"

namespace inspector {

namespace sc = meshvk::scenarios;

namespace {

// Specs worth offering over these axes: every way to put no axis, one axis or an ordered pair of
// axes on each of two dimensions, without using an axis twice.
std::vector<std::string> spec_choices(const std::vector<std::string>& axes) {
  std::vector<std::string> entries = {"None"};
  for (const auto& a : axes) entries.push_back("'" + a + "'");
  for (const auto& a : axes)
    for (const auto& b : axes)
      if (a != b) entries.push_back("('" + a + "', '" + b + "')");
  const auto uses = [](const std::string& e, const std::string& axis) {
    return e.find("'" + axis + "'") != std::string::npos;
  };
  std::vector<std::string> out = {"P()"};
  for (size_t i = 1; i < entries.size(); ++i)
    out.push_back("P(" + entries[i] + (entries[i][0] == '(' ? ",)" : ")"));
  for (const auto& e0 : entries)
    for (const auto& e1 : entries) {
      if (e1 == "None") continue;
      bool clash = false;
      for (const auto& a : axes) clash = clash || (uses(e0, a) && uses(e1, a));
      if (!clash) out.push_back("P(" + e0 + ", " + e1 + ")");
    }
  return out;
}

void controls(App& app) {
  const RunState state = app.snap.state;
  const bool active = state == RunState::running || state == RunState::paused;
  if (state == RunState::running) {
    if (ImGui::Button("Pause")) app.runner.pause();
  } else if (state == RunState::paused) {
    if (ImGui::Button("Play")) app.runner.resume(), app.step_selects = false;
  } else {
    if (ImGui::Button("Play")) app.restart(), app.step_selects = false;
  }
  app.record_widget("play");
  same_line_if_fits(button_width("Step"));
  if (ImGui::Button("Step")) {
    // Each step shows the array it published (the newest), until an array is picked by hand.
    app.step_selects = true;
    app.step_publishes = active ? app.snap.publishes : 0;
    if (active)
      app.runner.step();
    else
      app.restart(/*paused=*/true);
  }
  app.record_widget("step");
  same_line_if_fits(button_width("Restart"));
  if (ImGui::Button("Restart")) app.restart();
  same_line_if_fits(button_width("Stop"));
  ImGui::BeginDisabled(!active);
  if (ImGui::Button("Stop")) app.runner.stop();
  ImGui::EndDisabled();
  app.check_fits("scenario controls");

  const ImVec4 color = state == RunState::failed    ? ImVec4(1.0f, 0.4f, 0.4f, 1)
                       : state == RunState::running ? ImVec4(0.5f, 0.9f, 0.5f, 1)
                                                    : ImVec4(0.85f, 0.85f, 0.85f, 1);
  ImGui::TextColored(color, "%s", run_state_name(state));
  if (state == RunState::idle) {
    ImGui::SameLine();
    ImGui::TextDisabled("press Play or Step");
  }
  if (app.snap.checkpoints > 0) {
    ImGui::SameLine();
    ImGui::TextDisabled("checkpoint %d: %s", app.snap.checkpoints, app.snap.checkpoint.c_str());
  }
  if (!app.snap.message.empty()) {
    ImGui::PushTextWrapPos();
    ImGui::TextColored(color, "%s", app.snap.message.c_str());
    ImGui::PopTextWrapPos();
  }
}

// The label column: wide enough for the longest input name ("layers.1.weight"), at most 40%
// of the panel; a longer name is cut with "..." and says itself in a tooltip.
float label_column(const sc::Scenario& scenario) {
  float w = ImGui::CalcTextSize("Arguments").x;
  for (const std::string& input : scenario.inputs)
    w = std::max(w, ImGui::CalcTextSize(input.c_str()).x);
  return std::min(w + ImGui::GetStyle().ItemSpacing.x * 2, ImGui::GetContentRegionAvail().x * 0.4f);
}

void name_cell(const std::string& name, float column) {
  const float room = column - ImGui::GetStyle().ItemSpacing.x;
  if (ImGui::CalcTextSize(name.c_str()).x <= room) {
    ImGui::TextUnformatted(name.c_str());
    return;
  }
  std::string cut = name;
  while (!cut.empty() && ImGui::CalcTextSize((cut + "...").c_str()).x > room) cut.pop_back();
  ImGui::TextUnformatted((cut + "...").c_str());
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", name.c_str());
}

void mesh_and_specs(App& app, const sc::Scenario& scenario, float column) {
  const char* current = app.mesh_choices[app.mesh_choice].label.c_str();
  ImGui::TextUnformatted("Mesh");
  ImGui::SameLine(column);
  ImGui::SetNextItemWidth(-FLT_MIN);
  // Only the meshes whose axes the current specs name (App::update_offered_meshes).
  if (ImGui::BeginCombo("##mesh", current)) {
    for (const int i : app.offered_meshes) {
      if (ImGui::Selectable(app.mesh_choices[i].label.c_str(), app.mesh_choice == i)) {
        app.mesh_choice = i;
        app.restart();
      }
      app.record_widget("mesh_item:" + app.mesh_choices[i].label);
    }
    if (app.offered_meshes.size() < app.mesh_choices.size())
      ImGui::TextDisabled("(meshes without the axes your specs name are not offered)");
    ImGui::EndCombo();
  }
  app.record_widget("mesh");
  for (const std::string& input : scenario.inputs) {
    ImGui::PushID(input.c_str());
    // The axes on offer: the mesh the scenario laid this input out on in the last run.
    std::vector<std::string> axes;
    std::string default_spec = "its default";
    for (const InputInfo& info : app.snap.inputs) {
      if (info.name != input) continue;
      if (info.mesh) axes = info.mesh->axis_names();
      default_spec = info.default_spec.to_string();
    }
    std::string& text = app.spec_text[input];
    name_cell(input, column);
    ImGui::SameLine(column);
    ImGui::SetNextItemWidth(-28);
    if (ImGui::InputTextWithHint("##spec", default_spec.c_str(), &text,
                                 ImGuiInputTextFlags_EnterReturnsTrue))
      app.restart();
    app.record_widget("spec:" + input);
    // The whole spec first: a narrow panel cuts the field.
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "%s\nPartitionSpec of %s in JAX syntax, e.g. P('a', None); Enter re-runs.\nEmpty: %s",
          text.empty() ? default_spec.c_str() : text.c_str(), input.c_str(), default_spec.c_str());
    ImGui::SameLine();
    if (ImGui::BeginCombo("##choices", "",
                          ImGuiComboFlags_NoPreview | ImGuiComboFlags_PopupAlignLeft)) {
      if (ImGui::Selectable("(the scenario's default)", text.empty())) {
        text.clear();
        app.restart();
      }
      for (const std::string& choice : spec_choices(axes)) {
        if (ImGui::Selectable(choice.c_str(), text == choice)) {
          text = choice;
          app.restart();
        }
      }
      ImGui::EndCombo();
    }
    ImGui::PopID();
  }
  if (!app.spec_error.empty()) {
    ImGui::PushTextWrapPos();
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", app.spec_error.c_str());
    ImGui::PopTextWrapPos();
  }
}

// Dear ImGui's built-in font has no box-drawing glyphs, so the pictures the scenario prints
// are shown with ASCII lines instead: '-', '|' and '+' at the corners and joints.
std::string ascii_boxes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == 0xE2 && i + 2 < text.size() &&
        (static_cast<unsigned char>(text[i + 1]) & 0xFE) == 0x94) {
      const uint32_t cp = 0x2000 + ((static_cast<unsigned char>(text[i + 1]) & 0x3F) << 6) +
                          (static_cast<unsigned char>(text[i + 2]) & 0x3F);
      out += cp == 0x2500 || cp == 0x2501 || cp == 0x2550   ? '-'
             : cp == 0x2502 || cp == 0x2503 || cp == 0x2551 ? '|'
                                                            : '+';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

void draw_scenario_panel(App& app) {
  const auto& all = sc::all();
  const sc::Scenario& scenario = all[app.scenario];
  const float column = label_column(scenario);
  ImGui::TextUnformatted("Scenario");
  ImGui::SameLine(column);
  ImGui::SetNextItemWidth(-FLT_MIN);
  if (ImGui::BeginCombo("##scenario", scenario.name.c_str())) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (ImGui::Selectable(all[i].name.c_str(), app.scenario == static_cast<int>(i)))
        app.select_scenario(static_cast<int>(i));
      app.record_widget("scenario_item:" + all[i].name);
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", all[i].description.c_str());
    }
    ImGui::EndCombo();
  }
  app.record_widget("scenario");
  ImGui::PushTextWrapPos();
  ImGui::TextDisabled("%s", scenario.description.c_str());
  ImGui::PopTextWrapPos();
  ImGui::TextUnformatted("Arguments");
  ImGui::SameLine(column);
  ImGui::SetNextItemWidth(-FLT_MIN);
  if (ImGui::InputText("##args", &app.args_text, ImGuiInputTextFlags_EnterReturnsTrue))
    app.restart();
  if (ImGui::IsItemHovered() && !app.args_text.empty() &&
      ImGui::CalcTextSize(app.args_text.c_str()).x > ImGui::GetItemRectSize().x)
    ImGui::SetTooltip("%s", app.args_text.c_str());
  mesh_and_specs(app, scenario, column);
  ImGui::Separator();
  controls(app);
  if (app.snap.validation_enabled)
    ImGui::TextDisabled("validation messages: runtime %llu",
                        static_cast<unsigned long long>(app.snap.validation_messages));
  ImGui::Separator();

  // The scenario's output, following the end unless the reader scrolled up.
  ImGui::BeginChild("console", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
  const bool at_end = ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 1;
  if (app.console_version != app.snap_version) {
    app.console_text = ascii_boxes(app.snap.console);
    app.console_version = app.snap_version;
  }
  ImGui::TextUnformatted(app.console_text.data(),
                         app.console_text.data() + app.console_text.size());
  if (at_end) ImGui::SetScrollHereY(1.0f);
  ImGui::EndChild();
}

}  // namespace inspector

// The panels' places in the window (panel_layout.cpp works them out), the splitters between
// them, and collapsing: a panel collapsed from its title bar gives its room to its neighbours
// from the next frame on.
#include <imgui.h>

#include "app.hpp"

namespace inspector {
namespace {

// A splitter: a thin window over the border between two panels; dragging it moves the split.
// Returns the drag in pixels this frame.
float splitter(const char* id, const PanelRect& r, ImVec2 origin, bool vertical) {
  if (!r.shown) return 0;
  ImGui::SetNextWindowPos(ImVec2(origin.x + r.x, origin.y + r.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(r.w, r.h), ImGuiCond_Always);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowPadding, ImVec2(0, 0));
  ImGui::PushStyleVar(ImGuiStyleVar_WindowMinSize, ImVec2(1, 1));
  float moved = 0;
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoBackground |
                                 ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                                 ImGuiWindowFlags_NoFocusOnAppearing |
                                 ImGuiWindowFlags_NoScrollWithMouse;
  if (ImGui::Begin(id, nullptr, flags)) {
    ImGui::InvisibleButton("grip", ImVec2(r.w, r.h));
    if (ImGui::IsItemHovered() || ImGui::IsItemActive())
      ImGui::SetMouseCursor(vertical ? ImGuiMouseCursor_ResizeEW : ImGuiMouseCursor_ResizeNS);
    if (ImGui::IsItemActive()) {
      moved = vertical ? ImGui::GetIO().MouseDelta.x : ImGui::GetIO().MouseDelta.y;
      ImGui::GetWindowDrawList()->AddRectFilled(ImGui::GetItemRectMin(), ImGui::GetItemRectMax(),
                                                IM_COL32(120, 140, 200, 160));
    }
  }
  ImGui::End();
  ImGui::PopStyleVar(2);
  return moved;
}

}  // namespace

void App::layout_windows() {
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  const ImVec2 origin = vp->WorkPos;
  const ImVec2 size = vp->WorkSize;
  const PanelLayout layout = layout_panels(size.x, size.y, panels, ImGui::GetFrameHeight());
  // Panels are placed every frame, so resizing the window keeps every view visible and
  // screenshots are reproducible; the user moves the splits, not the windows.
  const ImGuiWindowFlags fixed =
      ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoBringToFrontOnFocus;
  struct View {
    const char* title;
    void (*draw)(App&);
    ImGuiWindowFlags flags;
  };
  const View views[kPanels] = {
      {"Scenario", draw_scenario_panel, 0},
      {"Mesh", draw_mesh_view, 0},
      {"Arrays", draw_arrays_view, ImGuiWindowFlags_NoScrollbar},
      {"Program", draw_program_view, 0},
      {"Timeline", draw_timeline_view, ImGuiWindowFlags_NoScrollbar},
  };
  for (int p = 0; p < kPanels; ++p) {
    const PanelRect& r = layout.panel[p];
    if (!r.shown) continue;
    ImGui::SetNextWindowPos(ImVec2(origin.x + r.x, origin.y + r.y), ImGuiCond_Always);
    ImGui::SetNextWindowSize(ImVec2(r.w, r.h), ImGuiCond_Always);
    // The View menu collapses and restores panels too; the title bar's arrow is read back below.
    // (Maximised, the timeline is all there is: never collapsed.)
    if (panels.maximise_timeline) panels.collapsed[p] = false;
    ImGui::SetNextWindowCollapsed(panels.collapsed[p], ImGuiCond_Always);
    const bool open =
        ImGui::Begin(view_title(views[p].title).c_str(), nullptr, fixed | views[p].flags);
    widgets[std::string("panel:") + views[p].title] = {
        ImGui::GetWindowPos(), ImVec2(ImGui::GetWindowPos().x + ImGui::GetWindowWidth(),
                                      ImGui::GetWindowPos().y + ImGui::GetWindowHeight())};
    if (open) views[p].draw(*this);
    // Whether the user toggled it: ImGui applies a title-bar click on the next Begin, so it
    // shows here as the state differing from the one asked for.
    const bool collapsed = ImGui::IsWindowCollapsed();
    ImGui::End();
    if (collapsed != panels.collapsed[p]) panels.collapsed[p] = collapsed;
  }
  if (panels.maximise_timeline) return;
  PanelSplits& s = panels.splits;
  if (const float dx = splitter("##split left", layout.left_splitter, origin, true))
    s.left = clamp_split(s.left + dx / size.x, size.x, 120);
  if (const float dy = splitter("##split scenario", layout.scenario_splitter, origin, false))
    s.scenario = clamp_split(s.scenario + dy / size.y, size.y, 60);
  if (const float dy = splitter("##split top", layout.top_splitter, origin, false))
    s.top = clamp_split(s.top + dy / size.y, size.y, 60);
  const float right_w = size.x - layout.panel[kArraysPanel].x;
  if (const float dx = splitter("##split arrays", layout.arrays_splitter, origin, true))
    s.arrays = clamp_split(s.arrays + dx / right_w, right_w, 120);
}

}  // namespace inspector

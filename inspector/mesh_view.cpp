// The mesh view: the device grid with axis names and sizes, each device's memory (used of its
// budget) and the queue its stream submits to. A device holding a piece of the selected array
// takes that piece's tile colour; hovering a device lights up its pieces and lanes elsewhere.
#include <imgui.h>

#include <algorithm>
#include <cmath>

#include "app.hpp"

namespace inspector {
namespace {

const ArrayInfo* selected(const App& app) {
  for (const ArrayInfo& a : app.snap.arrays)
    if (a.name == app.selected_array) return &a;
  return nullptr;
}

// The mesh to draw: the selected array's, else the one the scenario's inputs were laid out on.
std::optional<meshvk::Mesh> mesh_to_show(const App& app) {
  if (const ArrayInfo* a = selected(app); a && a->sharding && a->sharding->named())
    return a->sharding->named()->mesh();
  for (const InputInfo& in : app.snap.inputs)
    if (in.mesh) return in.mesh;
  return std::nullopt;
}

const meshvk::DeviceInfo* device_info(const App& app, int id) {
  for (const auto& d : app.snap.devices)
    if (d.id == id) return &d;
  return nullptr;
}

// The colour of the selected array's tile on this device, if it holds one.
std::optional<uint32_t> tile_color(const App& app, int device) {
  if (app.picture_cache.name != app.selected_array) return std::nullopt;
  for (const PictureTile& t : app.picture_cache.picture.tiles)
    if (std::find(t.devices.begin(), t.devices.end(), device) != t.devices.end()) return t.rgb;
  return std::nullopt;
}

void device_cell(App& app, int device, const std::string& coords, ImVec2 size) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 p1(p0.x + size.x, p0.y + size.y);
  ImGui::PushID(device);
  ImGui::InvisibleButton("device", size);
  const bool hovered = ImGui::IsItemHovered();
  ImGui::PopID();
  if (hovered) app.hovered_devices_next = {device};

  const auto color = tile_color(app, device);
  const uint32_t bg_rgb = color.value_or(0x2A2F3A);
  dl->AddRectFilled(p0, p1, rgb_to_imu32(bg_rgb));
  const double luma =
      ((bg_rgb >> 16) & 0xFF) * 0.299 + ((bg_rgb >> 8) & 0xFF) * 0.587 + (bg_rgb & 0xFF) * 0.114;
  const ImU32 text = luma > 186 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255);
  const meshvk::DeviceInfo* info = device_info(app, device);
  const std::string platform = info ? info->platform : app.snap.platform;
  const std::string name = platform + " " + std::to_string(device);
  const float line = ImGui::GetTextLineHeight();
  dl->AddText(ImVec2(p0.x + 4, p0.y + 3), text, name.c_str());
  if (size.y > 3 * line) dl->AddText(ImVec2(p0.x + 4, p0.y + 3 + line), text, coords.c_str());
  if (info && size.y > 2 * line + 10) {
    // Memory bar: used of budget on a log scale from 1 KiB, so that the few KiB a small
    // scenario holds of a GiB budget still shows; the amount is written beside it.
    const auto log_kib = [](uint64_t bytes) {
      return std::log2(1.0 + static_cast<double>(bytes) / 1024.0);
    };
    const float frac = info->memory_budget && info->memory_used
                           ? static_cast<float>(std::min(
                                 1.0, log_kib(info->memory_used) / log_kib(info->memory_budget)))
                           : 0.0f;
    const ImVec2 b0(p0.x + 4, p1.y - 9), b1(p1.x - 4, p1.y - 4);
    dl->AddRectFilled(b0, b1, IM_COL32(0, 0, 0, 120));
    if (info->memory_used > 0)
      dl->AddRectFilled(b0, ImVec2(std::max(b0.x + 2, b0.x + (b1.x - b0.x) * frac), b1.y),
                        IM_COL32(240, 200, 80, 255));
    const std::string used = format_bytes(info->memory_used);
    if (size.y > 3 * line + 10 && size.x > ImGui::CalcTextSize(used.c_str()).x + 10)
      dl->AddText(ImVec2(p0.x + 4, b0.y - line - 1), text, used.c_str());
    const std::string q = "q" + std::to_string(info->queue_index);
    if (size.x > ImGui::CalcTextSize((name + " q0").c_str()).x + 10)
      dl->AddText(ImVec2(p1.x - ImGui::CalcTextSize(q.c_str()).x - 4, p0.y + 3), text, q.c_str());
  }
  const bool lit = app.device_hovered(device);
  dl->AddRect(p0, p1, lit ? IM_COL32(255, 255, 255, 255) : IM_COL32(0, 0, 0, 160), 0, 0,
              lit ? 3.0f : 1.0f);
  if (hovered) {
    ImGui::BeginTooltip();
    ImGui::Text("%s  %s", info ? info->repr().c_str() : name.c_str(), coords.c_str());
    if (info) {
      ImGui::Text("adapter %s", info->adapter.c_str());
      ImGui::Text("queue family %d, queue %d", info->queue_family, info->queue_index);
      if (info->transfer_queue_index >= 0)
        ImGui::Text("transfer stream on queue %d", info->transfer_queue_index);
      ImGui::Text("memory %s of %s%s", format_bytes(info->memory_used).c_str(),
                  format_bytes(info->memory_budget).c_str(),
                  info->memory_shared ? " (shared by the adapter's devices)" : "");
      ImGui::TextDisabled("the bar: log scale, 1 KiB to the budget");
    }
    if (app.picture_cache.name == app.selected_array) {
      for (const PictureTile& t : app.picture_cache.picture.tiles)
        if (std::find(t.devices.begin(), t.devices.end(), device) != t.devices.end())
          ImGui::Text("%s: %s (%s)", app.selected_array.c_str(),
                      meshvk::index_to_string(t.index).c_str(), format_bytes(t.bytes).c_str());
    }
    ImGui::EndTooltip();
  }
}

}  // namespace

void draw_mesh_view(App& app) {
  const auto mesh = mesh_to_show(app);
  std::vector<int> sizes = {static_cast<int>(app.snap.devices.size())};
  std::vector<std::string> names = {"devices"};
  std::vector<int> ids;
  for (const auto& d : app.snap.devices) ids.push_back(d.id);
  if (mesh) {
    sizes = mesh->axis_sizes();
    names = mesh->axis_names();
    ids = mesh->device_ids();
    // Wrapped: a narrow panel would cut the axis types off.
    ImGui::TextWrapped("%s", mesh->to_string().c_str());
  } else {
    ImGui::TextDisabled("no mesh yet: %zu devices", ids.size());
  }
  if (ids.empty()) return;

  // Rank 1: a row; rank 2: rows x columns; rank 3+: one grid of the last two axes per index of
  // the leading ones, side by side.
  int cols = sizes.back();
  int rows = sizes.size() >= 2 ? sizes[sizes.size() - 2] : 1;
  if (sizes.size() == 1 && cols > 4) {
    // A long single axis wraps into rows of four, still in mesh order.
    rows = (cols + 3) / 4;
    cols = 4;
  }
  const int blocks =
      sizes.size() >= 3 ? static_cast<int>(ids.size()) / std::max(1, rows * cols) : 1;
  const float avail = ImGui::GetContentRegionAvail().x;
  const float gap = 4, block_gap = 14;
  const float cell_w = std::max(
      40.0f, (avail - (blocks - 1) * block_gap - blocks * (cols - 1) * gap) / float(blocks * cols));
  const float cell_h = std::clamp(cell_w * 0.62f, ImGui::GetTextLineHeight() * 2 + 14, 72.0f);
  // Axis labels: the column axis across the top, the row axis down the side.
  if (sizes.size() >= 2)
    ImGui::TextDisabled("%s: %d across, %s: %d down", names.back().c_str(), cols,
                        names[names.size() - 2].c_str(), rows);
  else
    ImGui::TextDisabled("%s: %d, in rows of %d", names.back().c_str(), sizes.back(), cols);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  for (int b = 0; b < blocks; ++b) {
    const float bx = origin.x + b * (cols * (cell_w + gap) - gap + block_gap);
    float by = origin.y;
    if (sizes.size() >= 3) {
      std::string label;
      int rest = b;
      for (int a = static_cast<int>(sizes.size()) - 3; a >= 0; --a) {
        label =
            names[a] + "=" + std::to_string(rest % sizes[a]) + (label.empty() ? "" : ", ") + label;
        rest /= sizes[a];
      }
      ImGui::GetWindowDrawList()->AddText(ImVec2(bx, by), ImGui::GetColorU32(ImGuiCol_TextDisabled),
                                          label.c_str());
      by += ImGui::GetTextLineHeight() + 2;
    }
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        const int position = (b * rows + r) * cols + c;
        if (position >= static_cast<int>(ids.size())) break;
        std::vector<int> coords = mesh ? mesh->coords(position) : std::vector<int>{position};
        std::string text = "(";
        for (size_t i = 0; i < coords.size(); ++i)
          text += (i ? "," : "") + std::to_string(coords[i]);
        text += ")";
        ImGui::SetCursorScreenPos(ImVec2(bx + c * (cell_w + gap), by + r * (cell_h + gap)));
        device_cell(app, ids[position], text, ImVec2(cell_w, cell_h));
      }
    }
  }
  const float grid_h =
      rows * (cell_h + gap) + (sizes.size() >= 3 ? ImGui::GetTextLineHeight() + 2 : 0);
  ImGui::SetCursorScreenPos(ImVec2(origin.x, origin.y + grid_h + 4));
  // A bar a quarter full is not a quarter of the budget: say so where the bars are.
  ImGui::TextDisabled("memory bars: log scale, 1 KiB to the device's budget");
  app.record_widget("memory_scale");

  // Every device, with its memory and queue.
  if (ImGui::BeginTable(
          "devices", 4,
          ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("device");
    ImGui::TableSetupColumn("queue");
    ImGui::TableSetupColumn("memory used");
    ImGui::TableSetupColumn("budget");
    ImGui::TableHeadersRow();
    for (const auto& d : app.snap.devices) {
      ImGui::TableNextRow();
      if (app.device_hovered(d.id))
        ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, IM_COL32(90, 90, 140, 255));
      ImGui::TableNextColumn();
      ImGui::Text("%s %d", d.platform.c_str(), d.id);
      if (ImGui::IsItemHovered()) app.hovered_devices_next = {d.id};
      ImGui::TableNextColumn();
      if (d.transfer_queue_index >= 0)  // and the queue of its transfer stream
        ImGui::Text("%d.%d +%d", d.queue_family, d.queue_index, d.transfer_queue_index);
      else
        ImGui::Text("%d.%d", d.queue_family, d.queue_index);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(d.memory_used).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(d.memory_budget).c_str());
    }
    ImGui::EndTable();
  }
}

}  // namespace inspector

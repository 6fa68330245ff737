// The arrays view: every array the scenario published, and the selected one drawn as
// visualize_array_sharding draws it (one tile per piece of devices_indices_map, JAX's labels and
// tab20b colours, told apart where JAX paints neighbours alike), sized for the panel and
// zoomable, with a tooltip per tile and an optional heat map of the values.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app.hpp"
#include "tile_layout.hpp"

namespace inspector {
namespace {

const ArrayInfo* find_array(const App& app, const std::string& name) {
  for (const ArrayInfo& a : app.snap.arrays)
    if (a.name == name) return &a;
  return nullptr;
}

std::string spec_of(const ArrayInfo& a) {
  if (!a.sharding) return "";
  if (const auto* n = a.sharding->named()) return n->spec().to_string();
  return a.sharding->to_string();
}

void array_table(App& app, float height) {
  // Each column as wide as its widest text: where they all fit, they share the panel in that
  // proportion (none narrower than its text); where they do not, the table scrolls sideways
  // rather than cutting them.
  const char* names[5] = {"name", "shape", "dtype", "sharding", "typeof"};
  float widths[5];
  for (int c = 0; c < 5; ++c) widths[c] = ImGui::CalcTextSize(names[c]).x;
  for (const ArrayInfo& a : app.snap.arrays) {
    const std::string cells[5] = {a.name, meshvk::shape_to_string(a.shape),
                                  std::string(meshvk::dtype_name(a.dtype)), spec_of(a), a.type};
    for (int c = 0; c < 5; ++c)
      widths[c] = std::max(widths[c], ImGui::CalcTextSize(cells[c].c_str()).x);
  }
  float total = 0;
  for (float& w : widths) total += (w += 2 * ImGui::GetStyle().CellPadding.x + 2);
  const bool fits = total <= ImGui::GetContentRegionAvail().x - ImGui::GetStyle().ScrollbarSize;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                (fits ? ImGuiTableFlags_SizingStretchProp
                                      : ImGuiTableFlags_ScrollX | ImGuiTableFlags_SizingFixedFit);
  if (!ImGui::BeginTable(fits ? "arrays" : "arrays scrolled", 5, flags, ImVec2(0, height))) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (int c = 0; c < 5; ++c)
    ImGui::TableSetupColumn(
        names[c], fits ? ImGuiTableColumnFlags_WidthStretch : ImGuiTableColumnFlags_WidthFixed,
        widths[c]);
  ImGui::TableHeadersRow();
  for (const ArrayInfo& a : app.snap.arrays) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const float name_room = ImGui::GetContentRegionAvail().x;
    if (ImGui::Selectable(a.name.c_str(), app.selected_array == a.name,
                          ImGuiSelectableFlags_SpanAllColumns)) {
      app.selected_array = a.name;
      app.step_selects = false;
    }
    // The name cell only: the row's middle may be a column border, which drags instead.
    app.widgets["array:" + a.name] = {
        ImGui::GetItemRectMin(),
        ImVec2(ImGui::GetItemRectMin().x + name_room, ImGui::GetItemRectMax().y)};
    // A name wider than its column is cut; the tooltip says it whole.
    if (ImGui::IsItemHovered() && ImGui::CalcTextSize(a.name.c_str()).x > name_room)
      ImGui::SetTooltip("%s", a.name.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(meshvk::shape_to_string(a.shape).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(std::string(meshvk::dtype_name(a.dtype)).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(spec_of(a).c_str());
    if (ImGui::IsItemHovered() && a.sharding)
      ImGui::SetTooltip("%s", a.sharding->to_string().c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(a.type.c_str());
  }
  ImGui::EndTable();
}

void tile_tooltip(const PictureTile& t, const ArrayInfo& a) {
  ImGui::BeginTooltip();
  ImGui::Text("%s", t.label.c_str());
  ImGui::Text("index %s",
              t.index.empty() ? "[] (a scalar)" : meshvk::index_to_string(t.index).c_str());
  meshvk::Shape shard;
  for (const auto& s : t.index) shard.push_back(s.size());
  ImGui::Text("shard %s %s, %s per device", std::string(meshvk::dtype_name(a.dtype)).c_str(),
              meshvk::shape_to_string(shard).c_str(), format_bytes(t.bytes).c_str());
  std::string devices;
  for (const int d : t.devices) devices += (devices.empty() ? "" : ", ") + std::to_string(d);
  ImGui::Text("devices %s (%zu cop%s)", devices.c_str(), t.devices.size(),
              t.devices.size() == 1 ? "y" : "ies");
  if (t.rgb != t.jax_rgb)
    ImGui::TextDisabled("drawn #%06X here; the terminal paints it #%06X as a neighbour", t.rgb,
                        t.jax_rgb);
  ImGui::EndTooltip();
}

// The picture: one rectangle per tile of devices_indices_map, sized for the panel, with a
// border and the longest label that fits.
void draw_picture(App& app, const ArrayInfo& a) {
  const ShardingPicture& pic = app.picture_cache.picture;
  if (!pic.error.empty()) {
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", pic.error.c_str());
    return;
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  if (app.heat_map) avail.y *= 0.4f;  // the values below need the rest
  app.picture_origin = origin;
  app.picture_avail = avail;
  const PictureLayout layout = layout_picture(pic, origin, avail, app.zoom);
  ImGui::InvisibleButton("picture",
                         ImVec2(std::max(layout.size.x, 1.0f), std::max(layout.size.y, 1.0f)));
  const bool hovered = ImGui::IsItemHovered();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  int hovered_tile = -1;
  for (size_t t = 0; hovered && t < layout.tiles.size(); ++t) {
    const TileRect& r = layout.tiles[t];
    if (mouse.x >= r.min.x && mouse.x < r.max.x && mouse.y >= r.min.y && mouse.y < r.max.y)
      hovered_tile = static_cast<int>(t);
  }
  if (hovered_tile >= 0) app.hovered_devices_next = pic.tiles[hovered_tile].devices;
  for (size_t s = 0; s < layout.headers.size() && s < pic.slices.size(); ++s)
    dl->AddText(layout.headers[s], ImGui::GetColorU32(ImGuiCol_Text), pic.slices[s].header.c_str());

  app.drawn_tiles.clear();
  app.drawn_array = a.name;
  const float font_size = ImGui::GetFontSize() * std::clamp(app.zoom, 1.0f, 2.0f);
  for (size_t t = 0; t < pic.tiles.size(); ++t) {
    const PictureTile& tile = pic.tiles[t];
    const ImVec2 p0 = layout.tiles[t].min, p1 = layout.tiles[t].max;
    dl->AddRectFilled(p0, p1, rgb_to_imu32(tile.rgb));
    dl->AddRect(p0, ImVec2(p1.x + 1, p1.y + 1), IM_COL32(16, 16, 20, 255));
    float size = font_size;
    const std::string shown = fit_label(tile, ImVec2(p1.x - p0.x, p1.y - p0.y), font_size, size);
    if (!shown.empty()) {
      const ImVec2 ts = ImGui::GetFont()->CalcTextSizeA(size, FLT_MAX, 0, shown.c_str());
      dl->AddText(
          ImGui::GetFont(), size,
          ImVec2(std::floor((p0.x + p1.x - ts.x) / 2), std::floor((p0.y + p1.y - ts.y) / 2)),
          text_color_on(tile.rgb), shown.c_str());
    }
    app.drawn_tiles.push_back(
        {p0, p1, tile.rgb, tile.jax_rgb, tile.label, shown, tile.devices, tile.index});
    bool lit = static_cast<int>(t) == hovered_tile;
    for (const int d : tile.devices) lit = lit || app.device_hovered(d);
    if (lit)
      dl->AddRect(ImVec2(p0.x + 1, p0.y + 1), ImVec2(p1.x - 1, p1.y - 1),
                  IM_COL32(255, 255, 255, 255), 0, 0, 3.0f);
  }
  app.hovered_tile = hovered_tile;
  if (hovered_tile >= 0) tile_tooltip(pic.tiles[hovered_tile], a);
}

// Viridis-like ramp: dark blue to green to yellow.
ImU32 heat_color(float t) {
  t = std::clamp(t, 0.0f, 1.0f);
  const float r = std::clamp(-0.35f + 1.6f * t * t, 0.0f, 1.0f) * 0.95f + 0.05f * t;
  const float g = std::clamp(0.05f + 0.9f * t, 0.0f, 1.0f);
  const float b =
      std::clamp(0.35f + 0.6f * std::sin(3.1416f * (0.15f + 0.85f * t)) - 0.5f * t, 0.0f, 1.0f);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(r, g, b, 1));
}

void draw_heat_map(App& app, const ArrayInfo& a) {
  const HeatMap& heat = app.snap.heat;
  const std::string key = a.name + "#" + std::to_string(a.version) + "#" +
                          std::to_string(app.heat_slice) + "#" + std::to_string(app.snap.run);
  if (key != app.heat_requested) {
    app.runner.request_heat_map(a.name, app.heat_slice);
    app.heat_requested = key;
  }
  if (heat.array != a.name) {
    ImGui::TextDisabled("reading values...");
    return;
  }
  if (!heat.error.empty()) {
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "heat map: %s", heat.error.c_str());
    return;
  }
  ImGui::Text("values of slice %d:", heat.slice);
  // The colour scale: min at the left, max at the right, the middle value under its middle.
  {
    ImGui::SameLine();
    char lo[32], mid[32], hi[32];
    std::snprintf(lo, sizeof lo, "%g", heat.min);
    std::snprintf(mid, sizeof mid, "%g", (heat.min + heat.max) / 2);
    std::snprintf(hi, sizeof hi, "%g", heat.max);
    ImGui::TextUnformatted(lo);
    ImGui::SameLine();
    const float w = 160, h = ImGui::GetTextLineHeight();
    const ImVec2 s0 = ImGui::GetCursorScreenPos();
    ImGui::Dummy(ImVec2(w, h));
    app.record_widget("heat_scale");
    ImDrawList* sdl = ImGui::GetWindowDrawList();
    for (int i = 0; i < 32; ++i)
      sdl->AddRectFilled(ImVec2(s0.x + w * i / 32, s0.y + 2),
                         ImVec2(s0.x + w * (i + 1) / 32, s0.y + h - 2),
                         heat_color((i + 0.5f) / 32));
    sdl->AddRect(ImVec2(s0.x, s0.y + 2), ImVec2(s0.x + w, s0.y + h - 2), IM_COL32(0, 0, 0, 200));
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("colour scale: %s (left) to %s (right), %s in the middle", lo, hi, mid);
    ImGui::SameLine();
    ImGui::TextUnformatted(hi);
  }
  const int64_t rows = a.shape.size() >= 2 ? a.shape[a.shape.size() - 2] : 1;
  const int64_t cols = a.shape.empty() ? 1 : a.shape.back();
  const float avail_w = ImGui::GetContentRegionAvail().x - 8;
  const float cell = std::max(1.0f, std::min(avail_w / heat.cols, 260.0f * app.zoom / heat.rows));
  const ImVec2 o = ImGui::GetCursorScreenPos();
  ImGui::Dummy(ImVec2(cell * heat.cols, cell * heat.rows));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float range = heat.max > heat.min ? heat.max - heat.min : 1.0f;
  for (int r = 0; r < heat.rows; ++r)
    for (int c = 0; c < heat.cols; ++c)
      dl->AddRectFilled(ImVec2(o.x + c * cell, o.y + r * cell),
                        ImVec2(o.x + (c + 1) * cell, o.y + (r + 1) * cell),
                        heat_color((heat.values[size_t(r) * heat.cols + c] - heat.min) / range));
  // Piece boundaries of the last two dimensions, so values can be read against the layout.
  for (const PictureTile& t : app.picture_cache.picture.tiles) {
    if (t.index.empty()) continue;
    const auto& rs = a.shape.size() >= 2 ? t.index[t.index.size() - 2] : meshvk::Slice{0, 1};
    const auto& cs = t.index.back();
    const float x0 = o.x + cell * heat.cols * cs.start / float(cols),
                x1 = o.x + cell * heat.cols * cs.stop / float(cols);
    const float y0 = o.y + cell * heat.rows * rs.start / float(rows),
                y1 = o.y + cell * heat.rows * rs.stop / float(rows);
    dl->AddRect(ImVec2(x0, y0), ImVec2(x1, y1), rgb_to_imu32(t.rgb), 0, 0, 2.0f);
  }
}

}  // namespace

void draw_arrays_view(App& app) {
  if (app.snap.arrays.empty()) {
    // Nothing ran yet (started without --scenario, or a trace file): say how to start.
    if (app.snap.run == 0 || app.snap.state == RunState::idle)
      ImGui::TextDisabled("idle: press Play or Step (Scenario panel) to run %s",
                          meshvk::scenarios::all()[app.scenario].name.c_str());
    else
      ImGui::TextDisabled("no arrays yet: the scenario publishes them as it runs");
    app.record_widget("arrays_hint");
    app.drawn_tiles.clear();
    return;
  }
  // The array asked for on the command line, once it appears; until then (or without one)
  // whatever is selected, else the first.
  if (!app.options.select_array.empty() && find_array(app, app.options.select_array)) {
    app.selected_array = app.options.select_array;
    app.options.select_array.clear();
  }
  const ArrayInfo* shown = find_array(app, app.selected_array);
  if (!shown) shown = &app.snap.arrays.front();
  app.selected_array = shown->name;
  array_table(app, std::min(ImGui::GetContentRegionAvail().y * 0.3f,
                            ImGui::GetFrameHeightWithSpacing() * (app.snap.arrays.size() + 1.5f)));
  const ArrayInfo* a = find_array(app, app.selected_array);
  if (!a || !a->sharding) return;

  // The picture is recomputed only when the array is published again.
  auto& cache = app.picture_cache;
  if (cache.name != a->name || cache.version != a->version || cache.run != app.snap.run) {
    cache.name = a->name;
    cache.version = a->version;
    cache.run = app.snap.run;
    cache.picture = make_sharding_picture(a->shape, *a->sharding, a->dtype);
  }

  ImGui::SetNextItemWidth(140);
  ImGui::SliderFloat("zoom", &app.zoom, 0.5f, 4.0f, "%.2fx");
  app.record_widget("zoom");
  same_line_if_fits(checkbox_width("heat map"));
  ImGui::Checkbox("heat map", &app.heat_map);
  if (app.heat_map && a->shape.size() >= 3) {
    int64_t slices = 1;
    for (size_t d = 0; d + 2 < a->shape.size(); ++d) slices *= a->shape[d];
    ImGui::SameLine();
    ImGui::SetNextItemWidth(120);
    ImGui::SliderInt("slice", &app.heat_slice, 0,
                     static_cast<int>(std::max<int64_t>(slices - 1, 0)));
  }
  const std::string what = a->name + "  " + a->type;
  same_line_if_fits(ImGui::CalcTextSize(what.c_str()).x);
  ImGui::TextDisabled("%s", what.c_str());
  app.check_fits("arrays header");
  if (!app.kept_error.empty()) {
    // The run failed before it showed anything: the last good run's arrays stay, and why the
    // new one failed is said with them.
    ImGui::PushTextWrapPos();
    ImGui::TextColored(ImVec4(1, 0.45f, 0.4f, 1), "%s", app.kept_error.c_str());
    ImGui::PopTextWrapPos();
    app.record_widget("kept_error");
  }

  ImGui::BeginChild("picture", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
  // Ctrl + wheel zooms the picture, as in a browser.
  if (ImGui::IsWindowHovered() && ImGui::GetIO().KeyCtrl && ImGui::GetIO().MouseWheel != 0)
    app.zoom = std::clamp(app.zoom * std::pow(1.15f, ImGui::GetIO().MouseWheel), 0.5f, 4.0f);
  draw_picture(app, *a);
  if (app.heat_map) {
    ImGui::Spacing();
    draw_heat_map(app, *a);
  }
  ImGui::EndChild();
}

}  // namespace inspector

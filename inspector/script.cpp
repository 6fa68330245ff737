#include "script.hpp"

#include <GLFW/glfw3.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "app.hpp"
#include "input_queue.hpp"

namespace inspector {
namespace {

int modifier_code(const std::string& name) {
  return name == "ctrl"    ? GLFW_KEY_LEFT_CONTROL
         : name == "shift" ? GLFW_KEY_LEFT_SHIFT
         : name == "alt"   ? GLFW_KEY_LEFT_ALT
                           : -1;
}

int key_code(const std::string& name) {
  if (name.size() == 1 && std::isalnum(static_cast<unsigned char>(name[0])))
    return std::toupper(static_cast<unsigned char>(name[0]));  // GLFW's letters and digits
  static const std::pair<const char*, int> named[] = {
      {"enter", GLFW_KEY_ENTER},         {"escape", GLFW_KEY_ESCAPE}, {"tab", GLFW_KEY_TAB},
      {"backspace", GLFW_KEY_BACKSPACE}, {"delete", GLFW_KEY_DELETE}, {"left", GLFW_KEY_LEFT},
      {"right", GLFW_KEY_RIGHT},         {"up", GLFW_KEY_UP},         {"down", GLFW_KEY_DOWN},
      {"home", GLFW_KEY_HOME},           {"end", GLFW_KEY_END},       {"space", GLFW_KEY_SPACE},
      {"equal", GLFW_KEY_EQUAL},         {"minus", GLFW_KEY_MINUS}};
  for (const auto& [n, code] : named)
    if (name == n) return code;
  return modifier_code(name);
}

}  // namespace

std::optional<Script> Script::load(const std::string& path, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "--script: cannot read " + path;
    return std::nullopt;
  }
  Script s;
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    s.lines_.push_back(line.substr(first));
  }
  return s;
}

bool Script::step(App& app, InputQueue& input) {
  if (!error_.empty()) return false;
  // A wait starts once ImGui has been handed every event queued before it.
  if (input.pending()) return true;
  if (wait_frames_ > 0) {
    --wait_frames_;
    return true;
  }
  if (!wait_for_.empty()) {
    const bool ready = wait_for_ == "arrays" ? !app.drawn_tiles.empty()
                                             : wait_for_ == run_state_name(app.snap.state);
    if (!ready) return true;
    wait_for_.clear();
  }
  while (next_ < lines_.size()) {
    const std::string line = lines_[next_++];
    std::istringstream in(line);
    std::string command;
    in >> command;
    // A point: "X Y" or "@target".
    const auto point = [&](double& x, double& y) {
      std::string first;
      in >> first;
      if (!first.empty() && first[0] == '@') {
        const std::string target = first.substr(1);
        if (target.rfind("tile:", 0) == 0) {
          const size_t n = std::strtoul(target.c_str() + 5, nullptr, 10);
          if (n >= app.drawn_tiles.size()) return false;
          const auto& t = app.drawn_tiles[n];
          x = (t.min.x + t.max.x) / 2;
          y = (t.min.y + t.max.y) / 2;
          return true;
        }
        const auto it = app.widgets.find(target);
        if (it == app.widgets.end()) return false;
        x = (it->second.first.x + it->second.second.x) / 2;
        y = (it->second.first.y + it->second.second.y) / 2;
        return true;
      }
      x = std::strtod(first.c_str(), nullptr);
      return static_cast<bool>(in >> y);
    };
    if (command == "wait") {
      in >> wait_frames_;
      return true;
    } else if (command == "wait_arrays") {
      wait_for_ = "arrays";
      return true;
    } else if (command == "wait_state") {
      in >> wait_for_;
      return true;
    } else if (command == "move" || command == "click") {
      double x = 0, y = 0;
      if (!point(x, y)) {
        error_ = "--script: nothing to point at in '" + line + "'";
        return false;
      }
      input.push({InputEvent::Kind::move, 0, 0, x, y});
      last_x_ = x, last_y_ = y;
      if (command == "click") {
        input.push({InputEvent::Kind::button, GLFW_MOUSE_BUTTON_LEFT, GLFW_PRESS});
        input.push({InputEvent::Kind::button, GLFW_MOUSE_BUTTON_LEFT, GLFW_RELEASE});
      }
    } else if (command == "key") {
      std::string spec;
      in >> spec;
      std::vector<int> mods;
      size_t plus;
      while ((plus = spec.find('+')) != std::string::npos) {
        const std::string m = spec.substr(0, plus);
        mods.push_back(modifier_code(m));
        spec = spec.substr(plus + 1);
      }
      const int key = key_code(spec);
      if (key < 0 || std::find(mods.begin(), mods.end(), -1) != mods.end()) {
        error_ = "--script: unknown key in '" + line + "'";
        return false;
      }
      for (const int m : mods) input.push({InputEvent::Kind::key, m, GLFW_PRESS});
      input.push({InputEvent::Kind::key, key, GLFW_PRESS});
      input.push({InputEvent::Kind::key, key, GLFW_RELEASE});
      for (auto m = mods.rbegin(); m != mods.rend(); ++m)
        input.push({InputEvent::Kind::key, *m, GLFW_RELEASE});
    } else if (command == "move_by") {
      double dx = 0, dy = 0;
      in >> dx >> dy;
      last_x_ += dx, last_y_ += dy;
      input.push({InputEvent::Kind::move, 0, 0, last_x_, last_y_});
    } else if (command == "mouse_down" || command == "mouse_up") {
      input.push({InputEvent::Kind::button, GLFW_MOUSE_BUTTON_LEFT,
                  command == "mouse_down" ? GLFW_PRESS : GLFW_RELEASE});
    } else if (command == "press" || command == "release") {
      // One key's press or release alone, to play the orders a real keyboard sends (xdotool
      // lets Ctrl go before the key it modified).
      std::string name;
      in >> name;
      const int key = key_code(name);
      if (key < 0) {
        error_ = "--script: unknown key in '" + line + "'";
        return false;
      }
      input.push({InputEvent::Kind::key, key, command == "press" ? GLFW_PRESS : GLFW_RELEASE});
    } else if (command == "type") {
      std::string text;
      std::getline(in, text);
      if (!text.empty() && text[0] == ' ') text.erase(0, 1);
      for (const char c : text)
        input.push({InputEvent::Kind::character, static_cast<unsigned char>(c)});
    } else if (command == "scroll") {
      double dy = 0;
      in >> dy;
      input.push({InputEvent::Kind::scroll, 0, 0, 0, dy});
    } else if (command == "dump") {
      std::string path;
      in >> path;
      write_state(app, path);
    } else if (command == "quit") {
      next_ = lines_.size();
      return false;
    } else {
      error_ = "--script: unknown command '" + line + "'";
      return false;
    }
  }
  return false;
}

void write_state(const App& app, const std::string& path) {
  std::ofstream out(path);
  const auto& all = meshvk::scenarios::all();
  out << "scenario " << all[app.scenario].name << "\n";
  out << "run " << app.snap.run << "\n";
  out << "state " << run_state_name(app.snap.state) << "\n";
  out << "mesh " << app.mesh_choices[app.mesh_choice].label << "\n";
  for (const auto& [input, text] : app.spec_text) out << "spec " << input << " " << text << "\n";
  out << "spec_error " << app.spec_error << "\n";
  std::string kept = app.kept_error;
  std::replace(kept.begin(), kept.end(), '\n', ' ');
  out << "kept_error " << kept << "\n";
  out << "drawn_tiles " << app.drawn_tiles.size() << "\n";
  out << "message " << app.snap.message << "\n";
  out << "selected " << app.selected_array << "\n";
  out << "zoom " << app.zoom << "\n";
  out << "font_scale " << ImGui::GetIO().FontGlobalScale << "\n";
  out << "hovered_tile " << app.hovered_tile << "\n";
  std::string devices;
  for (const int d : app.hovered_devices)
    devices += (devices.empty() ? "" : ",") + std::to_string(d);
  out << "hovered_devices " << devices << "\n";
  out << "open_dialog " << (app.open_dialog_visible ? 1 : 0) << "\n";
  std::string meshes;
  for (const int i : app.offered_meshes)
    meshes += (meshes.empty() ? "" : ";") + app.mesh_choices[i].label;
  out << "mesh_choices " << meshes << "\n";
  out << "timeline" << app.timeline_source() << "\n";
  out << "timeline_warning " << losses_warning(app.trace.losses) << "\n";
  out << "search " << app.tl.search << "\n";
  out << "search_match " << app.tl.match + 1 << " of " << app.tl.matches.size() << "\n";
  out << "search_active " << (app.tl.search_active ? 1 : 0) << "\n";
  out << "selected_span " << app.selected_span << "\n";
  out << "selected_steps " << app.tl.selected_steps.size() << "\n";
  // The selected span's program's peak memory on its device, as its details show it (-1: none).
  int64_t span_peak = -1;
  if (app.selected_span >= 0 && app.selected_span < static_cast<int>(app.trace.spans().size())) {
    const TraceSpan& s = app.trace.spans()[app.selected_span];
    const int device = app.trace.lanes()[s.lane].device;
    if (const int p = program_line_of(app, s).first; p >= 0 && device >= 0)
      span_peak = peak_memory_on(app.snap.programs[p], device);
  }
  out << "selected_span_peak " << span_peak << "\n";
  if (app.selected_span >= 0 && app.selected_span < static_cast<int>(app.trace.spans().size())) {
    const TraceSpan& s = app.trace.spans()[app.selected_span];
    out << "selected_span_is " << s.name << " | " << s.op << " | " << s.program << " | "
        << app.trace.lanes()[s.lane].name << "\n";
  }
  // The view in ns since the trace's first event (what the ruler counts from).
  char view[96];
  std::snprintf(view, sizeof view, "%.0f %.0f",
                app.view_start_ns - static_cast<double>(app.trace.min_ns()), app.view_span_ns);
  out << "view " << view << "\n";
  out << "marks " << app.tl.marks.size() << "\n";
  out << "range " << (app.tl.range_set ? 1 : 0) << "\n";
  out << "ruler_unit " << app.tl.ruler_unit << "\n";
  out << "cursor_label " << app.tl.cursor_label << "\n";
  for (const ProgramInfo& p : app.snap.programs) {
    out << "program " << p.name << "\n";
    if (!p.peak_per_device.empty())
      out << "program_memory " << p.name << " " << peak_memory_text(p) << "\n";
  }
  out << "frames " << app.frame_index << "\n";
  out << "window " << ImGui::GetIO().DisplaySize.x << " " << ImGui::GetIO().DisplaySize.y << "\n";
  std::string clipped;
  for (const std::string& c : app.clipped) clipped += (clipped.empty() ? "" : ";") + c;
  out << "clipped " << clipped << "\n";
  for (const auto& [name, rect] : app.widgets)
    out << "widget " << name << " " << rect.first.x << " " << rect.first.y << " " << rect.second.x
        << " " << rect.second.y << "\n";
}

}  // namespace inspector

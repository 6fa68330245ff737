#include "app.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "projection.hpp"

namespace inspector {

namespace sc = meshvk::scenarios;

namespace {

std::string shape_label(const std::vector<int>& sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + (sizes.size() == 1 ? ",)" : ")");
}

// Every way to lay n devices out as a mesh of rank 1 to 3 with no axis of size 1, largest
// leading axis first: for 8, (8,), (4, 2), (2, 4), (2, 2, 2).
std::vector<std::vector<int>> mesh_shapes(int n) {
  std::vector<std::vector<int>> out = {{n}};
  for (int a = n / 2; a >= 2; --a)
    if (n % a == 0 && n / a >= 2) out.push_back({a, n / a});
  for (int a = n / 4; a >= 2; --a)
    for (int b = n / a / 2; b >= 2; --b)
      if (n % (a * b) == 0 && n / (a * b) >= 2) out.push_back({a, b, n / (a * b)});
  return out;
}

}  // namespace

App::App(ScenarioRunner& r, const Options& o, int devices)
    : runner(r), options(o), num_devices(devices) {
  mesh_choices.push_back({"the scenario's own", std::nullopt});
  for (const auto& shape : mesh_shapes(num_devices))
    mesh_choices.push_back({shape_label(shape), sc::MeshOverride{shape, {}}});
  if (options.mesh) {
    mesh_choice = -1;
    for (size_t i = 1; i < mesh_choices.size(); ++i)
      if (mesh_choices[i].mesh->sizes == options.mesh->sizes) mesh_choice = static_cast<int>(i);
    if (mesh_choice < 0) {
      mesh_choices.push_back({shape_label(options.mesh->sizes), options.mesh});
      mesh_choice = static_cast<int>(mesh_choices.size()) - 1;
    }
  }
  const auto& all = sc::all();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].name == options.scenario) scenario = static_cast<int>(i);
  const sc::Scenario& s = all[scenario];
  if (options.args) {
    for (const auto& a : *options.args) args_text += (args_text.empty() ? "" : " ") + a;
  } else {
    for (const auto& a : s.interactive_args) args_text += (args_text.empty() ? "" : " ") + a;
  }
  for (const auto& [input, text] : options.specs) {
    const std::string name =
        !input.empty() ? input : (s.inputs.empty() ? std::string() : s.inputs.front());
    if (!name.empty()) spec_text[name] = text;
  }
  selected_array = options.select_array;
  heat_map = options.heat_map;
  if (options.timeline_ms > 0) view_span_ns = options.timeline_ms * 1e6;
  live.start();
}

void App::reset_timeline_selection() {
  selected_span = -1;
  tl.range_set = tl.range_dragging = false;
  tl.matches.clear();
  tl.match_mask.clear();
  tl.match = -1;
  tl.searched_spans = 0;
  tl.invocations.clear();
  tl.invocations_for = 0;
  tl.layouts_for.clear();  // a new trace of the same size must not reuse the old layouts
}

void App::restart(bool paused) {
  const sc::Scenario& s = sc::all()[scenario];
  RunRequest request;
  request.scenario = s.name;
  std::istringstream in(args_text);
  for (std::string word; in >> word;) request.args.push_back(word);
  if (mesh_choice >= 0 && mesh_choice < static_cast<int>(mesh_choices.size()))
    request.mesh = mesh_choices[mesh_choice].mesh;
  spec_error.clear();
  for (const auto& [input, text] : spec_text) {
    if (text.empty()) continue;
    try {
      request.specs.emplace(input, meshvk::PartitionSpec::parse(text));
    } catch (const std::exception& e) {
      spec_error = input + ": " + e.what();
    }
  }
  // A spec that does not parse leaves the run as it is: restarting without it would show
  // something the reader did not ask for, and lose what they were looking at.
  if (!spec_error.empty()) return;
  request.paused = paused;
  run_mesh_choice = mesh_choice;
  runner.run(std::move(request));
  // A new run starts a new picture: the old events and arrays belong to the previous program.
  if (live_mode) {
    trace.clear();
    trace.source = "live";
    live.reset();
    follow = true;
  }
  reset_timeline_selection();
  picture_cache = {};
}

void App::select_scenario(int index) {
  const auto& all = sc::all();
  scenario = index;
  args_text.clear();
  for (const auto& a : all[index].interactive_args) args_text += (args_text.empty() ? "" : " ") + a;
  spec_text.clear();
  spec_error.clear();
  zoom = 1.0f;  // another scenario's arrays have other sizes
  heat_slice = 0;
  selected_array.clear();
  restart();
}

void App::record_widget(const std::string& name) {
  widgets[name] = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
}

void App::check_fits(const std::string& name) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowWidth();
  if (ImGui::GetItemRectMax().x > right + 0.5f) clipped_next.insert(name);
}

void same_line_if_fits(float width) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  ImGui::SameLine();
  if (ImGui::GetCursorScreenPos().x + width > right) ImGui::NewLine();
}

float button_width(const char* label) {
  return ImGui::CalcTextSize(label, nullptr, true).x + 2 * ImGui::GetStyle().FramePadding.x;
}

float checkbox_width(const char* label) {
  return ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x +
         ImGui::CalcTextSize(label, nullptr, true).x;
}

void App::update_offered_meshes() {
  const sc::Scenario& s = sc::all()[scenario];
  const bool current_run = snap.scenario == s.name;
  // The scenario's own axis names, seen in a run on its own mesh.
  if (current_run && run_mesh_choice == 0)
    for (const InputInfo& info : snap.inputs)
      if (info.mesh) own_axis_names[s.name] = info.mesh->axis_names();
  // Until then, the names of the mesh the last run used: an override keeps the scenario's
  // names for as many axes as it has, so they are the scenario's own at least that far.
  if (current_run && !own_axis_names.count(s.name))
    for (const InputInfo& info : snap.inputs)
      if (info.mesh) fallback_axis_names = info.mesh->axis_names();
  const auto found = own_axis_names.find(s.name);
  const std::vector<std::string>* own = found != own_axis_names.end() ? &found->second
                                        : current_run && !fallback_axis_names.empty()
                                            ? &fallback_axis_names
                                            : nullptr;
  std::set<std::string> used;
  for (const std::string& input : s.inputs) {
    const auto typed = spec_text.find(input);
    try {
      if (typed != spec_text.end() && !typed->second.empty()) {
        for (const auto& a : meshvk::PartitionSpec::parse(typed->second).axes()) used.insert(a);
        continue;
      }
    } catch (const std::exception&) {
      continue;  // the spec field shows its error
    }
    if (!current_run) continue;
    for (const InputInfo& info : snap.inputs)
      if (info.name == input)
        for (const auto& a : info.default_spec.axes()) used.insert(a);
  }
  offered_meshes.clear();
  for (size_t i = 0; i < mesh_choices.size(); ++i) {
    bool usable = true;
    if (i > 0 && own) {
      // A mesh override keeps the scenario's axis names where it has as many axes, then
      // names the rest 'a', 'b', ... (ScenarioContext::mesh).
      const auto& sizes = mesh_choices[i].mesh->sizes;
      std::vector<std::string> names = mesh_choices[i].mesh->names;
      if (names.empty())
        for (size_t k = 0; k < sizes.size(); ++k)
          names.push_back(k < own->size() ? (*own)[k] : std::string(1, static_cast<char>('a' + k)));
      for (const auto& a : used)
        usable = usable && std::find(names.begin(), names.end(), a) != names.end();
    }
    if (usable || static_cast<int>(i) == mesh_choice) offered_meshes.push_back(static_cast<int>(i));
  }
}

void App::open_trace(const std::string& path) {
  open_traces({path});
}

void App::open_traces(const std::vector<std::string>& paths) {
  show_traces(load_chrome_trace_files(paths), paths);
}

void App::show_traces(TraceLoad load, const std::vector<std::string>& paths) {
  const std::string& path = paths.front();
  if (!load.error.empty()) {
    trace_error = load.error;
    trace_failed = true;
    return;
  }
  trace_error.clear();
  trace_failed = false;
  trace_name =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (paths.size() > 1) trace_name += " and " + std::to_string(paths.size() - 1) + " more";
  trace = std::move(load.data);
  live_mode = false;
  follow = false;
  reset_timeline_selection();
  // Opened before any scenario ran: the timeline is all there is to see.
  if (snap.run == 0 && options.scenario.empty()) panels.maximise_timeline = true;
  view_start_ns = static_cast<double>(trace.min_ns());
  view_span_ns = std::max(1e3, static_cast<double>(trace.max_ns() - trace.min_ns()) * 1.02);
  if (load.skipped > 0)
    trace_error = (paths.size() > 1 ? trace.source : path) + ": " + std::to_string(load.skipped) +
                  " events not understood were left out";
}

void App::project(const meshvk::TracedProgram& program, const std::string& hardware) {
  try {
    const meshvk::Estimate e = meshvk::estimate(*program.graph, meshvk::load_hardware(hardware));
    const int64_t start = program_start(trace, program.name);
    add_projection(trace, e, program.name, start);
    std::ostringstream note;
    note << "jit(" << program.name << ") on " << hardware << ": " << e.step_time * 1e6 << " us projected";
    projection_note = note.str();
    // Show the projection, from its start: the measured run beside it is usually far longer
    // (a CPU adapter against a TPU), so the view zooms to the projected step.
    view_start_ns = static_cast<double>(start);
    view_span_ns = std::max(1e3, e.step_time * 1e9 * 1.3);
    follow = false;
  } catch (const std::exception& ex) {
    projection_note = std::string("projection failed: ") + ex.what();
  }
}

void App::after_snapshot() {
  const auto has = [](const std::vector<ArrayInfo>& arrays, const std::string& name) {
    return std::any_of(arrays.begin(), arrays.end(),
                       [&](const ArrayInfo& a) { return a.name == name; });
  };
  if (snap.state == RunState::failed && !last_good_arrays.empty() &&
      (snap.arrays.empty() || !has(snap.arrays, selected_array))) {
    snap.arrays = last_good_arrays;
    if (snap.programs.empty()) snap.programs = last_good_programs;
    kept_error = "this run failed: " + snap.message + "\n(showing the last good run's arrays)";
  } else {
    kept_error.clear();
    if (!snap.arrays.empty() && snap.state != RunState::failed) {
      last_good_arrays = snap.arrays;
      last_good_programs = snap.programs;
    }
  }
  if (step_selects && snap.publishes > step_publishes && has(snap.arrays, snap.last_published)) {
    selected_array = snap.last_published;
    step_publishes = snap.publishes;
  }
}

void App::frame() {
  if (runner.snapshot(snap, snap_version)) after_snapshot();
  if (live_mode) live.poll(trace);
  if (!options.project.empty() && !projected_on_start &&
      (snap.state == RunState::finished || snap.state == RunState::failed || snap.state == RunState::stopped)) {
    const std::vector<meshvk::TracedProgram> traced = meshvk::traced_programs();
    if (!traced.empty()) project(traced.back(), options.project);
    projected_on_start = true;
  }
  clipped = std::move(clipped_next);
  clipped_next.clear();
  hovered_devices = std::move(hovered_devices_next);
  hovered_devices_next.clear();
  update_offered_meshes();

  if (ImGui::BeginMainMenuBar()) {
    if (ImGui::BeginMenu("File")) {
      if (ImGui::MenuItem("Open trace...", "Ctrl+O")) show_open_dialog = true;
      if (ImGui::MenuItem("Follow the live profiler", nullptr, live_mode)) {
        live_mode = true;
        trace.clear();
        trace.source = "live";
        live.reset();
        follow = true;
        reset_timeline_selection();
      }
      ImGui::Separator();
      if (ImGui::MenuItem("Quit", "Ctrl+Q")) quit = true;
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("Scenario")) {
      const auto& all = sc::all();
      for (size_t i = 0; i < all.size(); ++i) {
        if (ImGui::MenuItem(all[i].name.c_str(), nullptr, scenario == static_cast<int>(i)))
          select_scenario(static_cast<int>(i));
      }
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("Project onto")) {
      // The programs traced so far (newest first, one entry per name), each onto every shipped
      // machine: its projected timeline joins the measured one, lanes per device.
      const std::vector<meshvk::TracedProgram> traced = meshvk::traced_programs();
      std::vector<std::string> seen;
      for (auto it = traced.rbegin(); it != traced.rend(); ++it) {
        if (std::find(seen.begin(), seen.end(), it->name) != seen.end()) continue;
        seen.push_back(it->name);
        if (ImGui::BeginMenu(("jit(" + it->name + ")").c_str())) {
          for (const std::string& hw : meshvk::shipped_hardware())
            if (ImGui::MenuItem(hw.c_str())) project(*it, hw);
          ImGui::EndMenu();
        }
      }
      if (seen.empty()) ImGui::TextDisabled("run a scenario first: no jit program traced yet");
      if (!projection_note.empty()) ImGui::TextDisabled("%s", projection_note.c_str());
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("View")) {
      ImGui::MenuItem("Maximise timeline", "F11", &panels.maximise_timeline);
      static const char* const names[kPanels] = {"Scenario", "Mesh", "Arrays", "Program",
                                                 "Timeline"};
      for (int p = 0; p < kPanels; ++p) {
        bool shown = !panels.collapsed[p];
        if (ImGui::MenuItem(names[p], nullptr, &shown)) panels.collapsed[p] = !shown;
      }
      if (ImGui::MenuItem("Reset layout")) panels = PanelState{};
      ImGui::EndMenu();
    }
    ImGui::TextDisabled("|  %s on %s, %d virtual devices  |  %.0f fps", snap.platform.c_str(),
                        snap.adapter.c_str(), num_devices, ImGui::GetIO().Framerate);
    ImGui::EndMainMenuBar();
  }
  const ImGuiIO& io = ImGui::GetIO();
  // Dear ImGui 1.86 indexes keys by the platform's codes: GLFW's are ASCII for letters.
  if (io.KeyCtrl && ImGui::IsKeyPressed('O', false)) show_open_dialog = true;
  if (io.KeyCtrl && ImGui::IsKeyPressed('Q', false)) quit = true;
  // Ctrl+= / Ctrl+- / Ctrl+0: text larger, smaller, back (as in a browser); --ui-scale sets
  // the starting size of everything.
  ImGuiIO& mutable_io = ImGui::GetIO();
  if (io.KeyCtrl && ImGui::IsKeyPressed('=', true))
    mutable_io.FontGlobalScale = std::min(io.FontGlobalScale * 1.1f, 3.0f);
  if (io.KeyCtrl && ImGui::IsKeyPressed('-', true))
    mutable_io.FontGlobalScale = std::max(io.FontGlobalScale / 1.1f, 0.5f);
  if (io.KeyCtrl && ImGui::IsKeyPressed('0', false)) mutable_io.FontGlobalScale = 1.0f;

  // GLFW_KEY_F11 is 300: Dear ImGui 1.86 indexes keys by the platform's codes.
  if (ImGui::IsKeyPressed(300, false)) panels.maximise_timeline = !panels.maximise_timeline;
  layout_windows();
  draw_open_dialog(*this);
  ++frame_index;
}

std::string App::view_title(const std::string& name) const {
  // When a trace file and a live scenario are both open, each view says which it shows: the
  // arrays and the program are always the live run's, the timeline may be the file's. The
  // "###" keeps the window's identity while its title changes.
  std::string source;
  if (name == "Timeline")
    source = timeline_source();
  else if ((name == "Arrays" || name == "Program") && !snap.scenario.empty())
    source = "  (live: " + snap.scenario + ")";
  return name + source + "###" + name;
}

std::string App::timeline_source() const {
  if (!live_mode) return "  (trace file: " + trace_name + ")";
  return snap.scenario.empty() ? "" : "  (live: " + snap.scenario + ")";
}

bool App::device_hovered(int device) const {
  return std::find(hovered_devices.begin(), hovered_devices.end(), device) != hovered_devices.end();
}

ImU32 kind_color(SpanKind kind) {
  switch (kind) {
    case SpanKind::kernel:
      return IM_COL32(76, 140, 214, 255);
    case SpanKind::copy:
      return IM_COL32(222, 158, 54, 255);
    case SpanKind::collective:
      return IM_COL32(200, 70, 90, 255);
    case SpanKind::host:
      return IM_COL32(110, 170, 110, 255);
    default:
      return IM_COL32(140, 140, 140, 255);
  }
}

ImU32 rgb_to_imu32(uint32_t rgb, uint8_t alpha) {
  return IM_COL32((rgb >> 16) & 0xFF, (rgb >> 8) & 0xFF, rgb & 0xFF, alpha);
}

ImU32 text_color_on(uint32_t rgb) {
  const double luma =
      ((rgb >> 16) & 0xFF) * 0.299 + ((rgb >> 8) & 0xFF) * 0.587 + (rgb & 0xFF) * 0.114;
  return luma > 186 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255);
}

std::string format_bytes(uint64_t bytes) {
  // Binary units everywhere, and whole amounts written as the program text writes them
  // ("4 KiB", engine/src/graph/mesh_groups.cpp), so one size reads the same in every view.
  char buf[32];
  const auto unit = [&](int shift, const char* name, int decimals) {
    const uint64_t one = uint64_t{1} << shift;
    if (bytes % one == 0)
      std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes >> shift),
                    name);
    else
      std::snprintf(buf, sizeof buf, "%.*f %s", decimals, bytes / double(one), name);
  };
  if (bytes >= (uint64_t{1} << 30))
    unit(30, "GiB", 2);
  else if (bytes >= (uint64_t{1} << 20))
    unit(20, "MiB", 2);
  else if (bytes >= 1024)
    unit(10, "KiB", 1);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else if (s >= 1e-6)
    std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f ns", s * 1e9);
  return buf;
}

}  // namespace inspector

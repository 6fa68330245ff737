#pragma once
// The inspector's state shared by its views, and the frame that lays them out. Everything here
// lives on the UI thread; meshvk work happens in the ScenarioRunner's thread.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <imgui.h>

#include "live_trace.hpp"
#include "options.hpp"
#include "panel_layout.hpp"
#include "scenario_runner.hpp"
#include "sharding_picture.hpp"
#include "timeline_model.hpp"
#include "trace_json.hpp"
#include "trace_model.hpp"

namespace inspector {

// One tile as the arrays view drew it, in window pixels (what --layout-dump writes).
struct DrawnTile {
  ImVec2 min, max;
  uint32_t rgb = 0;      // as drawn
  uint32_t jax_rgb = 0;  // as the terminal paints it
  std::string label;     // the full label ("CPU 0,2")
  std::string shown;     // what fitted in the tile; empty: only the tooltip says
  std::vector<int> devices;
  meshvk::Index index;
};

// A mesh the scenario panel offers: a shape and whether it is the scenario's own.
struct MeshChoice {
  std::string label;                                    // "(4, 2)"
  std::optional<meshvk::scenarios::MeshOverride> mesh;  // nullopt: the scenario's own mesh
};

struct App {
  App(ScenarioRunner& runner, const Options& options, int num_devices);

  // One frame of UI: menus, the five views, popups.
  void frame();
  // Places the five views by `panels` (app_layout.cpp), with splitters to drag.
  void layout_windows();
  // What a new snapshot changes in the views: a failed run's kept arrays, Step's selection.
  void after_snapshot();
  // Starts the selected scenario again with the current mesh, specs and arguments.
  void restart(bool paused = false);
  void open_trace(const std::string& path);
  // Adds `program`'s timeline projected onto `hardware` beside the measured lanes.
  void project(const meshvk::TracedProgram& program, const std::string& hardware);
  std::string projection_note;  // the last projection's step time, or why it failed
  bool projected_on_start = false;  // Options::project done (or nothing to project)
  // Several traces on one timeline (trace_json.hpp's merge_trace_loads).
  void open_traces(const std::vector<std::string>& paths);
  // The traces `paths` as loaded (main loads --trace files before the window opens).
  void show_traces(TraceLoad load, const std::vector<std::string>& paths);
  // Forgets the timeline's selection, range, search and collective rows (a new trace).
  void reset_timeline_selection();

  ScenarioRunner& runner;
  Options options;
  int num_devices = 8;
  RunnerSnapshot snap;
  uint64_t snap_version = 0;

  // Scenario choice.
  int scenario = 0;  // index into meshvk::scenarios::all()
  std::string args_text;
  std::vector<MeshChoice> mesh_choices;
  int mesh_choice = 0;
  std::map<std::string, std::string> spec_text;  // per input: the override typed or chosen
  std::string spec_error;
  std::string console_text;  // the scenario's output as shown
  uint64_t console_version = 0;

  // Cross-view highlighting. Views read the *_shown values (last frame's) and write the *_next
  // ones, so whichever view is drawn first still sees what another view hovered.
  std::vector<int> hovered_devices;
  std::vector<int> hovered_devices_next;
  bool device_hovered(int device) const;
  // What the timeline shows, for its title: "  (trace file: NAME)" or "  (live: SCENARIO)".
  std::string timeline_source() const;
  // A view's window title with what it shows: "Arrays  (live: sharded_matmul)###Arrays".
  std::string view_title(const std::string& name) const;
  std::string selected_array;
  std::string selected_op;
  int program = 0;  // which jit program the program view shows  // from the program view; the
                    // timeline highlights its spans

  // Arrays view.
  float zoom = 1.0f;
  bool heat_map = false;
  int heat_slice = 0;
  std::string heat_requested;  // "name#version#slice#run" last asked of the runner
  std::vector<DrawnTile> drawn_tiles;
  std::string drawn_array;
  int hovered_tile = -1;
  ImVec2 picture_origin, picture_avail;  // where the picture was laid out, for --layout-dump
  struct PictureCache {
    std::string name;
    uint64_t version = 0;
    uint64_t run = 0;
    ShardingPicture picture;
  } picture_cache;

  // Timeline.
  TraceData trace;
  LiveTrace live;
  bool live_mode = true;  // follow the profiler; off after a file is opened
  bool follow = true;     // keep the newest events in view while live
  double view_start_ns = 0;
  double view_span_ns = 20e6;  // live: the last 20 ms
  int selected_span = -1;
  std::string trace_error;
  bool trace_failed = false;  // the last open_trace read nothing
  std::string trace_name;     // the file's name, for the timeline's title
  bool show_open_dialog = false;
  bool open_dialog_visible = false;  // drawn this frame
  std::string open_path;
  // Timeline interaction (timeline_view.cpp, timeline_lanes.cpp, timeline_details.cpp).
  struct TimelineUi {
    std::map<std::string, bool> lane_collapsed;  // by lane name; host lanes start collapsed
    bool all_flows = false;                      // else only the selected span's flows
    bool range_set = false;                      // a dragged time range and its totals
    double range_t0 = 0, range_t1 = 0;
    bool range_dragging = false;
    double cursor_ns = -1;  // where the mouse is on the time axis; < 0 when not over it
    std::string search;
    std::vector<size_t> matches;
    std::vector<char> match_mask;  // by span: a match of the search (the lanes mark them)
    int match = -1;
    bool search_active = false;  // the search field has the keyboard (for --state-dump)
    size_t searched_spans = 0;   // the trace's span count when `matches` was made
    std::string searched_for;
    std::vector<CollectiveInvocation> invocations;
    size_t invocations_for = 0;  // span count they were grouped from (recomputed when it grows)
    double invocations_at = 0;   // when (ImGui::GetTime)
    int sort_column = 2;
    bool sort_ascending = true;
    bool sort_dirty = true;
    int scroll_to_lane = -1;  // the lanes scroll to show this lane once
    // The last frame's lane layouts and what they were made for: a still view (the usual case
    // between inputs) redraws them without looking at the spans again.
    std::vector<LaneLayout> layouts;
    std::string layouts_for;
    bool show_timeline_tab = false;  // the collectives table asks for the timeline tab
    // Perfetto's M: marked spans of time, drawn across the lanes and on the ruler until cleared.
    std::vector<std::pair<double, double>> marks;
    // A collectives row selects every device's step of its invocation (selected_span is the
    // first of them); a click in the lanes selects one span again.
    std::vector<size_t> selected_steps;
    float details_h = 0;       // the details panel under the lanes; 0: its starting height
    std::string ruler_unit;    // the ticks' unit ("ms"), and the cursor's time as the ruler
    std::string cursor_label;  // last showed it (for --state-dump)
  } tl;
  // Panels: their splits, which are collapsed, maximise-timeline.
  PanelState panels;
  int program_scroll_line = -1;  // the program view scrolls to this line once
  bool program_wrap = true;      // long program lines wrap at the panel's edge

  // Where some widgets were drawn last, for --script targets ("spec:w", "array:x", ...).
  std::map<std::string, std::pair<ImVec2, ImVec2>> widgets;
  void record_widget(const std::string& name);
  // Whether the last item reaches past its window's right edge, where it would be cut: its
  // name goes in `clipped` (this frame's), which --state-dump writes (the 1024x700 test).
  void check_fits(const std::string& name);
  std::set<std::string> clipped, clipped_next;
  // The mesh choices the current specs can use (indices into mesh_choices).
  std::vector<int> offered_meshes;
  // Each input's spec's axes under the scenario's own mesh, learned from a run without a
  // mesh override: what the mesh choices must provide.
  std::map<std::string, std::vector<std::string>> own_axis_names;  // scenario -> its axes
  void select_scenario(int index);  // with its default arguments and specs, zoom reset
  void update_offered_meshes();
  int run_mesh_choice = 0;
  std::vector<std::string> fallback_axis_names;  // the mesh choice of the run last started

  // A run that failed before publishing an array (a spec the mesh cannot take) keeps showing
  // the last good run's arrays, with the failure said beside them (kept_error).
  std::vector<ArrayInfo> last_good_arrays;
  std::vector<ProgramInfo> last_good_programs;
  std::string kept_error;
  // Step selects the array the scenario published during the step (the newest).
  bool step_selects = false;
  uint64_t step_publishes = 0;

  // Frames (for --frames) and status.
  uint64_t frame_index = 0;
  bool quit = false;
};

// The views, one file each.
void draw_scenario_panel(App& app);
void draw_mesh_view(App& app);
void draw_arrays_view(App& app);
void draw_program_view(App& app);
void draw_timeline_view(App& app);
void draw_open_dialog(App& app);

// Matching program ops to spans (program_view.cpp): the op's first word, normalized.
std::string op_key(const std::string& op);
bool span_matches_op(const TraceSpan& span, const std::string& key);
// The program line a span came from: (program index, line number), or (-1, -1).
std::pair<int, int> program_line_of(const App& app, const TraceSpan& span);
// "peak memory 24 KiB on each of 8 devices", or "peak memory 8 KiB to 24 KiB per device (0: 24
// KiB, ...)" (program_view.cpp); "" when the program has no memory analysis.
std::string peak_memory_text(const ProgramInfo& program);
// The timeline's parts (timeline_lanes.cpp, timeline_details.cpp).
void draw_timeline_lanes(App& app);
void draw_span_details(App& app);
void draw_collective_invocations(App& app);
// Puts span `span` in view and selects it.
void select_span(App& app, size_t span, bool center);

// SameLine when an item `width` wide still fits on the line, else a new line: a toolbar wraps
// in a narrow window instead of being cut at its edge.
void same_line_if_fits(float width);
// The width of a button or checkbox labelled `label`.
float button_width(const char* label);
float checkbox_width(const char* label);

// Colours and formats the views share.
ImU32 kind_color(SpanKind kind);
ImU32 rgb_to_imu32(uint32_t rgb, uint8_t alpha = 255);
// Black on light backgrounds, white on dark ones (JAX's _get_text_color).
ImU32 text_color_on(uint32_t rgb);
std::string format_bytes(uint64_t bytes);
std::string format_duration(double seconds);

}  // namespace inspector

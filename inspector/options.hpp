#pragma once
// meshvk-inspector's command line.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "scenario.hpp"

namespace inspector {

struct Options {
  std::string scenario;  // run at start; empty: none
  std::optional<std::vector<std::string>>
      args;  // the scenario's arguments (default: its interactive ones)
  std::optional<meshvk::scenarios::MeshOverride> mesh;
  std::vector<std::pair<std::string, std::string>>
      specs;                        // (input, spec text); input "" is the first input
  int devices = 0;                  // 0: MESHVK_NUM_DEVICES, else 8
  std::vector<std::string> traces;  // Chrome trace JSON files to open, on one timeline
  bool paused = false;
  int width = 1600, height = 1000;
  bool size_given = false;  // --size: else the window fits the screen
  int frames = 0;           // > 0: render this many frames, then exit
  std::string screenshot;   // with frames: the last frame as PNG
  std::string layout_dump;  // with frames: where the arrays view drew its tiles, for tests
  double timeout_s = 300;   // with frames: give up waiting for the scenario after this long
  // Preselections, for scripted screenshots: the array shown, the program op highlighted, and
  // how much of the live timeline is in view.
  std::string select_array;
  std::string select_op;
  // Once the scenario ends: its last jit program projected onto this machine (Project onto).
  std::string project;
  double timeline_ms = 0;
  bool heat_map = false;
  // With frames: resize, minimize and restore the window along the way (the robustness test).
  bool exercise_window = false;
  // Input played into the window (see script.hpp), and where to write the app's state at the
  // end; the run ends when the script does.
  std::string script;
  std::string state_dump;
  double max_fps = 0;     // > 0: draw at most this many frames a second (the tests use 5)
  float ui_scale = 1.0f;  // font and sizes, for high-DPI screens
};

extern const char* const kUsage;

// nullopt with `error` set for bad arguments; nullopt with error empty for --help.
std::optional<Options> parse_options(int argc, char** argv, std::string& error);

// "--spec NAME=P('a')" or "--spec P('a')": the input name and the spec text.
std::pair<std::string, std::string> split_spec_argument(const std::string& text);

}  // namespace inspector

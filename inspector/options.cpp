#include "options.hpp"

#include <cstdlib>
#include <sstream>

namespace inspector {

const char* const kUsage =
    "usage: meshvk-inspector [--scenario NAME] [--args \"ARGS\"] [--mesh 4x2] [--spec "
    "[INPUT=]SPEC]...\n"
    "                        [--devices N] [--trace FILE]... [--paused] [--size WxH]\n"
    "                        [--frames N [--screenshot OUT.png] [--layout-dump OUT.txt] [--timeout "
    "S]]\n"
    "  --list-scenarios  list the scenarios and exit\n"
    "  --scenario NAME   run a scenario at start (--list-scenarios shows them)\n"
    "  --args \"ARGS\"     its arguments instead of its interactive defaults\n"
    "  --mesh 4x2        the mesh shape instead of the scenario's ((8), (4,2), (2,4), (2,2,2), "
    "...)\n"
    "  --spec SPEC       PartitionSpec of the first input, in JAX syntax: \"P('a', 'b')\"\n"
    "  --spec x=SPEC     PartitionSpec of input x\n"
    "  --devices N       split the adapter into N virtual devices (default MESHVK_NUM_DEVICES or "
    "8)\n"
    "  --trace FILE      open a Chrome trace JSON (as File > Open); given again, the traces\n"
    "                    go on one timeline (the processes of a job: trace.process0.json ...)\n"
    "  --paused          start the scenario paused at its first checkpoint\n"
    "  --size WxH        the window's size (default 1600x1000, or the screen's work area where\n"
    "                    that is smaller)\n"
    "  --frames N        render N frames (and until the scenario has shown an array), then exit\n"
    "  --screenshot OUT  write the last frame as PNG\n"
    "  --select NAME     show array NAME;  --op TEXT  highlight the program op starting with TEXT\n"
    "  --timeline-ms N   show the last N ms of the live timeline;  --heat-map  show values too\n"
    "  --project HW      once the scenario ends, project its last jit program onto HW\n"
    "                    (tpu_v5e, tpu_v5p, h100_sxm, a100, this_adapter or a .hw file)\n"
    "  --layout-dump OUT with --frames: where every tile was drawn, with devices_indices_map\n"
    "  --ui-scale F      scale the font and every size by F (0.5 to 4), for high-DPI screens;\n"
    "                    in the window Ctrl+= and Ctrl+- change the text size, Ctrl+0 resets it\n"
    "  --script FILE     play the input in FILE into the window (tests; see inspector/script.hpp)\n"
    "  --state-dump OUT  with --script: write the app's state when the script ends\n"
    "  --fps N           draw at most N frames a second\n";

std::pair<std::string, std::string> split_spec_argument(const std::string& text) {
  // A name is what comes before '=' when that part looks like an identifier.
  const size_t eq = text.find('=');
  if (eq == std::string::npos) return {"", text};
  const std::string name = text.substr(0, eq);
  for (const char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return {"", text};
  return {name, text.substr(eq + 1)};
}

std::optional<Options> parse_options(int argc, char** argv, std::string& error) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) {
        error = a + " needs a value";
        return std::nullopt;
      }
      return std::string(argv[++i]);
    };
    const auto integer = [&](int& out, int lo) -> bool {
      const auto v = value();
      if (!v) return false;
      char* end = nullptr;
      const long n = std::strtol(v->c_str(), &end, 10);
      if (*end != '\0' || n < lo || n > 1 << 20) {
        error = a + " takes a whole number >= " + std::to_string(lo) + ", got " + *v;
        return false;
      }
      out = static_cast<int>(n);
      return true;
    };
    if (a == "--help" || a == "-h") {
      error.clear();
      return std::nullopt;
    } else if (a == "--scenario") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.scenario = *v;
    } else if (a == "--args") {
      const auto v = value();
      if (!v) return std::nullopt;
      std::istringstream in(*v);
      std::vector<std::string> args;
      for (std::string word; in >> word;) args.push_back(word);
      o.args = args;
    } else if (a == "--mesh") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.mesh = meshvk::scenarios::parse_mesh_shape(*v);
      if (!o.mesh) {
        error = "--mesh takes a shape such as 8, 4x2 or 2x2x2, got " + *v;
        return std::nullopt;
      }
    } else if (a == "--spec") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.specs.push_back(split_spec_argument(*v));
      try {
        meshvk::PartitionSpec::parse(o.specs.back().second);
      } catch (const std::exception& e) {
        error = std::string("--spec: ") + e.what();
        return std::nullopt;
      }
    } else if (a == "--devices") {
      if (!integer(o.devices, 1)) return std::nullopt;
    } else if (a == "--trace") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.traces.push_back(*v);
    } else if (a == "--paused") {
      o.paused = true;
    } else if (a == "--size") {
      const auto v = value();
      if (!v) return std::nullopt;
      if (std::sscanf(v->c_str(), "%dx%d", &o.width, &o.height) != 2 || o.width < 320 ||
          o.height < 240 || o.width > 8192 || o.height > 8192) {
        error = "--size takes WxH (at least 320x240), got " + *v;
        return std::nullopt;
      }
      o.size_given = true;
    } else if (a == "--frames") {
      if (!integer(o.frames, 1)) return std::nullopt;
    } else if (a == "--screenshot") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.screenshot = *v;
    } else if (a == "--layout-dump") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.layout_dump = *v;
    } else if (a == "--select") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.select_array = *v;
    } else if (a == "--project") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.project = *v;
    } else if (a == "--op") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.select_op = *v;
    } else if (a == "--timeline-ms") {
      int ms = 0;
      if (!integer(ms, 1)) return std::nullopt;
      o.timeline_ms = ms;
    } else if (a == "--heat-map") {
      o.heat_map = true;
    } else if (a == "--exercise-window") {
      o.exercise_window = true;
    } else if (a == "--script") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.script = *v;
    } else if (a == "--state-dump") {
      const auto v = value();
      if (!v) return std::nullopt;
      o.state_dump = *v;
    } else if (a == "--fps") {
      int fps = 0;
      if (!integer(fps, 1)) return std::nullopt;
      o.max_fps = fps;
    } else if (a == "--ui-scale") {
      const auto v = value();
      if (!v) return std::nullopt;
      char* end = nullptr;
      const float f = std::strtof(v->c_str(), &end);
      if (*end != '\0' || !(f >= 0.5f && f <= 4.0f)) {
        error = "--ui-scale takes a number from 0.5 to 4, got " + *v;
        return std::nullopt;
      }
      o.ui_scale = f;
    } else if (a == "--timeout") {
      int t = 0;
      if (!integer(t, 1)) return std::nullopt;
      o.timeout_s = t;
    } else {
      error = "unknown argument " + a;
      return std::nullopt;
    }
  }
  if (!o.screenshot.empty() && o.frames == 0) o.frames = 3;
  if (!o.scenario.empty() && !meshvk::scenarios::find(o.scenario)) {
    error = "no scenario named " + o.scenario + "; there are:";
    for (const auto& s : meshvk::scenarios::all()) error += " " + s.name;
    return std::nullopt;
  }
  return o;
}

}  // namespace inspector

// meshvk-inspector: meshes, array shardings, partitioned programs and collective timelines,
// live while scenarios run.
//
//   build/bin/meshvk-inspector [--scenario sharded_matmul] [--mesh 4x2] [--spec "P('a', 'b')"]
//   build/bin/meshvk-inspector --trace trace.json
//   xvfb-run -s "-screen 0 1600x1000x24" build/bin/meshvk-inspector --scenario NAME
//       --frames 30 --screenshot out.png        (headless: renders 30 frames, writes a PNG, exits)
#include <GLFW/glfw3.h>
#include <dlfcn.h>
#include <imgui.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>

#include "app.hpp"
#include "imgui_layer.hpp"
#include "options.hpp"
#include "screenshot.hpp"
#include "script.hpp"
#include "tile_layout.hpp"
#include "trace_json.hpp"
#include "vk_window.hpp"

namespace {

namespace sc = meshvk::scenarios;
using inspector::App;

// Under LeakSanitizer: the Vulkan loader unloads the driver and layers when an instance goes
// away, before leaks are reported, so their frames would be nameless and tests/lsan.supp could
// not match them. Loading them once more with RTLD_NODELETE keeps them mapped (as the tests do).
void keep_vulkan_modules_loaded() {
#if defined(__SANITIZE_ADDRESS__)
  for (const char* lib : {"libvulkan_lvp.so", "libVkLayer_khronos_validation.so"})
    dlopen(lib, RTLD_NOW | RTLD_NODELETE);
#endif
}

int device_count(const inspector::Options& options) {
  if (options.devices > 0) return options.devices;
  if (const char* env = std::getenv("MESHVK_NUM_DEVICES"); env && std::atoi(env) > 0)
    return std::atoi(env);
  return 8;
}

void dump_tile(std::ostream& out, ImVec2 min, ImVec2 max, uint32_t rgb, uint32_t jax_rgb,
               const meshvk::Index& index, const std::vector<int>& devices,
               const std::string& label, const std::string& shown) {
  char colors[32];
  std::snprintf(colors, sizeof colors, "#%06X #%06X", rgb, jax_rgb);
  std::string list;
  for (const int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
  out << "tile " << static_cast<int>(min.x) << " " << static_cast<int>(min.y) << " "
      << static_cast<int>(max.x) << " " << static_cast<int>(max.y) << " " << colors << "\t"
      << meshvk::index_to_string(index) << "\t" << list << "\t" << label << "\t" << shown << "\n";
}

// For tests: where each tile of the shown array was drawn, in window pixels, then every array
// the scenario published, each with its devices_indices_map and the tiles the arrays view would
// draw for it in the same place:
//   selected NAME
//   array NAME
//   entry DEVICE [0:2, 0:4]
//   tile X0 Y0 X1 Y1 #RGB #JAXRGB<TAB>[0:2, 0:4]<TAB>0,1<TAB>CPU 0,1<TAB>label as shown
void dump_layout(const App& app, const std::string& path) {
  std::ofstream out(path);
  out << "selected " << app.drawn_array << "\n";
  for (const auto& a : app.snap.arrays) {
    if (!a.sharding) continue;
    out << "array " << a.name << "\n";
    try {
      for (const auto& e : a.sharding->devices_indices_map(a.shape))
        out << "entry " << e.device << " " << meshvk::index_to_string(e.index) << "\n";
    } catch (const std::exception& e) {
      out << "error " << e.what() << "\n";
    }
    if (a.name == app.drawn_array) {
      for (const auto& t : app.drawn_tiles)
        dump_tile(out, t.min, t.max, t.rgb, t.jax_rgb, t.index, t.devices, t.label, t.shown);
      continue;
    }
    const auto pic = inspector::make_sharding_picture(a.shape, *a.sharding, a.dtype);
    const auto layout =
        inspector::layout_picture(pic, app.picture_origin, app.picture_avail, app.zoom);
    for (size_t i = 0; i < pic.tiles.size(); ++i) {
      const auto& t = pic.tiles[i];
      const auto& r = layout.tiles[i];
      float size = 0;
      const std::string shown = inspector::fit_label(
          t, ImVec2(r.max.x - r.min.x, r.max.y - r.min.y), ImGui::GetFontSize(), size);
      dump_tile(out, r.min, r.max, t.rgb, t.jax_rgb, t.index, t.devices, t.label, shown);
    }
  }
}

// Resizes, minimizes and restores the window over a few frames, each change followed by frames
// that must rebuild the swapchain cleanly.
void exercise_window(GLFWwindow* window, int frame) {
  switch (frame) {
    case 4:
      glfwSetWindowSize(window, 900, 640);
      break;
    case 8:
      glfwSetWindowSize(window, 1900, 1100);
      break;
    case 12:
      glfwIconifyWindow(window);
      break;
    case 16:
      glfwRestoreWindow(window);
      break;
    case 20:
      glfwSetWindowSize(window, 640, 400);
      break;
    default:
      break;
  }
}

// Whether a --frames run may take its screenshot: the scenario has shown an array or ended.
bool ready_for_screenshot(const App& app) {
  if (app.options.scenario.empty()) return true;
  if (!app.options.project.empty()) return app.projected_on_start;
  const auto state = app.snap.state;
  if (state == inspector::RunState::failed || state == inspector::RunState::finished ||
      state == inspector::RunState::stopped)
    return true;
  return !app.snap.arrays.empty() && !app.drawn_tiles.empty();
}

}  // namespace

int main(int argc, char** argv) {
  keep_vulkan_modules_loaded();
  for (int i = 1; i < argc; ++i) {
    // --list is the old spelling, kept for scripts that use it.
    if (std::strcmp(argv[i], "--list-scenarios") == 0 || std::strcmp(argv[i], "--list") == 0) {
      for (const auto& s : sc::all()) std::cout << s.name << "\n    " << s.description << "\n";
      return 0;
    }
  }
  std::string error;
  const auto options = inspector::parse_options(argc, argv, error);
  if (!options) {
    if (error.empty()) {
      std::cout << inspector::kUsage;
      return 0;
    }
    std::cerr << "meshvk-inspector: " << error << "\n" << inspector::kUsage;
    return 2;
  }
  const char* validation_env = std::getenv("MESHVK_VALIDATION");
  const bool validation = validation_env && std::strcmp(validation_env, "1") == 0;
  const bool scripted = !options->script.empty();
  const bool headless_run = options->frames > 0 || scripted;
  std::optional<inspector::Script> script;
  if (scripted) {
    script = inspector::Script::load(options->script, error);
    if (!script) {
      std::cerr << "meshvk-inspector: " << error << "\n";
      return 2;
    }
  }

  // The traces before anything else: one that cannot be read (missing, a directory, not valid
  // JSON, a value out of range) is named at once, and fails a headless run before a window or a
  // scenario starts, with or without a display. The window shows the error too.
  std::optional<inspector::TraceLoad> traces;
  if (!options->traces.empty()) {
    traces = inspector::load_chrome_trace_files(options->traces);
    if (!traces->error.empty()) {
      std::cerr << "meshvk-inspector: could not open the trace: " << traces->error << "\n";
      if (headless_run) return 1;
    }
  }

  try {
    const int devices = device_count(*options);
    inspector::ScenarioRunner runner(devices);
    inspector::VkWindow window({.width = options->width,
                                .height = options->height,
                                .title = "meshvk inspector",
                                .validation = validation,
                                .low_latency = headless_run,
                                .fit_screen = !options->size_given});
    inspector::ImGuiLayer imgui(window, options->ui_scale);
    // A change in the run (state, arrays, output) wakes an idle window at once.
    runner.set_on_change([] { glfwPostEmptyEvent(); });
    // ... until the window goes away: GLFW must not be called after glfwTerminate.
    struct StopWaking {
      inspector::ScenarioRunner& runner;
      ~StopWaking() { runner.set_on_change({}); }
    } stop_waking{runner};
    // The runtime first: the app turns the profiler on, which then sees the runtime's devices.
    runner.wait_started();
    App app(runner, *options, devices);
    if (traces) app.show_traces(std::move(*traces), options->traces);
    if (!options->scenario.empty()) app.restart(options->paused);

    const float clear[4] = {0.09f, 0.09f, 0.11f, 1.0f};
    const auto started = std::chrono::steady_clock::now();
    int rendered = 0;
    bool timed_out = false;
    inspector::Capture capture;
    bool script_running = scripted;
    int linger = 3;       // frames to draw before sleeping again: input settles over a few
    int script_tail = 0;  // frames drawn after the script's last event
    inspector::RunState last_state = app.snap.state;
    double frame_seconds = 0;
    auto linger_until = std::chrono::steady_clock::now();
    auto last_frame = linger_until;
    while (!window.should_close() && !app.quit) {
      const auto frame_start = std::chrono::steady_clock::now();
      // Interactive: draw only when something happens, so an idle window costs nothing: input
      // (GLFW wakes us), a change in the run (the runner posts an empty event), a running
      // scenario's live timeline (30 frames a second), a text field's caret. Headless: go as
      // fast as the frames come.
      const inspector::RunState state = app.snap.state;
      const bool active = state == inspector::RunState::running ||
                          state == inspector::RunState::starting || frame_start < linger_until;
      if (headless_run || imgui.input().pending() || linger > 0) {
        glfwPollEvents();
      } else if (active) {
        // At most 30 frames a second while the run changes (its every line of output wakes
        // us, and the frames would take the CPU the scenario needs), but input draws at once.
        const auto slot = last_frame + std::chrono::duration<double>(1.0 / 30);
        for (auto now = std::chrono::steady_clock::now(); now < slot && !imgui.input().pending();
             now = std::chrono::steady_clock::now())
          glfwWaitEventsTimeout(std::chrono::duration<double>(slot - now).count());
      } else {
        glfwWaitEventsTimeout(ImGui::GetIO().WantTextInput ? 0.5 : 30.0);
      }
      last_frame = std::chrono::steady_clock::now();
      if (imgui.input().pending()) linger = std::max(linger, 3);
      if (options->exercise_window) exercise_window(window.glfw(), rendered);
      if (script_running) {
        script_running = script->step(app, imgui.input());
        if (!script->error().empty()) {
          std::cerr << "meshvk-inspector: " << script->error() << "\n";
          app.quit = true;
        }
      }
      imgui.new_frame();
      app.frame();
      if (app.snap.state != last_state) {
        last_state = app.snap.state;
        // The profiler's last device spans come in after the run's end: keep the live timeline
        // drawing for a second.
        linger_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        if (!headless_run)
          std::cout << "run: " << inspector::run_state_name(last_state) << std::endl;
      }
      if (linger > 0) --linger;
      const VkCommandBuffer cmd = window.begin_frame(clear);
      if (cmd == VK_NULL_HANDLE) {
        imgui.skip_frame();
        // A window that stays minimized still ends a --frames run at its timeout.
        timed_out = headless_run && std::chrono::steady_clock::now() - started >
                                        std::chrono::duration<double>(options->timeout_s);
        if (timed_out) break;
        if (!headless_run) std::this_thread::sleep_for(std::chrono::milliseconds(30));
        continue;
      }
      imgui.render(cmd);
      bool last = false;
      if (headless_run) {
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        timed_out = elapsed > options->timeout_s;
        if (scripted) {
          if (!script_running && !imgui.input().pending()) ++script_tail;
          last = script_tail >= 3 || timed_out;
        } else {
          last = (rendered + 1 >= options->frames && ready_for_screenshot(app) &&
                  (!options->exercise_window || rendered >= 24)) ||
                 timed_out;
        }
      }
      window.end_frame(last && !options->screenshot.empty() ? &capture : nullptr);
      ++rendered;
      if (options->max_fps > 0) {
        const auto until = frame_start + std::chrono::duration<double>(1.0 / options->max_fps);
        std::this_thread::sleep_until(until);
      }
      frame_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - frame_start).count();
      if (last) {
        if (!options->layout_dump.empty()) dump_layout(app, options->layout_dump);
        if (!options->state_dump.empty()) inspector::write_state(app, options->state_dump);
        break;
      }
    }
    window.wait_idle();
    // A script that could not be played (an unknown command, a target not on screen) fails.
    int rc = script && !script->error().empty() ? 2 : 0;
    if (headless_run) {
      if (timed_out) {
        std::cerr << "meshvk-inspector: the scenario showed nothing within " << options->timeout_s
                  << " s\n";
        rc = 1;
      }
      if (!options->screenshot.empty()) {
        const std::string e = inspector::write_png(options->screenshot, capture);
        if (!e.empty()) {
          std::cerr << "meshvk-inspector: " << e << "\n";
          rc = 1;
        } else {
          std::cout << "screenshot " << options->screenshot << " " << capture.width << "x"
                    << capture.height << "\n";
        }
      }
      if (!app.trace_error.empty()) std::cout << "trace: " << app.trace_error << "\n";
      // A trace the script opened (File > Open) that could not be read fails the run too.
      if (app.trace_failed) {
        std::cerr << "meshvk-inspector: could not open the trace: " << app.trace_error << "\n";
        rc = rc ? rc : 1;
      }
      if (rendered > 0)
        std::cout << "frame time " << 1e3 * frame_seconds / rendered << " ms on average\n";
      std::cout << "frames " << rendered << ", scenario "
                << inspector::run_state_name(app.snap.state)
                << (app.snap.message.empty() ? "" : " (" + app.snap.message + ")") << "\n";
    }
    runner.stop();
    // The runner's validation count is read at its checkpoints; refresh it after the run.
    inspector::RunnerSnapshot last;
    uint64_t version = 0;
    runner.snapshot(last, version);
    if (validation) {
      std::cout << "validation messages: inspector " << window.validation_messages() << ", runtime "
                << last.validation_messages << "\n";
      if (window.validation_messages() + last.validation_messages > 0) rc = rc ? rc : 3;
    }
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "meshvk-inspector: " << e.what() << "\n";
    return 1;
  }
}

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
#include <thread>

#include "app.hpp"
#include "imgui_layer.hpp"
#include "options.hpp"
#include "screenshot.hpp"
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

// For tests: where each tile of the selected array was drawn, in window pixels.
void dump_layout(const App& app, const std::string& path) {
  std::ofstream out(path);
  out << "array " << app.drawn_array << "\n";
  for (const auto& t : app.drawn_tiles) {
    char color[8];
    std::snprintf(color, sizeof color, "%06X", t.rgb);
    out << "tile " << static_cast<int>(t.min.x) << " " << static_cast<int>(t.min.y) << " "
        << static_cast<int>(t.max.x) << " " << static_cast<int>(t.max.y) << " #" << color << " "
        << t.label << "\n";
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
    if (std::strcmp(argv[i], "--list") == 0) {
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
  const bool headless_run = options->frames > 0;

  try {
    const int devices = device_count(*options);
    inspector::ScenarioRunner runner(devices);
    inspector::VkWindow window({.width = options->width,
                                .height = options->height,
                                .title = "meshvk inspector",
                                .validation = validation,
                                .low_latency = headless_run});
    inspector::ImGuiLayer imgui(window);
    // The runtime first: the app turns the profiler on, which then sees the runtime's devices.
    runner.wait_started();
    App app(runner, *options, devices);
    if (!options->scenario.empty()) app.restart(options->paused);

    const float clear[4] = {0.09f, 0.09f, 0.11f, 1.0f};
    const auto started = std::chrono::steady_clock::now();
    int rendered = 0;
    bool timed_out = false;
    inspector::Capture capture;
    while (!window.should_close() && !app.quit) {
      // Interactive: sleep until input or a short timeout, so a live scenario still animates;
      // headless: go as fast as the frames come.
      if (headless_run)
        glfwPollEvents();
      else
        glfwWaitEventsTimeout(1.0 / 30);
      if (options->exercise_window) exercise_window(window.glfw(), rendered);
      imgui.new_frame();
      app.frame();
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
        last = (rendered + 1 >= options->frames && ready_for_screenshot(app) &&
                (!options->exercise_window || rendered >= 24)) ||
               timed_out;
      }
      window.end_frame(last && !options->screenshot.empty() ? &capture : nullptr);
      ++rendered;
      if (last) {
        if (!options->layout_dump.empty()) dump_layout(app, options->layout_dump);
        break;
      }
    }
    window.wait_idle();
    int rc = 0;
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

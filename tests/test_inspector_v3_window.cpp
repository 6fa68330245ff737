// Issue 26 in the inspector's window, driven by --script under Xvfb and checked through the
// state it dumps: the warning a trace with dropped spans gets, and search stepping with Enter
// and Shift+Enter while the field keeps the keyboard.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "inspector_harness.hpp"

namespace fs = std::filesystem;
using namespace inspector_test;

namespace {

std::map<std::string, std::string> read_state(const fs::path& path) {
  std::map<std::string, std::string> state;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    // "widget NAME x0 y0 x1 y1" lines are keyed "widget NAME".
    size_t sp = line.find(' ');
    if (line.rfind("widget ", 0) == 0) sp = line.find(' ', sp + 1);
    state[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
  }
  return state;
}

// A trace of a few kernels named "matmul" and "fusion" on two devices, with `other_data`.
std::string small_trace(const std::string& other_data) {
  std::string t = R"({"otherData":{"clock_origin_ns":0)" + other_data + R"(},"traceEvents":[
{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"CPU 0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"CPU 1"}})";
  for (int k = 0; k < 6; ++k)
    for (int d = 0; d < 2; ++d)
      t += ",\n{\"ph\":\"X\",\"name\":\"" + std::string(k % 2 ? "fusion" : "matmul") +
           "\",\"cat\":\"kernel\",\"pid\":1,\"tid\":" + std::to_string(d) +
           ",\"ts\":" + std::to_string(k * 100 + d * 10) + ",\"dur\":20,\"args\":{}}";
  return t + "\n]}";
}

class Window {
 public:
  Window() : dir_(fs::temp_directory_path() / ("meshvk-v3-" + std::to_string(getpid()))) {
    fs::create_directories(dir_);
  }
  ~Window() { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  // Opens `trace` and plays `script`; returns the app's exit status and its output.
  int play(const Xvfb& xvfb, const std::string& trace, const std::string& script,
           std::string& output) {
    std::ofstream(at("trace.json")) << trace;
    std::ofstream(at("script.txt")) << script;
    const std::string command = "DISPLAY=" + xvfb.display() + " MESHVK_VALIDATION=1 " +
                                inspector_binary() + " --trace " + at("trace.json") +
                                " --fps 10 --timeout 120 --script " + at("script.txt") + " 2>&1";
    return run(command, output);
  }

 private:
  fs::path dir_;
};

}  // namespace

TEST(InspectorV3Window, DroppedSpansAreSaidAboveTheLanes) {
  ASSERT_TRUE(fs::exists(inspector_binary())) << inspector_binary();
  Xvfb xvfb;
  if (xvfb.display().empty()) GTEST_SKIP() << "Xvfb is not installed (the xvfb package)";
  Window w;
  std::string output;
  ASSERT_EQ(w.play(xvfb, small_trace(R"(,"dropped_spans":44492)"),
                   "wait 3\ndump " + w.at("state.txt") + "\nquit\n", output),
            0)
      << output;
  auto s = read_state(w.at("state.txt"));
  EXPECT_NE(s["timeline_warning"].find("44,492 device spans dropped"), std::string::npos)
      << s["timeline_warning"];
  EXPECT_NE(s["widget timeline_warning"], "") << "the warning was drawn";

  ASSERT_EQ(w.play(xvfb, small_trace(""), "wait 3\ndump " + w.at("clean.txt") + "\nquit\n", output),
            0)
      << output;
  s = read_state(w.at("clean.txt"));
  EXPECT_EQ(s["timeline_warning"], "");
  EXPECT_EQ(s.count("widget timeline_warning"), 0u);
}

TEST(InspectorV3Window, EnterAndShiftEnterStepThroughMatchesKeepingTheField) {
  ASSERT_TRUE(fs::exists(inspector_binary())) << inspector_binary();
  Xvfb xvfb;
  if (xvfb.display().empty()) GTEST_SKIP() << "Xvfb is not installed (the xvfb package)";
  Window w;
  std::string output;
  // Six "matmul" kernels (three per device); Enter steps forward, Shift+Enter back, and the
  // field keeps the keyboard, so each press steps (Enter once let go of it after one step).
  const std::string script =
      "wait 3\nclick @search\nwait 1\ntype matmul\nwait 1\n"
      "key enter\nwait 2\ndump " +
      w.at("one.txt") + "\nkey enter\nwait 2\nkey enter\nwait 2\ndump " + w.at("three.txt") +
      "\nkey shift+enter\nwait 2\ndump " + w.at("back.txt") +
      "\nkey shift+enter\nwait 2\nkey shift+enter\nwait 2\nkey "
      "shift+enter\nwait 2\ndump " +
      w.at("wrapped.txt") + "\nquit\n";
  ASSERT_EQ(w.play(xvfb, small_trace(""), script, output), 0) << output;
  auto s = read_state(w.at("one.txt"));
  EXPECT_EQ(s["search"], "matmul");
  EXPECT_EQ(s["search_match"], "1 of 6");
  EXPECT_EQ(s["search_active"], "1") << "the field keeps the keyboard after Enter";
  EXPECT_NE(s["selected_span"], "-1");
  s = read_state(w.at("three.txt"));
  EXPECT_EQ(s["search_match"], "3 of 6");
  EXPECT_EQ(s["search_active"], "1");
  s = read_state(w.at("back.txt"));
  EXPECT_EQ(s["search_match"], "2 of 6") << "Shift+Enter steps back";
  EXPECT_EQ(s["search_active"], "1");
  s = read_state(w.at("wrapped.txt"));
  EXPECT_EQ(s["search_match"], "5 of 6") << "back past the first wraps to the last";
}

namespace {

// Two devices: "matmul" (op dot) and "fusion" (op add) kernels, then one ring all-reduce whose
// steps run on both devices from 700 us.
std::string trace_with_a_collective() {
  std::string t = R"({"otherData":{"clock_origin_ns":0},"traceEvents":[
{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"CPU 0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"CPU 1"}})";
  for (int k = 0; k < 6; ++k)
    for (int d = 0; d < 2; ++d)
      t += ",\n{\"ph\":\"X\",\"name\":\"" + std::string(k % 2 ? "fusion" : "matmul") +
           "\",\"cat\":\"kernel\",\"pid\":1,\"tid\":" + std::to_string(d) +
           ",\"ts\":" + std::to_string(k * 100 + d * 10) + ",\"dur\":20,\"args\":{\"op\":\"" +
           (k % 2 ? "add" : "dot") + "\"}}";
  for (int d = 0; d < 2; ++d)
    t += ",\n{\"ph\":\"X\",\"name\":\"all_reduce(ring)\",\"cat\":\"collective\",\"pid\":1,"
         "\"tid\":" +
         std::to_string(d) + ",\"ts\":" + std::to_string(700 + d * 5) +
         ",\"dur\":40,\"args\":{\"op\":\"all-reduce\",\"bytes\":4096}}";
  return t + "\n]}";
}

// "view START SPAN" as numbers.
std::pair<double, double> view_of(std::map<std::string, std::string>& s) {
  std::istringstream in(s["view"]);
  double start = 0, span = 0;
  in >> start >> span;
  return {start, span};
}

// "widget NAME x0 y0 x1 y1" as numbers.
std::vector<float> rect_of(std::map<std::string, std::string>& s, const std::string& name) {
  std::istringstream in(s["widget " + name]);
  std::vector<float> r(4, -1);
  in >> r[0] >> r[1] >> r[2] >> r[3];
  return r;
}

}  // namespace

// Issue 26.6: Perfetto's habits. W/S zoom at the pointer, A/D pan, F zooms to the selection,
// M marks it; the cursor's time is in the ruler's unit; the details sit under the lanes (the
// track keeps its width when they open) and their top edge drags; a collectives row selects
// every device's step.
TEST(InspectorV3Window, PerfettoKeysDetailsBelowAndCollectiveRowsSelectEveryStep) {
  ASSERT_TRUE(fs::exists(inspector_binary())) << inspector_binary();
  Xvfb xvfb;
  if (xvfb.display().empty()) GTEST_SKIP() << "Xvfb is not installed (the xvfb package)";
  Window w;
  const auto dump = [&](const std::string& name) { return "dump " + w.at(name) + "\n"; };
  const std::string script =
      "wait 3\nmove @track\nwait 2\n" + dump("start.txt") + "key w\nkey w\nkey w\nwait 2\n" +
      dump("in.txt") + "key s\nwait 2\n" + dump("out.txt") + "key d\nwait 2\n" + dump("right.txt") +
      "key a\nwait 2\n" + dump("left.txt") +
      // Shift+wheel pans a tenth of the view; Ctrl+wheel zooms as the wheel does.
      "press shift\nscroll -1\nrelease shift\nwait 2\n" + dump("shift_wheel.txt") +
      "press ctrl\nscroll 1\nrelease ctrl\nwait 2\n" + dump("ctrl_wheel.txt") +
      // Select the first "fusion" through the search, leave the field, F and M over the lanes.
      "click @search\nwait 1\ntype fusion\nwait 1\nkey enter\nwait 2\nkey escape\nwait 1\n"
      "move @track\nwait 1\nkey f\nwait 2\n" +
      dump("fit.txt") + "key m\nwait 2\n" + dump("mark.txt") +
      // The details' top edge dragged 40 px up.
      "move @details_splitter\nwait 1\nmouse_down\nwait 1\nmove_by 0 -40\nwait 1\nmouse_up\n"
      "wait 2\n" +
      dump("taller.txt") +
      // A tab takes a click once the pointer was over it a frame (Dear ImGui's item overlap).
      "move @tab:collectives\nwait 1\nclick @tab:collectives\nwait 2\nmove @collective_row:0\nwait "
      "1\nclick @collective_row:0\nwait 3\n" +
      dump("row.txt") + "move @track\nwait 1\nkey f\nwait 2\n" + dump("steps.txt") + "quit\n";
  std::string output;
  ASSERT_EQ(w.play(xvfb, trace_with_a_collective(), script, output), 0) << output;

  auto start = read_state(w.at("start.txt"));
  const auto [s0, v0] = view_of(start);
  ASSERT_GT(v0, 0);
  // The pointer's time in the ruler's unit ("+0.31234 ms" beside ticks in ms, not "312 us").
  ASSERT_NE(start["ruler_unit"], "");
  const std::string label = start["cursor_label"];
  ASSERT_GT(label.size(), start["ruler_unit"].size());
  EXPECT_EQ(label.substr(label.rfind(' ') + 1), start["ruler_unit"]) << label;

  // W three times: 0.8^3 of the view, with the time under the pointer (the track's middle) kept.
  auto in = read_state(w.at("in.txt"));
  const auto [s1, v1] = view_of(in);
  EXPECT_NEAR(v1, v0 * 0.512, v0 * 1e-3);
  EXPECT_NEAR(s1 + v1 / 2, s0 + v0 / 2, v0 * 5e-3) << "W zooms at the pointer";
  auto out = read_state(w.at("out.txt"));
  EXPECT_NEAR(view_of(out).second, v1 * 1.25, v1 * 1e-3);
  const auto [s2, v2] = view_of(out);
  auto right = read_state(w.at("right.txt"));
  EXPECT_NEAR(view_of(right).first, s2 + 0.2 * v2, v2 * 1e-3) << "D pans right a fifth";
  auto left = read_state(w.at("left.txt"));
  EXPECT_NEAR(view_of(left).first, s2, v2 * 1e-3) << "A pans back";
  auto shift_wheel = read_state(w.at("shift_wheel.txt"));
  EXPECT_NEAR(view_of(shift_wheel).first, s2 + 0.1 * v2, v2 * 1e-3) << "Shift+wheel pans";
  EXPECT_NEAR(view_of(shift_wheel).second, v2, v2 * 1e-6);
  auto ctrl_wheel = read_state(w.at("ctrl_wheel.txt"));
  EXPECT_NEAR(view_of(ctrl_wheel).second, v2 * 0.8, v2 * 1e-3) << "Ctrl+wheel zooms";

  // F: the first fusion (100-120 us on CPU 0) with a tenth of its length either side.
  auto fit = read_state(w.at("fit.txt"));
  EXPECT_EQ(fit["search_active"], "0");
  EXPECT_NE(fit["selected_span"], "-1");
  EXPECT_NEAR(view_of(fit).first, 98000, 2);
  EXPECT_NEAR(view_of(fit).second, 24000, 2);
  // The details opened under the lanes; the track kept its left and right edges.
  const auto track0 = rect_of(start, "track");
  const auto track1 = rect_of(fit, "track");
  EXPECT_EQ(track1[0], track0[0]);
  EXPECT_EQ(track1[2], track0[2]) << "opening the details rescaled the track";
  const auto details = rect_of(fit, "details");
  EXPECT_GT(details[1], track1[1]) << "the details are under the lanes";

  auto mark = read_state(w.at("mark.txt"));
  EXPECT_EQ(mark["marks"], "1");
  auto taller = read_state(w.at("taller.txt"));
  EXPECT_NEAR(rect_of(taller, "details")[1], details[1] - 40, 2) << "the details' edge drags";
  EXPECT_EQ(rect_of(taller, "track")[2], track0[2]);

  // A collectives row selects both devices' steps (700-740 and 705-745 us); F frames them.
  auto row = read_state(w.at("row.txt"));
  EXPECT_EQ(row["selected_steps"], "2");
  auto steps = read_state(w.at("steps.txt"));
  EXPECT_NEAR(view_of(steps).first, 700000 - 4500, 2);
  EXPECT_NEAR(view_of(steps).second, 54000, 2);
}

namespace {

// Runs the inspector with `args` and `script` under `xvfb`; the state dumps land in `dir`.
int play_app(const Xvfb& xvfb, const std::string& args, const std::string& script,
             const fs::path& dir, std::string& output) {
  std::ofstream(dir / "script.txt") << script;
  return run("DISPLAY=" + xvfb.display() + " MESHVK_VALIDATION=1 " + inspector_binary() + " " +
                 args + " --timeout 240 --script " + (dir / "script.txt").string(),
             output);
}

}  // namespace

// Issue 26.8: an idle start says how to run; Step selects the array it just published; the
// memory bars and the heat map say their scales.
TEST(InspectorV3Window, IdleHintStepSelectsWhatItPublishedAndScalesAreSaid) {
  ASSERT_TRUE(fs::exists(inspector_binary())) << inspector_binary();
  Xvfb xvfb;
  if (xvfb.display().empty()) GTEST_SKIP() << "Xvfb is not installed (the xvfb package)";
  Window w;
  const fs::path dir = fs::path(w.at("."));
  std::string output;
  // No --scenario: nothing runs until Play or Step. Step runs sharded_matmul paused at its
  // first checkpoint (x and w published); the next Step publishes y and selects it.
  const std::string script = "wait 3\ndump " + w.at("idle.txt") + "\n\n" +
                             "move @step\nwait 1\nclick @step\nwait_arrays\nwait_state paused\n"
                             "wait 3\ndump " +
                             w.at("first.txt") + "\n\n" +
                             "move @step\nwait 1\nclick @step\nwait 5\nwait_state paused\nwait 3\n"
                             "dump " +
                             w.at("second.txt") + "\nquit\n";
  ASSERT_EQ(play_app(xvfb, "--heat-map --args '--steps 2 --size 64,128,64'", script, dir, output),
            0)
      << output;
  auto idle = read_state(w.at("idle.txt"));
  EXPECT_EQ(idle["state"], "idle");
  EXPECT_NE(idle["widget arrays_hint"], "") << "the idle arrays view says to press Play or Step";
  auto first = read_state(w.at("first.txt"));
  EXPECT_EQ(first["state"], "paused");
  auto second = read_state(w.at("second.txt"));
  EXPECT_EQ(second["state"], "paused");
  EXPECT_NE(second["selected"], first["selected"]) << "Step selects what it published";
  EXPECT_NE(second["widget memory_scale"], "") << "the memory bars say they are log-scale";
  EXPECT_NE(second["widget heat_scale"], "") << "the heat map has a colour scale";
}

// Issue 26.8: a spec the mesh cannot take fails the run; the last good picture and the mesh's
// colours stay, with the error beside them.
TEST(InspectorV3Window, ABadSpecKeepsTheLastGoodPictureWithTheError) {
  ASSERT_TRUE(fs::exists(inspector_binary())) << inspector_binary();
  Xvfb xvfb;
  if (xvfb.display().empty()) GTEST_SKIP() << "Xvfb is not installed (the xvfb package)";
  Window w;
  const fs::path dir = fs::path(w.at("."));
  std::string output;
  const std::string script =
      "wait_arrays\nwait_state finished\nwait 2\nclick @array:w\nwait 2\ndump " + w.at("good.txt") +
      "\n\n" +
      "click @spec:w\nwait 1\nkey ctrl+a\ntype P('c', None)\nkey enter\nwait 5\nwait_state failed\n"
      "wait 3\ndump " +
      w.at("bad.txt") + "\nquit\n";
  ASSERT_EQ(play_app(xvfb,
                     "--scenario sharded_matmul --args '--steps 2 --size 64,128,64' --mesh 4x2 "
                     "--spec \"w=P('b', None)\"",
                     script, dir, output),
            0)
      << output;
  auto good = read_state(w.at("good.txt"));
  EXPECT_EQ(good["selected"], "w");
  EXPECT_EQ(good["kept_error"], "");
  auto bad = read_state(w.at("bad.txt"));
  EXPECT_EQ(bad["state"], "failed") << bad["message"];
  EXPECT_EQ(bad["selected"], "w");
  EXPECT_EQ(bad["drawn_tiles"], good["drawn_tiles"]) << "the last good picture is still drawn";
  EXPECT_NE(bad["kept_error"].find("failed"), std::string::npos) << bad["kept_error"];
  EXPECT_NE(bad["widget kept_error"], "") << "the error is drawn beside the picture";
}

// Issue 26.9: a jit program's peak memory per device (Lowered::memory_analysis) in the program
// view and in a span's details; where a collective comes from is in its details (rule and
// source, tested in test_inspector_timeline) and now in the collectives table too.
TEST(InspectorV3Window, ProgramPeakMemoryPerDeviceInTheProgramViewAndTheDetails) {
  ASSERT_TRUE(fs::exists(inspector_binary())) << inspector_binary();
  Xvfb xvfb;
  if (xvfb.display().empty()) GTEST_SKIP() << "Xvfb is not installed (the xvfb package)";
  Window w;
  const fs::path dir = fs::path(w.at("."));
  std::string output;
  const std::string script =
      "wait_arrays\nwait_state finished\nwait 10\nclick @search\nwait 1\ntype matmul\n"
      "wait 1\nkey enter\nwait 3\ndump " +
      w.at("state.txt") + "\nquit\n";
  ASSERT_EQ(play_app(xvfb,
                     "--scenario sharded_matmul --args '--steps 2 --size 64,128,64' --mesh 4x2 "
                     "--spec \"x=P('a', 'b')\" --spec \"w=P('b', None)\"",
                     script, dir, output),
            0)
      << output;
  auto s = read_state(w.at("state.txt"));
  // layer: x's (16, 64) block, w's (64, 64) one, the (16, 64) product before and after its
  // all-reduce and tanh, all float32 on every device alike.
  EXPECT_NE(s["program_memory"].find("layer peak memory "), std::string::npos)
      << s["program_memory"];
  EXPECT_NE(s["program_memory"].find(" on each of 8 devices"), std::string::npos)
      << s["program_memory"];
  EXPECT_NE(s["widget program_memory"], "") << "the program view shows it";
  EXPECT_NE(s["selected_span"], "-1") << s["search_match"];
  // The first "matmul" is a device's kernel (matmul_blocked, op dot_general, of jit(layer)).
  EXPECT_NE(s["selected_span_is"].find("| CPU "), std::string::npos) << s["selected_span_is"];
  EXPECT_GT(std::stoll(s["selected_span_peak"]), 0) << "the span's details give its device's peak";
}

// Issue 26 in the inspector's window, driven by --script under Xvfb and checked through the
// state it dumps: the warning a trace with dropped spans gets, and search stepping with Enter
// and Shift+Enter while the field keeps the keyboard.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

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

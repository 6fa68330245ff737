#pragma once
// Running meshvk-inspector from a test: a private Xvfb display, the app as a child process and
// its --layout-dump parsed back.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace inspector_test {

// Xvfb on a display it picks itself (-displayfd), so parallel tests never collide; stopped when
// this goes away.
class Xvfb {
 public:
  explicit Xvfb(const std::string& screen = "1600x1000x24") {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      const std::string fd = std::to_string(fds[1]);
      execlp("Xvfb", "Xvfb", "-displayfd", fd.c_str(), "-screen", "0", screen.c_str(), "-nolisten",
             "tcp", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    char buf[32] = {};
    size_t n = 0;
    while (n < sizeof buf - 1) {
      const ssize_t r = read(fds[0], buf + n, 1);
      if (r <= 0 || buf[n] == '\n') break;
      ++n;
    }
    close(fds[0]);
    if (n > 0) display_ = ":" + std::string(buf, n);
  }
  ~Xvfb() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  Xvfb(const Xvfb&) = delete;
  Xvfb& operator=(const Xvfb&) = delete;
  const std::string& display() const { return display_; }

 private:
  pid_t pid_ = -1;
  std::string display_;
};

// Runs a shell command, returning its exit status and what it printed.
inline int run(const std::string& command, std::string& output) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string inspector_binary() {
  const char* dir = std::getenv("MESHVK_BIN_DIR");
  return dir ? std::string(dir) + "/meshvk-inspector" : "";
}

struct DumpTile {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  uint32_t rgb = 0, jax_rgb = 0;
  std::string index;    // "[0:256, 0:128]"
  std::string devices;  // "0,2,4,6"
  std::string label;    // "CPU 0,2,4,6"
  std::string shown;    // the label as it fitted in the tile; empty: none did
};

struct DumpArray {
  std::map<std::string, std::vector<int>> boxes;  // devices_indices_map grouped by index
  std::vector<DumpTile> tiles;
  std::string error;
};

struct LayoutDump {
  std::string selected;
  std::vector<std::string> order;
  std::map<std::string, DumpArray> arrays;
};

// Reads the format inspector/main.cpp's dump_layout writes.
inline LayoutDump read_layout_dump(const std::string& path) {
  LayoutDump dump;
  std::ifstream in(path);
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.rfind("selected ", 0) == 0) {
      dump.selected = line.substr(9);
    } else if (line.rfind("array ", 0) == 0) {
      current = line.substr(6);
      dump.order.push_back(current);
      dump.arrays[current];
    } else if (line.rfind("entry ", 0) == 0) {
      std::istringstream ls(line.substr(6));
      int device = 0;
      ls >> device;
      std::string index;
      std::getline(ls, index);
      dump.arrays[current].boxes[index.substr(index.find('['))].push_back(device);
    } else if (line.rfind("error ", 0) == 0) {
      dump.arrays[current].error = line.substr(6);
    } else if (line.rfind("tile ", 0) == 0) {
      std::vector<std::string> fields;
      std::istringstream tabs(line);
      for (std::string f; std::getline(tabs, f, '\t');) fields.push_back(f);
      DumpTile t;
      std::istringstream ls(fields[0]);
      std::string word, rgb, jax;
      ls >> word >> t.x0 >> t.y0 >> t.x1 >> t.y1 >> rgb >> jax;
      t.rgb = static_cast<uint32_t>(std::stoul(rgb.substr(1), nullptr, 16));
      t.jax_rgb = static_cast<uint32_t>(std::stoul(jax.substr(1), nullptr, 16));
      if (fields.size() > 1) t.index = fields[1];
      if (fields.size() > 2) t.devices = fields[2];
      if (fields.size() > 3) t.label = fields[3];
      if (fields.size() > 4) t.shown = fields[4];
      dump.arrays[current].tiles.push_back(t);
    }
  }
  return dump;
}

}  // namespace inspector_test

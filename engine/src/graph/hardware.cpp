// Hardware descriptions for Lowered::estimate: the `key = value` text format, the shipped files
// (hardware/*.hw) and "this adapter", measured on the current runtime.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "meshvk/error.hpp"
#include "meshvk/estimate.hpp"
#include "meshvk/jit.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"

#ifndef MESHVK_HARDWARE_BUILD_DIR
#define MESHVK_HARDWARE_BUILD_DIR ""
#endif
#ifndef MESHVK_HARDWARE_INSTALL_DIR
#define MESHVK_HARDWARE_INSTALL_DIR ""
#endif

namespace meshvk {

namespace {

constexpr const char* kValidKeys =
    "name, description, peak_flops.<dtype>, vector_flops, hbm_bandwidth, hbm_capacity, dispatch, "
    "collective_dma, shared_engine, fuse_into_matmul, link.<field>, axis.<mesh axis>.<field> (fields: topology, "
    "bandwidth, latency, wraparound, bidirectional), efficiency.<matmul|elementwise|reduce|copy|collective>";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

struct Where {
  const std::string& file;
  int line;
  std::string text() const { return file + ":" + std::to_string(line); }
};

double number(const std::string& v, const std::string& key, const Where& w) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || !(x >= 0) || !std::isfinite(x))
    throw Error("hardware " + w.text() + ": " + key + " = '" + v + "' is not a finite number >= 0 (write 1.97e14, 8.1e11, 1e-6)");
  return x;
}

// A rate the model divides by: a bandwidth or a peak.
double rate(const std::string& v, const std::string& key, const Where& w) {
  const double x = number(v, key, w);
  if (x <= 0) throw Error("hardware " + w.text() + ": " + key + " = '" + v + "' is a rate and must be > 0");
  return x;
}

bool boolean(const std::string& v, const std::string& key, const Where& w) {
  if (v == "true" || v == "yes" || v == "1") return true;
  if (v == "false" || v == "no" || v == "0") return false;
  throw Error("hardware " + w.text() + ": " + key + " = '" + v + "' is not true or false");
}

void set_link(Link& l, const std::string& field, const std::string& v, const std::string& key, const Where& w) {
  if (field == "topology") {
    if (v != "ring" && v != "all_to_all")
      throw Error("hardware " + w.text() + ": " + key + " = '" + v + "'; valid: ring, all_to_all");
    l.topology = v;
  } else if (field == "bandwidth") {
    l.bandwidth = rate(v, key, w);
  } else if (field == "latency") {
    l.latency = number(v, key, w);
  } else if (field == "wraparound") {
    l.wraparound = boolean(v, key, w);
  } else if (field == "bidirectional") {
    l.bidirectional = boolean(v, key, w);
  } else {
    throw Error("hardware " + w.text() + ": unknown link field '" + field +
                "'; valid: topology, bandwidth, latency, wraparound, bidirectional");
  }
}

std::string format(double x) {
  std::ostringstream o;
  o.precision(6);
  o << x;
  return o.str();
}

void link_text(std::ostringstream& o, const std::string& prefix, const Link& l) {
  o << prefix << "topology = " << l.topology << "\n"
    << prefix << "bandwidth = " << format(l.bandwidth) << "\n"
    << prefix << "latency = " << format(l.latency) << "\n"
    << prefix << "wraparound = " << (l.wraparound ? "true" : "false") << "\n"
    << prefix << "bidirectional = " << (l.bidirectional ? "true" : "false") << "\n";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("load_hardware: cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Seconds one call of `f` takes, the best of `reps` after one warm-up, the device drained.
template <class F>
double best_time(int reps, F&& f) {
  f();
  Runtime::current().synchronize();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    Runtime::current().synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

const Link& Hardware::link_for(const std::string& axis) const {
  const auto it = axes.find(axis);
  return it == axes.end() ? link : it->second;
}

double Hardware::efficiency_of(const std::string& kind) const {
  const auto it = efficiency.find(kind);
  return it == efficiency.end() || it->second <= 0 ? 1.0 : it->second;
}

double Hardware::matmul_flops(DType dtype) const {
  if (const auto it = peak_flops.find(std::string(dtype_name(dtype))); it != peak_flops.end()) return it->second;
  if (const auto it = peak_flops.find("bfloat16"); it != peak_flops.end()) return it->second;
  return peak_flops.empty() ? 0 : peak_flops.begin()->second;
}

std::string Hardware::to_text() const {
  std::ostringstream o;
  o << "name = " << name << "\n";
  if (!description.empty()) o << "description = " << description << "\n";
  for (const auto& [dtype, f] : peak_flops) o << "peak_flops." << dtype << " = " << format(f) << "\n";
  o << "vector_flops = " << format(vector_flops) << "\n"
    << "hbm_bandwidth = " << format(hbm_bandwidth) << "\n"
    << "hbm_capacity = " << format(hbm_capacity) << "\n"
    << "dispatch = " << format(dispatch) << "\n"
    << "collective_dma = " << (collective_dma ? "true" : "false") << "\n"
    << "fuse_into_matmul = " << (fuse_into_matmul ? "true" : "false") << "\n"
    << "shared_engine = " << (shared_engine ? "true" : "false") << "\n";
  link_text(o, "link.", link);
  for (const auto& [axis, l] : axes) link_text(o, "axis." + axis + ".", l);
  for (const auto& [kind, e] : efficiency) o << "efficiency." << kind << " = " << format(e) << "\n";
  return o.str();
}

Hardware parse_hardware(const std::string& text, const std::string& name) {
  Hardware hw;
  hw.name = name;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const Where w{name, line};
    const std::string s = trim(raw.substr(0, raw.find('#')));
    if (s.empty()) continue;
    const size_t eq = s.find('=');
    if (eq == std::string::npos)
      throw Error("hardware " + w.text() + ": '" + s + "' is not `key = value`; keys: " + kValidKeys);
    const std::string key = trim(s.substr(0, eq)), v = trim(s.substr(eq + 1));
    const size_t dot = key.find('.');
    const std::string head = key.substr(0, dot), rest = dot == std::string::npos ? "" : key.substr(dot + 1);
    if (key == "name") hw.name = v;
    else if (key == "description") hw.description = v;
    else if (head == "peak_flops" && !rest.empty()) hw.peak_flops[rest] = rate(v, key, w);
    else if (key == "vector_flops") hw.vector_flops = rate(v, key, w);
    else if (key == "hbm_bandwidth") hw.hbm_bandwidth = rate(v, key, w);
    else if (key == "hbm_capacity") hw.hbm_capacity = number(v, key, w);
    else if (key == "dispatch") hw.dispatch = number(v, key, w);
    else if (key == "collective_dma") hw.collective_dma = boolean(v, key, w);
    else if (key == "fuse_into_matmul") hw.fuse_into_matmul = boolean(v, key, w);
    else if (key == "shared_engine") hw.shared_engine = boolean(v, key, w);
    else if (head == "link" && !rest.empty()) set_link(hw.link, rest, v, key, w);
    else if (head == "axis" && rest.find('.') != std::string::npos && rest.find('.') > 0) {
      const std::string axis = rest.substr(0, rest.rfind('.'));
      // An axis starts as the default link, whichever order the file gives them in: the
      // default's fields are copied in when the file ends (below).
      set_link(hw.axes[axis], rest.substr(rest.rfind('.') + 1), v, key, w);
    } else if (head == "efficiency" && !rest.empty()) {
      static const std::vector<std::string> kinds = {"matmul", "elementwise", "reduce", "copy", "collective"};
      if (std::find(kinds.begin(), kinds.end(), rest) == kinds.end())
        throw Error("hardware " + w.text() + ": unknown op kind '" + rest +
                    "'; valid: matmul, elementwise, reduce, copy, collective");
      const double e = number(v, key, w);
      if (e <= 0 || e > 1) throw Error("hardware " + w.text() + ": " + key + " = " + v + " must be in (0, 1]");
      hw.efficiency[rest] = e;
    } else {
      throw Error("hardware " + w.text() + ": unknown key '" + key + "'; valid: " + kValidKeys);
    }
  }
  if (hw.peak_flops.empty() || hw.hbm_bandwidth <= 0 || hw.link.bandwidth <= 0)
    throw Error("hardware " + name + ": needs peak_flops.<dtype>, hbm_bandwidth and link.bandwidth (all > 0)");
  // Axis overrides: fields the file did not give are the default link's. Parsed again over a
  // copy of the default, so `axis.Y.wraparound = true` alone keeps the default's bandwidth.
  if (!hw.axes.empty()) {
    std::map<std::string, Link> axes;
    std::istringstream again(text);
    for (const auto& [axis, l] : hw.axes) axes[axis] = hw.link;
    line = 0;
    while (std::getline(again, raw)) {
      ++line;
      const std::string s = trim(raw.substr(0, raw.find('#')));
      const size_t eq = s.find('=');
      if (s.rfind("axis.", 0) != 0 || eq == std::string::npos) continue;
      const std::string key = trim(s.substr(0, eq)), rest = key.substr(5);
      set_link(axes[rest.substr(0, rest.rfind('.'))], rest.substr(rest.rfind('.') + 1), trim(s.substr(eq + 1)), key,
               Where{name, line});
    }
    hw.axes = std::move(axes);
  }
  return hw;
}

std::string hardware_dir() {
  if (const char* env = std::getenv("MESHVK_HARDWARE_DIR"); env && *env) return env;
  for (const char* dir : {MESHVK_HARDWARE_BUILD_DIR, MESHVK_HARDWARE_INSTALL_DIR})
    if (*dir && std::filesystem::is_directory(dir)) return dir;
  return MESHVK_HARDWARE_INSTALL_DIR;
}

std::vector<std::string> shipped_hardware() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(hardware_dir(), ec))
    if (e.path().extension() == ".hw") names.push_back(e.path().stem().string());
  if (std::find(names.begin(), names.end(), "this_adapter") == names.end()) names.push_back("this_adapter");
  std::sort(names.begin(), names.end());
  return names;
}

Hardware load_hardware(const std::string& name_or_path) {
  if (std::filesystem::is_regular_file(name_or_path))
    return parse_hardware(read_file(name_or_path), std::filesystem::path(name_or_path).stem().string());
  const std::filesystem::path shipped = std::filesystem::path(hardware_dir()) / (name_or_path + ".hw");
  if (std::filesystem::is_regular_file(shipped)) return parse_hardware(read_file(shipped.string()), name_or_path);
  if (name_or_path == "this_adapter") return calibrate_this_adapter();
  std::string names;
  for (const auto& n : shipped_hardware()) names += (names.empty() ? "" : ", ") + n;
  throw Error("load_hardware: '" + name_or_path + "' is neither a file nor a shipped hardware description; shipped (in " +
              hardware_dir() + "): " + names);
}

Hardware calibrate_this_adapter() {
  // Measured once per process: the figures do not change while it runs.
  static std::mutex mutex;
  static std::optional<Hardware> measured;
  std::lock_guard lock(mutex);
  if (measured) return *measured;
  Runtime& rt = Runtime::current();
  const int64_t n = 256, words = 1 << 22;  // a 256^3 matmul; a 16 MiB copy
  const Array a = ones({n, n}), b = ones({n, n}), big = zeros({words});
  const auto mm = jit([](const Array& x, const Array& y) { return matmul(x, y); }, {.name = "calibrate_matmul"});
  const auto cp = jit([](const Array& x) { return x + 1.0f; }, {.name = "calibrate_copy"});
  // A kernel's own cost inside a program: 17 dependent 1x1 matmuls (which never fuse) against
  // one, so a call's fixed cost (submission, the host's wait) cancels out.
  const Array tiny = ones({1, 1});
  const auto one = jit([](const Array& x) { return matmul(x, x); }, {.name = "calibrate_dispatch"});
  const auto chain = jit(
      [](const Array& x) {
        Array y = x;
        for (int i = 0; i < 17; ++i) y = matmul(y, x);
        return y;
      },
      {.name = "calibrate_dispatch_chain"});
  const double t_call = best_time(5, [&] { (void)one(tiny); });
  const double t_chain = best_time(5, [&] { (void)chain(tiny); });
  const double dispatch = std::max(0.0, (t_chain - t_call) / 16);
  const double t_mm = best_time(3, [&] { (void)mm(a, b); }) - t_call + dispatch;
  const double t_cp = best_time(3, [&] { (void)cp(big); }) - t_call + dispatch;
  Hardware hw;
  hw.name = "this_adapter";
  hw.description = "measured on " + rt.adapter_name() + " by calibrate_this_adapter()";
  hw.dispatch = dispatch;
  hw.peak_flops["float32"] = 2.0 * n * n * n / std::max(t_mm - dispatch, 1e-9);
  hw.vector_flops = static_cast<double>(words) / std::max(t_cp - dispatch, 1e-9);
  // x + 1 reads and writes every word.
  hw.hbm_bandwidth = 2.0 * words * 4 / std::max(t_cp - dispatch, 1e-9);
  hw.hbm_capacity = 0;
  // The virtual devices share the adapter's memory: a collective is copies within it, one
  // device's at a time (lavapipe runs submissions one after another).
  hw.link.topology = "all_to_all";
  hw.link.bandwidth = hw.hbm_bandwidth / 2;
  hw.link.latency = dispatch;
  hw.collective_dma = false;
  hw.shared_engine = true;
  measured = hw;
  return hw;
}

}  // namespace meshvk

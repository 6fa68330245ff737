// ScenarioContext: the mesh and spec overrides, and the calls that reach the observer.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "scaling_book.hpp"
#include "scenario.hpp"

namespace meshvk::scenarios {

std::optional<MeshOverride> parse_mesh_shape(std::string_view text) {
  MeshOverride mesh;
  int value = -1;
  for (const char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value > 1 << 16) return std::nullopt;
    } else if (c == 'x' || c == ',' || c == ')') {
      if (value > 0)
        mesh.sizes.push_back(value);
      else if (c == 'x')
        return std::nullopt;
      value = -1;
    } else if (c != '(' && c != ' ') {
      return std::nullopt;
    }
  }
  if (value > 0) mesh.sizes.push_back(value);
  if (mesh.sizes.empty() || value == 0) return std::nullopt;
  return mesh;
}

Mesh ScenarioContext::mesh(std::vector<int> sizes, std::vector<std::string> names,
                           std::vector<AxisType> types) const {
  if (!mesh_override) return make_mesh(std::move(sizes), std::move(names), std::move(types));
  const MeshOverride& o = *mesh_override;
  std::vector<std::string> new_names = o.names;
  if (new_names.empty()) {
    // Keep the scenario's axis names where it has enough, so its specs still name them.
    for (size_t i = 0; i < o.sizes.size(); ++i)
      new_names.push_back(i < names.size() ? names[i] : std::string(1, static_cast<char>('a' + i)));
  }
  if (types.size() != o.sizes.size()) types.clear();
  return make_mesh(o.sizes, std::move(new_names), std::move(types));
}

PartitionSpec ScenarioContext::spec(const std::string& name, const PartitionSpec& default_spec,
                                    const Mesh& on_mesh) const {
  if (observer) observer->on_input(name, default_spec, on_mesh);
  const auto it = spec_overrides.find(name);
  return it == spec_overrides.end() ? default_spec : it->second;
}

void ScenarioContext::publish(const std::string& name, const Array& array) const {
  if (observer) observer->on_array(name, array);
}

void ScenarioContext::publish_program(const std::string& name, const std::string& text) const {
  if (observer) observer->on_program(name, text);
}

void ScenarioContext::publish_program(const std::string& name, const Lowered& lowered) const {
  if (!observer) return;
  observer->on_program(name, lowered.as_text());
  observer->on_program_memory(name, lowered.memory_analysis());
}

void ScenarioContext::checkpoint(const std::string& label) const {
  if (stop && stop->load()) throw Stopped{};
  if (observer && !observer->on_checkpoint(label)) throw Stopped{};
  if (stop && stop->load()) throw Stopped{};
}

int ScenarioContext::help_or_unknown(const std::string& arg, const char* usage) const {
  if (arg == "--help" || arg == "-h") {
    *out << usage;
    return 0;
  }
  *err << "unknown argument " << arg << "\n" << usage;
  return 2;
}

void ScenarioContext::banner() const {
  const Runtime& rt = Runtime::current();
  *out << "meshvk on " << rt.adapter_name() << ", split into " << rt.num_devices()
       << " virtual devices\n\n";
}

bool report(const ScenarioContext& ctx, const std::string& what, bool ok) {
  *ctx.out << what << ": " << (ok ? "equal" : "NOT EQUAL") << "\n";
  return ok;
}

std::vector<std::string> printed_tokens(const std::string& numpy_text) {
  std::vector<std::string> tokens;
  std::string token;
  for (const char c : numpy_text) {
    if (c == '[' || c == ']' || c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!token.empty()) tokens.push_back(std::move(token));
      token.clear();
    } else {
      token += c;
    }
  }
  if (!token.empty()) tokens.push_back(std::move(token));
  return tokens;
}

bool report_printed(const ScenarioContext& ctx, const std::string& what, const Array& got,
                    const std::vector<std::string>& printed) {
  const std::vector<std::string> mine = printed_tokens(got.to_string());
  std::ostream& out = *ctx.out;
  if (mine == printed) {
    out << what << ": equal\n";
    return true;
  }
  if (mine.size() != printed.size()) {
    out << what << ": differs (" << mine.size() << " values printed, the tutorial prints "
        << printed.size() << ")\n";
    return false;
  }
  size_t differing = 0;
  std::string examples;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] == printed[i]) continue;
    if (++differing <= 3)
      examples += (examples.empty() ? "" : ", ") + std::string("[") + std::to_string(i) +
                  "] " + mine[i] + " for " + printed[i];
  }
  out << what << ": differs in " << differing << " of " << mine.size() << " values (" << examples
      << (differing > 3 ? ", ..." : "") << ")\n";
  return false;
}

Timing timeit(const std::function<void()>& f, int loops, int runs) {
  f();  // untimed: traces a jit function once, as a warm %timeit cache would have
  std::vector<double> per_loop;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int l = 0; l < loops; ++l) f();
    per_loop.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / loops);
  }
  Timing t;
  t.loops = loops;
  t.runs = runs;
  for (const double v : per_loop) t.mean += v / runs;
  for (const double v : per_loop) t.std += (v - t.mean) * (v - t.mean) / runs;
  t.std = std::sqrt(t.std);
  return t;
}

namespace {

// IPython's _format_time: 3 significant digits in s, ms, µs or ns.
std::string format_time(double seconds) {
  static const char* const units[] = {"s", "ms", "\u00b5s", "ns"};
  int order = 0;
  if (seconds > 0) {
    const int exponent = static_cast<int>(std::floor(std::log10(seconds)));
    const int thousands = exponent >= 0 ? exponent / 3 : -((-exponent + 2) / 3);  // floor division
    order = std::clamp(-thousands, 0, 3);
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.3g %s", seconds * std::pow(1000.0, order), units[order]);
  return text;
}

}  // namespace

std::string timing_text(const Timing& t) {
  return format_time(t.mean) + " \u00b1 " + format_time(t.std) +
         " per loop (mean \u00b1 std. dev. of " + std::to_string(t.runs) + " run" +
         (t.runs == 1 ? "" : "s") + ", " + std::to_string(t.loops) + " loop" +
         (t.loops == 1 ? "" : "s") + " each)";
}

void report_timing(const ScenarioContext& ctx, const std::string& what, const Timing& t,
                   const std::string& tutorial) {
  *ctx.out << what << "\n  this machine: " << timing_text(t) << "\n  the tutorial: " << tutorial
           << "\n";
}

std::string exception_text(const std::string& type, const std::string& message, bool color) {
  // termcolor's colored(name, 'red'): "\x1b[31m" + name + "\x1b[0m", 9 characters textwrap
  // counts although the terminal shows none.
  const std::string red = "\x1b[31m", reset = "\x1b[0m";
  std::istringstream words(type + ": " + message);
  std::string result, line, word;
  size_t width = 0;  // the line's length as textwrap counts it
  bool first = true;
  while (words >> word) {
    const size_t counted = word.size() + (first ? red.size() + reset.size() : 0);
    const std::string shown =
        first && color ? red + word.substr(0, type.size()) + reset + word.substr(type.size()) : word;
    first = false;
    if (!line.empty() && width + 1 + counted > 70) {
      result += line + "\n";
      line.clear();
      width = 0;
    }
    line += (line.empty() ? "" : " ") + shown;
    width += (width ? 1 : 0) + counted;
  }
  return result + line;
}

float max_abs_diff(const Array& a, const Array& b) {
  return programs::max_abs_diff(a, b);
}

}  // namespace meshvk::scenarios

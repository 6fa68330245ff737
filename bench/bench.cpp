#include "bench.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

namespace meshvk::bench {

int thread_count() {
  // LP_NUM_THREADS=0: lavapipe computes on its queue thread, one thread, without handing each
  // dispatch to a worker (the one-thread setting that costs least per dispatch).
  if (const char* env = std::getenv("LP_NUM_THREADS"); env && *env)
    return std::max(1, std::atoi(env));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M %Z", std::localtime(&now));
  return text;
}

std::string fixed(double v, int precision) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

std::string figure(double v) {
  return fixed(v, v >= 100 ? 0 : v >= 10 ? 1 : 2);
}

}  // namespace

std::string machine_summary(const std::string& adapter) {
  const char* lp = std::getenv("LP_NUM_THREADS");
  std::ostringstream s;
  s << "machine:        " << cpu_model() << ", nproc " << std::thread::hardware_concurrency()
    << "\n"
    << "adapter:        " << adapter << "\n"
    << "LP_NUM_THREADS: "
    << (!lp || !*lp                 ? "unset (lavapipe uses nproc)"
        : std::string(lp) == "0" ? "0 (compute on lavapipe's queue thread)"
                                 : lp)
    << "; CPU baselines use "
    << thread_count() << " thread(s)\n"
    << "date:           " << today() << "\n";
  return s.str();
}

double median_seconds(int reps, const std::function<void()>& run) {
  run();  // warm-up: pipelines compiled, memory touched, caches warm
  std::vector<double> times;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::pair<double, double> median_seconds_interleaved(int reps, const std::function<void()>& a,
                                                     const std::function<void()>& b) {
  a();
  b();
  std::vector<double> ta, tb;
  auto time = [](const std::function<void()>& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int i = 0; i < std::max(reps, 1); ++i) {
    ta.push_back(time(a));
    tb.push_back(time(b));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

void print_markdown_table(std::ostream& out, const std::vector<std::string>& head,
                          const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width(head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    width[i] = head[i].size();
    for (const auto& c : cells) width[i] = std::max(width[i], c[i].size());
  }
  auto line = [&](const std::vector<std::string>& c) {
    out << "|";
    for (size_t i = 0; i < c.size(); ++i)
      out << " " << std::left << std::setw(static_cast<int>(width[i])) << c[i] << " |";
    out << "\n";
  };
  line(head);
  out << "|";
  for (size_t w : width) out << std::string(w + 2, '-') << "|";
  out << "\n";
  for (const auto& c : cells) line(c);
}

void Table::print(std::ostream& out) const {
  const std::vector<std::string> head = {"benchmark",       "meshvk", "baseline",
                                         "baseline figure", "ratio",  "target"};
  std::vector<std::vector<std::string>> cells;
  for (const Row& r : rows_) {
    if (r.meshvk == 0 && !r.note.empty()) {
      cells.push_back({r.name, r.note, "", "", "", ""});
      continue;
    }
    std::vector<std::string> c = {r.name, figure(r.meshvk) + " " + r.unit, r.baseline_name, "", "",
                                  ""};
    if (!r.baseline_name.empty()) {
      c[3] = figure(r.baseline) + " " + r.unit;
      const double ratio = r.lower_is_better ? r.baseline / r.meshvk : r.meshvk / r.baseline;
      c[4] = fixed(100 * ratio, 1) + "%";
      if (r.target > 0)
        c[5] = ">= " + fixed(100 * r.target, 0) + "% " + (ratio >= r.target ? "PASS" : "MISS");
    }
    cells.push_back(std::move(c));
  }
  print_markdown_table(out, head, cells);
}

}  // namespace meshvk::bench

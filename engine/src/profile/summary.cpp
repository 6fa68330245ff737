// Summaries of the events: time by kind, by collective and by name, per jit program and over
// everything, with achieved GFLOP/s and GB/s where spans said how much work they did.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "meshvk/profile.hpp"

namespace meshvk::profile {

namespace {

void add(Totals& t, const Span& s) {
  const double seconds = static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
  ++t.count;
  t.seconds += seconds;
  if (s.bytes) {
    t.bytes += s.bytes;
    t.bytes_seconds += seconds;
  }
  if (s.flops) {
    t.flops += s.flops;
    t.flops_seconds += seconds;
  }
}

// summarize() takes events a program made too: a null name is read as "" (as a Span's
// default), not dereferenced.
const char* text(const char* s) { return s ? s : ""; }

void add(Summary& summary, const Span& s) {
  add(summary.by_kind[kind_name(s.kind)], s);
  if (s.kind == Kind::collective) add(summary.by_collective[text(s.name)], s);
  if (s.kind == Kind::kernel || s.kind == Kind::copy) add(summary.by_name[text(s.name)], s);
}

std::string row(const std::string& name, const Totals& t) {
  char line[256];
  std::snprintf(line, sizeof line, "  %-34s %8llu %12.3f", name.c_str(),
                static_cast<unsigned long long>(t.count), t.seconds * 1e3);
  std::string s = line;
  if (t.gflops() > 0) {
    std::snprintf(line, sizeof line, " %10.2f GFLOP/s", t.gflops());
    s += line;
  }
  if (t.gbps() > 0) {
    std::snprintf(line, sizeof line, " %10.2f GB/s", t.gbps());
    s += line;
  }
  return s + "\n";
}

void table(std::string& out, const char* title, const std::map<std::string, Totals>& rows) {
  if (rows.empty()) return;
  char head[160];
  std::snprintf(head, sizeof head, " %-34s %8s %12s\n", title, "spans", "ms");
  out += head;
  std::vector<std::pair<std::string, Totals>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  for (const auto& [name, t] : sorted) out += row(name, t);
}

}  // namespace

std::string Summary::to_string() const {
  std::string out = program.empty() ? "all events\n" : program + "\n";
  table(out, "by kind", by_kind);
  table(out, "by collective", by_collective);
  table(out, "by kernel / copy", by_name);
  return out;
}

std::string Report::to_string() const {
  std::string out = overall.to_string();
  for (const Summary& p : programs) out += "\n" + p.to_string();
  out += "\nevents " + std::to_string(counters.events) +
         ", dropped: " + std::to_string(counters.dropped_events) + " events, " +
         std::to_string(counters.dropped_spans) + " device spans, " +
         std::to_string(counters.dropped_flows) + " flows\n";
  return out;
}

Report summarize(const std::vector<Event>& events) {
  Report r;
  std::map<std::string, Summary> programs;
  for (const Event& e : events) {
    const Span* s = std::get_if<Span>(&e);
    if (!s) continue;
    add(r.overall, *s);
    if (*text(s->program)) {
      Summary& p = programs[s->program];
      p.program = s->program;
      add(p, *s);
    }
  }
  for (auto& [name, p] : programs) r.programs.push_back(std::move(p));
  r.counters = counters();
  return r;
}

Report summarize() {
  return summarize(events());
}

}  // namespace meshvk::profile

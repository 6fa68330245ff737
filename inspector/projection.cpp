#include "projection.hpp"

#include <functional>

namespace inspector {

int64_t program_start(const TraceData& trace, const std::string& program) {
  int64_t start = trace.max_ns();
  bool found = false;
  for (const TraceSpan& s : trace.spans())
    if (s.program == program && (!found || s.start_ns < start)) {
      start = s.start_ns;
      found = true;
    }
  return found ? start : trace.min_ns();
}

size_t add_projection(TraceData& trace, const meshvk::Estimate& e, const std::string& program, int64_t start_ns) {
  // A runtime id of its own per (hardware, program): the lanes never mix with measured ones,
  // and projecting the same pair again reuses its lanes.
  const int runtime = kProjectedRuntime - static_cast<int>(std::hash<std::string>{}(e.hardware + "/" + program) % 1000000);
  const std::string prefix = "projected on " + e.hardware + ": " + program + " · device ";
  size_t added = 0;
  for (const meshvk::ProjectedSpan& p : e.timeline) {
    TraceSpan s;
    s.lane = trace.lane(runtime, p.device, p.communication ? 1 : 0,
                        prefix + std::to_string(p.device) + (p.communication ? " · communication" : " · compute"));
    s.kind = p.communication ? SpanKind::collective : SpanKind::kernel;
    s.name = p.name;
    s.program = program;
    s.start_ns = start_ns + static_cast<int64_t>(p.start * 1e9);
    s.end_ns = start_ns + static_cast<int64_t>(p.end * 1e9);
    if (s.end_ns <= s.start_ns) s.end_ns = s.start_ns + 1;
    trace.add_span(std::move(s));
    ++added;
  }
  trace.finish();
  return added;
}

}  // namespace inspector

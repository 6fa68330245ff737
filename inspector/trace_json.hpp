#pragma once
// Chrome trace JSON (what meshvk::profile::write_chrome_trace and MESHVK_TRACE write, and what
// chrome://tracing and Perfetto read) into the timeline's model.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trace_model.hpp"

namespace inspector {

struct TraceLoad {
  TraceData data;
  std::string error;   // empty on success; otherwise what is wrong, for the window to show
  size_t skipped = 0;  // events that were not understood and left out
  // meshvk's traces: the host clock's value at time 0 of the file (otherData.clock_origin_ns),
  // and "process 1" for a trace written by process 1 of a job of several.
  std::optional<int64_t> clock_origin_ns;
  // A job's traces: process 0's clock minus the writer's (otherData.clock_offset_ns), so traces
  // from several hosts line up on process 0's clock.
  std::optional<int64_t> clock_offset_ns;
  std::string process;
};

// Bounds on what untrusted text may make the loader do. The text is streamed with simdjson's
// On-Demand API, so no tree of values is built: memory is the text, simdjson's index of it
// (reserved up front, ~6.7 bytes per byte of text at most) and the model being built.
//
// Every byte of the text is checked as strictly as the DOM parser would (On-Demand by itself
// skips what it is not asked for): any JSON error, a key given twice in one object, a number no
// double holds, a time ("ts") beyond 2^53 ns either side of 0 or a duration ("dur") below 0 or
// beyond it, an "E" before its "B", fails the load with a message naming the byte, or the event
// (its index in the array) and the field.
struct TraceLimits {
  size_t max_bytes = size_t{512} << 20;  // the text (the file) itself
  size_t max_events = size_t{1} << 24;   // entries of the event array, understood or not
  // The text, simdjson's buffers for it and the model together. A file this budget cannot
  // parse is refused before parsing; one whose model outgrows it stops with an error.
  size_t max_memory = size_t{2} << 30;
  size_t max_depth = 1024;  // nesting of arrays and objects (real traces have 4 levels)
};

TraceLoad load_chrome_trace(std::string_view json, const TraceLimits& limits = {});
TraceLoad load_chrome_trace_file(const std::string& path, const TraceLimits& limits = {});

// Several traces on one timeline, e.g. the files the processes of one job wrote
// (trace.process0.json, trace.process1.json, ...): each loaded trace's lanes that hold spans,
// named after its process ("process 1 / CPU 4", or "file 2 / ..." for a trace that names none),
// its spans moved by the difference of the clock origins so that they line up (meshvk's
// processes on one machine share the host clock). One trace comes back as it is; the first
// error ends the merge with that error.
TraceLoad merge_trace_loads(std::vector<TraceLoad> loads);
TraceLoad load_chrome_trace_files(const std::vector<std::string>& paths,
                                  const TraceLimits& limits = {});

}  // namespace inspector

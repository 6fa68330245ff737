#pragma once
// Chrome trace JSON (what meshvk::profile::write_chrome_trace and MESHVK_TRACE write, and what
// chrome://tracing and Perfetto read) into the timeline's model.
#include <string>
#include <string_view>

#include "trace_model.hpp"

namespace inspector {

struct TraceLoad {
  TraceData data;
  std::string error;   // empty on success; otherwise what is wrong, for the window to show
  size_t skipped = 0;  // events that were not understood and left out
};

TraceLoad load_chrome_trace(std::string_view json);
TraceLoad load_chrome_trace_file(const std::string& path);

}  // namespace inspector

// The inspector's Chrome trace loader on arbitrary text: it reports errors as text, never throws
// or crashes, and stays within its memory budget (libFuzzer's -rss_limit_mb catches overshoot).
// A trace that loads is also merged with a second copy of itself, as the traces of two
// processes are (merge_trace_loads: lanes, spans and flows copied, times moved).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "trace_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inspector::TraceLimits limits;
  limits.max_memory = size_t{64} << 20;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  inspector::TraceLoad load = inspector::load_chrome_trace(text, limits);
  if (!load.error.empty() || load.data.spans().size() > 4096) return 0;
  std::vector<inspector::TraceLoad> both;
  both.push_back(std::move(load));
  both.push_back(inspector::load_chrome_trace(text, limits));
  auto& origin = both.back().clock_origin_ns;
  if (origin && *origin > -1'000'000'000) *origin -= 1000;  // another process's clock
  const inspector::TraceLoad merged = inspector::merge_trace_loads(std::move(both));
  (void)merged;
  return 0;
}

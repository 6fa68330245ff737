#include "profile/recorder.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "meshvk/error.hpp"
#include "profile/device_profiler.hpp"
#include "runtime/env.hpp"

namespace meshvk::profile {

std::atomic<bool> g_on{false};

Recorder& Recorder::get() {
  // Never destroyed: runtimes and events may outlive static destructors' order.
  static Recorder* r = new Recorder;
  return *r;
}

void Recorder::start(const Options& options) {
  // Checked before anything changes: a bad MESHVK_PROFILE_SAMPLE leaves the profiler as it was.
  const uint32_t sample =
      options.sample_replays
          ? options.sample_replays
          : static_cast<uint32_t>(
                detail::env_unsigned("MESHVK_PROFILE_SAMPLE", 1, 1'000'000, "replays").value_or(1));
  // Rounding up to a power of two, and the ring's bytes, must not overflow; past 2^32 events
  // (hundreds of GiB) no machine holds the ring anyway.
  constexpr size_t kMaxCapacity = size_t{1} << 32;
  if (options.capacity == 0 || options.capacity > kMaxCapacity)
    throw Error("profile::start: Options::capacity = " + std::to_string(options.capacity) +
                " events; give 1 to 2^32 (" + std::to_string(kMaxCapacity) +
                ") events (default 2^20)");
  {
    std::lock_guard lock(info_mutex_);
    auto fits = [&](const Ring* r) {
      return r && r->capacity() >= options.capacity && r->capacity() < 2 * options.capacity;
    };
    if (!fits(ring_.load())) {
      // A ring once used is never freed (a producer may still be writing to it), but one of the
      // same size is used again, so switching capacities back and forth does not grow memory.
      Ring* ring = nullptr;
      for (const auto& r : rings_)
        if (fits(r.get())) ring = r.get();
      if (!ring) {
        try {
          rings_.push_back(std::make_unique<Ring>(options.capacity));
        } catch (const std::bad_alloc&) {
          throw Error("profile::start: no memory for a ring of " + std::to_string(options.capacity) +
                      " events (" + std::to_string(options.capacity * sizeof(Event) >> 20) +
                      " MiB); give a smaller Options::capacity (default 2^20)");
        }
        ring = rings_.back().get();
      }
      first_ticket_.store(ring->head());
      ring_.store(ring, std::memory_order_release);
      dropped_spans.store(0);
      dropped_flows.store(0);
    }
    trace_path_ = options.trace_path.empty() ? environment_trace_ : options.trace_path;
    trace_error_.clear();
  }
  sample_replays_.store(sample);
  if (!g_on.load()) clear();  // a new session; start() while running keeps what it has
  g_on.store(true);
}

void Recorder::stop() {
  g_on.store(false);
  for_each_profiler([](DeviceProfiler& p) { p.flush(); });
}

void Recorder::clear() {
  if (Ring* r = ring_.load()) first_ticket_.store(r->head());
  dropped_spans.store(0);
  dropped_flows.store(0);
  std::lock_guard lock(replays_mutex_);
  replays_.clear();
}

uint64_t Recorder::next_replay(const char* program) {
  std::lock_guard lock(replays_mutex_);
  return ++replays_[program];
}

const void* Recorder::head(uint64_t& head) const {
  const Ring* r = ring_.load(std::memory_order_acquire);
  head = r ? r->head() : 0;
  return r;
}

uint64_t Recorder::read(const void*& ring, uint64_t from, std::vector<Event>& out, uint64_t& missed,
                        size_t max) const {
  const Ring* r = ring_.load(std::memory_order_acquire);
  if (!r) return from;
  if (ring != r) {
    ring = r;
    from = 0;
  }
  return r->read(std::max(from, first_ticket_.load()), out, missed, max);
}

Counters Recorder::counters() const {
  Counters c;
  const Ring* r = ring_.load(std::memory_order_acquire);
  if (r) {
    const uint64_t head = r->head(), first = first_ticket_.load();
    c.events = head - first;
    if (head - first > r->capacity()) c.dropped_events = head - first - r->capacity();
  }
  c.dropped_spans = dropped_spans.load();
  c.dropped_flows = dropped_flows.load();
  return c;
}

std::vector<Event> Recorder::events() const {
  std::vector<Event> out;
  uint64_t missed = 0;
  const void* ring = nullptr;
  read(ring, 0, out, missed, ~size_t{0});
  return out;
}

int Recorder::add_runtime(DeviceProfiler* profiler, RuntimeLanes lanes) {
  std::lock_guard live(live_mutex_);
  std::lock_guard info(info_mutex_);
  lanes.runtime = next_runtime_++;
  lanes_.push_back(std::move(lanes));
  live_.push_back(profiler);
  return lanes_.back().runtime;
}

bool Recorder::remove_runtime(DeviceProfiler* profiler) {
  std::lock_guard live(live_mutex_);
  live_.erase(std::remove(live_.begin(), live_.end(), profiler), live_.end());
  return live_.empty();
}

void Recorder::set_clock(int runtime, const std::string& clock) {
  std::lock_guard info(info_mutex_);
  for (RuntimeLanes& l : lanes_)
    if (l.runtime == runtime) l.clock = clock;
}

std::vector<RuntimeLanes> Recorder::lanes() const {
  std::lock_guard info(info_mutex_);
  return lanes_;
}

void Recorder::for_each_profiler(const std::function<void(DeviceProfiler&)>& fn) {
  std::lock_guard live(live_mutex_);
  for (DeviceProfiler* p : live_) fn(*p);
}

std::string Recorder::trace_path() const {
  std::lock_guard info(info_mutex_);
  return trace_path_;
}

std::string Recorder::trace_error() const {
  std::lock_guard info(info_mutex_);
  return trace_error_;
}

void Recorder::write_trace_if_asked() {
  const std::string path = trace_path();
  if (path.empty() || !ring_.load()) return;
  try {
    write_chrome_trace(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshvk: %s\n", e.what());
    std::lock_guard info(info_mutex_);
    trace_error_ = e.what();
  }
}

void Recorder::start_from_environment() {
  // Checked on every runtime's start, before it counts as read: MESHVK_PROFILE=yes is an Error.
  const bool profile = detail::env_switch("MESHVK_PROFILE").value_or(false);
  {
    std::lock_guard info(info_mutex_);
    if (environment_read_) return;
    environment_read_ = true;
  }
  const char* trace = std::getenv("MESHVK_TRACE");
  {
    std::lock_guard info(info_mutex_);
    environment_trace_ = trace ? trace : "";
  }
  if (profile || (trace && *trace)) start(Options{});
  if (profile) {
    std::lock_guard info(info_mutex_);
    environment_summary_ = true;
  }
}

void Recorder::print_summary_if_asked() {
  const Ring* ring = ring_.load(std::memory_order_acquire);
  if (!ring) return;
  const uint64_t head = ring->head();
  {
    std::lock_guard info(info_mutex_);
    if (!environment_summary_ || head == summarized_head_ || head == first_ticket_.load()) return;
    summarized_head_ = head;
  }
  try {
    const std::string text = summarize().to_string();
    std::fprintf(stderr, "meshvk profile (MESHVK_PROFILE=1), at the last runtime's end:\n%s",
                 text.c_str());
  } catch (const std::exception& e) {  // it runs in a destructor
    std::fprintf(stderr, "meshvk profile: summarizing at shutdown: %s\n", e.what());
  }
}

}  // namespace meshvk::profile

#pragma once
// Process-wide profiler state: the on/off switch every hook tests, the event ring, id counters,
// drop counters, and the runtimes whose device work is being profiled.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshvk/profile.hpp"
#include "profile/ring.hpp"

namespace meshvk::profile {

class DeviceProfiler;

// The one branch a hook costs while profiling is off.
extern std::atomic<bool> g_on;
inline bool on() {
  return g_on.load(std::memory_order_relaxed);
}

// What the trace needs to name a runtime's lanes.
struct RuntimeLanes {
  int runtime = 0;
  std::string platform;  // "CPU" or "GPU"
  std::string adapter;
  std::vector<int> queues;           // per device: its compute stream's queue
  std::vector<int> transfer_queues;  // per device: its transfer stream's queue; empty: none
  std::string clock;        // how device timestamps reach the host clock; "" until calibrated
};

class Recorder {
 public:
  static Recorder& get();

  // Lock-free: the submission path calls it.
  void emit(const Event& event) {
    if (Ring* r = ring_.load(std::memory_order_acquire)) r->push(event);
  }
  uint64_t next_span_id() { return span_ids_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t next_flow_id() { return flow_ids_.fetch_add(1, std::memory_order_relaxed); }
  std::atomic<uint64_t> dropped_spans{0};
  std::atomic<uint64_t> dropped_flows{0};

  // Options::sample_replays: the number of this replay of jit function `program` (an interned
  // "jit(name)"), 1 for the first since start() or clear(), and whether that one is profiled.
  uint64_t next_replay(const char* program);
  bool sampled(uint64_t replay) const {
    return (replay - 1) % sample_replays_.load(std::memory_order_relaxed) == 0;
  }

  void start(const Options& options);
  void stop();
  void clear();
  Counters counters() const;
  std::vector<Event> events() const;
  // For subscribers: the current ring and its head, and a read from a ticket of `ring` (from
  // the start of the current one when the ring was replaced since).
  const void* head(uint64_t& head) const;
  uint64_t read(const void*& ring, uint64_t from, std::vector<Event>& out, uint64_t& missed,
                size_t max) const;

  // Runtimes register their profiler; flush() and poll() reach them through here.
  int add_runtime(DeviceProfiler* profiler, RuntimeLanes lanes);
  // Returns whether it was the last live one.
  bool remove_runtime(DeviceProfiler* profiler);
  void set_clock(int runtime, const std::string& clock);
  std::vector<RuntimeLanes> lanes() const;
  void for_each_profiler(const std::function<void(DeviceProfiler&)>& fn);

  // Where stop() and runtime destruction write the trace; "" for nowhere.
  std::string trace_path() const;
  // Writes the trace to trace_path() when there is one; errors go to stderr (it runs in
  // destructors).
  void write_trace_if_asked();
  // Why the last write_trace_if_asked() failed; "" when it did not.
  std::string trace_error() const;
  // MESHVK_PROFILE / MESHVK_TRACE, read once when the first runtime is created.
  void start_from_environment();
  // With MESHVK_PROFILE=1: summarize() to stderr, when the last live runtime has been destroyed
  // and events came in since the previous summary.
  void print_summary_if_asked();

 private:
  Recorder() = default;
  std::atomic<Ring*> ring_{nullptr};
  std::vector<std::unique_ptr<Ring>> rings_;  // replaced rings stay: a producer may still hold one
  std::atomic<uint64_t> first_ticket_{0};     // events before it were cleared
  std::atomic<uint64_t> span_ids_{1};
  std::atomic<uint64_t> flow_ids_{1};
  std::atomic<uint32_t> sample_replays_{1};
  std::mutex replays_mutex_;                           // innermost, like info_mutex_
  std::unordered_map<const char*, uint64_t> replays_;  // replays so far, per jit function

  // Neither lock is taken on the submission path. live_mutex_ is held while calling into a
  // profiler, which takes its runtime's mutex: never the other way round. info_mutex_ is
  // innermost: nothing is locked while it is held.
  mutable std::mutex live_mutex_;
  std::vector<DeviceProfiler*> live_;
  mutable std::mutex info_mutex_;
  std::string trace_path_;
  std::string trace_error_;
  std::string environment_trace_;  // MESHVK_TRACE: the trace path when start() names none
  bool environment_read_ = false;
  bool environment_summary_ = false;  // MESHVK_PROFILE=1
  uint64_t summarized_head_ = 0;      // the ring's head at the last summary printed
  int next_runtime_ = 1;
  std::vector<RuntimeLanes> lanes_;  // every runtime seen, alive or not
};

}  // namespace meshvk::profile

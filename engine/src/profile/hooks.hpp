#pragma once
// What the engine's other layers call. Each hook is one line at its call site and, while
// profiling is off, costs one branch: on() or a null slice pointer.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "profile/clock.hpp"
#include "profile/device_profiler.hpp"
#include "profile/recorder.hpp"

namespace meshvk::profile {

// What the current thread is running, attached to the spans it records.
struct Context {
  const char* program = "";     // "jit(f)"
  const char* op = "";          // the program op
  const char* collective = "";  // "all_gather(one_shot)"
  const char* rule = "";        // the running collective's provenance (Span::rule); OpScope restores it
  bool muted = false;           // in a jit replay that Options::sample_replays leaves out
};
Context& context();

// Whether the current thread records profile events: profiling is on and it is not in an
// unsampled replay.
inline bool recording() {
  return on() && !context().muted;
}

// Where a copy reads from: a buffer written by submission `value` of stream `timeline`.
struct From {
  int timeline = -1;
  uint64_t value = 0;
};

// A device span around the commands recorded in its scope: a timestamp before and after.
// `slice` is Recording::profile.get(): null while profiling is off.
class DeviceSpan {
 public:
  DeviceSpan(Slice* slice, Kind kind, std::string_view name, uint64_t bytes = 0, uint64_t flops = 0)
      : slice_(slice) {
    if (slice_) [[unlikely]]
      index_ = slice_->open(kind, name, bytes, flops, -1, 0);
  }
  // A copy of `bytes` reading another device's buffer: a transfer the trace links to its source.
  DeviceSpan(Slice* slice, std::string_view name, uint64_t bytes, const From& from)
      : slice_(slice) {
    if (slice_) [[unlikely]]
      index_ = slice_->open(Kind::copy, name, bytes, 0, from.timeline, from.value);
  }
  ~DeviceSpan() {
    if (slice_) [[unlikely]]
      slice_->close(index_);
  }
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;

 private:
  Slice* slice_;
  size_t index_ = 0;
};

// A host span on the runtime's host lane covering its scope.
class HostSpan {
 public:
  HostSpan(DeviceProfiler& profiler, const char* name, int peer = -1, uint64_t value = 0)
      : profiler_(profiler), name_(name), peer_(peer), value_(value) {
    if (recording()) [[unlikely]]
      start_ = now_ns();
  }
  ~HostSpan() {
    if (start_) [[unlikely]]
      profiler_.host_span(name_, start_, now_ns(), peer_, value_);
  }
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  DeviceProfiler& profiler_;
  const char* name_;
  int peer_;
  uint64_t value_;
  int64_t start_ = 0;
};

// A jit trace or replay: tags what runs in its scope with the program "jit(<name>)" and draws a
// "trace" or "replay" host span around it.
class JitScope {
 public:
  JitScope(DeviceProfiler& profiler, const std::string& name, bool trace);
  ~JitScope();
  JitScope(const JitScope&) = delete;
  JitScope& operator=(const JitScope&) = delete;

 private:
  DeviceProfiler& profiler_;
  const char* saved_ = nullptr;
  int64_t start_ = 0;
  const char* what_ = "";
  uint64_t replay_ = 0;  // the replay's number (Options::sample_replays); 0 for a trace
  bool was_muted_ = false;
};

// Tags the device work recorded in its scope with a program op ("matmul", "psum", ...).
class OpScope {
 public:
  explicit OpScope(std::string_view op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* saved_ = nullptr;
  const char* saved_rule_ = nullptr;
};
// While profiling: the provenance of the collective the current op runs (Span::rule), until the
// enclosing OpScope ends.
void set_rule(std::string_view rule);

// A collective: every recording begun in its scope is one step of it, drawn as a span named
// "<name>(<algorithm>)" (or "<name>") around the step's copies and kernels.
class CollectiveScope {
 public:
  explicit CollectiveScope(const char* name, const char* algorithm = nullptr);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  const char* saved_ = nullptr;
};

// Around vkQueueSubmit: reads back what finished on the device, notes what the submission
// will timestamp, and draws the "submit" host span.
class SubmitHook {
 public:
  SubmitHook(DeviceProfiler& profiler, int device, VkCommandBuffer cb, uint64_t signal,
             std::span<const uint64_t> need)
      : profiler_(profiler), device_(device), signal_(signal) {
    if (recording()) [[unlikely]] {
      start_ = now_ns();
      if (cb) profiler.submitting(device, cb, signal, need);
    }
  }
  ~SubmitHook() {
    if (start_) [[unlikely]]
      profiler_.host_span("submit", start_, now_ns(), profiler_.device_of(device_), signal_);
  }
  SubmitHook(const SubmitHook&) = delete;
  SubmitHook& operator=(const SubmitHook&) = delete;

 private:
  DeviceProfiler& profiler_;
  int device_;
  uint64_t signal_;
  int64_t start_ = 0;
};

// Program::replay, recording the refresh of `device` (submitted next, with timeline value
// `signal`; it runs after the previous replay and before this one): saves the previous run's
// timestamps of each of the program's `captured` submissions on that device. Runs while
// profiling is off too, as long as a run is unsaved, so no run's ticks are overwritten unseen.
// `on_device(timeline)` says whether a captured submission's stream belongs to that device.
template <class Submissions, class OnDevice>
void save_replayed(DeviceProfiler& profiler, VkCommandBuffer cb, int device, uint64_t signal,
                   const Submissions& captured, const OnDevice& on_device) {
  if (!profiler.saving()) [[likely]]
    return;
  for (const auto& s : captured)
    if (on_device(s.timeline)) profiler.save(cb, device, signal, s.cb);
}

// A host wait on a device's timeline: the "wait" host span (which device, which value, how
// long), then a read-back of what finished meanwhile.
class WaitHook {
 public:
  WaitHook(DeviceProfiler& profiler, int device, uint64_t value)
      : profiler_(profiler), device_(device), value_(value) {
    if (recording()) [[unlikely]]
      start_ = now_ns();
  }
  ~WaitHook();
  WaitHook(const WaitHook&) = delete;
  WaitHook& operator=(const WaitHook&) = delete;

 private:
  DeviceProfiler& profiler_;
  int device_;
  uint64_t value_;
  int64_t start_ = 0;
};

}  // namespace meshvk::profile

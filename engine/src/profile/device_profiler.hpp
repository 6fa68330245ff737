#pragma once
// Device timestamps for one runtime's virtual devices. Every recording made while profiling gets
// a Slice: timestamp queries taken from its device's pools, written around each dispatch, copy
// and collective step. When the submission's timeline value is reached (noticed on later
// submits and waits, never by stalling a submit) the ticks are read back, put on the host clock
// and published as spans, with flows from the spans that produced what was copied.
//
// Captured (jit) command buffers are submitted again on every replay, resetting and writing the
// same queries. The latest run of one is read straight from its pools; an earlier run is saved
// first by the next replay: the command buffer that refreshes a device's inputs (which runs
// after the previous replay finished and before this one's captured buffers) also copies the
// queries of that device's captured buffers into a host-visible slot. No extra command buffer
// or submission is needed, which matters on lavapipe, where each costs ~9 us. A loop body runs
// the same buffers again within one replay (once per iteration): there a small command buffer,
// in the same submission right before the next run, saves the previous one
// (RuntimeState::save_previous_run), so no iteration's spans are lost.
//
// A recording that records no span writes no timestamp: on lavapipe the first timestamp of a
// submission is what costs (~10 us: its queries live in the rasterizer's scene, which then has
// to be flushed through the worker threads at the end of the submission). So replays on lavapipe
// go out as one submission (RuntimeState::resubmit_merged) and pay it once.
#include <vulkan/vulkan.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meshvk/profile.hpp"
#include "profile/clock.hpp"
#include "profile/query_pool.hpp"
#include "vk/device.hpp"
#include "vk/sync.hpp"

namespace meshvk::profile {

inline constexpr uint32_t kBlockQueries =
    64;  // queries per pool; a recording takes more as it grows
inline constexpr uint32_t kMaxBlocks =
    1024;  // per device: beyond that spans are dropped and counted
// Saved runs of one captured buffer not yet read: how many replays the device may run behind
// the host before runs are dropped (counted in dropped_spans). 64 was passed within 20 s of a
// 3,000-step scenario on lavapipe while the inspector drew; kSlotsPerBuffer runs share one
// host-visible buffer, so that a device far behind costs few memory allocations.
inline constexpr uint32_t kMaxSlots = 1024;
inline constexpr uint32_t kSlotsPerBuffer = 16;
inline constexpr uint32_t kNoQuery = ~0u;

class DeviceProfiler;

// A span being recorded: the queries that will hold its start and end ticks.
struct SpanRecord {
  const char* name = "";
  const char* op = "";
  const char* rule = "";
  Kind kind = Kind::kernel;
  uint32_t begin = kNoQuery, end = kNoQuery;
  uint64_t bytes = 0, flops = 0;
  int src_device = -1;     // a copy reading another device's buffer ...
  uint64_t src_value = 0;  // ... written by that device's submission with this timeline value
};

// The timestamps of one recording.
class Slice {
 public:
  Slice(DeviceProfiler& owner, int device, VkCommandBuffer cb);
  ~Slice();  // returns its query pools to the profiler
  Slice(const Slice&) = delete;
  Slice& operator=(const Slice&) = delete;

  // Opens a span, writing its start timestamp; returns its index for close().
  size_t open(Kind kind, std::string_view name, uint64_t bytes, uint64_t flops, int src_device,
              uint64_t src_value);
  void close(size_t span);

 private:
  friend class DeviceProfiler;
  // Writes a timestamp; returns its query, or kNoQuery when the device has no pool left.
  uint32_t stamp(VkPipelineStageFlagBits stage);
  VkQueryPool pool_of(uint32_t query) const;

  DeviceProfiler& owner_;
  int device_;
  VkCommandBuffer cb_;
  std::vector<uint32_t> blocks_;  // indices of the device's query pools this recording uses
  uint32_t used_ = 0;             // queries written so far
  std::vector<SpanRecord> spans_;
  const char* program_ = "";
  const char* op_ = "";
  const char* rule_ = "";
  const char* collective_ = "";  // a collective step: one more span around the whole recording
  int64_t recording_since_ = 0;  // host clock at begin, for the "record" host span

  // Captured buffers only.
  bool captured_ = false;
  uint64_t submissions_ = 0;
  uint64_t in_pools_ = 0;  // timeline value of the run whose ticks only the pools hold; 0: none
  // Host-visible copies of earlier runs' ticks, kSlotsPerBuffer runs to a buffer.
  std::vector<std::unique_ptr<vk::Buffer>> slots_;
  std::vector<char> slot_used_;  // per slot
  uint64_t slot_bytes() const { return uint64_t{used_} * 8; }
  uint64_t slot_offset(int k) const { return (k % kSlotsPerBuffer) * slot_bytes(); }
  const vk::Buffer& slot_buffer(int k) const { return *slots_[k / kSlotsPerBuffer]; }
};

class DeviceProfiler {
 public:
  struct Setup {
    VkInstance instance;
    vk::Device& device;
    std::recursive_mutex& mutex;  // the runtime's: guards every hook below
    std::string platform;
    // Per stream (devices' compute streams, then their transfer streams): its timeline
    // semaphore, the queue it submits to and its virtual device. Lanes are numbered like them.
    struct Stream {
      const vk::TimelineSemaphore* timeline;
      vk::Queue* queue;
      int device;
      bool transfer;
    };
    std::vector<Stream> streams;
  };
  explicit DeviceProfiler(Setup setup);
  ~DeviceProfiler();  // reads back what is in flight and writes the trace when one is asked for
  DeviceProfiler(const DeviceProfiler&) = delete;
  DeviceProfiler& operator=(const DeviceProfiler&) = delete;

  int runtime() const { return runtime_; }
  int device_of(int lane) const { return lane < 0 ? lane : lanes_[lane].device; }

  // Hooks, called with the runtime's mutex held.
  // A recording for stream `lane` begins: its slice, with the start timestamp written; null when
  // timestamps are not available.
  std::shared_ptr<Slice> begin(int lane, VkCommandBuffer cb);
  // A recording ends (before vkEndCommandBuffer): the end timestamp and the "record" host span.
  void close(const std::shared_ptr<Slice>& slice, bool captured);
  // A command buffer is about to be submitted to stream `lane` with `signal`, waiting for
  // need[l] from each stream l.
  void submitting(int lane, VkCommandBuffer cb, uint64_t signal, std::span<const uint64_t> need);
  // Whether some captured buffer's last run is still only in its query pools.
  bool saving() const { return unsaved_ > 0; }
  // Whether `captured`'s last run is still only in its query pools: a run again (a loop body's
  // next iteration in the same replay) would overwrite it unless save() copies it first.
  bool unsaved(VkCommandBuffer captured) const;
  // Records into `cb`, a recording on stream `lane` that will be submitted with timeline value
  // `signal` and runs after the last run of `captured` finished and before its next one, a
  // copy of that last run's ticks into a host-visible slot.
  void save(VkCommandBuffer cb, int lane, uint64_t signal, VkCommandBuffer captured);
  // A captured command buffer is freed.
  void release(VkCommandBuffer cb);
  // Reads back finished submissions if the runtime is not busy on another thread.
  void poll_if_idle();

  void host_span(const char* name, int64_t start, int64_t end, int peer, uint64_t value);

  // Not hooks: they take the runtime's mutex themselves.
  void poll();   // finished submissions, without waiting
  void flush();  // every submission in flight, waiting for them

 private:
  friend class Slice;
  struct Submitted {
    uint64_t value;
    std::shared_ptr<Slice> slice;
    bool replay;  // a captured buffer submitted again: sources are found through `waits`
    std::vector<std::pair<int, uint64_t>> waits;  // other devices' timeline values it waited for
    int slot = -1;          // where save() copied the ticks; -1: still in the query pools
    int saved_on = -1;      // the lane whose ...
    uint64_t saved_by = 0;  // ... timeline value marks that copy done
    bool lost = false;      // run again before save() copied its ticks: dropped
  };
  struct PendingFlow {
    int src_device;
    uint64_t src_value;
    uint64_t to;
    FlowKind kind;
  };
  struct Lane {
    const vk::TimelineSemaphore* timeline;
    int queue;
    int device;
    bool transfer;
    std::vector<std::unique_ptr<QueryPool>> blocks;
    std::vector<uint32_t> free_blocks;
    std::deque<Submitted> in_flight;
    // (timeline value, id of the submission's last span): where flows from this device start.
    std::deque<std::pair<uint64_t, uint64_t>> history;
  };

  void setup_clock();
  uint32_t take_block(int device);
  void give_back(Slice& slice);
  int free_slot(Slice& slice);
  Submitted* find(int device, uint64_t value);
  void poll_device(int device);  // callers resolve flows after polling the lanes they poll
  bool publish(int device, const Submitted& s);
  void resolve_flows();

  vk::Device& device_;
  std::recursive_mutex& mutex_;
  VkInstance instance_;
  int runtime_;
  uint32_t valid_bits_;
  VkPipelineStageFlagBits end_stage_ = VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT;  // where spans end
  std::vector<Lane> lanes_;
  std::unique_ptr<Calibrator> calibrator_;
  ClockMap clock_;
  int64_t calibrated_at_ = 0;
  std::shared_ptr<Slice> staged_;  // closed and about to be submitted (not captured)
  int unsaved_ = 0;                // captured runs whose ticks only their pools hold
  std::unordered_map<VkCommandBuffer, std::shared_ptr<Slice>> captured_;
  std::vector<PendingFlow> flows_;
  std::vector<uint64_t> ticks_;  // scratch for read-back
  std::vector<int> sent_from_;   // scratch for publish(): lanes a span received a transfer from
};

}  // namespace meshvk::profile

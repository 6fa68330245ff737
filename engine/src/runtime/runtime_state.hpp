#pragma once
// Internal side of meshvk::Runtime: the adapter split into virtual devices, each with a memory
// pool, a command stream on one of the adapter's queues and a timeline semaphore, and, where the
// adapter has queues to spare, a transfer stream on a queue of its own for the copies of
// collectives, so they run while the device's kernels do.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "meshvk/runtime.hpp"
#include "runtime/liveness.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/staged_link.hpp"
#include "vk/device.hpp"
#include "vk/external_memory.hpp"
#include "vk/instance.hpp"
#include "vk/pipeline.hpp"
#include "vk/sync.hpp"

namespace meshvk::profile {  // profile hook
class DeviceProfiler;
class Slice;
}  // namespace meshvk::profile

namespace meshvk::detail {

// "Timeline `timeline` has finished its submission number `value`". Timelines 0..n-1 are the
// devices' compute streams, n..2n-1 their transfer streams (when the runtime has them).
struct Fence {
  int timeline = -1;
  uint64_t value = 0;
  bool none() const { return timeline < 0 || value == 0; }
  bool operator==(const Fence&) const = default;
};

// Commands being recorded for one virtual device, with what they must wait for and what must
// stay alive until they finish.
struct Recording {
  int device = 0;
  int timeline = 0;       // the stream it is submitted to
  bool captured = false;  // recorded while a Capture is active: kept for replay
  // For a device of another process (multi-process runtimes): nothing is recorded (cb is null)
  // and submitting it only counts, on a peer timeline, what that process submits there.
  bool remote = false;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  std::vector<Fence> waits;
  std::vector<std::shared_ptr<const void>> keep_alive;
  std::shared_ptr<profile::Slice> profile;  // profile hook: its timestamps; null while off
  // What the ops recorded into it cost, as ids of the trace's cost events (kernels/cost.hpp):
  // kept with a captured submission, so Lowered::estimate can replay the program's graph.
  std::vector<uint32_t> work;
  // It writes a value that depends on nothing (an iota, a fill, host values) into buffers nothing else
  // writes: captured, it runs while traced and a program's replays leave it out (trace_only),
  // its buffers keeping what the trace wrote. A jit step's index constants and masks cost no
  // dispatch per replay (on 8 virtual devices, 8 each).
  bool constant = false;
  // Waits on work another device of the adapter did in this one's stead (a replica computed once
  // and copied: graph/pending_pieces.cpp, take_ops.cpp, linalg_ops.cpp): Lowered::estimate leaves
  // them out, as separate hardware would compute its own replica.
  std::vector<Fence> replica_waits;
  // Work the host does in place of the command buffer (a stream with host_run: transfers between
  // processes on CPU adapters): the communication thread runs it once every wait is reached,
  // then signals the value from the host. Kept with the command buffer for replays.
  std::function<void()> host_work;
  void wait_for(const Fence& f) {
    if (!f.none()) waits.push_back(f);
  }
  void wait_for_replica(const Fence& f) {
    wait_for(f);
    if (!f.none()) replica_waits.push_back(f);
  }
};

// One command stream of a virtual device: a command pool, a queue and its timeline semaphore.
struct Stream {
  Stream(vk::Device& device, vk::Queue& queue, int virtual_device, bool transfer, int adapter);
  vk::Queue& queue;
  int device;     // the virtual device it belongs to
  bool transfer;  // the device's transfer stream
  int adapter;    // the runtime's adapter (VkDevice) it runs on
  // Of a device of another process: nothing goes to its queue; its values are that process's,
  // published in the node's shared memory or sent as messages (RuntimeState::timeline_value).
  bool remote = false;
  // Its submissions' work runs on the host (Recording::host_work), by the communication thread,
  // never on the queue: a peer timeline where device memory is host memory and the node's
  // shared memory holds the rings (RuntimeState::host_transfers).
  bool host_run = false;
  vk::CommandPool pool;
  vk::TimelineSemaphore semaphore;
  uint64_t last_submitted = 0;
  struct InFlight {
    uint64_t value;
    VkCommandBuffer cb;
    std::vector<std::shared_ptr<const void>> keep_alive;
  };
  std::deque<InFlight> in_flight;
  std::vector<VkCommandBuffer> idle;
  // The latest submissions, for naming what a timed-out wait was stuck on.
  struct Submitted {
    uint64_t value;
    const char* activity;
    std::vector<Fence> waits;
  };
  std::deque<Submitted> recent;
  // Several adapters: the last value handed to vkQueueSubmit (or signalled from the host), and
  // the submissions held on the host, in order, until what they wait for on other VkDevices is
  // reached (see RuntimeState::communicate). Guarded by RuntimeState::held_mutex_.
  uint64_t queued = 0;
  struct Held {
    VkCommandBuffer cb;
    std::vector<uint64_t> need;  // per timeline
    uint64_t signal;
    std::shared_ptr<const std::function<void()>> host_work;  // host_run streams: what to run
  };
  std::deque<Held> held;
};

// What the current thread is recording ("all_gather(ring)"), or null: timeout errors name the
// submission a device is stuck on by it.
const char*& current_activity();
// A lasting copy of an activity's text, for activities built at run time ("all_reduce(ring),
// reduce-scatter step 2 of 7").
const char* intern_activity(const std::string& text);
// The cost event (kernels/cost.hpp's id, 0: none) of the collective the current thread is
// running: every submission it makes while a trace listens carries it (Lowered::estimate).
uint32_t& current_collective_work();
class ActivityScope {
 public:
  explicit ActivityScope(const char* activity) : saved_(current_activity()) {
    current_activity() = activity;
  }
  ~ActivityScope() { current_activity() = saved_; }
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  const char* saved_;
};

class RuntimeState;
class DeviceBuffer;

// Everything submitted while a jit trace runs: the command buffers in submission order with the
// fences they waited for and signalled, and every buffer they touched, kept for replay.
struct Capture {
  struct Submission {
    int timeline;
    VkCommandBuffer cb;
    std::vector<Fence> waits;
    uint64_t signal;
    const char* activity;
    // Whether this capture's program releases the command buffer: not when an inner capture (a
    // loop body's) recorded it, or a loop submitted its body again.
    bool owned = true;
    // Ran once while traced, and a replay leaves it out: a loop traced only to be recorded (scan's
    // backward pass, traced during the forward pass with zero cotangents) whose every real
    // iteration is a later iterate(). A replay's waits on it become waits on its stream's previous
    // submission: nothing reads what it wrote before the loop writes it again.
    bool trace_only = false;
    // Ids of the cost events of the ops recorded into it (Recording::work), and of the
    // collective it belongs to (current_collective_work()), for Lowered::estimate.
    std::vector<uint32_t> work;
    std::vector<Fence> replica_waits;  // Recording::replica_waits
  };
  std::vector<Submission> submissions;
  // Each captured command buffer's work ids: a loop's resubmitted body costs what it did.
  std::map<VkCommandBuffer, std::vector<uint32_t>> work_of;
  std::vector<std::shared_ptr<const void>> keep_alive;
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  // The buffers allocated while it was active (in `buffers` too, so none is freed while the
  // program lives): what the program itself takes from the pools (its memory analysis).
  std::vector<const DeviceBuffer*> allocated;
  std::vector<uint64_t> start_values;  // each timeline's last submitted value when the trace began
  // Transfers between processes: the ring range each staged its bytes in, its send and its
  // receive. A replay writes the same range again, after whatever read it since.
  struct RingUse {
    int src_process, dst_process;
    uint64_t offset, bytes;
    Fence sent, received;
    const uint8_t* from = nullptr;  // RuntimeState::note_send's
  };
  std::vector<RingUse> ring_uses;
  void retain(std::shared_ptr<DeviceBuffer> buffer);
};

// A range of a virtual device's memory holding one array piece. It tracks the submission that
// wrote it and the last submission of each device that used it, so that its memory returns to
// the pool only after all of them finished.
class DeviceBuffer : public std::enable_shared_from_this<DeviceBuffer> {
 public:
  DeviceBuffer(std::shared_ptr<RuntimeState> runtime, int device, runtime::Allocation allocation,
               uint64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  int device() const { return device_; }
  VkBuffer vk_buffer() const { return allocation_.buffer; }
  uint64_t offset() const { return allocation_.offset; }
  uint64_t bytes() const { return bytes_; }
  // The allocation's full size: bytes() rounded up to the pool's alignment, so vector loads and
  // stores may run to a multiple of 16 bytes without touching another buffer.
  uint64_t capacity() const { return allocation_.size; }

  // The submission that wrote the contents; readers wait for it.
  Fence ready() const { return ready_; }
  void written_by(const Fence& f);
  void used_by(const Fence& f);
  // Per timeline, the last submission that read or wrote it (0: none).
  const std::vector<uint64_t>& last_use() const { return last_use_; }

 private:
  std::shared_ptr<RuntimeState> runtime_;
  int device_;
  runtime::Allocation allocation_;
  uint64_t bytes_;
  Fence ready_;
  std::vector<uint64_t> last_use_;  // per timeline
  friend class RuntimeState;
};

class RuntimeState : public std::enable_shared_from_this<RuntimeState> {
 public:
  explicit RuntimeState(const RuntimeOptions& options);
  ~RuntimeState();

  int num_devices() const { return num_devices_; }
  // Several processes (meshvk/distributed.hpp): the devices of every process, process-major;
  // this process holds local_device_count() of them from first_local_device(). Work for another
  // process's device is skipped here (a remote Recording), except what moves bytes between
  // processes (collectives/transport.hpp), which every process counts alike.
  bool multi_process() const { return processes_ > 1; }
  int process_index() const { return process_; }
  int process_count() const { return processes_; }
  int local_device_count() const { return local_count_; }
  int first_local_device() const { return process_ * local_count_; }
  int process_of(int device) const { return device / local_count_; }
  bool is_local(int device) const { return process_of(device) == process_; }
  // The streams of a device's transfers to other processes (sends) and from them (receives).
  // Every process runs the same program, so every process counts the same submissions on them,
  // and one process can wait for a value another reaches. Two, not one: a send held behind a
  // receive that waits for the peer's send would make the two processes take turns.
  int peer_timeline(int device) const { return peer_base_ + device; }
  int peer_receive_timeline(int device) const { return peer_base_ + num_devices() + device; }
  bool is_peer_timeline(int timeline) const { return peer_base_ >= 0 && timeline >= peer_base_; }
  // The value a timeline has reached: its semaphore's here, what its process published there
  // (shared) or last told this one (staged).
  uint64_t timeline_value(int timeline) const;
  // Bytes moving between processes are staged in a ring per ordered pair of processes, of host
  // memory every VkDevice imports by pointer: the node's shared memory (shared), or each
  // process's own, the bytes shipped as MPI messages (staged: between nodes, or forced by
  // MESHVK_PROCESS_TRANSPORT=staged; runtime/staged_link.hpp).
  enum class BetweenProcesses { shared, staged };
  BetweenProcesses between_processes() const { return between_processes_; }
  uint64_t ring_bytes() const { return ring_bytes_; }
  // Transfers between processes run on the host (the communication thread copies into and out of
  // the shared ring and folds there), not as copy and fold commands: where every adapter is a
  // CPU (device memory is host memory) and the rings are the node's shared memory. Each hop then
  // costs no queue submission, no queue thread and no poll of its completion.
  // MESHVK_HOST_TRANSFERS=0 keeps the commands.
  bool host_transfers() const { return host_transfers_; }
  // Host transfers: the first byte of a local buffer's memory, and the start of the ring from
  // `src_process` to `dst_process` in the node's shared memory.
  uint8_t* host_bytes(const DeviceBuffer& b);
  uint8_t* ring_memory(int src_process, int dst_process);
  // Host transfers where the node's processes map each other's device memory
  // (runtime/peer_memory.hpp; MESHVK_PEER_MAPPING=0 turns it off): a piece of one region goes as
  // where it lies in the sender's buffer, which the receiver reads in place. Every process
  // agrees on it, so both sides of a transfer record the same ring use.
  bool peer_mapping() const { return peer_mapping_; }
  // Where `bytes` at `offset` of a local buffer's VkBuffer lie for the node's other processes.
  std::optional<runtime::PeerPiece> peer_piece(const DeviceBuffer& b, uint64_t offset,
                                               uint64_t bytes);
  // The first byte of a piece `process` sent (communication thread only).
  const uint8_t* peer_bytes(int process, const runtime::PeerPiece& piece);
  // Staged: the local send on peer `timeline` that will signal `value` copies [offset, offset +
  // bytes) of the ring to `dst_process`; the communication thread ships it once the value is
  // reached. Called before that submission (its value is then last_submitted + 1), so that no
  // progress message of the timeline overtakes its data. Nothing with the shared transport.
  // `from`, where not null, is where the bytes lie in this process's memory (a buffer's own,
  // see sendable_bytes): shipped from there, they skip the ring.
  void note_send(int timeline, uint64_t value, int dst_process, uint64_t offset, uint64_t bytes,
                 const uint8_t* from = nullptr);
  // Staged, where device memory is host memory (lavapipe): `bytes` at `offset` of the local buffer
  // `b` as the communication thread may send them, once what wrote them is done; else null
  // (the bytes go through the ring). MESHVK_STAGED_ZERO_COPY=0 turns it off.
  const uint8_t* sendable_bytes(const DeviceBuffer& b, uint64_t offset, uint64_t bytes);
  // The ring from `src_process` to `dst_process` as a buffer of `virtual_device`'s VkDevice, and
  // where the ring starts in it.
  VkBuffer ring_view(int virtual_device, int src_process, int dst_process, uint64_t& start);
  // The next `bytes` of that ring (at most ring_bytes() / 2), identically on every process, and
  // the receives that must have read what was there before (waits for the sender).
  struct RingRange {
    uint64_t offset = 0;
    std::vector<Fence> waits;
  };
  RingRange reserve_ring(int src_process, int dst_process, uint64_t bytes);
  // Every process's `bytes` bytes, in process order (all give the same size): host data only.
  // `what` names the exchange when a process is elsewhere or sends another size.
  std::vector<uint8_t> exchange(const void* data, uint64_t bytes, const std::string& what);
  // The receives that still read [offset, offset + bytes) of that ring (no longer tracked after).
  std::vector<Fence> ring_readers(int src_process, int dst_process, uint64_t offset, uint64_t bytes);
  // The receive that reads [offset, offset + bytes) of that ring.
  void ring_read_by(int src_process, int dst_process, uint64_t offset, uint64_t bytes,
                    const Fence& receive);
  // Compute streams first (timeline d is device d's), then transfer streams, if any.
  int num_timelines() const { return static_cast<int>(streams_.size()); }
  int device_of(int timeline) const { return streams_[timeline]->device; }
  // Whether each device has a transfer stream of its own (else transfer work goes on its
  // compute stream); see RuntimeOptions::transfer_queue.
  bool has_transfer_streams() const { return has_transfer_streams_; }
  int transfer_timeline(int device) const {
    return has_transfer_streams() ? num_devices_ + device : device;
  }
  const std::string& platform() const { return platform_; }
  const std::string& adapter_name() const { return adapters_[0]->adapter().name; }
  // The first adapter's VkDevice, whose properties (limits, CPU or GPU) choose kernel variants
  // for every device; device_for names the VkDevice a virtual device's commands go to.
  vk::Device& device() { return *adapters_[0]; }
  vk::Device& device_for(int virtual_device) { return *adapters_[adapter_of_[virtual_device]]; }
  const VkPhysicalDeviceLimits& device_limits() const { return limits_; }
  // Several adapters in one process (RuntimeOptions::adapters): each is a VkDevice of its own
  // holding a contiguous share of the virtual devices.
  int num_adapters() const { return static_cast<int>(adapters_.size()); }
  int adapter_of(int virtual_device) const { return adapter_of_[virtual_device]; }
  // How bytes move between devices of different adapters: through device memory both VkDevices
  // import (the same physical device: an opaque fd), or staged through host memory both import
  // by pointer. Chosen at creation (MESHVK_ADAPTER_TRANSPORT=shared|staged forces one).
  enum class CrossAdapter { shared, staged };
  CrossAdapter cross_adapter() const { return cross_adapter_; }
  // `buffer`'s memory as a VkBuffer of `virtual_device`'s VkDevice, at the same offset (shared:
  // the block imported there once). Its own buffer on the same adapter.
  VkBuffer buffer_on(const DeviceBuffer& buffer, int virtual_device);
  // Host memory both devices' VkDevices see as buffers (staged): view(0) on `src_device`'s,
  // view(1) on `dst_device`'s. Reused once nothing queued holds it any more (fresh pages and
  // imports cost more than the copies).
  std::shared_ptr<vk::HostBuffer> host_staging(int src_device, int dst_device, uint64_t bytes);
  const vk::Instance& instance() const { return *instance_; }
  std::vector<DeviceInfo> devices();

  // Serializes every use of the runtime's Vulkan objects by meshvk's entry points.
  std::recursive_mutex& mutex() { return mutex_; }

  // A buffer of `bytes` on `device`; throws Error naming the device, the request, what the device
  // and its adapter's devices hold, the budget in force and how to raise it when it does not
  // fit, after waiting for memory still in use by the GPU and letting go of spare blocks.
  std::shared_ptr<DeviceBuffer> allocate(int device, uint64_t bytes);

  // A recording on the device's compute stream, or on its transfer stream (the compute stream
  // when it has none), which may hold copies and fills but no dispatch.
  Recording begin(int device);
  Recording begin_transfer(int device);
  // A recording on the device's send or receive timeline (multi-process runtimes only).
  Recording begin_peer(int device) { return begin_on(peer_timeline(device)); }
  Recording begin_peer_receive(int device) { return begin_on(peer_receive_timeline(device)); }
  // Submits the recording; returns the fence its completion signals.
  Fence submit(Recording&& recording);
  // Waits on the host; throws Error naming the device and `during` on timeout.
  void wait(const Fence& fence, const std::string& during);
  void wait_all(const std::string& during);
  // wait() with several processes: ends the job when a peer died or the wait times out.
  void wait_across_processes(const Fence& fence, const std::string& during);
  bool reached(const Fence& fence);
  // Signals the stream's next timeline value from the host, as if an empty submission ran:
  // what a test uses to release a device it made wait for a signal that never comes. Only for a
  // stream with nothing pending (a host signal must stay below every pending one): else Error.
  Fence signal_from_host(int timeline);

  // The compute pipeline cached under `key` for `virtual_device`'s VkDevice, built by `make`
  // (on device_for(virtual_device)) the first time that VkDevice asks for it.
  vk::ComputePipeline& pipeline(int virtual_device, const std::string& key,
                                const std::function<std::unique_ptr<vk::ComputePipeline>()>& make);
  // A host-visible buffer of `virtual_device`'s VkDevice for uploads and read-backs, outside
  // every device budget.
  std::shared_ptr<vk::Buffer> staging(int virtual_device, uint64_t bytes);

  uint64_t wait_timeout_ns() const { return wait_timeout_ns_; }
  // MESHVK_FAST_MATH=1: generated kernels use the driver's exp, sin, ... (faster, but a few ulp
  // off and different on each adapter) instead of meshvk's math library.
  bool fast_math() const { return fast_math_; }
  // Whether devices of one VkDevice that hold the same piece of a replicated result compute it
  // once, the others copying it (elementwise results, takes, a matmul's packed weight);
  // MESHVK_SPLIT_REPLICAS=0 computes it on each.
  bool splits_replicas() const { return split_replicas_; }
  // Whether kernels on `adapter` use the math library's float64 variants of sin, cos, tan and
  // arctan2 (mathlib.hpp): where it has shaderFloat64, unless MESHVK_MATHLIB_FLOAT64=0 keeps the
  // float-float ones (=1 requires every adapter to have it).
  bool mathlib_float64(const vk::Adapter& adapter) const {
    return adapter.float64 && mathlib_float64_;
  }
  // Compute dispatches recorded so far, over all devices (tests check fusion with it).
  std::atomic<uint64_t> dispatches{0};
  // Pieces of elementwise results computed once for several devices of a VkDevice (every member
  // of such a group counts, the one that computed it included), over all devices.
  std::atomic<uint64_t> shared_pieces{0};

  // While a capture is active, every recording is kept for replay instead of recycled. A
  // capture belongs to the thread that began it (a jit trace): other threads' commands on the
  // same runtime are not captured. Captures nest (a loop body traced inside a jit trace): work
  // submitted is recorded in every active capture of the thread, owned by the innermost.
  void begin_capture(Capture* capture);
  void end_capture();  // the innermost
  // The calling thread's innermost active capture on this runtime, or null.
  Capture* capture() const;
  // All of them, outermost first.
  std::vector<Capture*> captures() const;
  // Submits a captured command buffer again, with new timeline values.
  Fence resubmit(int timeline, VkCommandBuffer cb, const std::vector<Fence>& waits);
  // Several captured command buffers of one timeline in one vkQueueSubmit, in order, each with
  // its waits (which may name earlier entries of the batch); returns their fences.
  struct Resubmission {
    VkCommandBuffer cb;
    std::vector<Fence> waits;
    const char* activity = nullptr;
  };
  std::vector<Fence> resubmit_batch(int timeline, const std::vector<Resubmission>& entries);
  // Whether replays go out as one submission (resubmit_merged): every stream submits to one
  // queue of a CPU adapter, which runs submissions one after another and charges for each
  // (lavapipe: ~20 us of CPU for one that writes a timestamp, as profiled programs do).
  // MESHVK_MERGE_REPLAYS=0 turns it off.
  bool merges_replays();
  // Captured command buffers of any streams as ONE VkSubmitInfo, in the given order, where each
  // entry's waits name work submitted before or an earlier entry: a full memory barrier between
  // consecutive entries stands in for the waits among them, and each stream signals the value of
  // its last entry (its earlier entries' values are reached with it). Returns each entry's fence.
  struct MergedEntry {
    int timeline;
    Resubmission submission;
  };
  std::vector<Fence> resubmit_merged(const std::vector<MergedEntry>& entries);
  std::atomic<uint64_t> merged_replays{0};  // resubmit_merged calls (tests check replays use it)
  std::atomic<uint64_t> captured_secondaries{0};  // recordings captured as secondaries (tests)
  std::atomic<uint64_t> direct_sends{0};  // pieces sendable_bytes let go out of their buffer (tests)
  // Returns a captured command buffer to its stream's pool.
  void release_command_buffer(int timeline, VkCommandBuffer cb);
  // Drops a recording that recorded nothing its waits do not already imply (never submitted).
  void discard(Recording&& r) {
    if (!r.remote && r.cb) release_command_buffer(r.timeline, r.cb);
  }
  // Keeps `objects` alive until every timeline t has reached `values[t]` (shorter: the rest 0):
  // what a waiter that gave up (a timeout) hands over instead of freeing what queued commands
  // still use. Released when a later call finds them reached, at the latest with the runtime.
  void keep_until(std::vector<uint64_t> values, std::vector<std::shared_ptr<const void>> objects);
  // A device's pool usage: in use now, the most since the last reset_peak_memory, its budget.
  struct PoolStats {
    uint64_t in_use = 0, peak = 0, limit = 0;
  };
  PoolStats pool_stats(int device);
  void reset_peak_memory();
  uint64_t last_submitted(int timeline) {
    std::lock_guard lock(mutex_);
    return streams_[timeline]->last_submitted;
  }
  profile::DeviceProfiler& profiler() { return *profiler_; }  // profile hook

 private:
  friend class DeviceBuffer;
  void retire(int device, const runtime::Allocation& allocation, std::vector<uint64_t> last_use);
  void note_captured(const Capture::Submission& s,
                     const std::vector<std::shared_ptr<const void>>& keep_alive);
  void note_resubmitted(int timeline, const std::vector<Resubmission>& entries,
                        const std::vector<Fence>& fences);
  void reclaim(bool block);
  void recycle(Stream& stream);
  std::string budget_error(int device, uint64_t bytes);
  // Device memory (runtime/device_memory.cpp). The budget each device has of its own, if any:
  // MESHVK_MEMORY_PER_DEVICE, else RuntimeOptions::memory_per_device; 0 when the devices of an
  // adapter share its memory (the default).
  struct MemorySetting {
    uint64_t per_device = 0;
    std::string origin;  // "MESHVK_MEMORY_PER_DEVICE=2GiB" or "RuntimeOptions::memory_per_device"
  };
  static MemorySetting memory_setting(const RuntimeOptions& options);
  // A pool per virtual device, drawing on its adapter's AdapterMemory; `local_devices`: per
  // adapter, how many of this process's devices it holds.
  void open_pools(const MemorySetting& setting, const std::vector<int>& local_devices,
                  bool exportable);

  std::recursive_mutex mutex_;
  std::unique_ptr<vk::Instance> instance_;
  std::vector<std::unique_ptr<vk::Device>> adapters_;
  std::vector<int> adapter_of_;  // per virtual device
  VkPhysicalDeviceLimits limits_{};
  CrossAdapter cross_adapter_ = CrossAdapter::shared;
  // Several processes (runtime/processes.cpp).
  int process_ = 0, processes_ = 1, local_count_ = 0;
  int peer_base_ = -1;  // the first peer timeline; -1 with one process
  bool has_transfer_streams_ = false;
  uint64_t ring_bytes_ = 0;
  struct RingUse {
    uint64_t start, end;
    Fence receive;
  };
  struct Ring {
    uint64_t head = 0;
    std::deque<RingUse> uses;
  };
  std::map<std::pair<int, int>, Ring> rings_;  // per (source, destination) process
  BetweenProcesses between_processes_ = BetweenProcesses::shared;
  bool host_transfers_ = false;
  bool peer_mapping_ = false;
  void share_device_memory();  // share_memory's last step: decides peer_mapping_
  std::vector<pid_t> pids_;  // each process's, with peer_mapping_
  std::unique_ptr<runtime::PeerMappings> peer_mappings_;  // communication thread
  // Host transfers: each host_run command buffer's work (Recording::host_work), until the
  // command buffer is reset or released. Guarded by held_mutex_.
  std::unordered_map<VkCommandBuffer, std::shared_ptr<const std::function<void()>>> host_work_;
  bool run_host_work(std::unique_lock<std::mutex>& lock);  // communication thread
  std::optional<BetweenProcesses> forced_between_;  // MESHVK_PROCESS_TRANSPORT
  // Staged: the rings and the messages (before segment_views_, which import its memory).
  std::unique_ptr<StagedLink> link_;
  Liveness* liveness_ = nullptr;  // the process group's, with several processes
  struct SendNote {
    uint64_t value;
    int dst_process;
    uint64_t offset, bytes;
    const uint8_t* from;  // null: the ring's bytes at offset
  };
  std::vector<std::deque<SendNote>> send_notes_;  // per timeline; guarded by held_mutex_
  bool staged_zero_copy_ = true;                  // MESHVK_STAGED_ZERO_COPY
  // Communication thread only: per timeline, the value every other process was told (progress
  // or a send's data), and per timeline and process, what that process was told.
  std::vector<uint64_t> progress_sent_;
  std::vector<uint64_t> progress_told_;
  bool exchange_staged();                         // communication thread, without held_mutex_
  // Per adapter, per process: the process's segment of the node's shared memory imported there
  // (staged: one per adapter, the link's memory).
  std::vector<std::vector<std::unique_ptr<vk::ImportedBuffer>>> segment_views_;
  uint64_t* progress_table(int process) const;  // per timeline, in the process's segment
  void join_processes(int local_devices);       // before the streams are made
  void share_memory();                          // after
  void publish_progress();                      // under held_mutex_
  bool progress_published() const;              // every local value reached is published
  void wait_local_progress(uint64_t timeout_ns);  // until a local stream moves, at most that
  // spin_ns: first looks for that long, yielding the core between looks: host work waiting on
  // another process's value (host transfers) usually gets it within tens of microseconds, and
  // a futex wake on 2 shared cores costs as much (all-reduce of 1 MiB between 2 processes of one
  // device: 127-210 -> 113-122 us with 30 us).
  void wait_for_peers(uint64_t timeout_ns, uint64_t spin_ns = 0);
  uint64_t peer_spin_ns_ = 0;  // MESHVK_PEER_SPIN_US, with host transfers       // until another process publishes, at most that
  void ring_own_doorbell();                       // wakes this process's communication thread
  // The heartbeat (runtime/liveness.hpp): the communication thread publishes this process's
  // beat each period (shared: in its segment, where it also reads the others'; staged: as
  // messages), and says at its end that this process's runtime ended.
  void heartbeat();
  void end_heartbeat();
  std::vector<uint64_t> published_;             // per timeline; guarded by held_mutex_
  std::vector<uint64_t*> tables_;               // per process, in its segment
  bool host_holds() const { return adapters_.size() > 1 || processes_ > 1; }
  // Staged transfers' host memory, per (source adapter, destination adapter); see host_staging.
  std::map<std::pair<int, int>, std::vector<std::shared_ptr<vk::HostBuffer>>> host_staging_;
  std::string platform_;
  int num_devices_ = 0;
  std::vector<std::unique_ptr<runtime::MemoryPool>> pools_;
  std::string memory_origin_;  // MemorySetting::origin
  std::vector<std::unique_ptr<Stream>> streams_;
  struct Retired {
    int device;
    runtime::Allocation allocation;
    std::vector<uint64_t> last_use;
  };
  std::vector<Retired> retired_;
  struct Deferred {
    std::vector<uint64_t> values;  // per timeline
    std::vector<std::shared_ptr<const void>> objects;
  };
  std::vector<Deferred> deferred_;
  // Per adapter, keyed by kernel name or generated source text: hashed once per lookup.
  std::vector<std::unordered_map<std::string, std::unique_ptr<vk::ComputePipeline>>> pipelines_;
  uint64_t wait_timeout_ns_;
  VkCommandBuffer merge_barrier_ = VK_NULL_HANDLE;  // resubmit_merged's, from stream 0's pool
  // Captured work where replays merge (merges_replays, profiling off) is recorded in secondary
  // command buffers: a replay then goes to the queue as one primary that executes them all, and
  // lavapipe pays its per-command-buffer set-up once instead of per recording
  // (docs/LAVAPIPE.md). The primaries that carry them (`wrap`) come from a pool of their own,
  // used under mutex_ only, and go back to wrap_idle_ once their fence is reached.
  std::unordered_set<VkCommandBuffer> secondaries_;
  std::unique_ptr<vk::CommandPool> wrap_pool_;
  std::vector<VkCommandBuffer> wrap_idle_;
  std::deque<std::pair<Fence, VkCommandBuffer>> wrap_in_flight_;
  bool is_secondary(VkCommandBuffer cb) const { return cb && secondaries_.count(cb) != 0; }
  // A primary that executes `cbs` (secondaries) in order, each after everything before it (a
  // memory barrier between them, as between merged entries).
  VkCommandBuffer wrap(std::span<const VkCommandBuffer> cbs);
  // The primaries wrap() made for one submission: once it is submitted, each is reused after its
  // fence; if it never is (something threw), at once.
  struct WrapSettler {
    RuntimeState& rt;
    std::vector<std::pair<VkCommandBuffer, Fence>> wrappers;
    bool submitted = false;
    VkCommandBuffer wrap(std::span<const VkCommandBuffer> cbs, const Fence& done = {}) {
      return wrappers.emplace_back(rt.wrap(cbs), done).first;
    }
    ~WrapSettler();
  };
  bool fast_math_ = false;
  bool split_replicas_ = true;
  bool mathlib_float64_ = true;
  Fence submit_command_buffer(int timeline, VkCommandBuffer cb, const std::vector<Fence>& waits,
                              const char* activity);
  // profile hook: where `captured` is about to run again on `timeline` (its submission signals
  // `signal`) while its previous run's timestamps are only in its query pools (a loop body's
  // next iteration within one replay), a command buffer copying them out, to go right before it
  // in the same submission, noted in `saves`; VK_NULL_HANDLE otherwise. settle_saves hands the
  // noted buffers to their streams until their values are reached once the submission went out,
  // or takes them back at once where it did not (a SaveSettler does either when it goes).
  struct SavedRun {
    int timeline;
    uint64_t signal;
    VkCommandBuffer cb;
  };
  VkCommandBuffer save_previous_run(int timeline, VkCommandBuffer captured, uint64_t signal,
                                    std::vector<SavedRun>& saves);
  void settle_saves(std::vector<SavedRun>& saves, bool submitted) noexcept;
  struct SaveSettler {
    RuntimeState& rt;
    std::vector<SavedRun> saves;
    bool submitted = false;
    ~SaveSettler() { rt.settle_saves(saves, submitted); }
  };
  void open_adapters(const RuntimeOptions& options, int n);

  // Several adapters (runtime/communication.cpp). A VkDevice cannot wait on another's
  // semaphores, and lavapipe stalls its whole queue on a wait whose signal is not yet
  // submitted, so a submission goes to its queue only once every value it waits for is reached
  // (other VkDevices) or submitted (its own); until then it is held here, with every later one
  // of its stream, and the communication thread submits it when its inputs arrive.
  void queue_submit(Stream& s, VkCommandBuffer cb, const std::vector<uint64_t>& need,
                    uint64_t signal);
  void enqueue(Stream& s, VkCommandBuffer cb, std::vector<uint64_t> need, uint64_t signal);
  bool submittable(const Stream& s, const std::vector<uint64_t>& need) const;
  bool drain_held();  // submits what became submittable; true when anything was
  void communicate();  // the communication thread's loop
  void start_communication();
  void stop_communication();
  std::mutex held_mutex_;  // after mutex_, before any queue's submit_mutex
  std::condition_variable held_cv_;
  bool stopping_ = false;
  std::string communication_error_;  // what ended the thread early, for timeout errors
  std::thread communication_;
  void remember(Stream& stream, uint64_t value, const char* activity,
                const std::vector<Fence>& waits);
  Recording begin_on(int timeline);
  std::string describe(int timeline) const;       // "device 3" or "device 3's transfer stream"
  std::string explain_stall(const Fence& fence);  // for timeout errors
  // profile hook; last, so it is destroyed before the streams whose timelines it reads
  std::unique_ptr<profile::DeviceProfiler> profiler_;
};

}  // namespace meshvk::detail

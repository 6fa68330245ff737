#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace meshvk {

namespace detail {
class RuntimeState;
}

struct RuntimeOptions {
  // Virtual devices to split the adapter into (1 to 64); 0 means 8. MESHVK_NUM_DEVICES, when
  // set, overrides it (so `mpirun -x MESHVK_NUM_DEVICES=4` runs a program written for 8, and
  // ctest's 8 devices apply to a test's own Runtime). Under mpirun (meshvk/distributed.hpp) it
  // is each process's count: the mesh has that many times the number of processes.
  int num_devices = 0;
  // Adapter index or a substring of its name; empty means the first discrete or integrated GPU,
  // else lavapipe. MESHVK_ADAPTER overrides it.
  std::string adapter;
  // Several adapters in one process, each an index or a substring of a name as `adapter` takes
  // ({"0", "1"}, or {"llvmpipe", "llvmpipe"}: the same adapter named twice is opened twice and
  // counts as two). The virtual devices are split into contiguous shares in this order, the
  // first num_devices % adapters.size() adapters taking one more. Non-empty overrides `adapter`;
  // MESHVK_ADAPTERS=0,1 overrides both.
  std::vector<std::string> adapters;
  // Memory budget of each virtual device in bytes. 0 (the default): no budget per device; the
  // virtual devices of an adapter share its memory, as JAX's CPU devices share the host's: what
  // they hold together stays within 90% of the adapter's device-local heap (a CPU adapter such as
  // lavapipe: half of the machine's memory, if that is more), and any one of them may use all of
  // it. MESHVK_MEMORY_PER_DEVICE (bytes, or with a KiB, MiB, GiB or TiB suffix: 512MiB, 2GiB)
  // overrides it.
  uint64_t memory_per_device = 0;
  // Khronos validation layer; unset means MESHVK_VALIDATION=1.
  std::optional<bool> validation;
  // A transfer stream per device, on a queue of its own, for the copies of collectives, so they
  // overlap the device's kernels. Unset means MESHVK_TRANSFER_QUEUE (0 or 1), else on exactly
  // when the adapter's compute family has a spare queue for it. Forced on where there is none,
  // the streams share queues: correct, but nothing overlaps.
  std::optional<bool> transfer_queue;
};

// One virtual device as meshvk::devices() lists it.
struct DeviceInfo {
  int id = 0;
  std::string platform;  // "CPU" for a CPU-type adapter such as lavapipe, "GPU" otherwise
  std::string adapter;   // the Vulkan adapter's name
  int adapter_index = 0;  // which of the runtime's adapters (RuntimeOptions::adapters) holds it
  int process_index = 0;  // the process holding it (meshvk/distributed.hpp); 0 with one process
  int queue_family = 0;
  int queue_index = 0;
  int transfer_queue_index = -1;  // the queue of its transfer stream; -1 when it has none
  // What the device may hold: its own budget (RuntimeOptions::memory_per_device), or, when
  // memory_shared, the budget its adapter's devices share (what the others hold counts too).
  uint64_t memory_budget = 0;
  bool memory_shared = false;
  uint64_t memory_used = 0;
  std::string repr() const;  // "CpuDevice(id=0)", as JAX prints a device
};

// Owns the Vulkan adapter split into N virtual devices, each with its own memory pool, command
// stream and timeline semaphore. One Runtime is current at a time; arrays keep what they use
// alive, so they stay valid after the Runtime object goes out of scope.
//
// Threads: a Runtime and the arrays and jit functions made on it may be used from several
// threads at once. Every public entry point runs under the runtime's (recursive) lock, so ops of
// different threads run one after another; a jit trace captures only its own thread's work and
// holds the lock throughout. The current Runtime is process-wide, not per thread: create and
// destroy runtimes while no other thread is using the current one.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The Runtime most recently created and still alive, for every thread; throws Error when
  // there is none.
  static Runtime& current();

  int num_devices() const;
  // On a temporary Runtime, platform(), adapter_name() and state() return copies.
  const std::string& platform() const&;
  std::string platform() const&& { return platform(); }
  // The first adapter's name (each device's is in devices()).
  const std::string& adapter_name() const&;
  std::string adapter_name() const&& { return adapter_name(); }
  std::vector<DeviceInfo> devices() const;
  // Waits until every virtual device has finished the work submitted to it.
  void synchronize();
  // jax's Device.memory_stats(): bytes device `device`'s pool holds now (with memory that
  // queued commands still use: after synchronize(), what live arrays and programs hold), the
  // most it held since the runtime began or reset_peak_memory(), and its budget (0: the devices
  // share their adapter's memory). A device of another process: 0s.
  struct MemoryStats {
    uint64_t bytes_in_use = 0, peak_bytes_in_use = 0, bytes_limit = 0;
  };
  MemoryStats memory_stats(int device) const;
  void reset_peak_memory();
  // Messages the Khronos validation layer reported (warnings and errors) since start, to this
  // Runtime and to every Runtime of the process.
  uint64_t validation_messages() const;
  static uint64_t validation_messages_in_process();
  bool validation_enabled() const;

  const std::shared_ptr<detail::RuntimeState>& state() const& { return state_; }
  std::shared_ptr<detail::RuntimeState> state() const&& { return state_; }

 private:
  std::shared_ptr<detail::RuntimeState> state_;
};

// "CpuDevice(id=0)" or "GpuDevice(id=0)": how JAX names a device.
std::string device_repr(int device, const std::string& platform);

// The current Runtime's devices.
std::vector<DeviceInfo> devices();

}  // namespace meshvk

// Device memory: each virtual device's pool (by default the devices of an adapter share its
// memory; RuntimeOptions::memory_per_device or MESHVK_MEMORY_PER_DEVICE gives each a budget of its
// own), the buffers arrays hold, and when their memory returns to the pool.
#include <algorithm>
#include <cstdio>
#include <string>

#include <unistd.h>

#include "meshvk/error.hpp"
#include "runtime/env.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

namespace {

std::string size_text(uint64_t bytes) {
  char s[64];
  if (bytes >= (1ull << 30))
    std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  else
    std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace
DeviceBuffer::DeviceBuffer(std::shared_ptr<RuntimeState> runtime, int device,
                           runtime::Allocation allocation, uint64_t bytes)
    : runtime_(std::move(runtime)),
      device_(device),
      allocation_(allocation),
      bytes_(bytes),
      last_use_(runtime_->num_timelines(), 0) {}

DeviceBuffer::~DeviceBuffer() {
  std::lock_guard lock(runtime_->mutex());
  runtime_->retire(device_, allocation_, std::move(last_use_));
}

void DeviceBuffer::written_by(const Fence& f) {
  ready_ = f;
  used_by(f);
}

void DeviceBuffer::used_by(const Fence& f) {
  if (!f.none()) last_use_[f.timeline] = std::max(last_use_[f.timeline], f.value);
  // A captured program reads and writes this buffer again on every replay.
  for (Capture* c : runtime_->captures()) c->retain(shared_from_this());
}

RuntimeState::PoolStats RuntimeState::pool_stats(int device) {
  if (device < 0 || device >= num_devices())
    throw Error("memory_stats: no device " + std::to_string(device) + "; the runtime has devices 0.." +
                std::to_string(num_devices() - 1));
  std::lock_guard lock(mutex_);
  if (!is_local(device)) return {};
  reclaim(false);  // what finished commands no longer use is free
  const runtime::MemoryPool& pool = *pools_[device];
  return {pool.used(), pool.peak(), pool.budget()};
}

void RuntimeState::reset_peak_memory() {
  std::lock_guard lock(mutex_);
  reclaim(false);
  for (auto& p : pools_)
    if (p) p->reset_peak();
}

RuntimeState::MemorySetting RuntimeState::memory_setting(const RuntimeOptions& options) {
  const char* name = "MESHVK_MEMORY_PER_DEVICE";
  if (const auto bytes = env_bytes(name, 1ull << 20))
    return {*bytes, std::string(name) + "=" + *env_text(name)};
  if (options.memory_per_device) {
    // As the variable: below 1 MiB every allocation would fail with a budget of "0.00 MiB".
    if (options.memory_per_device < (1ull << 20))
      throw Error("RuntimeOptions::memory_per_device = " + std::to_string(options.memory_per_device) +
                  " bytes; give at least 1 MiB (1048576), or 0 for the devices to share the adapter's memory");
    return {options.memory_per_device, "RuntimeOptions::memory_per_device"};
  }
  return {};
}

void RuntimeState::open_pools(const MemorySetting& setting, const std::vector<int>& local_devices,
                              bool exportable) {
  std::vector<std::shared_ptr<runtime::AdapterMemory>> shared;
  for (size_t a = 0; a < adapters_.size(); ++a) {
    auto memory = std::make_shared<runtime::AdapterMemory>();
    memory->devices = local_devices[a];
    if (!setting.per_device) {
      // The devices share the adapter: 90% of its heap, the rest left to the driver and to
      // whatever else runs on it.
      const vk::Device& dev = *adapters_[a];
      const uint64_t heap = dev.device_heap_size();
      memory->limit = heap / 10 * 9;
      memory->limit_origin = "90% of its " + size_text(heap) + " device-local heap";
      // A CPU adapter's memory is the machine's: lavapipe reports a small heap but allocates
      // from system RAM, so half of that (over every adapter: lavapipe opened twice is still one
      // machine), if more.
      if (dev.adapter().is_cpu()) {
        const uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                             static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
        const uint64_t half = ram / 2 / adapters_.size();
        if (half > memory->limit) {
          memory->limit = half;
          memory->limit_origin =
              "half of this machine's " + size_text(ram) + " of memory" +
              (adapters_.size() > 1 ? ", over " + std::to_string(adapters_.size()) + " adapters"
                                    : "") +
              ", which a CPU adapter allocates from";
        }
      }
    }
    shared.push_back(std::move(memory));
  }
  memory_origin_ = setting.origin;
  for (int d = 0; d < num_devices_; ++d) {
    const int a = adapter_of_[d];
    pools_.push_back(std::make_unique<runtime::MemoryPool>(
        *adapters_[a], d, setting.per_device ? setting.per_device : runtime::kUnbounded, shared[a],
        exportable));
  }
}

std::string RuntimeState::budget_error(int device, uint64_t bytes) {
  const runtime::MemoryPool& pool = *pools_[device];
  const runtime::AdapterMemory& memory = pool.adapter();
  const int a = adapter_of_[device];
  const std::string dev = "device " + std::to_string(device);
  const std::string adapter =
      "adapter " + std::to_string(a) + " (" + adapters_[a]->adapter().name + ")";
  const std::string others = memory.devices > 1
                                 ? "the " + std::to_string(memory.devices) + " devices of " +
                                       adapter + " together hold " + size_text(memory.used)
                                 : "";
  std::string text = "out of memory on " + dev + ": requested " + size_text(bytes);
  if (pool.budget() != runtime::kUnbounded) {
    // A budget of its own.
    text += ", " + size_text(pool.budget() - pool.used()) + " free of its " +
            size_text(pool.budget()) + " budget (" + memory_origin_ + ")";
    if (!others.empty()) text += "; " + others;
    return text + "; free arrays on " + dev +
           ", shard the array over more devices, or raise MESHVK_MEMORY_PER_DEVICE (bytes, or "
           "512MiB, 2GiB) or RuntimeOptions::memory_per_device (the variable wins; unset both "
           "and the devices share the adapter's memory)";
  }
  text +=
      "; " + dev + " holds " + size_text(pool.used()) +
      (others.empty() ? " of the " + size_text(memory.limit) + " budget of " + adapter
                      : ", and " + others + " of the " + size_text(memory.limit) + " they share") +
      " (" + memory.limit_origin + "), " + size_text(memory.limit - memory.used - memory.spare) +
      " free";
  return text +
         "; free arrays, shard the array over more devices or use fewer devices "
         "(MESHVK_NUM_DEVICES) so that replicated arrays take less, or give each device a budget "
         "of its own instead of the shared one, beyond it if the machine has the memory "
         "(MESHVK_MEMORY_PER_DEVICE=8GiB, say, or RuntimeOptions::memory_per_device)";
}

std::shared_ptr<DeviceBuffer> RuntimeState::allocate(int device, uint64_t bytes) {
  if (device < 0 || device >= num_devices())
    throw Error("no device " + std::to_string(device) + "; the runtime has devices 0.." +
                std::to_string(num_devices() - 1));
  std::lock_guard lock(mutex_);
  if (!is_local(device)) {
    // Another process's device: a buffer of that size there, nothing here.
    auto buffer =
        std::make_shared<DeviceBuffer>(shared_from_this(), device, runtime::Allocation{}, bytes);
    for (Capture* c : captures()) c->retain(buffer);
    return buffer;
  }
  reclaim(false);
  auto& pool = *pools_[device];
  // Within the budget the driver may still refuse a block (a buffer past its maxBufferSize or
  // its heap): said as the budget's errors are, with the driver's words.
  auto attempt = [&]() -> std::optional<runtime::Allocation> {
    try {
      return pool.try_allocate(bytes);
    } catch (const Error& e) {
      throw Error("out of memory on device " + std::to_string(device) + ": requested " + size_text(pool.aligned(bytes)) +
                  ", which the Vulkan adapter cannot give (" + e.what() +
                  "); shard the array over more devices so that each piece is smaller, or split the work into smaller arrays");
    }
  };
  std::optional<runtime::Allocation> a = attempt();
  if (!a && !retired_.empty()) {
    // Memory still in use by the GPU may be all that stands in the way.
    reclaim(true);
    a = attempt();
  }
  if (!a && pool.adapter().limit != runtime::kUnbounded) {
    // Spare blocks the adapter's other devices keep for reuse.
    bool released = false;
    for (int d = 0; d < num_devices_; ++d)
      if (adapter_of_[d] == adapter_of_[device]) released = pools_[d]->release_spares() || released;
    if (released) a = attempt();
  }
  if (!a) throw Error(budget_error(device, pool.aligned(bytes)));
  auto buffer = std::make_shared<DeviceBuffer>(shared_from_this(), device, *a, bytes);
  for (Capture* c : captures()) {
    c->retain(buffer);
    c->allocated.push_back(buffer.get());
  }
  return buffer;
}

void RuntimeState::retire(int device, const runtime::Allocation& allocation,
                          std::vector<uint64_t> last_use) {
  if (!is_local(device)) return;
  retired_.push_back({device, allocation, std::move(last_use)});
  reclaim(false);
}

void RuntimeState::reclaim(bool block) {
  std::vector<uint64_t> reached(streams_.size());
  for (size_t d = 0; d < streams_.size(); ++d) reached[d] = timeline_value(static_cast<int>(d));
  auto done = [&](const Retired& r) {
    for (size_t d = 0; d < r.last_use.size(); ++d)
      if (r.last_use[d] > reached[d]) return false;
    return true;
  };
  if (block) {
    for (const Retired& r : retired_)
      for (size_t d = 0; d < r.last_use.size(); ++d)
        if (r.last_use[d] > reached[d])
          wait(Fence{static_cast<int>(d), r.last_use[d]}, "freeing memory");
    for (size_t d = 0; d < streams_.size(); ++d) reached[d] = timeline_value(static_cast<int>(d));
  }
  auto keep = std::stable_partition(retired_.begin(), retired_.end(),
                                    [&](const Retired& r) { return !done(r); });
  for (auto it = keep; it != retired_.end(); ++it) pools_[it->device]->free(it->allocation);
  retired_.erase(keep, retired_.end());
  // Moved out first: releasing a deferred DeviceBuffer retires it, which comes back here.
  std::vector<Deferred> finished;
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    bool reached_all = true;
    for (size_t t = 0; t < it->values.size(); ++t)
      reached_all = reached_all && it->values[t] <= reached[t];
    if (reached_all) {
      finished.push_back(std::move(*it));
      it = deferred_.erase(it);
    } else {
      ++it;
    }
  }
}

void RuntimeState::keep_until(std::vector<uint64_t> values,
                              std::vector<std::shared_ptr<const void>> objects) {
  std::lock_guard lock(mutex_);
  values.resize(streams_.size(), 0);
  deferred_.push_back({std::move(values), std::move(objects)});
}
}  // namespace meshvk::detail

// The runtime's making and unmaking: the settings, the adapters split into virtual devices with
// their memory pools and streams, and what it lists of them. The rest of RuntimeState lives by
// concept: submission.cpp (recording, captures, vkQueueSubmit), waiting.cpp (host waits and
// their timeout errors), device_memory.cpp (pools, buffers, out-of-memory errors), adapters.cpp,
// communication.cpp, merged_submit.cpp, processes.cpp.
#include "runtime/runtime_state.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "runtime/env.hpp"

namespace meshvk::detail {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int parse_count(const std::string& text, const char* what) {
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > 64)
    throw Error(std::string(what) + "=" + text + " is not a device count; give an integer from 1 to 64");
  return static_cast<int>(n);
}

}  // namespace

RuntimeState::RuntimeState(const RuntimeOptions& options) {
  int n = options.num_devices;
  if (const std::string e = env("MESHVK_NUM_DEVICES"); !e.empty()) n = parse_count(e, "MESHVK_NUM_DEVICES");
  if (n == 0) n = 8;
  if (n < 1 || n > 64)
    throw Error("Runtime: num_devices = " + std::to_string(n) + "; give an integer from 1 to 64");
  const bool validation = env_switch("MESHVK_VALIDATION").value_or(options.validation.value_or(false));
  std::optional<bool> transfer = options.transfer_queue;
  if (const auto e = env_switch("MESHVK_TRANSFER_QUEUE")) transfer = *e;
  // At most a year, so the nanoseconds fit in 64 bits.
  constexpr uint64_t kMaxTimeoutMs = 365ull * 24 * 3600 * 1000;
  wait_timeout_ns_ =
      env_unsigned("MESHVK_WAIT_TIMEOUT_MS", 1, kMaxTimeoutMs, "milliseconds").value_or(120000) *
      1000000ull;
  // Read before any Vulkan object is made, so that a malformed value costs nothing.
  const MemorySetting memory = memory_setting(options);
  fast_math_ = env_switch("MESHVK_FAST_MATH").value_or(false);
  split_replicas_ = env_switch("MESHVK_SPLIT_REPLICAS").value_or(true);
  const std::optional<bool> float64 = env_switch("MESHVK_MATHLIB_FLOAT64");
  mathlib_float64_ = float64.value_or(true);
  (void)env_switch("MESHVK_DIV64");  // read at each kernel's build: a malformed value fails here, at once

  instance_ = std::make_unique<vk::Instance>(validation);
  join_processes(n);          // runtime/processes.cpp: one process, or this one of several
  open_adapters(options, n);  // runtime/adapters.cpp: adapters_, adapter_of_
  platform_ = device().adapter().is_cpu() ? "CPU" : "GPU";
  for (const auto& a : adapters_)
    if (float64 == true && !a->adapter().float64)
      throw Error("MESHVK_MATHLIB_FLOAT64=1, but Vulkan adapter " + a->adapter().name +
                  " has no shaderFloat64; unset it, or give 0 for the float-float sin, cos, tan "
                  "and arctan2");
  // Every process holds n devices, laid out on its adapters alike: another process's device d
  // has the place this process's device d % n has here.
  const int local_n = n;
  n *= processes_;
  for (int d = local_n; d < n; ++d) adapter_of_.push_back(adapter_of_[d % local_n]);
  num_devices_ = n;
  pipelines_.resize(adapters_.size());

  // Each adapter's share of this process's virtual devices, and of its queues. MESHVK_QUEUES=N
  // uses at most N of each adapter's queues (devices and transfer streams then share them).
  // NVIDIA's take one by default: there a queue waiting on another queue's semaphore resumes
  // about 170 us after the signal (each queue is a channel the GPU schedules in turn), which made
  // every collective over 8 virtual devices cost 2.9 ms; on one queue it costs 0.25-0.4 ms
  // (H200, driver 580, 2026-11-27, README).
  const std::optional<uint64_t> queue_limit = env_unsigned("MESHVK_QUEUES", 1, 64, "queues");
  auto queues_of = [&](const vk::Device& dev) {
    constexpr uint32_t kNvidia = 0x10de;
    const uint64_t limit =
        queue_limit.value_or(dev.adapter().properties.vendorID == kNvidia ? 1 : dev.queue_count());
    return static_cast<int>(std::min<uint64_t>(dev.queue_count(), limit));
  };
  std::vector<std::vector<int>> members(adapters_.size());
  for (int d = 0; d < local_n; ++d) members[adapter_of_[d]].push_back(d);
  bool spare_everywhere = true;
  for (size_t a = 0; a < adapters_.size(); ++a)
    spare_everywhere = spare_everywhere && queues_of(*adapters_[a]) > static_cast<int>(members[a].size());
  const bool exportable = adapters_.size() > 1 && cross_adapter_ == CrossAdapter::shared;
  // Device d's place among its adapter's devices, and how many that adapter holds.
  auto local_of = [&](int d) {
    const auto& m = members[adapter_of_[d]];
    return static_cast<int>(std::find(m.begin(), m.end(), d % local_n) - m.begin());
  };
  auto share_of = [&](int d) { return static_cast<int>(members[adapter_of_[d]].size()); };
  std::vector<int> local_counts;
  for (const auto& m : members) local_counts.push_back(static_cast<int>(m.size()));
  open_pools(memory, local_counts, exportable);  // runtime/device_memory.cpp
  for (int d = 0; d < n; ++d) {
    const int a = adapter_of_[d];
    vk::Device& dev = *adapters_[a];
    streams_.push_back(
        std::make_unique<Stream>(dev, dev.queue(local_of(d) % queues_of(dev)), d, false, a));
  }
  auto queue_of_transfers = [&](int d) -> vk::Queue& {
    vk::Device& dev = *adapters_[adapter_of_[d]];
    const int queues = queues_of(dev);
    const int spare = queues - share_of(d);
    return dev.queue(spare > 0 ? share_of(d) + local_of(d) % spare : local_of(d) % queues);
  };
  // Transfer streams take the queues the compute streams left; forced on without any, they
  // share their device's queue.
  has_transfer_streams_ = transfer.value_or(spare_everywhere);
  if (has_transfer_streams_) {
    for (int d = 0; d < n; ++d)
      streams_.push_back(std::make_unique<Stream>(*adapters_[adapter_of_[d]], queue_of_transfers(d),
                                                  d, true, adapter_of_[d]));
  }
  if (processes_ > 1) {
    peer_base_ = static_cast<int>(streams_.size());
    for (int d = 0; d < 2 * n; ++d)  // each device's sends, then each device's receives
      streams_.push_back(std::make_unique<Stream>(*adapters_[adapter_of_[d % n]],
                                                  queue_of_transfers(d % n), d % n, true,
                                                  adapter_of_[d % n]));
    for (auto& s : streams_) s->remote = !is_local(s->device);
    share_memory();
  }
  // profile hook: the profiler reads each stream's timeline and may calibrate on a queue. Its
  // timestamp queries live on the first adapter: only that adapter's devices get device spans.
  profile::DeviceProfiler::Setup profiled{instance_->handle(), device(), mutex_, platform_, {}};
  for (auto& s : streams_)
    profiled.streams.push_back({&s->semaphore, &s->queue, s->device, s->transfer});
  profiler_ = std::make_unique<profile::DeviceProfiler>(std::move(profiled));
  if (host_holds()) start_communication();
}

RuntimeState::~RuntimeState() {
  stop_communication();
  for (auto& a : adapters_) vkDeviceWaitIdle(a->handle());
  // The link's requests go before the memory they may send from (pool blocks, zero-copy) does,
  // and the buffers that import its rings before the rings.
  segment_views_.clear();
  link_.reset();
  for (auto& s : streams_) s->in_flight.clear();
  std::vector<Deferred> deferred = std::move(deferred_);
  deferred.clear();
  retired_.clear();
}

std::vector<DeviceInfo> RuntimeState::devices() {
  std::vector<DeviceInfo> list;
  for (int d = 0; d < num_devices(); ++d) {
    DeviceInfo info;
    info.id = d;
    info.platform = platform_;
    info.adapter = device_for(d).adapter().name;
    info.adapter_index = adapter_of_[d];
    info.process_index = process_of(d);
    info.queue_family = static_cast<int>(streams_[d]->queue.family);
    info.queue_index = static_cast<int>(streams_[d]->queue.index);
    if (has_transfer_streams())
      info.transfer_queue_index = static_cast<int>(streams_[transfer_timeline(d)]->queue.index);
    const runtime::MemoryPool& pool = *pools_[d];
    info.memory_shared = pool.budget() == runtime::kUnbounded;
    info.memory_budget = info.memory_shared ? pool.adapter().limit : pool.budget();
    info.memory_used = pool.used();
    list.push_back(std::move(info));
  }
  return list;
}

vk::ComputePipeline& RuntimeState::pipeline(
    int virtual_device, const std::string& key,
    const std::function<std::unique_ptr<vk::ComputePipeline>()>& make) {
  std::lock_guard lock(mutex_);
  auto& p = pipelines_[adapter_of_[virtual_device]][key];
  if (!p) p = make();
  return *p;
}

std::shared_ptr<vk::Buffer> RuntimeState::staging(int virtual_device, uint64_t bytes) {
  return std::make_shared<vk::Buffer>(device_for(virtual_device), std::max<uint64_t>(bytes, 4),
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                      device_for(virtual_device).staging_memory_type(), true);
}

}  // namespace meshvk::detail

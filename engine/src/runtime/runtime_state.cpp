#include "runtime/runtime_state.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include <unistd.h>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "runtime/env.hpp"
#include "runtime/process_group.hpp"
#include "vk/check.hpp"

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

std::string mib(uint64_t bytes) {
  char s[64];
  std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace

Stream::Stream(vk::Device& device, vk::Queue& q, int virtual_device, bool is_transfer, int on_adapter)
    : queue(q),
      device(virtual_device),
      transfer(is_transfer),
      adapter(on_adapter),
      pool(device.handle(), q.family),
      semaphore(device.handle()) {}

namespace {
// The calling thread's jit captures, one per runtime it traces on (a trace's body may use
// another runtime's arrays, which are then not captured, as before).
struct ThreadCapture {
  const RuntimeState* runtime;
  Capture* capture;
};
std::vector<ThreadCapture>& thread_captures() {
  thread_local std::vector<ThreadCapture> captures;
  return captures;
}
}  // namespace

Capture* RuntimeState::capture() const {
  for (const ThreadCapture& c : thread_captures())
    if (c.runtime == this) return c.capture;
  return nullptr;
}

const char*& current_activity() {
  thread_local const char* activity = nullptr;
  return activity;
}

const char* intern_activity(const std::string& text) {
  // Few distinct texts (a collective's phases and steps), each kept for the process's life:
  // recordings, captured programs and error messages keep pointers to them.
  static std::mutex mutex;
  static std::set<std::string, std::less<>> texts;
  std::lock_guard lock(mutex);
  return texts.insert(text).first->c_str();
}

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
  if (Capture* c = runtime_->capture()) c->retain(shared_from_this());
}

void Capture::retain(std::shared_ptr<DeviceBuffer> buffer) {
  for (const auto& b : buffers)
    if (b == buffer) return;
  buffers.push_back(std::move(buffer));
}

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
  fast_math_ = env_switch("MESHVK_FAST_MATH").value_or(false);
  const std::optional<bool> float64 = env_switch("MESHVK_MATHLIB_FLOAT64");
  mathlib_float64_ = float64.value_or(true);

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

  // Each adapter's share of this process's virtual devices, and of its queues.
  std::vector<std::vector<int>> members(adapters_.size());
  for (int d = 0; d < local_n; ++d) members[adapter_of_[d]].push_back(d);
  bool spare_everywhere = true;
  for (size_t a = 0; a < adapters_.size(); ++a)
    spare_everywhere = spare_everywhere && adapters_[a]->queue_count() > members[a].size();
  const bool exportable = adapters_.size() > 1 && cross_adapter_ == CrossAdapter::shared;
  // Device d's place among its adapter's devices, and how many that adapter holds.
  auto local_of = [&](int d) {
    const auto& m = members[adapter_of_[d]];
    return static_cast<int>(std::find(m.begin(), m.end(), d % local_n) - m.begin());
  };
  auto share_of = [&](int d) { return static_cast<int>(members[adapter_of_[d]].size()); };
  for (int d = 0; d < n; ++d) {
    const int a = adapter_of_[d];
    vk::Device& dev = *adapters_[a];
    uint64_t budget = options.memory_per_device;
    if (budget == 0) {
      uint64_t heap = dev.device_heap_size() * 9 / 10;
      // A CPU adapter's memory is the machine's: lavapipe reports a small heap but allocates
      // from system RAM, so half of that is shared out instead (over every adapter's devices:
      // lavapipe opened twice is still one machine).
      if (dev.adapter().is_cpu())
        heap = std::max<uint64_t>(heap, static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                                            sysconf(_SC_PAGE_SIZE) / 2 / adapters_.size());
      budget = std::min<uint64_t>(heap / share_of(d), 4ull << 30);
    }
    pools_.push_back(std::make_unique<runtime::MemoryPool>(dev, d, budget, exportable));
    streams_.push_back(
        std::make_unique<Stream>(dev, dev.queue(local_of(d) % dev.queue_count()), d, false, a));
  }
  auto queue_of_transfers = [&](int d) -> vk::Queue& {
    vk::Device& dev = *adapters_[adapter_of_[d]];
    const int queues = static_cast<int>(dev.queue_count());
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
    info.memory_budget = pools_[d]->budget();
    info.memory_used = pools_[d]->used();
    list.push_back(std::move(info));
  }
  return list;
}

std::string RuntimeState::budget_error(int device, uint64_t bytes) {
  const auto& pool = *pools_[device];
  return "out of memory on device " + std::to_string(device) + ": requested " + mib(bytes) +
         ", " + mib(pool.budget() - pool.used()) + " free of its " + mib(pool.budget()) +
         " budget; free arrays on device " + std::to_string(device) +
         ", shard the array over more devices, or raise RuntimeOptions::memory_per_device";
}

std::shared_ptr<DeviceBuffer> RuntimeState::allocate(int device, uint64_t bytes) {
  if (device < 0 || device >= num_devices())
    throw Error("no device " + std::to_string(device) + "; the runtime has devices 0.." +
                std::to_string(num_devices() - 1));
  std::lock_guard lock(mutex_);
  if (!is_local(device)) {
    // Another process's device: a buffer of that size there, nothing here.
    auto buffer = std::make_shared<DeviceBuffer>(shared_from_this(), device, runtime::Allocation{}, bytes);
    if (Capture* c = capture()) c->retain(buffer);
    return buffer;
  }
  reclaim(false);
  auto& pool = *pools_[device];
  std::optional<runtime::Allocation> a = pool.try_allocate(bytes);
  if (!a && !retired_.empty()) {
    // Memory still in use by the GPU may be all that stands in the way.
    reclaim(true);
    a = pool.try_allocate(bytes);
  }
  if (!a) throw Error(budget_error(device, pool.aligned(bytes)));
  auto buffer = std::make_shared<DeviceBuffer>(shared_from_this(), device, *a, bytes);
  if (Capture* c = capture()) c->retain(buffer);
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
        if (r.last_use[d] > reached[d]) wait(Fence{static_cast<int>(d), r.last_use[d]}, "freeing memory");
    for (size_t d = 0; d < streams_.size(); ++d) reached[d] = timeline_value(static_cast<int>(d));
  }
  auto keep = std::stable_partition(retired_.begin(), retired_.end(), [&](const Retired& r) { return !done(r); });
  for (auto it = keep; it != retired_.end(); ++it) pools_[it->device]->free(it->allocation);
  retired_.erase(keep, retired_.end());
  // Moved out first: releasing a deferred DeviceBuffer retires it, which comes back here.
  std::vector<Deferred> finished;
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    bool reached_all = true;
    for (size_t t = 0; t < it->values.size(); ++t) reached_all = reached_all && it->values[t] <= reached[t];
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

void RuntimeState::recycle(Stream& s) {
  const uint64_t reached = s.semaphore.value();
  while (!s.in_flight.empty() && s.in_flight.front().value <= reached) {
    vk::check(vkResetCommandBuffer(s.in_flight.front().cb, 0), "vkResetCommandBuffer");
    s.idle.push_back(s.in_flight.front().cb);
    s.in_flight.pop_front();
  }
}

Recording RuntimeState::begin(int device) {
  return begin_on(device);
}

Recording RuntimeState::begin_transfer(int device) {
  return begin_on(transfer_timeline(device));
}

Recording RuntimeState::begin_on(int timeline) {
  std::lock_guard lock(mutex_);
  Stream& s = *streams_[timeline];
  Recording r;
  r.device = s.device;
  r.timeline = timeline;
  if (s.remote) {
    r.remote = true;
    r.captured = capture() != nullptr;
    return r;
  }
  recycle(s);
  if (s.idle.empty()) {
    r.cb = s.pool.allocate();
  } else {
    r.cb = s.idle.back();
    s.idle.pop_back();
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  r.captured = capture() != nullptr;
  // Captured buffers are submitted again on replay, possibly while the previous one is pending.
  begin.flags = r.captured ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk::check(vkBeginCommandBuffer(r.cb, &begin), "vkBeginCommandBuffer");
  if (profile::on() && s.adapter == 0) r.profile = profiler_->begin(timeline, r.cb);  // profile hook
  return r;
}

Fence RuntimeState::submit(Recording&& r) {
  std::lock_guard lock(mutex_);
  Capture* const capturing = r.captured ? capture() : nullptr;
  if (r.remote) {
    // Only a peer timeline's count matters here: it is what this process waits for.
    if (!is_peer_timeline(r.timeline)) return Fence{};
    const Fence f = submit_command_buffer(r.timeline, VK_NULL_HANDLE, r.waits, current_activity());
    if (capturing)
      capturing->submissions.push_back({r.timeline, VK_NULL_HANDLE, r.waits, f.value, current_activity()});
    return f;
  }
  if (r.profile) profiler_->close(r.profile, capturing != nullptr);  // profile hook
  vk::check(vkEndCommandBuffer(r.cb), "vkEndCommandBuffer");
  const Fence f = submit_command_buffer(r.timeline, r.cb, r.waits, current_activity());
  if (capturing) {
    capturing->submissions.push_back({r.timeline, r.cb, r.waits, f.value, current_activity()});
    for (auto& k : r.keep_alive) capturing->keep_alive.push_back(std::move(k));
  } else {
    streams_[r.timeline]->in_flight.push_back({f.value, r.cb, std::move(r.keep_alive)});
  }
  return f;
}

Fence RuntimeState::resubmit(int timeline, VkCommandBuffer cb, const std::vector<Fence>& waits) {
  std::lock_guard lock(mutex_);
  return submit_command_buffer(timeline, cb, waits, nullptr);
}

std::vector<Fence> RuntimeState::resubmit_batch(int timeline,
                                                const std::vector<Resubmission>& entries) {
  std::lock_guard lock(mutex_);
  if (host_holds()) {
    // One by one: each may have to be held until what it waits for on another VkDevice is there.
    std::vector<Fence> fences;
    for (const Resubmission& e : entries)
      fences.push_back(submit_command_buffer(timeline, e.cb, e.waits, e.activity));
    return fences;
  }
  Stream& s = *streams_[timeline];
  const size_t count = entries.size();
  // Storage the VkSubmitInfos point into, sized up front so nothing moves.
  std::vector<std::vector<VkSemaphore>> semaphores(count);
  std::vector<std::vector<uint64_t>> values(count);
  std::vector<std::vector<VkPipelineStageFlags>> stages(count);
  std::vector<uint64_t> signals(count);
  std::vector<VkTimelineSemaphoreSubmitInfo> timelines(count);
  std::vector<VkSubmitInfo> submits(count);
  std::deque<profile::SubmitHook> hooks;  // profile hook: one span per entry
  const VkSemaphore signal_semaphore = s.semaphore.handle();
  std::vector<Fence> fences;
  for (size_t i = 0; i < count; ++i) {
    std::vector<uint64_t> need(streams_.size(), 0);
    for (const Fence& f : entries[i].waits)
      if (!f.none()) need[f.timeline] = std::max(need[f.timeline], f.value);
    for (size_t d = 0; d < need.size(); ++d) {
      if (!need[d]) continue;
      semaphores[i].push_back(streams_[d]->semaphore.handle());
      values[i].push_back(need[d]);
      stages[i].push_back(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
    }
    signals[i] = s.last_submitted + 1 + i;
    hooks.emplace_back(*profiler_, timeline, entries[i].cb, signals[i], need);
    timelines[i] = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    timelines[i].waitSemaphoreValueCount = static_cast<uint32_t>(values[i].size());
    timelines[i].pWaitSemaphoreValues = values[i].data();
    timelines[i].signalSemaphoreValueCount = 1;
    timelines[i].pSignalSemaphoreValues = &signals[i];
    submits[i] = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submits[i].pNext = &timelines[i];
    submits[i].waitSemaphoreCount = static_cast<uint32_t>(semaphores[i].size());
    submits[i].pWaitSemaphores = semaphores[i].data();
    submits[i].pWaitDstStageMask = stages[i].data();
    submits[i].commandBufferCount = entries[i].cb ? 1 : 0;
    submits[i].pCommandBuffers = &entries[i].cb;
    submits[i].signalSemaphoreCount = 1;
    submits[i].pSignalSemaphores = &signal_semaphore;
    fences.push_back(Fence{timeline, signals[i]});
  }
  if (count) {
    std::lock_guard queue_lock(s.queue.submit_mutex);
    vk::check(vkQueueSubmit(s.queue.handle, static_cast<uint32_t>(count), submits.data(), VK_NULL_HANDLE), "vkQueueSubmit");
  }
  s.last_submitted += count;
  s.queued = s.last_submitted;
  for (size_t i = 0; i < count; ++i) remember(s, signals[i], entries[i].activity, entries[i].waits);
  return fences;
}

void RuntimeState::release_command_buffer(int timeline, VkCommandBuffer cb) {
  std::lock_guard lock(mutex_);
  profiler_->release(cb);  // profile hook
  streams_[timeline]->pool.free(cb);
}

void RuntimeState::begin_capture(Capture* c) {
  std::lock_guard lock(mutex_);
  if (capture()) throw Error("internal: a jit trace began inside another on the same thread");
  c->start_values.clear();
  for (const auto& s : streams_) c->start_values.push_back(s->last_submitted);
  thread_captures().push_back({this, c});
}

void RuntimeState::end_capture() {
  auto& captures = thread_captures();
  std::erase_if(captures, [&](const ThreadCapture& c) { return c.runtime == this; });
}

Fence RuntimeState::submit_command_buffer(int timeline, VkCommandBuffer cb,
                                          const std::vector<Fence>& waits, const char* activity) {
  Stream& s = *streams_[timeline];
  // One wait per timeline, on the highest value needed from it.
  std::vector<uint64_t> need(streams_.size(), 0);
  for (const Fence& f : waits)
    if (!f.none()) need[f.timeline] = std::max(need[f.timeline], f.value);
  const uint64_t signal = s.last_submitted + 1;
  if (s.remote) {
    // Another process submits it; this one only counts it.
    s.last_submitted = signal;
    return Fence{timeline, signal};
  }
  {
    const profile::SubmitHook profiled(*profiler_, timeline, cb, signal, need);  // profile hook
    if (!host_holds()) {
      queue_submit(s, cb, need, signal);
      s.queued = signal;
    } else {
      enqueue(s, cb, std::move(need), signal);
    }
  }
  s.last_submitted = signal;
  remember(s, signal, activity, waits);
  return Fence{timeline, signal};
}

void RuntimeState::queue_submit(Stream& s, VkCommandBuffer cb, const std::vector<uint64_t>& need,
                                uint64_t signal) {
  // Waits on the stream's own VkDevice only: what it needs from other adapters was reached on
  // the host before it came here.
  std::vector<VkSemaphore> wait_semaphores;
  std::vector<uint64_t> wait_values;
  std::vector<VkPipelineStageFlags> wait_stages;
  for (size_t d = 0; d < need.size(); ++d) {
    if (!need[d] || streams_[d]->adapter != s.adapter || streams_[d]->remote) continue;
    wait_semaphores.push_back(streams_[d]->semaphore.handle());
    wait_values.push_back(need[d]);
    wait_stages.push_back(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  }
  const VkSemaphore signal_semaphore = s.semaphore.handle();
  VkTimelineSemaphoreSubmitInfo timeline_info{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  timeline_info.waitSemaphoreValueCount = static_cast<uint32_t>(wait_values.size());
  timeline_info.pWaitSemaphoreValues = wait_values.data();
  timeline_info.signalSemaphoreValueCount = 1;
  timeline_info.pSignalSemaphoreValues = &signal;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.pNext = &timeline_info;
  submit.waitSemaphoreCount = static_cast<uint32_t>(wait_semaphores.size());
  submit.pWaitSemaphores = wait_semaphores.data();
  submit.pWaitDstStageMask = wait_stages.data();
  submit.commandBufferCount = cb ? 1 : 0;
  submit.pCommandBuffers = &cb;
  submit.signalSemaphoreCount = 1;
  submit.pSignalSemaphores = &signal_semaphore;
  std::lock_guard queue_lock(s.queue.submit_mutex);
  vk::check(vkQueueSubmit(s.queue.handle, 1, &submit, VK_NULL_HANDLE), "vkQueueSubmit");
}

void RuntimeState::remember(Stream& s, uint64_t value, const char* activity,
                            const std::vector<Fence>& waits) {
  constexpr size_t kRecent = 256;
  if (s.recent.size() == kRecent) s.recent.pop_front();
  s.recent.push_back({value, activity, waits});
}

std::string RuntimeState::describe(int timeline) const {
  const Stream& s = *streams_[timeline];
  return "device " + std::to_string(s.device) +
         (is_peer_timeline(timeline)
              ? (timeline < peer_base_ + num_devices() ? "'s send stream" : "'s receive stream")
          : s.transfer ? "'s transfer stream"
                       : "");
}

Fence RuntimeState::signal_from_host(int timeline) {
  std::lock_guard lock(mutex_);
  Stream& s = *streams_[timeline];
  if (s.semaphore.value() < s.last_submitted)
    throw Error("signal_from_host: " + describe(timeline) + " still has submissions pending (at " +
                std::to_string(s.semaphore.value()) + " of " + std::to_string(s.last_submitted) +
                "); a host signal must come after them");
  std::lock_guard held_lock(held_mutex_);
  s.semaphore.signal(++s.last_submitted);
  s.queued = s.last_submitted;
  return Fence{timeline, s.last_submitted};
}

bool RuntimeState::reached(const Fence& f) {
  return f.none() || timeline_value(f.timeline) >= f.value;
}

uint64_t RuntimeState::timeline_value(int timeline) const {
  const Stream& s = *streams_[timeline];
  if (!s.remote) return s.semaphore.value();
  // Another process's: only peer timelines are published (and only they are waited for).
  if (!is_peer_timeline(timeline)) return UINT64_MAX;
  if (link_) return link_->mirror(timeline);
  return std::atomic_ref<uint64_t>(progress_table(process_of(s.device))[timeline])
      .load(std::memory_order_acquire);
}

void RuntimeState::wait(const Fence& f, const std::string& during) {
  if (f.none()) return;
  const Stream& s = *streams_[f.timeline];
  const profile::WaitHook profiled(*profiler_, f.timeline, f.value);  // profile hook
  if (processes_ > 1) return wait_across_processes(f, during);
  if (s.semaphore.wait(f.value, wait_timeout_ns_)) return;
  std::string ended;
  {
    std::lock_guard held_lock(held_mutex_);
    if (!communication_error_.empty())
      ended = "; the communication thread between adapters stopped: " + communication_error_;
  }
  throw Error("timed out after " + std::to_string(wait_timeout_ns_ / 1000000) + " ms during " +
              during + ": " + explain_stall(f) + ended + "; set MESHVK_WAIT_TIMEOUT_MS to wait longer");
}

void RuntimeState::wait_across_processes(const Fence& f, const std::string& during) {
  // What this process waits for may hang on another process that died or stopped: look at the
  // peers between slices, and end the whole job (every process would wait forever otherwise)
  // with what was waited for, rather than return an error to a program that cannot go on.
  const Stream& s = *streams_[f.timeline];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(wait_timeout_ns_);
  constexpr uint64_t kSliceNs = 20'000'000;
  while (true) {
    if (s.remote ? timeline_value(f.timeline) >= f.value : s.semaphore.wait(f.value, kSliceNs))
      return;
    if (s.remote) std::this_thread::sleep_for(std::chrono::microseconds(50));
    ProcessGroup& group = *ProcessGroup::get();
    const int dead = group.dead_process();
    const bool late = std::chrono::steady_clock::now() > deadline;
    if (dead < 0 && !late) continue;
    const std::string why =
        dead >= 0 ? "process " + std::to_string(dead) + " of the job died"
                  : "timed out after " + std::to_string(wait_timeout_ns_ / 1000000) +
                        " ms (MESHVK_WAIT_TIMEOUT_MS)";
    group.abort(why + " while process " + std::to_string(process_) + " waited during " + during +
                ": " + explain_stall(f) + "; ending the job");
  }
}

std::string RuntimeState::explain_stall(const Fence& f) {
  std::lock_guard lock(mutex_);
  auto submitted = [](const Stream& s, uint64_t value) -> const Stream::Submitted* {
    for (const auto& r : s.recent)
      if (r.value == value) return &r;
    return nullptr;
  };
  const Stream& s = *streams_[f.timeline];
  std::string text =
      describe(f.timeline) + " did not reach timeline value " + std::to_string(f.value);
  if (const auto* target = submitted(s, f.value); target && target->activity)
    text += std::string(", the end of its ") + target->activity;
  text += " (it is at " + std::to_string(timeline_value(f.timeline)) + ")";
  // From the first submission the stream has not finished, follow unmet waits to a stream that
  // is not waiting on another: the signal that never came is missing there.
  int timeline = f.timeline;
  for (int hops = 0; hops < num_timelines(); ++hops) {
    const Stream& t = *streams_[timeline];
    if (t.remote) {
      text += "; " + describe(timeline) + " belongs to process " +
              std::to_string(process_of(t.device)) + ", which has not sent its data: it died, "
              "hangs or runs a different program";
      break;
    }
    const uint64_t next = t.semaphore.value() + 1;
    const Stream::Submitted* stuck = submitted(t, next);
    if (!stuck) break;
    text += "; " + describe(timeline) + "'s submission " + std::to_string(next) + " (" +
            (stuck->activity ? stuck->activity : "no collective") + ")";
    int unmet = -1;
    std::string waits;
    for (const Fence& w : stuck->waits) {
      if (w.none()) continue;
      const uint64_t at = timeline_value(w.timeline);
      if (at >= w.value) continue;
      waits += (waits.empty() ? " " : ", ") + describe(w.timeline) + " value " +
               std::to_string(w.value) + " (at " + std::to_string(at) + ")";
      if (unmet < 0) unmet = w.timeline;
    }
    if (unmet < 0) {
      text += " has what it waits for: it is running, or queued behind other work on its queue";
      break;
    }
    bool held = false;
    if (host_holds()) {
      std::lock_guard held_lock(held_mutex_);
      held = t.queued < next;
    }
    text += (held ? " is held on the host (data of another adapter or process) until it has" : " waits for") + waits;
    timeline = unmet;
  }
  return text;
}

void RuntimeState::wait_all(const std::string& during) {
  for (int t = 0; t < num_timelines(); ++t)
    if (!streams_[t]->remote) wait(Fence{t, last_submitted(t)}, during);
  std::lock_guard lock(mutex_);
  for (auto& s : streams_) recycle(*s);
  reclaim(false);
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

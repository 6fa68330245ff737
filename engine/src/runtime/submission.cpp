// Recording and submitting work: each stream's command buffers, jit captures (what a trace
// records for replay, and the activity that names a submission in errors), and the
// vkQueueSubmit of a recording or of captured command buffers, with its timeline waits.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "runtime/runtime_state.hpp"
#include "vk/check.hpp"

namespace meshvk::detail {

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
  const auto& all = thread_captures();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (it->runtime == this) return it->capture;
  return nullptr;
}

std::vector<Capture*> RuntimeState::captures() const {
  std::vector<Capture*> out;
  for (const ThreadCapture& c : thread_captures())
    if (c.runtime == this) out.push_back(c.capture);
  return out;
}

const char*& current_activity() {
  thread_local const char* activity = nullptr;
  return activity;
}

uint32_t& current_collective_work() {
  thread_local uint32_t work = 0;
  return work;
}

const char* intern_activity(const std::string& text) {
  // Few distinct texts (a collective's phases and steps), each kept for the process's life:
  // recordings, captured programs and error messages keep pointers to them.
  static std::mutex mutex;
  static std::set<std::string, std::less<>> texts;
  std::lock_guard lock(mutex);
  return texts.insert(text).first->c_str();
}

void RuntimeState::note_captured(const Capture::Submission& s,
                                 const std::vector<std::shared_ptr<const void>>& keep_alive) {
  // Every capture of a nesting (a loop body traced inside a jit trace) records the work: the
  // innermost owns the command buffer, the outer ones replay it too.
  const std::vector<Capture*> all = captures();
  for (size_t i = 0; i < all.size(); ++i) {
    Capture::Submission entry = s;
    entry.owned = s.owned && i + 1 == all.size();
    // A resubmitted loop body costs what its first run did (Lowered::estimate).
    if (!s.owned && entry.work.empty() && entry.cb) {
      for (const Capture* c : all)
        if (const auto it = c->work_of.find(entry.cb); it != c->work_of.end() && entry.work.empty()) entry.work = it->second;
    } else if (entry.cb) {
      all[i]->work_of[entry.cb] = entry.work;
    }
    all[i]->submissions.push_back(std::move(entry));
    all[i]->keep_alive.insert(all[i]->keep_alive.end(), keep_alive.begin(), keep_alive.end());
  }
}

void Capture::retain(std::shared_ptr<DeviceBuffer> buffer) {
  for (const auto& b : buffers)
    if (b == buffer) return;
  buffers.push_back(std::move(buffer));
}

void RuntimeState::recycle(Stream& s) {
  const uint64_t reached = s.semaphore.value();
  while (!s.in_flight.empty() && s.in_flight.front().value <= reached) {
    if (s.host_run) {
      std::lock_guard held(held_mutex_);
      host_work_.erase(s.in_flight.front().cb);
    }
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
  r.captured = capture() != nullptr;
  // A host_run stream's command buffers never reach the queue: no timestamps to take.
  const bool profiled = profile::on() && s.adapter == 0 && !s.host_run;
  // See secondaries_: captured work that replays merge, unprofiled (timestamps stay in primaries).
  const bool secondary = r.captured && !profiled && merges_replays();
  if (secondary) {
    r.cb = s.pool.allocate(true);
    secondaries_.insert(r.cb);
    captured_secondaries.fetch_add(1);
  } else if (s.idle.empty()) {
    r.cb = s.pool.allocate();
  } else {
    r.cb = s.idle.back();
    s.idle.pop_back();
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  const VkCommandBufferInheritanceInfo inherit{VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO};
  if (secondary) begin.pInheritanceInfo = &inherit;
  // Captured buffers are submitted again on replay, possibly while the previous one is pending.
  begin.flags = r.captured ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk::check(vkBeginCommandBuffer(r.cb, &begin), "vkBeginCommandBuffer");
  if (profiled) r.profile = profiler_->begin(timeline, r.cb);  // profile hook
  return r;
}

Fence RuntimeState::submit(Recording&& r) {
  std::lock_guard lock(mutex_);
  Capture* const capturing = r.captured ? capture() : nullptr;
  if (r.remote) {
    // Only a peer timeline's count matters here: it is what this process waits for.
    if (!is_peer_timeline(r.timeline)) return Fence{};
    const Fence f = submit_command_buffer(r.timeline, VK_NULL_HANDLE, r.waits, current_activity());
    if (capturing) {
      // A constant: left out of replays on its own process, so not counted here either.
      Capture::Submission entry{r.timeline, VK_NULL_HANDLE, r.waits, f.value, current_activity()};
      entry.trace_only = r.constant;
      note_captured(entry, {});
    }
    return f;
  }
  if (r.profile) profiler_->close(r.profile, capturing != nullptr);  // profile hook
  vk::check(vkEndCommandBuffer(r.cb), "vkEndCommandBuffer");
  if (r.host_work) {
    if (!streams_[r.timeline]->host_run)
      throw Error("internal: host work recorded for a stream that runs on its queue");
    std::lock_guard held(held_mutex_);
    host_work_[r.cb] = std::make_shared<const std::function<void()>>(std::move(r.host_work));
  }
  WrapSettler wrapped{*this};
  const Fence next{r.timeline, streams_[r.timeline]->last_submitted + 1};
  const VkCommandBuffer cb = is_secondary(r.cb) ? wrapped.wrap({&r.cb, 1}, next) : r.cb;
  const Fence f = submit_command_buffer(r.timeline, cb, r.waits, current_activity());
  wrapped.submitted = true;
  if (capturing) {
    Capture::Submission entry{r.timeline, r.cb, r.waits, f.value, current_activity()};
    entry.trace_only = r.constant;
    entry.work = std::move(r.work);
    entry.replica_waits = std::move(r.replica_waits);
    if (current_collective_work()) entry.work.push_back(current_collective_work());
    note_captured(entry, r.keep_alive);
  } else {
    streams_[r.timeline]->in_flight.push_back({f.value, r.cb, std::move(r.keep_alive)});
  }
  return f;
}

Fence RuntimeState::resubmit(int timeline, VkCommandBuffer cb, const std::vector<Fence>& waits) {
  std::lock_guard lock(mutex_);
  WrapSettler wrapped{*this};
  const Fence next{timeline, streams_[timeline]->last_submitted + 1};
  const Fence f = submit_command_buffer(timeline, is_secondary(cb) ? wrapped.wrap({&cb, 1}, next) : cb,
                                        waits, nullptr);
  wrapped.submitted = true;
  return f;
}

VkCommandBuffer RuntimeState::save_previous_run(int timeline, VkCommandBuffer captured, uint64_t signal,
                                                std::vector<SavedRun>& saves) {
  if (!captured || !profiler_->unsaved(captured)) return VK_NULL_HANDLE;
  Stream& s = *streams_[timeline];
  recycle(s);
  VkCommandBuffer cb;
  if (s.idle.empty()) {
    cb = s.pool.allocate();
  } else {
    cb = s.idle.back();
    s.idle.pop_back();
  }
  saves.push_back({timeline, signal, cb});
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk::check(vkBeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer");
  profiler_->save(cb, timeline, signal, captured);
  vk::check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  return cb;
}

void RuntimeState::settle_saves(std::vector<SavedRun>& saves, bool submitted) noexcept {
  for (const SavedRun& r : saves) {
    Stream& s = *streams_[r.timeline];
    if (submitted)
      s.in_flight.push_back({r.signal, r.cb, {}});
    else if (vkResetCommandBuffer(r.cb, 0) == VK_SUCCESS)
      s.idle.push_back(r.cb);
  }
  saves.clear();
}

std::vector<Fence> RuntimeState::resubmit_batch(int timeline,
                                                const std::vector<Resubmission>& entries) {
  std::lock_guard lock(mutex_);
  if (host_holds()) {
    // One by one: each may have to be held until what it waits for on another VkDevice is there.
    std::vector<Fence> fences;
    for (const Resubmission& e : entries) {
      WrapSettler wrapped{*this};
      const Fence next{timeline, streams_[timeline]->last_submitted + 1};
      fences.push_back(submit_command_buffer(
          timeline, is_secondary(e.cb) ? wrapped.wrap({&e.cb, 1}, next) : e.cb, e.waits, e.activity));
      wrapped.submitted = true;
    }
    note_resubmitted(timeline, entries, fences);
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
  std::vector<std::array<VkCommandBuffer, 2>> cbs(count);  // a loop body's saved ticks, then it
  SaveSettler settler{*this, {}};
  WrapSettler wrapped{*this};
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
    uint32_t n = 0;
    if (const VkCommandBuffer save = save_previous_run(timeline, entries[i].cb, signals[i], settler.saves))
      cbs[i][n++] = save;
    if (entries[i].cb)
      cbs[i][n++] = is_secondary(entries[i].cb)
                        ? wrapped.wrap({&entries[i].cb, 1}, Fence{timeline, signals[i]})
                        : entries[i].cb;
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
    submits[i].commandBufferCount = n;
    submits[i].pCommandBuffers = cbs[i].data();
    submits[i].signalSemaphoreCount = 1;
    submits[i].pSignalSemaphores = &signal_semaphore;
    fences.push_back(Fence{timeline, signals[i]});
  }
  if (count) {
    std::lock_guard queue_lock(s.queue.submit_mutex);
    vk::check(vkQueueSubmit(s.queue.handle, static_cast<uint32_t>(count), submits.data(), VK_NULL_HANDLE), "vkQueueSubmit");
    settler.submitted = true;
    wrapped.submitted = true;
  }
  s.last_submitted += count;
  s.queued = s.last_submitted;
  for (size_t i = 0; i < count; ++i) remember(s, signals[i], entries[i].activity, entries[i].waits);
  note_resubmitted(timeline, entries, fences);
  return fences;
}

void RuntimeState::note_resubmitted(int timeline, const std::vector<Resubmission>& entries,
                                    const std::vector<Fence>& fences) {
  // A loop replaying its body inside a jit trace: the trace's program submits the body's
  // command buffers again on its every replay (it does not own them).
  if (!capture()) return;
  for (size_t i = 0; i < entries.size(); ++i)
    note_captured({timeline, entries[i].cb, entries[i].waits, fences[i].value, entries[i].activity, false}, {});
}

void RuntimeState::release_command_buffer(int timeline, VkCommandBuffer cb) {
  std::lock_guard lock(mutex_);
  profiler_->release(cb);  // profile hook
  secondaries_.erase(cb);
  if (streams_[timeline]->host_run) {
    std::lock_guard held(held_mutex_);
    host_work_.erase(cb);
  }
  streams_[timeline]->pool.free(cb);
}

VkCommandBuffer RuntimeState::wrap(std::span<const VkCommandBuffer> cbs) {
  if (!wrap_pool_) wrap_pool_ = std::make_unique<vk::CommandPool>(device().handle(), streams_.front()->queue.family);
  while (!wrap_in_flight_.empty() &&
         timeline_value(wrap_in_flight_.front().first.timeline) >= wrap_in_flight_.front().first.value) {
    vk::check(vkResetCommandBuffer(wrap_in_flight_.front().second, 0), "vkResetCommandBuffer");
    wrap_idle_.push_back(wrap_in_flight_.front().second);
    wrap_in_flight_.pop_front();
  }
  VkCommandBuffer cb;
  if (wrap_idle_.empty()) {
    cb = wrap_pool_->allocate();
  } else {
    cb = wrap_idle_.back();
    wrap_idle_.pop_back();
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vk::check(vkBeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer");
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  for (size_t i = 0; i < cbs.size(); ++i) {
    if (i)
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                           0, 1, &barrier, 0, nullptr, 0, nullptr);
    vkCmdExecuteCommands(cb, 1, &cbs[i]);
  }
  vk::check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  return cb;
}

RuntimeState::WrapSettler::~WrapSettler() {
  for (const auto& [cb, done] : wrappers) {
    if (submitted) {
      rt.wrap_in_flight_.push_back({done, cb});
    } else if (vkResetCommandBuffer(cb, 0) == VK_SUCCESS) {
      rt.wrap_idle_.push_back(cb);
    }
  }
}

void RuntimeState::begin_capture(Capture* c) {
  std::lock_guard lock(mutex_);
  c->start_values.clear();
  for (const auto& s : streams_) c->start_values.push_back(s->last_submitted);
  thread_captures().push_back({this, c});
}

void RuntimeState::end_capture() {
  // The innermost of this runtime's captures on this thread.
  auto& all = thread_captures();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (it->runtime == this) {
      all.erase(std::next(it).base());
      return;
    }
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
}  // namespace meshvk::detail

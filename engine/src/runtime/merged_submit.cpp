// A jit replay as one submission, on CPU adapters whose streams all share one queue: lavapipe
// runs a queue's submissions one after another and charges per VkSubmitInfo (~20 us of CPU for
// one that writes a timestamp, whatever it holds), so a profiled replay of 8 devices' small
// steps paid that 16 or more times. One VkSubmitInfo pays it once.
#include <deque>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "runtime/env.hpp"
#include "runtime/runtime_state.hpp"
#include "vk/check.hpp"

namespace meshvk::detail {

bool RuntimeState::merges_replays() {
  // One adapter only: work across VkDevices is ordered through the host (communication thread).
  // GPUs only where asked for (MESHVK_MERGE_REPLAYS=1) until measured there.
  if (host_holds() || !env_switch("MESHVK_MERGE_REPLAYS").value_or(device().adapter().is_cpu()))
    return false;
  for (const auto& s : streams_)
    if (s->queue.handle != streams_.front()->queue.handle) return false;
  return true;
}

std::vector<Fence> RuntimeState::resubmit_merged(const std::vector<MergedEntry>& entries) {
  std::lock_guard lock(mutex_);
  if (!merges_replays())
    throw Error("internal: a merged resubmission where streams do not share one queue");
  if (merge_barrier_ == VK_NULL_HANDLE) {
    // Every earlier write visible to every later command: what the waits between entries gave.
    merge_barrier_ = streams_.front()->pool.allocate();
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;  // several times in one batch
    vk::check(vkBeginCommandBuffer(merge_barrier_, &begin), "vkBeginCommandBuffer");
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
    vkCmdPipelineBarrier(merge_barrier_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                         VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
    vk::check(vkEndCommandBuffer(merge_barrier_), "vkEndCommandBuffer");
  }
  const size_t timelines = streams_.size();
  std::vector<uint64_t> next(timelines), need(timelines, 0);
  for (size_t t = 0; t < timelines; ++t) next[t] = streams_[t]->last_submitted;
  std::vector<VkCommandBuffer> cbs;
  // Secondaries (captured unprofiled): executed from one primary, the barriers in it.
  std::vector<VkCommandBuffer> secondaries;
  bool all_secondary = true;
  std::vector<Fence> fences;
  std::deque<profile::SubmitHook> hooks;  // profile hook: one span per entry
  SaveSettler settler{*this, {}};
  WrapSettler wrapped{*this};
  for (const MergedEntry& e : entries) {
    std::vector<uint64_t> entry_need(timelines, 0);
    for (const Fence& f : e.submission.waits) {
      if (f.none()) continue;
      entry_need[f.timeline] = std::max(entry_need[f.timeline], f.value);
      if (f.value > next[f.timeline])
        throw Error("internal: a merged resubmission waits on work after it");
      // Waits on earlier entries are the barriers' business; the rest wait before the batch.
      if (f.value <= streams_[f.timeline]->last_submitted)
        need[f.timeline] = std::max(need[f.timeline], f.value);
    }
    const uint64_t signal = ++next[e.timeline];
    const VkCommandBuffer save = save_previous_run(e.timeline, e.submission.cb, signal, settler.saves);
    hooks.emplace_back(*profiler_, e.timeline, e.submission.cb, signal, entry_need);
    if (!cbs.empty()) cbs.push_back(merge_barrier_);
    if (save) {
      cbs.push_back(save);
      all_secondary = false;
    }
    if (e.submission.cb) {
      cbs.push_back(e.submission.cb);
      if (is_secondary(e.submission.cb))
        secondaries.push_back(e.submission.cb);
      else
        all_secondary = false;
    }
    fences.push_back(Fence{e.timeline, signal});
  }
  if (entries.empty()) return fences;
  // Every wrapper is reusable once the whole submission is done.
  if (all_secondary) {
    cbs.clear();
    if (!secondaries.empty()) cbs.push_back(wrapped.wrap(secondaries, fences.back()));
  } else {
    // Some entries are primaries (recorded while profiling, or before replays merged): the
    // secondaries among them each go in a primary of their own.
    for (VkCommandBuffer& cb : cbs)
      if (is_secondary(cb)) cb = wrapped.wrap({&cb, 1}, fences.back());
  }
  std::vector<VkSemaphore> wait_semaphores, signal_semaphores;
  std::vector<uint64_t> wait_values, signal_values;
  std::vector<VkPipelineStageFlags> wait_stages;
  for (size_t t = 0; t < timelines; ++t) {
    if (need[t]) {
      wait_semaphores.push_back(streams_[t]->semaphore.handle());
      wait_values.push_back(need[t]);
      wait_stages.push_back(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
    }
    if (next[t] > streams_[t]->last_submitted) {
      signal_semaphores.push_back(streams_[t]->semaphore.handle());
      signal_values.push_back(next[t]);
    }
  }
  VkTimelineSemaphoreSubmitInfo timeline_info{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  timeline_info.waitSemaphoreValueCount = static_cast<uint32_t>(wait_values.size());
  timeline_info.pWaitSemaphoreValues = wait_values.data();
  timeline_info.signalSemaphoreValueCount = static_cast<uint32_t>(signal_values.size());
  timeline_info.pSignalSemaphoreValues = signal_values.data();
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.pNext = &timeline_info;
  submit.waitSemaphoreCount = static_cast<uint32_t>(wait_semaphores.size());
  submit.pWaitSemaphores = wait_semaphores.data();
  submit.pWaitDstStageMask = wait_stages.data();
  submit.commandBufferCount = static_cast<uint32_t>(cbs.size());
  submit.pCommandBuffers = cbs.data();
  submit.signalSemaphoreCount = static_cast<uint32_t>(signal_semaphores.size());
  submit.pSignalSemaphores = signal_semaphores.data();
  {
    vk::Queue& queue = streams_.front()->queue;
    std::lock_guard queue_lock(queue.submit_mutex);
    vk::check(vkQueueSubmit(queue.handle, 1, &submit, VK_NULL_HANDLE), "vkQueueSubmit");
    settler.submitted = true;
    wrapped.submitted = true;
  }
  merged_replays.fetch_add(1);
  for (size_t i = 0; i < entries.size(); ++i) {
    Stream& s = *streams_[entries[i].timeline];
    s.last_submitted = fences[i].value;
    remember(s, fences[i].value, entries[i].submission.activity, entries[i].submission.waits);
  }
  return fences;
}

}  // namespace meshvk::detail

#include "exec/program.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "vk/copy.hpp"

namespace meshvk::exec {

using detail::Fence;
using detail::Recording;

Program::Program(std::shared_ptr<detail::RuntimeState> rt, std::unique_ptr<detail::Capture> capture,
                 std::vector<ShardedValue> inputs, std::vector<ShardedValue> outputs,
                 const std::vector<ShardedValue>& fed)
    : rt_(std::move(rt)),
      capture_(std::move(capture)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)) {
  fed_.resize(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    fed_[i].resize(inputs_[i].shards.size());
    if (i < fed.size())
      for (size_t k = 0; k < fed[i].shards.size() && k < fed_[i].size(); ++k)
        fed_[i][k] = {fed[i].shards[k], fed[i].shards[k]->ready()};
  }
  for (int t = 0; t < rt_->num_timelines(); ++t)
    last_replay_.push_back(Fence{t, rt_->last_submitted(t)});
  for (const ShardedValue& v : outputs_) {
    output_written_.emplace_back();
    for (const auto& b : v.shards) output_written_.back().push_back(b->ready());
  }
}

Program::~Program() {
  try {
    for (const Fence& f : last_replay_) rt_->wait(f, "releasing a jit program");
  } catch (const Error&) {
    // A device that has not finished: what its queued commands use (buffer views, staging
    // buffers) stays with the runtime until they have; the command buffers stay allocated
    // until the runtime's pools go.
    std::vector<uint64_t> values;
    for (const Fence& f : last_replay_) {
      if (f.none()) continue;
      values.resize(std::max<size_t>(values.size(), f.timeline + 1), 0);
      values[f.timeline] = std::max(values[f.timeline], f.value);
    }
    // The program's buffers too: a replay's uses of them are not in their last_use.
    std::vector<std::shared_ptr<const void>> kept = std::move(capture_->keep_alive);
    for (auto& b : capture_->buffers) kept.push_back(std::move(b));
    for (const auto* group : {&inputs_, &outputs_})
      for (const auto& v : *group)
        for (const auto& b : v.shards) kept.push_back(b);
    rt_->keep_until(std::move(values), std::move(kept));
    return;
  }
  for (const auto& s : capture_->submissions)
    if (s.owned && s.cb) rt_->release_command_buffer(s.timeline, s.cb);
}

std::vector<ShardedValue> Program::replay(const std::vector<ShardedValue>& inputs) {
  std::lock_guard lock(rt_->mutex());
  const int n = rt_->num_devices(), timelines = rt_->num_timelines();
  // 1. Each device waits until every stream finished the previous replay (its buffers are
  //    reused), then copies the new inputs into the traced input buffers it holds.
  std::vector<Fence> refreshed(n);
  std::set<int> used;
  for (const auto& s : capture_->submissions) used.insert(rt_->device_of(s.timeline));
  for (const auto& v : inputs_)
    for (const auto& b : v.shards) used.insert(b->device());
  for (const auto& v : outputs_)
    for (const auto& b : v.shards) used.insert(b->device());
  // Every submission that still reads or writes a buffer the replay rewrites, on any stream of
  // any device (a collective reading a returned result from another device's transfer stream),
  // must finish first: the buffers' last uses, per device, per timeline.
  std::vector<std::vector<uint64_t>> in_use(n, std::vector<uint64_t>(timelines, 0));
  auto note_uses = [&](const detail::DeviceBuffer& b) {
    auto& mine = in_use[b.device()];
    for (int t = 0; t < timelines; ++t) mine[t] = std::max(mine[t], b.last_use()[t]);
  };
  for (const auto& b : capture_->buffers) note_uses(*b);
  for (const auto* values : {&inputs_, &outputs_})
    for (const auto& v : *values)
      for (const auto& b : v.shards) note_uses(*b);
  for (const int d : used) {
    if (!rt_->is_local(d)) continue;  // its process refreshes it
    Recording rec = rt_->begin(d);
    for (int t = 0; t < timelines; ++t) rec.wait_for(Fence{t, in_use[d][t]});
    // profile hook: keeps the previous replay's timestamps (rec is d's next submission).
    profile::save_replayed(rt_->profiler(), rec.cb, d, rt_->last_submitted(d) + 1,
                           capture_->submissions,
                           [&](int timeline) { return rt_->device_of(timeline) == d; });
    for (const Fence& f : last_replay_) rec.wait_for(f);
    std::vector<detail::DeviceBuffer*> read;
    struct Refresh {
      const detail::DeviceBuffer* src;
      detail::DeviceBuffer* dst;
      const detail::DeviceBuffer* from;  // src, or its copy aside
    };
    std::vector<Refresh> copies;
    for (size_t i = 0; i < inputs.size(); ++i)
      for (size_t k = 0; k < inputs[i].shards.size(); ++k) {
        detail::DeviceBuffer& dst = *inputs_[i].shards[k];
        if (dst.device() != d) continue;
        const detail::DeviceBuffer& src = *inputs[i].shards[k];
        rec.wait_for(src.ready());
        if (&src == &dst || src.bytes() == 0) continue;
        Fed& last = fed_[i][k];
        const detail::Fence ready = src.ready();
        if (last.source.lock().get() == &src && last.written.timeline == ready.timeline &&
            last.written.value == ready.value)
          continue;  // what the buffer holds already
        last = {inputs[i].shards[k], ready};
        copies.push_back({&src, &dst, &src});
        read.push_back(const_cast<detail::DeviceBuffer*>(&src));
      }
    // A source that is itself one of the inputs this refresh rewrites (a result the function
    // returned unchanged, passed back in another position: f(x, y) = (y, x)) is copied aside
    // first, so no copy reads what another has already overwritten.
    bool staged = false;
    for (Refresh& c : copies) {
      const bool rewritten =
          std::any_of(copies.begin(), copies.end(), [&](const Refresh& o) { return o.dst == c.src; });
      if (!rewritten) continue;
      auto aside = rt_->allocate(d, c.src->bytes());
      const VkBufferCopy region{c.src->offset(), aside->offset(), c.src->bytes()};
      vk::copy_buffer(rec.cb, c.src->vk_buffer(), aside->vk_buffer(), 1, &region);
      c.from = aside.get();
      rec.keep_alive.push_back(std::move(aside));
      staged = true;
    }
    if (staged) {
      VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT;
      barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      vkCmdPipelineBarrier(rec.cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &barrier,
                           0, nullptr, 0, nullptr);
    }
    for (const Refresh& c : copies) {
      const VkBufferCopy region{c.from->offset(), c.dst->offset(), c.src->bytes()};
      const profile::DeviceSpan span(rec.profile.get(), "jit input", c.src->bytes(),  // profile hook
                                     {c.src->ready().timeline, c.src->ready().value});
      vk::copy_buffer(rec.cb, c.from->vk_buffer(), c.dst->vk_buffer(), 1, &region);
    }
    refreshed[d] = rt_->submit(std::move(rec));
    for (auto* b : read) b->used_by(refreshed[d]);
  }
  // 2. The traced submissions again, their waits moved to this replay's timeline values: waits
  //    on work from before the trace become waits on the refresh of that stream's device.
  std::map<std::pair<int, uint64_t>, uint64_t> moved;
  auto remap = [&](const Fence& f) -> Fence {
    if (f.none()) return f;
    if (f.value <= capture_->start_values[f.timeline]) {
      const Fence& r = refreshed[rt_->device_of(f.timeline)];
      return r.none() ? Fence{} : r;
    }
    const auto it = moved.find({f.timeline, f.value});
    if (it == moved.end()) throw Error("internal: a traced submission waits on work outside its program");
    return Fence{f.timeline, it->second};
  };
  // Each stream's submissions go out in as few vkQueueSubmit calls as the dependencies allow:
  // a stream submits every next submission whose waits on other streams are already submitted
  // (so no wait ever precedes its signal), then the next stream takes its turn.
  // Transfers between processes write the ring ranges they wrote when traced: each send waits
  // for whatever read those bytes since (eager transfers; the last replay's receives).
  std::map<std::pair<int, uint64_t>, std::vector<Fence>> ring_waits;
  for (const auto& use : capture_->ring_uses)
    ring_waits[{use.sent.timeline, use.sent.value}] =
        rt_->ring_readers(use.src_process, use.dst_process, use.offset, use.bytes);
  // This process's sends among them, which the staged transport ships when they are done.
  std::map<std::pair<int, uint64_t>, const detail::Capture::RingUse*> sends;
  for (const auto& use : capture_->ring_uses)
    if (use.src_process == rt_->process_index()) sends[{use.sent.timeline, use.sent.value}] = &use;
  std::vector<Fence> last(timelines);
  const auto& subs = capture_->submissions;
  const bool merge = rt_->merges_replays();
  if (merge) {
    // One submission for the whole replay, in the trace's order (each submission's waits name
    // work submitted before it): see RuntimeState::resubmit_merged.
    std::vector<detail::RuntimeState::MergedEntry> merged;
    std::vector<uint64_t> next(timelines);
    for (int t = 0; t < timelines; ++t) next[t] = rt_->last_submitted(t);
    for (const auto& sub : subs) {
      if (sub.trace_only) {
        moved[{sub.timeline, sub.signal}] = next[sub.timeline];
        continue;
      }
      std::vector<Fence> waits{refreshed[rt_->device_of(sub.timeline)]};
      for (const Fence& w : sub.waits) waits.push_back(remap(w));
      moved[{sub.timeline, sub.signal}] = ++next[sub.timeline];
      merged.push_back({sub.timeline, {sub.cb, std::move(waits), sub.activity}});
    }
    const std::vector<Fence> fences = rt_->resubmit_merged(merged);
    for (const Fence& f : fences) last[f.timeline] = f;
  }
  std::vector<std::deque<size_t>> pending(timelines);
  for (size_t i = 0; i < subs.size(); ++i) pending[subs[i].timeline].push_back(i);
  size_t remaining = merge ? 0 : subs.size();
  while (remaining) {
    bool progressed = false;
    for (int t = 0; t < timelines; ++t) {
      std::vector<detail::RuntimeState::Resubmission> batch;
      uint64_t next = rt_->last_submitted(t) + 1;
      while (!pending[t].empty()) {
        const auto& sub = subs[pending[t].front()];
        const bool ready = std::all_of(sub.waits.begin(), sub.waits.end(), [&](const Fence& w) {
          return w.none() || w.value <= capture_->start_values[w.timeline] ||
                 moved.count({w.timeline, w.value});
        });
        if (!ready) break;
        if (sub.trace_only) {
          moved[{t, sub.signal}] = next - 1;
          pending[t].pop_front();
          --remaining;
          progressed = true;
          continue;
        }
        std::vector<Fence> waits{refreshed[rt_->device_of(t)]};
        for (const Fence& w : sub.waits) waits.push_back(remap(w));
        if (const auto it = ring_waits.find({t, sub.signal}); it != ring_waits.end())
          waits.insert(waits.end(), it->second.begin(), it->second.end());
        if (const auto it = sends.find({t, sub.signal}); it != sends.end())
          rt_->note_send(t, next, it->second->dst_process, it->second->offset, it->second->bytes,
                         it->second->from);
        moved[{t, sub.signal}] = next++;
        batch.push_back({sub.cb, std::move(waits), sub.activity});
        pending[t].pop_front();
      }
      if (batch.empty()) continue;
      last[t] = rt_->resubmit_batch(t, batch).back();
      remaining -= batch.size();
      progressed = true;
    }
    if (!progressed) throw Error("internal: a traced program's submissions wait on each other in a cycle");
  }
  for (const auto& use : capture_->ring_uses)
    rt_->ring_read_by(use.src_process, use.dst_process, use.offset, use.bytes, remap(use.received));
  // 3. Outputs are ready when the submissions that wrote them (in this replay) are.
  for (size_t i = 0; i < outputs_.size(); ++i)
    for (size_t k = 0; k < outputs_[i].shards.size(); ++k) {
      const Fence written = remap(output_written_[i][k]);
      outputs_[i].shards[k]->written_by(written);
    }
  std::vector<ShardedValue> out = outputs_;
  for (int t = 0; t < timelines; ++t)
    if (!last[t].none())
      last_replay_[t] = last[t];
    else if (t < n && !refreshed[t].none())
      last_replay_[t] = refreshed[t];
  return out;
}

}  // namespace meshvk::exec

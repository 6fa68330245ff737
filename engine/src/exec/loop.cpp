#include "exec/loop.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "meshvk/error.hpp"
#include "vk/copy.hpp"

namespace meshvk::exec {

using detail::Fence;

LoopBody::LoopBody(std::shared_ptr<detail::RuntimeState> rt, std::unique_ptr<detail::Capture> capture,
                   std::vector<ShardedValue> inputs, std::vector<ShardedValue> outputs, size_t carried)
    : rt_(std::move(rt)),
      body_(std::move(capture)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      carried_(carried) {
  std::set<int> devices;
  for (const auto& s : body_->submissions) devices.insert(rt_->device_of(s.timeline));
  for (const auto* group : {&inputs_, &outputs_})
    for (const auto& v : *group)
      for (const auto& b : v.shards) devices.insert(b->device());
  devices_.assign(devices.begin(), devices.end());
  last_.assign(rt_->num_timelines(), 0);
  for (const auto& s : body_->submissions) last_[s.timeline] = std::max(last_[s.timeline], s.signal);
  for (const ShardedValue& v : outputs_) {
    output_written_.emplace_back();
    for (const auto& b : v.shards) output_written_.back().push_back(b->ready());
  }
}

LoopBody::~LoopBody() {
  std::vector<uint64_t> values = last_;
  try {
    for (int t = 0; t < static_cast<int>(values.size()); ++t)
      rt_->wait(Fence{t, values[t]}, "releasing a loop's body");
  } catch (const Error&) {
    // Still queued: the command buffers stay allocated until the runtime's pools go, and what
    // they touch stays alive until they finish.
    std::vector<std::shared_ptr<const void>> kept;
    for (auto* c : {body_.get(), feedback_.get()}) {
      if (!c) continue;
      for (auto& k : c->keep_alive) kept.push_back(std::move(k));
      for (auto& b : c->buffers) kept.push_back(std::move(b));
    }
    for (const auto* group : {&inputs_, &outputs_})
      for (const auto& v : *group)
        for (const auto& b : v.shards) kept.push_back(b);
    rt_->keep_until(std::move(values), std::move(kept));
    return;
  }
  for (auto* c : {body_.get(), feedback_.get()})
    if (c)
      for (const auto& s : c->submissions)
        if (s.owned && s.cb) rt_->release_command_buffer(s.timeline, s.cb);
}

size_t LoopBody::recorded() const {
  size_t n = 0;
  for (const auto* c : {body_.get(), feedback_.get()})
    if (c)
      for (const auto& s : c->submissions) n += s.owned && s.cb ? 1 : 0;
  return n;
}

// Each device copies the carried pieces it holds from the outputs into the inputs, once every
// stream is past `after` (the previous iteration, and whatever read the loop's buffers since).
void LoopBody::feed_back(const std::vector<uint64_t>& after, std::vector<Fence>& fed) {
  std::vector<Fence> waits;
  for (int t = 0; t < static_cast<int>(after.size()); ++t)
    if (after[t]) waits.push_back(Fence{t, after[t]});
  if (feedback_) {
    for (const auto& s : feedback_->submissions)
      fed[rt_->device_of(s.timeline)] = rt_->resubmit_batch(s.timeline, {{s.cb, waits, "loop carry"}}).front();
  } else {
    feedback_ = std::make_unique<detail::Capture>();
    rt_->begin_capture(feedback_.get());
    try {
      const detail::ActivityScope activity("loop carry");
      for (const int d : devices_) {
        detail::Recording rec = rt_->begin(d);
        for (const Fence& w : waits) rec.wait_for(w);
        for (size_t i = 0; i < carried_; ++i)
          for (size_t k = 0; k < outputs_[i].shards.size(); ++k) {
            const detail::DeviceBuffer& src = *outputs_[i].shards[k];
            const detail::DeviceBuffer& dst = *inputs_[i].shards[k];
            if (dst.device() != d || &src == &dst || src.bytes() == 0) continue;
            const VkBufferCopy region{src.offset(), dst.offset(), src.bytes()};
            vk::copy_buffer(rec.cb, src.vk_buffer(), dst.vk_buffer(), 1, &region);
          }
        fed[d] = rt_->submit(std::move(rec));
      }
    } catch (...) {
      rt_->end_capture();
      throw;
    }
    rt_->end_capture();
  }
  for (size_t i = 0; i < carried_; ++i)
    for (size_t k = 0; k < outputs_[i].shards.size(); ++k) {
      const Fence f = fed[inputs_[i].shards[k]->device()];
      outputs_[i].shards[k]->used_by(f);
      inputs_[i].shards[k]->written_by(f);
    }
}

void LoopBody::iterate() {
  std::lock_guard lock(rt_->mutex());
  const int timelines = rt_->num_timelines();
  // 1. Every stream past the previous iteration and past every other use of the loop's buffers
  //    (a result read out between iterations): then the carried values move.
  std::vector<uint64_t> after = last_;
  auto note_uses = [&](const detail::DeviceBuffer& b) {
    for (int t = 0; t < timelines; ++t) after[t] = std::max(after[t], b.last_use()[t]);
  };
  for (const auto& b : body_->buffers) note_uses(*b);
  for (const auto* group : {&inputs_, &outputs_})
    for (const auto& v : *group)
      for (const auto& b : v.shards) note_uses(*b);
  std::vector<Fence> fed(rt_->num_devices());
  feed_back(after, fed);
  // 2. The body's submissions again, as Program::replay submits a program's: waits on work from
  //    before the body become waits on this iteration's copies of that stream's device.
  std::map<std::pair<int, uint64_t>, uint64_t> moved;
  auto remap = [&](const Fence& f) -> Fence {
    if (f.none()) return f;
    if (f.value <= body_->start_values[f.timeline]) return fed[rt_->device_of(f.timeline)];
    const auto it = moved.find({f.timeline, f.value});
    if (it == moved.end()) throw Error("internal: a loop body's submission waits on work outside it");
    return Fence{f.timeline, it->second};
  };
  const auto& subs = body_->submissions;
  std::vector<std::deque<size_t>> pending(timelines);
  for (size_t i = 0; i < subs.size(); ++i) pending[subs[i].timeline].push_back(i);
  size_t remaining = subs.size();
  while (remaining) {
    bool progressed = false;
    for (int t = 0; t < timelines; ++t) {
      std::vector<detail::RuntimeState::Resubmission> batch;
      std::vector<uint64_t> traced;
      uint64_t next = rt_->last_submitted(t) + 1;
      while (!pending[t].empty()) {
        const auto& sub = subs[pending[t].front()];
        const bool ready = std::all_of(sub.waits.begin(), sub.waits.end(), [&](const Fence& w) {
          return w.none() || w.value <= body_->start_values[w.timeline] || moved.count({w.timeline, w.value});
        });
        if (!ready) break;
        if (sub.trace_only) {  // see Capture::Submission::trace_only
          moved[{t, sub.signal}] = next - 1;
          pending[t].pop_front();
          --remaining;
          progressed = true;
          continue;
        }
        std::vector<Fence> waits{fed[rt_->device_of(t)]};
        for (const Fence& w : sub.waits) waits.push_back(remap(w));
        moved[{t, sub.signal}] = next++;
        batch.push_back({sub.cb, std::move(waits), sub.activity});
        pending[t].pop_front();
      }
      if (batch.empty()) continue;
      last_[t] = rt_->resubmit_batch(t, batch).back().value;
      remaining -= batch.size();
      progressed = true;
    }
    if (!progressed) throw Error("internal: a loop body's submissions wait on each other in a cycle");
  }
  for (int d = 0; d < rt_->num_devices(); ++d)
    if (!fed[d].none()) last_[fed[d].timeline] = std::max(last_[fed[d].timeline], fed[d].value);
  // 3. The outputs are this iteration's.
  for (size_t i = 0; i < outputs_.size(); ++i)
    for (size_t k = 0; k < outputs_[i].shards.size(); ++k)
      outputs_[i].shards[k]->written_by(remap(output_written_[i][k]));
  if (rt_->capture()) return;
  ahead_.push_back(last_);
  if (ahead_.size() > kAhead) {
    for (int t = 0; t < timelines; ++t)
      if (ahead_.front()[t]) rt_->wait(Fence{t, ahead_.front()[t]}, "a loop's earlier iteration");
    ahead_.pop_front();
  }
}

void overwrite(detail::RuntimeState& rt, const ShardedValue& dst, const ShardedValue& src) {
  std::lock_guard lock(rt.mutex());
  if (dst.shards.size() != src.shards.size())
    throw Error("internal: overwriting a value with one of another layout");
  const detail::ActivityScope activity("loop input");
  for (size_t k = 0; k < dst.shards.size(); ++k) {
    detail::DeviceBuffer& to = *dst.shards[k];
    const detail::DeviceBuffer& from = *src.shards[k];
    if (&to == &from || from.bytes() == 0) continue;
    if (to.device() != from.device() || to.bytes() != from.bytes())
      throw Error("internal: overwriting a piece with one of another device or size");
    detail::Recording rec = rt.begin(to.device());
    rec.wait_for(from.ready());
    for (int t = 0; t < static_cast<int>(to.last_use().size()); ++t) rec.wait_for(Fence{t, to.last_use()[t]});
    const VkBufferCopy region{from.offset(), to.offset(), from.bytes()};
    vk::copy_buffer(rec.cb, from.vk_buffer(), to.vk_buffer(), 1, &region);
    const Fence f = rt.submit(std::move(rec));
    to.written_by(f);
    const_cast<detail::DeviceBuffer&>(from).used_by(f);
  }
}

}  // namespace meshvk::exec

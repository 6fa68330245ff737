// Submissions across adapters: a VkDevice cannot wait on another VkDevice's timeline semaphores
// (lavapipe has no external semaphores), and lavapipe stalls its whole queue on a wait whose
// signal is not yet submitted. So with several adapters a submission reaches its queue only when
// every value it waits for is reached (other VkDevices) or already submitted (its own VkDevice);
// until then it is held on the host, with every later submission of its stream (a timeline's
// signals must reach the queue in order). The runtime's communication thread submits held work
// when its inputs arrive. With one adapter none of this runs.
#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "runtime/process_group.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

namespace {
// How long the communication thread waits on one remote value before looking again (new held
// work may depend on another).
constexpr uint64_t kPollNs = 2'000'000;
// Staged: how long the thread keeps calling MPI without a pause while messages are in flight
// but none completes.
constexpr int kStreamingMs = 20;
}  // namespace

bool RuntimeState::submittable(const Stream& s, const std::vector<uint64_t>& need) const {
  for (size_t t = 0; t < need.size(); ++t) {
    if (!need[t]) continue;
    const Stream& from = *streams_[t];
    if (!from.remote && from.adapter == s.adapter ? from.queued < need[t]
                                                  : timeline_value(static_cast<int>(t)) < need[t])
      return false;
  }
  return true;
}

void RuntimeState::enqueue(Stream& s, VkCommandBuffer cb, std::vector<uint64_t> need,
                           uint64_t signal) {
  if (liveness_) liveness_->progressed();  // the program submits work: a sign of life
  std::lock_guard lock(held_mutex_);
  if (s.host_run) {
    // Always the communication thread's: it runs the work once every wait is reached.
    const auto work = host_work_.find(cb);
    s.held.push_back({cb, std::move(need), signal,
                      work == host_work_.end() ? nullptr : work->second});
    held_cv_.notify_one();
    ring_own_doorbell();
    return;
  }
  if (s.held.empty() && submittable(s, need)) {
    queue_submit(s, cb, need, signal);
    s.queued = signal;
    // Other processes may wait for it: the communication thread publishes it when reached.
    if (processes_ > 1) {
      held_cv_.notify_one();
      ring_own_doorbell();
    }
    return;
  }
  s.held.push_back({cb, std::move(need), signal});
  held_cv_.notify_one();
  if (processes_ > 1) ring_own_doorbell();
}

bool RuntimeState::drain_held() {
  bool any = false;
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (auto& sp : streams_) {
      Stream& s = *sp;
      if (s.host_run) continue;  // run_host_work's
      while (!s.held.empty() && submittable(s, s.held.front().need)) {
        const Stream::Held h = std::move(s.held.front());
        s.held.pop_front();
        queue_submit(s, h.cb, h.need, h.signal);
        s.queued = h.signal;
        progressed = any = true;
      }
    }
  }
  return any;
}

bool RuntimeState::run_host_work(std::unique_lock<std::mutex>& lock) {
  // Only this thread takes a host_run stream's held work, front first: the stream's values are
  // signalled in order, each after its work.
  bool any = false;
  for (auto& sp : streams_) {
    Stream& s = *sp;
    if (!s.host_run) continue;
    while (!s.held.empty()) {
      const std::vector<uint64_t>& need = s.held.front().need;
      bool ready = true;
      for (size_t t = 0; t < need.size() && ready; ++t)
        ready = !need[t] || timeline_value(static_cast<int>(t)) >= need[t];
      if (!ready) break;
      const auto work = s.held.front().host_work;
      const uint64_t signal = s.held.front().signal;
      lock.unlock();
      if (work && *work) (*work)();
      s.semaphore.signal(signal);
      lock.lock();
      s.held.pop_front();
      s.queued = signal;
      any = true;
    }
  }
  return any;
}

void RuntimeState::communicate() {
  std::unique_lock lock(held_mutex_);
  std::chrono::steady_clock::time_point give_up{};
  // Staged between processes: how long to sleep while nothing moves (doubling up to 1 ms), as
  // messages only arrive when this thread looks.
  uint64_t quiet_ns = 50'000;
  // Staged, while messages are on their way: MPI moves their bytes only inside calls (over shared
  // memory a fragment at a time, each needing both sides to call), so the thread calls it again
  // at once, yielding the core in between, rather than sleeping. Only while messages complete:
  // a peer that takes none (stopped, or busy for long) gets the sleeping polls again.
  bool streaming = false, was_busy = false;
  std::chrono::steady_clock::time_point last_moved{};
  while (true) {
    try {
      if (processes_ > 1) {
        heartbeat();
        publish_progress();
      }
      if (link_) {
        lock.unlock();
        const bool moved = exchange_staged();
        lock.lock();
        const bool busy = link_->busy();
        const auto now = std::chrono::steady_clock::now();
        if (moved || (busy && !was_busy)) last_moved = now;
        was_busy = busy;
        streaming = busy && now - last_moved < std::chrono::milliseconds(kStreamingMs);
        quiet_ns = moved || busy ? 50'000 : std::min<uint64_t>(quiet_ns * 2, 1'000'000);
      }
      if (drain_held()) continue;
      if (host_transfers_ && run_host_work(lock)) continue;
    } catch (const std::exception& e) {
      // A failed vkQueueSubmit: nothing held can run any more; waits on it time out naming this.
      if (!lock.owns_lock()) lock.lock();
      communication_error_ = e.what();
      for (auto& s : streams_) s->held.clear();
      if (processes_ > 1) liveness_->forget_all();  // no heartbeat either
      return;
    }
    // The first remote value a held submission still waits for.
    const Stream* blocking = nullptr;
    uint64_t value = 0;
    for (const auto& sp : streams_) {
      if (sp->held.empty() || blocking) continue;
      const auto& need = sp->held.front().need;
      for (size_t t = 0; t < need.size() && !blocking; ++t) {
        const Stream& from = *streams_[t];
        if (need[t] && (from.remote || from.adapter != sp->adapter) &&
            timeline_value(static_cast<int>(t)) < need[t]) {
          blocking = &from;
          value = need[t];
        }
      }
    }
    const bool idle = std::none_of(streams_.begin(), streams_.end(),
                                   [](const auto& s) { return !s->held.empty(); });
    if (stopping_) {
      // Shutting down: held work still gets its chance for one wait timeout, then is dropped
      // unsubmitted (its command buffers and buffers go with the runtime). Staged, every value
      // and byte other processes may wait for goes out first, and the thread ends once every
      // process said it sends nothing more and its own messages are through (none is left
      // unmatched when MPI finalizes).
      if (link_ && idle && progress_published()) {
        lock.unlock();
        link_->say_goodbye();
        const bool done = link_->done();
        lock.lock();
        if (done) return;
      } else if (!link_ && idle) {
        return;
      }
      if (give_up == std::chrono::steady_clock::time_point{})
        give_up = std::chrono::steady_clock::now() + std::chrono::nanoseconds(wait_timeout_ns_);
      if (std::chrono::steady_clock::now() > give_up) return;
    }
    if (processes_ > 1 && (blocking || !idle || !progress_published())) {
      // Other processes wait on what this one publishes, and this one on what they publish:
      // sleep until a local device finishes, or (with nothing local to publish) until another
      // process rings.
      const bool publishing = !progress_published();
      lock.unlock();
      if (streaming)
        std::this_thread::yield();
      else if (link_)  // staged: messages arrive only when this thread looks
        wait_local_progress(blocking && blocking->remote ? 100'000 : quiet_ns);
      else if (publishing)
        wait_local_progress(blocking && blocking->remote ? 200'000 : 1'000'000);
      else
        wait_for_peers(2'000'000, host_transfers_ && blocking && blocking->remote ? peer_spin_ns_ : 0);
      lock.lock();
    } else if (idle && link_) {
      if (streaming) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      } else {
        held_cv_.wait_for(lock, std::chrono::nanoseconds(quiet_ns));
      }
    } else if (idle && processes_ > 1) {
      // The heartbeat goes on while nothing moves.
      held_cv_.wait_for(lock, std::chrono::nanoseconds(liveness_->period_ns()));
    } else if (idle) {
      held_cv_.wait(lock);
    } else if (blocking) {
      lock.unlock();
      blocking->semaphore.wait(value, kPollNs);
      lock.lock();
    } else {
      // Held only behind other held work of this VkDevice: that moves when its own input comes.
      held_cv_.wait_for(lock, std::chrono::nanoseconds(kPollNs));
    }
  }
}

void RuntimeState::start_communication() {
  communication_ = std::thread([this] { communicate(); });
}

void RuntimeState::stop_communication() {
  if (!communication_.joinable()) return;
  {
    std::lock_guard lock(held_mutex_);
    stopping_ = true;
  }
  held_cv_.notify_one();
  if (processes_ > 1) ring_own_doorbell();
  communication_.join();
  end_heartbeat();
}

}  // namespace meshvk::detail

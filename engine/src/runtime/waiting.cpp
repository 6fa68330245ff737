// Waiting on the host for timeline values, with a timeout whose error explains what the
// device was stuck on; with several processes, watching the peers while waiting.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <time.h>

#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "runtime/process_group.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

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

namespace {

uint64_t process_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

}  // namespace

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
  // A CPU adapter (lavapipe) computes in this process's threads: a window of the timeout in
  // which the process used a sixteenth of a core or more is a long kernel (a tutorial-sized
  // matmul takes minutes), not a hang, so the wait goes on for another window; a sixteenth, so
  // that a machine shared with other jobs still counts as busy (a quarter timed out a 36 s
  // kernel on 2 cores at load 6). A stalled queue blocks without using the CPU, and so still
  // times out.
  const bool on_cpu = device_for(s.device).adapter().is_cpu();
  for (uint64_t before = process_cpu_ns();;) {
    const auto start = std::chrono::steady_clock::now();
    if (s.semaphore.wait(f.value, wait_timeout_ns_)) return;
    const auto wall = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
            .count());
    const uint64_t now = process_cpu_ns();
    const bool busy = on_cpu && now - before >= wall / 16;
    before = now;
    if (!busy) break;
  }
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
  // with what was waited for, rather than return an error to a program that cannot go on. The
  // wait goes on while the job shows signs of life: MESHVK_WAIT_TIMEOUT_MS counts the time no
  // process showed progress, or an awaited one sent no heartbeat (runtime/liveness.hpp).
  const Stream& s = *streams_[f.timeline];
  ProcessGroup& group = *ProcessGroup::get();
  Liveness::Watch watch;
  Liveness::Waiting waiting(liveness_);
  constexpr uint64_t kSliceNs = 20'000'000;
  auto judged = std::chrono::steady_clock::now();
  while (true) {
    if (s.remote ? timeline_value(f.timeline) >= f.value : s.semaphore.wait(f.value, kSliceNs)) {
      liveness_->progressed();
      return;
    }
    if (s.remote) std::this_thread::sleep_for(std::chrono::microseconds(50));
    const bool resumed = liveness_->look(watch, Liveness::kResumedNs);
    const int dead = group.dead_process();
    std::string why;
    if (dead >= 0) {
      // Just resumed (stopped, then continued by Open MPI's SIGCONT as it ends the job): the
      // other most likely ended the job because of this process, and is not to be blamed.
      why = group.gone(dead, resumed);
    } else {
      const auto now = std::chrono::steady_clock::now();
      if (now - judged < std::chrono::milliseconds(10)) continue;
      judged = now;
      waiting.account();
      const Liveness::Verdict verdict =
          liveness_->judge(watch, {}, wait_timeout_ns_, &ProcessGroup::state_of, &group);
      if (!verdict.note.empty()) group.note(verdict.note);
      if (!verdict.lost) continue;
      why = "timed out: " + verdict.headline + " (MESHVK_WAIT_TIMEOUT_MS=" +
            std::to_string(wait_timeout_ns_ / 1000000) + ")";
      group.abort(why + " while process " + std::to_string(process_) + " waited during " + during +
                  ": " + explain_stall(f) + verdict.peers + "; ending the job");
    }
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
}  // namespace meshvk::detail

// Liveness between processes: the heartbeat's counters and the rule a waiting process applies
// (runtime/liveness.hpp says which and why).
#include "runtime/liveness.hpp"

#include <algorithm>
#include <ctime>

#include "runtime/env.hpp"

namespace meshvk::detail {

namespace {

constexpr uint64_t kNoteMs = 700;
// A heartbeat missing this long at least ends the job (with a shorter MESHVK_WAIT_TIMEOUT_MS,
// a loaded machine can starve a communication thread for a second).
constexpr uint64_t kSilentFloorMs = 2000;

uint64_t process_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

uint64_t ms(Liveness::Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

Liveness::Liveness(int rank, int size) : rank_(rank), size_(size), peers_(static_cast<size_t>(size)) {
  uint64_t timeout_ms = 120000;
  try {
    timeout_ms = env_unsigned("MESHVK_WAIT_TIMEOUT_MS", 1, 365ull * 24 * 3600 * 1000, "milliseconds")
                     .value_or(timeout_ms);
  } catch (...) {  // named where the runtime reads it
  }
  // Ten beats per timeout, at most 100 ms apart (a few small messages a second per peer).
  period_ns_ = std::clamp<uint64_t>(timeout_ms * 100'000, 1'000'000, 100'000'000);
}

int64_t Liveness::stall_ns() const {
  return static_cast<int64_t>(std::max<uint64_t>(1'000'000'000, 10 * period_ns_));
}

bool Liveness::due() {
  const int64_t now = ns(Clock::now());
  listened_.store(now, std::memory_order_relaxed);
  const int64_t before = looked_.exchange(now, std::memory_order_relaxed);
  if (before && now - before > stall_ns()) {
    std::lock_guard lock(mutex_);
    excuse(Clock::now());
  }
  const int64_t beat = last_beat_.load(std::memory_order_relaxed);
  return !beat || now - beat >= static_cast<int64_t>(period_ns_);
}

Liveness::Beat Liveness::beat(uint64_t timelines, uint64_t own_cpu_ns) {
  const auto now = Clock::now();
  std::lock_guard lock(mutex_);
  const uint64_t cpu = process_cpu_ns();
  const uint64_t excluded = own_cpu_ns + wait_cpu_ns_.load(std::memory_order_relaxed);
  const uint64_t user = cpu > excluded ? cpu - excluded : 0;
  const uint64_t program = progress_.load(std::memory_order_relaxed);
  const int64_t previous = last_beat_.load(std::memory_order_relaxed);
  bool moved = !previous || timelines != last_timelines_ ||
               program != last_program_progress_;
  if (!moved) {
    // Computing outside meshvk's waits: a sixteenth of a core or more over the period, as the
    // one-process wait counts a CPU adapter busy (a machine shared with other jobs still counts).
    const auto elapsed = static_cast<uint64_t>(ns(now) - previous);
    moved = user > last_user_cpu_ && user - last_user_cpu_ >= elapsed / 16;
  }
  last_beat_.store(ns(now), std::memory_order_relaxed);
  last_timelines_ = timelines;
  last_program_progress_ = program;
  last_user_cpu_ = user;
  Peer& self = peers_[rank_];
  if (!self.known) self = Peer{true, {}, now, now};
  if (moved) {
    ++own_progress_;
    self.progress_at = now;
  }
  self.tick_at = now;
  self.last = Beat{++tick_, own_progress_, waiting_.load(std::memory_order_relaxed) > 0 ? 1u : 0u};
  return self.last;
}

namespace {
uint64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}
}  // namespace

Liveness::Waiting::Waiting(Liveness* liveness) : liveness_(liveness) {
  if (!liveness_) return;
  liveness_->enter_wait();
  cpu_ns_ = thread_cpu_ns();
}

Liveness::Waiting::~Waiting() {
  if (!liveness_) return;
  account();
  liveness_->leave_wait();
}

void Liveness::Waiting::account() {
  if (!liveness_) return;
  const uint64_t now = thread_cpu_ns();
  liveness_->waited_cpu(now - cpu_ns_);
  cpu_ns_ = now;
}

void Liveness::excuse(Clock::time_point now) {
  // This process was not scheduled (stopped, then resumed): what it missed is not the others'
  // silence; every clock starts again.
  for (Peer& p : peers_) p.tick_at = p.progress_at = now;
  resumed_at_.store(ns(now), std::memory_order_relaxed);
}

bool Liveness::look_locked(Watch& watch, Clock::time_point now) {
  const int64_t before = looked_.exchange(ns(now), std::memory_order_relaxed);
  const bool stalled = (before && ns(now) - before > stall_ns()) || ns(now) - ns(watch.last) > stall_ns();
  if (stalled) {
    excuse(now);
    watch.start = now;
  }
  watch.last = now;
  return stalled;
}

bool Liveness::look(Watch& watch, uint64_t within_ns) {
  const auto now = Clock::now();
  const int64_t before = looked_.exchange(ns(now), std::memory_order_relaxed);
  if ((before && ns(now) - before > stall_ns()) || ns(now) - ns(watch.last) > stall_ns()) {
    std::lock_guard lock(mutex_);
    excuse(now);
    watch.start = now;
  }
  watch.last = now;
  const int64_t resumed = resumed_at_.load(std::memory_order_relaxed);
  return resumed && ns(now) - resumed < static_cast<int64_t>(within_ns);
}

void Liveness::heard(int peer, const Beat& beat) {
  if (peer < 0 || peer >= size_ || peer == rank_ || beat.tick == 0) return;
  const auto now = Clock::now();
  std::lock_guard lock(mutex_);
  Peer& p = peers_[peer];
  if (beat.waiting == kEnded || beat.waiting == kEndingJob) {  // nothing more to hear
    p.known = false;
    return;
  }
  if (!p.known) {
    p = Peer{true, beat, now, now};
    return;
  }
  if (beat.tick != p.last.tick) p.tick_at = now;
  if (beat.progress != p.last.progress) p.progress_at = now;
  p.last = beat;
}

void Liveness::forget(int peer) {
  std::lock_guard lock(mutex_);
  if (peer >= 0 && peer < size_) peers_[peer].known = false;
}

void Liveness::forget_all() {
  std::lock_guard lock(mutex_);
  for (Peer& p : peers_) p.known = false;
  last_beat_.store(0, std::memory_order_relaxed);
  looked_.store(0, std::memory_order_relaxed);
  listened_.store(0, std::memory_order_relaxed);
}

std::string Liveness::describe_locked(int r, Clock::time_point now, char state) const {
  const std::string name = "process " + std::to_string(r);
  if (state == 'T' || state == 't') return name + " is stopped (SIGSTOP or a debugger)";
  if (state == 'X') return name + " died";
  const Peer& p = peers_[r];
  if (!p.known) return name + " sent no heartbeat (its runtime has not started or has ended)";
  const uint64_t silent = ms(now - p.tick_at);
  if (now - p.tick_at > std::chrono::nanoseconds(3 * period_ns_))
    return name + " sent no heartbeat for " + std::to_string(silent) +
           " ms: it was stopped (SIGSTOP) or died, or its node cannot be reached";
  const std::string idle = " and has shown no progress for " + std::to_string(ms(now - p.progress_at)) + " ms";
  return p.last.waiting ? name + " is alive" + idle +
                              ", itself waiting inside meshvk (for its devices or another "
                              "process): the processes wait for each other"
                        : name + " is alive" + idle +
                              " in the program's own code (no submissions, completions or "
                              "computing): hung, sleeping, or in another part of the program";
}

std::string Liveness::describe(int r) {
  std::lock_guard lock(mutex_);
  return describe_locked(r, Clock::now(), '?');
}

Liveness::Verdict Liveness::judge(Watch& watch, const std::vector<int>& awaited, uint64_t timeout_ns,
                                  char (*pid_state)(int, const void*), const void* context) {
  const auto now = Clock::now();
  const auto timeout = std::chrono::nanoseconds(timeout_ns);
  std::lock_guard lock(mutex_);
  look_locked(watch, now);
  const int64_t resumed_ns = resumed_at_.load(std::memory_order_relaxed);
  const bool resumed = resumed_ns && ns(now) - resumed_ns < static_cast<int64_t>(kResumedNs);
  std::vector<int> who = awaited;
  if (who.empty())
    for (int r = 0; r < size_; ++r)
      if (r != rank_) who.push_back(r);
  auto state = [&](int r) { return pid_state ? pid_state(r, context) : '?'; };
  Verdict v;
  // A process whose heartbeat stopped: stopped, dead, or cut off. It ends the job only while
  // this process's communication thread listens (else the rule below still does, in time); a
  // note is given either way (that thread may be stuck on the very process that died).
  const auto note_after = std::chrono::nanoseconds(std::max<uint64_t>(kNoteMs * 1'000'000ull, 7 * period_ns_));
  const auto silent_after = std::max<std::chrono::nanoseconds>(timeout, std::chrono::milliseconds(kSilentFloorMs));
  const int64_t listened = listened_.load(std::memory_order_relaxed);
  const bool listening = listened && ns(now) - listened <= static_cast<int64_t>(3 * period_ns_);
  for (int r : who) {
    Peer& p = peers_[r];
    if (!p.known) continue;
    if (listening && now - p.tick_at >= silent_after) {
      v.lost = true;
      v.headline = describe_locked(r, now, state(r)) +
                   (resumed ? " (counted from when this process was resumed after being stopped)" : "");
      return v;
    }
    if (now - p.tick_at >= note_after && note_after < silent_after && p.noted_tick != p.last.tick) {
      p.noted_tick = p.last.tick;
      v.note += (v.note.empty() ? "" : "; ") + describe_locked(r, now, state(r)) +
                (resumed ? " (counted from when this process was resumed after being stopped)" : "") +
                "; waiting for it up to " + std::to_string(ms(silent_after)) + " ms (MESHVK_WAIT_TIMEOUT_MS)";
    }
  }
  // Otherwise: until no process of the job has shown progress for the timeout.
  if (now - watch.start < timeout) return v;
  Clock::time_point last{};
  bool any_peer = false;
  for (int r = 0; r < size_; ++r) {
    if (!peers_[r].known) continue;
    any_peer = any_peer || r != rank_;
    last = std::max(last, peers_[r].progress_at);
  }
  if (any_peer && now - last < timeout) return v;
  v.lost = true;
  v.headline = any_peer ? "no process of the job showed progress for " + std::to_string(ms(now - last)) + " ms"
                        : "nothing came for " + std::to_string(ms(now - watch.start)) +
                              " ms (no heartbeat to judge by)";
  for (int r : who) v.peers += "; " + describe_locked(r, now, state(r));
  return v;
}

}  // namespace meshvk::detail

#pragma once
// Liveness between the processes of a job: a heartbeat each process publishes (over the node's
// shared memory, or as MPI messages of the staged link between nodes) and the rule by which a
// process waiting for others decides that the job is lost.
//
// A beat carries two counters and a state:
// - tick: raised by the communication thread every period (MESHVK_WAIT_TIMEOUT_MS / 10, at most
//   100 ms). It says only that the process exists and is scheduled: a tick that stops means the
//   process died, was stopped (SIGSTOP) or its node cannot be reached.
// - progress: raised only by the process's own progress, never by polling: its devices'
//   timeline values advanced (its submissions completed), its program submitted work or
//   finished a wait or an exchange, or it computed outside meshvk's waits (CPU time of the
//   process, less the communication thread's and the time its threads spent inside meshvk's
//   waits, of a sixteenth of a core or more over the period; on a CPU adapter this counts the
//   device's kernels too). A process hung inside a wait, or idle in its own code, shows none.
// - waiting: whether the process's program is inside a meshvk wait right now (for its devices
//   or for other processes), for the messages.
//
// The rule (a waiting process, judge()): a wait goes on as long as some process of the job,
// this one included, showed progress within MESHVK_WAIT_TIMEOUT_MS: a process blocked waiting
// for a third that computes is not taken for hung, since the third shows progress. It ends the
// job when every process has shown none for that long (a hang, a deadlock: every process waits
// or idles), naming each awaited process with what its heartbeat says (alive and waiting itself,
// alive in its own code, or silent), or at once when an awaited process's tick has stopped for
// that long (stopped or dead, also across nodes where /proc cannot tell). A process that was
// itself not scheduled for a while (stopped, then resumed) first looks again for a full timeout
// rather than blame others for the time it did not look. Before a process's first beat (no
// runtime yet) and after its runtime ended, the wait's own length is the timeout, as before.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace meshvk::detail {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  struct Beat {
    uint64_t tick = 0, progress = 0, waiting = 0;
  };
  // Beat::waiting of a process whose runtime ended: nothing more is to be heard from it.
  static constexpr uint64_t kEnded = 2;
  // Beat::waiting of a process that is ending the job (MPI_Abort) with a message of its own.
  static constexpr uint64_t kEndingJob = 3;

  Liveness(int rank, int size);

  // This process, any thread: its program moved (a submission, a finished wait or exchange).
  void progressed() { progress_.fetch_add(1, std::memory_order_relaxed); }
  // A thread enters or leaves a meshvk wait; waited_cpu adds the CPU time the thread spent
  // polling there, so that it does not count as the process computing.
  void enter_wait() { waiting_.fetch_add(1, std::memory_order_relaxed); }
  void leave_wait() { waiting_.fetch_sub(1, std::memory_order_relaxed); }
  void waited_cpu(uint64_t ns) { wait_cpu_ns_.fetch_add(ns, std::memory_order_relaxed); }

  // The communication thread, every turn: whether a beat is due (the period passed). A turn
  // that comes long after the last (the process was stopped, then resumed) first excuses
  // every other process for the time this one did not look.
  bool due();
  // Then the beat to publish: `timelines` is the sum of the process's local timeline values
  // (they advance when its submissions complete), `own_cpu_ns` the calling thread's CPU time.
  Beat beat(uint64_t timelines, uint64_t own_cpu_ns);
  // A thread inside a meshvk wait, for its lifetime (null: no job): counted as waiting, and
  // the CPU time it spends polling (account(), at each turn) does not count as computing.
  class Waiting {
   public:
    explicit Waiting(Liveness* liveness);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;
    void account();

   private:
    Liveness* liveness_;
    uint64_t cpu_ns_ = 0;
  };
  // What a peer published (read from its segment, or its message arrived).
  void heard(int peer, const Beat& beat);
  // The peer's runtime ended (or this one's): no heartbeat is to be expected from it.
  void forget(int peer);
  void forget_all();
  uint64_t period_ns() const { return period_ns_; }

  // A waiting loop's view: when its wait began and when it last looked.
  struct Watch {
    Clock::time_point start = Clock::now(), last = start;
  };
  struct Verdict {
    bool lost = false;     // end the job
    std::string headline;  // "no process of the job showed progress for 3012 ms", or the silent peer
    std::string peers;     // "; process 1 is alive ...", for each awaited process (may be empty)
    // Before the job is lost: an awaited process whose heartbeat has been missing for seven
    // periods (0.7 s), said once per silence, so that a process Open MPI ends first (a rank
    // killed on another node ends the job through mpirun within seconds) names it too.
    std::string note;
  };
  // Whether the job is lost for a wait that waits on `awaited` processes (empty: any other),
  // with MESHVK_WAIT_TIMEOUT_MS `timeout_ns`. `pid_state(r)` gives /proc's state letter of
  // process r where it runs on this node ('?' where not known), for the messages.
  Verdict judge(Watch& watch, const std::vector<int>& awaited, uint64_t timeout_ns,
                char (*pid_state)(int, const void*), const void* context);
  // What the heartbeat says of process r now ("alive, itself waiting inside meshvk", ...).
  std::string describe(int r);
  // A waiting loop's turn before it looks at anything else: a turn long after the last (this
  // process was stopped, then resumed) excuses every other process and restarts the watch.
  // Returns whether this process was resumed within `within_ns`, for the messages: a peer found
  // gone just after most likely ended the job because of this one.
  bool look(Watch& watch, uint64_t within_ns);
  // How recent a resumption counts for the messages: Open MPI's SIGTERM follows its SIGCONT
  // within about a second when it ends the job.
  static constexpr uint64_t kResumedNs = 5'000'000'000;

 private:
  struct Peer {
    bool known = false;
    Beat last;
    Clock::time_point tick_at, progress_at;
    uint64_t noted_tick = 0;  // the tick a note about its silence was given at
  };
  std::string describe_locked(int r, Clock::time_point now, char state) const;
  void excuse(Clock::time_point now);
  bool look_locked(Watch& watch, Clock::time_point now);  // true: excused now
  int rank_, size_;
  uint64_t period_ns_;
  std::atomic<uint64_t> progress_{0}, waiting_{0}, wait_cpu_ns_{0};
  // The communication thread's own: the last beat's readings.
  uint64_t tick_ = 0, own_progress_ = 0, last_timelines_ = 0, last_user_cpu_ = 0,
           last_program_progress_ = 0;
  // Clock readings in nanoseconds (0: never), read without the mutex on the hot paths (every
  // turn of the communication thread and of a waiting loop).
  static int64_t ns(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  int64_t stall_ns() const;     // a turn this long after the last: the process was not scheduled
  std::atomic<int64_t> last_beat_{0};
  std::atomic<int64_t> looked_{0};      // the last turn or judgement, by any thread
  std::atomic<int64_t> resumed_at_{0};  // the last excuse
  // The communication thread's last turn: it hears the others' beats (reads their segments, or
  // receives their messages), so while it is behind (starved on a loaded machine) their
  // silence is not judged.
  std::atomic<int64_t> listened_{0};
  std::mutex mutex_;
  std::vector<Peer> peers_;  // every process, this one included (its own progress)
};

}  // namespace meshvk::detail

#pragma once
// The processes of a multi-process job (Open MPI): this process's rank, host-side collectives on
// bytes, and the node's shared memory. MPI is initialized once per process and finalized at exit,
// so this is process-wide by nature; it holds no device's state.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/liveness.hpp"

namespace meshvk::detail {

// Throws Error naming `what` and Open MPI's message unless `rc` is MPI_SUCCESS (built with MPI).
void check_mpi(int rc, const char* what);

class ProcessGroup {
 public:
  // The job this process belongs to, or null outside one (not initialized).
  static ProcessGroup* get();
  // Joins the job (MPI_Init) once; later calls return the same group. Throws Error when meshvk
  // was built without Open MPI or the explicit rank/size disagree with it.
  static ProcessGroup& initialize(int expected_size, int expected_rank);
  // Whether Open MPI's launcher started this process as one of several (OMPI_COMM_WORLD_SIZE >
  // 1), so that the first Runtime joins the job by itself.
  static bool launched_by_mpirun();

  // distributed::initialize() ran (not only a Runtime joining under mpirun): the program is
  // written for several processes, and to_host follows JAX's multi-controller rule.
  bool initialized_by_user = false;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Whether every process of the job runs on this node (the shared-memory transport applies).
  bool single_node() const { return single_node_; }
  // Whether MPI lets several threads call it at once (MPI_THREAD_MULTIPLE), as the staged
  // transport's communication thread needs.
  bool threads_multiple() const { return threads_multiple_; }

  // This process's CLOCK_MONOTONIC against process 0's, measured at initialisation by ping-pongs
  // over MPI (NTP's estimate from the round trip with the least delay): process 0's clock reads
  // this process's plus clock_offset_ns(), within clock_offset_uncertainty_ns() (half that round
  // trip). 0 and 0 on process 0. Traces record it, so traces from several hosts line up.
  int64_t clock_offset_ns() const { return clock_offset_ns_; }
  int64_t clock_offset_uncertainty_ns() const { return clock_offset_uncertainty_ns_; }

  // A process of the job on this node that has died (is gone or a zombie), or -1: what a wait
  // that sees no progress checks, so that a dead peer ends the job at once.
  int dead_process() const;

  // The heartbeat of every process and the rule for waiting on them (runtime/liveness.hpp).
  Liveness& liveness() { return *liveness_; }
  // /proc's state letter of process r where it runs on this node ('R', 'S', 'T' stopped, 'Z';
  // 'X' when it is gone), '?' where it runs elsewhere or is not known. For Liveness::judge.
  char state_of(int r) const;
  static char state_of(int r, const void* group) {
    return static_cast<const ProcessGroup*>(group)->state_of(r);
  }

  // Where each process's heartbeat lives in the node's shared memory (the runtime's shared tier;
  // empty otherwise): abort() marks this process's as ending the job, so that the others, finding
  // it gone, say it ended the job rather than died.
  void set_heartbeat_slots(std::vector<uint64_t*> slots) { heartbeat_slots_ = std::move(slots); }
  // How a waiting process names process r, found gone: "process r of the job died", or that it
  // ended the job (its heartbeat says so), or, when this process was just resumed after being
  // stopped, that it ended while this one was stopped.
  std::string gone(int r, bool resumed) const;

  // Every process reaches this point; `what` names it in errors.
  void barrier(const char* what = "a barrier of every process");
  // Every process's `bytes` bytes, in rank order. Each process first tells every other which
  // exchange it is at (its count, `what`, `bytes`): a process that sends nothing within
  // MESHVK_WAIT_TIMEOUT_MS, or is at another exchange or size, ends the job with a message naming
  // it and what it was doing.
  std::vector<uint8_t> allgather(const void* data, size_t bytes,
                                 const char* what = "an exchange between every process");
  // `message` on standard error, "meshvk: process R: " first.
  void note(const std::string& message);
  // Ends every process of the job with `message` on standard error (MPI_Abort).
  [[noreturn]] void abort(const std::string& message);

  // Shared memory of the node: each process allocates `bytes` (a multiple of the page size) of
  // its own and sees everyone's; segment(r) is process r's, page-aligned. Collective: every
  // process calls it once, with the same size, and every process gets the same answer: "" when
  // every process mapped every segment, else why the first process that could not failed (its
  // /dev/shm full, or not the others' /dev/shm: processes Open MPI puts on one node may still
  // not share it). Nothing stays in /dev/shm either way, and on failure nothing stays mapped.
  // Called again (a later Runtime of the job), it keeps segments of the same size, zeroing the
  // first `reset_bytes` of this process's (what a runtime publishes there) before every process
  // goes on; segments of another size are given up and made anew.
  std::string allocate_shared(uint64_t bytes, uint64_t reset_bytes);
  uint8_t* segment(int rank) const { return segments_[rank]; }
  uint64_t segment_bytes() const { return segment_bytes_; }

  ~ProcessGroup();

 private:
  ProcessGroup() = default;
  int rank_ = 0, size_ = 1;
  bool single_node_ = true;
  bool threads_multiple_ = false;
  uint64_t segment_bytes_ = 0;
  std::vector<uint8_t*> segments_;
  std::vector<int> pids_;  // per process; only meaningful on one node
  int64_t clock_offset_ns_ = 0, clock_offset_uncertainty_ns_ = 0;
  uint64_t exchanges_ = 0;  // allgathers and barriers so far, the same count on every process
  std::unique_ptr<Liveness> liveness_;
  std::vector<uint64_t*> heartbeat_slots_;  // per process: tick, progress, waiting
  struct Mpi;
  std::unique_ptr<Mpi> mpi_;
};

}  // namespace meshvk::detail

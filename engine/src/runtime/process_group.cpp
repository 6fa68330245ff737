#include "runtime/process_group.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <tuple>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <mutex>
#include <thread>

#include "meshvk/error.hpp"
#include "runtime/env.hpp"

#if MESHVK_HAVE_MPI
#include <mpi.h>
#endif

namespace meshvk::detail {

namespace {
// The process's group: MPI is initialized once per process and finalized at its exit.
std::mutex& group_mutex() {
  static std::mutex m;
  return m;
}
std::unique_ptr<ProcessGroup>& the_group() {
  static std::unique_ptr<ProcessGroup> group;
  return group;
}

uint64_t host_timeout_ms() {
  return env_unsigned("MESHVK_WAIT_TIMEOUT_MS", 1, 365ull * 24 * 3600 * 1000, "milliseconds")
      .value_or(120000);
}
}  // namespace

#if MESHVK_HAVE_MPI

struct ProcessGroup::Mpi {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm exchange = MPI_COMM_NULL;  // allgather's messages, apart from every other's
};

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string("Open MPI: ") + what + " failed: " + std::string(text, length));
}

namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  {
    std::lock_guard lock(group_mutex());
    the_group().reset();  // unmaps the shared memory, frees the node's communicator
  }
  MPI_Finalize();
}
}  // namespace

// The rank and size distributed::initialize was given, against what Open MPI says.
static void check_expected(const ProcessGroup& group, int expected_size, int expected_rank) {
  if (expected_size >= 0 && expected_size != group.size())
    throw Error("distributed::initialize: num_processes = " + std::to_string(expected_size) +
                " but Open MPI started " + std::to_string(group.size()) +
                " processes; leave it unset or give mpirun -np " + std::to_string(expected_size));
  if (expected_rank >= 0 && expected_rank != group.rank())
    throw Error("distributed::initialize: process_id = " + std::to_string(expected_rank) +
                " but Open MPI gave this process rank " + std::to_string(group.rank()) +
                "; leave it unset or give the rank mpirun assigns");
}

namespace {

int64_t monotonic_ns() {  // the profiler's clock (profile/clock.hpp)
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// NTP's estimate of process 0's clock minus this process's, from `rounds` ping-pongs with it:
// a process sends its time t1, process 0 answers with its own t2, the process reads t3 on
// arrival; t2 - (t1 + t3) / 2 from the round with the least delay. Returns (offset, delay / 2).
std::pair<int64_t, int64_t> measure_clock_offset(MPI_Comm comm, int rank, int size) {
  constexpr int kRounds = 8, kTag = 0x6d76;
  if (rank == 0) {
    for (int peer = 1; peer < size; ++peer)
      for (int r = 0; r < kRounds; ++r) {
        int64_t t1 = 0;
        check_mpi(MPI_Recv(&t1, 1, MPI_INT64_T, peer, kTag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        const int64_t t2 = monotonic_ns();
        check_mpi(MPI_Send(&t2, 1, MPI_INT64_T, peer, kTag, comm), "MPI_Send");
      }
    return {0, 0};
  }
  int64_t best_delay = INT64_MAX, offset = 0;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t t1 = monotonic_ns();
    check_mpi(MPI_Send(&t1, 1, MPI_INT64_T, 0, kTag, comm), "MPI_Send");
    int64_t t2 = 0;
    check_mpi(MPI_Recv(&t2, 1, MPI_INT64_T, 0, kTag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    const int64_t t3 = monotonic_ns();
    if (t3 - t1 < best_delay) {
      best_delay = t3 - t1;
      offset = t2 - (t1 + (t3 - t1) / 2);
    }
  }
  return {offset, best_delay / 2};
}

}  // namespace

ProcessGroup& ProcessGroup::initialize(int expected_size, int expected_rank) {
  std::lock_guard lock(group_mutex());
  auto& group = the_group();
  if (!group) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // MULTIPLE: the staged transport's communication thread sends and receives while the
      // program's thread runs collectives on the host.
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      std::atexit(finalize_at_exit);
    }
    std::unique_ptr<ProcessGroup> made(new ProcessGroup());  // private constructor
    made->mpi_ = std::make_unique<Mpi>();
    int level = 0;
    MPI_Query_thread(&level);
    made->threads_multiple_ = level >= MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &made->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &made->size_);
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, made->rank_,
                                  MPI_INFO_NULL, &made->mpi_->node),
              "MPI_Comm_split_type");
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &made->mpi_->exchange), "MPI_Comm_dup");
    int node_size = 0;
    MPI_Comm_size(made->mpi_->node, &node_size);
    made->single_node_ = node_size == made->size_;
    const int pid = getpid();
    made->pids_.resize(made->size_);
    check_mpi(MPI_Allgather(&pid, 1, MPI_INT, made->pids_.data(), 1, MPI_INT, MPI_COMM_WORLD),
              "MPI_Allgather");
    made->liveness_ = std::make_unique<Liveness>(made->rank_, made->size_);
    std::tie(made->clock_offset_ns_, made->clock_offset_uncertainty_ns_) =
        measure_clock_offset(made->mpi_->exchange, made->rank_, made->size_);
    // Checked before the group is kept: a refused initialize leaves is_initialized() false
    // (MPI itself stays initialized; a later call makes the group again).
    check_expected(*made, expected_size, expected_rank);
    group = std::move(made);
  }
  check_expected(*group, expected_size, expected_rank);
  return *group;
}

ProcessGroup::~ProcessGroup() {
  if (!mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mpi_->node != MPI_COMM_NULL) MPI_Comm_free(&mpi_->node);
  if (!finalized && mpi_->exchange != MPI_COMM_NULL) MPI_Comm_free(&mpi_->exchange);
  for (uint8_t* p : segments_) munmap(p, segment_bytes_);
  mpi_.reset();
}

namespace {

// What each process tells every other before an exchange: which one it is at.
struct ExchangeHeader {
  uint64_t count;
  uint64_t bytes;
  char what[112];
};

std::string describe(const ExchangeHeader& h) {
  return std::string(h.what, strnlen(h.what, sizeof h.what)) + " (exchange " +
         std::to_string(h.count) + ", " + std::to_string(h.bytes) + " bytes per process)";
}

std::string list_processes(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i)
    text += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return (ranks.size() == 1 ? "process " : "processes ") + text;
}

// Completes every request, polling; request i is a message to or from process peers[i].
// A process that has not sent (or taken) its message within the wait timeout is named and the
// job ends, as when a process died.
void complete_exchange(ProcessGroup& group, std::vector<MPI_Request>& requests,
                       const std::vector<int>& peers, const std::vector<bool>& sends,
                       const std::string& what) {
  // A process that has not sent (or taken) its message is waited for as long as the job shows
  // signs of life (runtime/liveness.hpp), then named, and the job ends, as when a process died.
  Liveness& live = group.liveness();
  Liveness::Watch watch;
  Liveness::Waiting waiting(&live);
  const uint64_t timeout_ns = host_timeout_ms() * 1'000'000;
  std::vector<bool> done(requests.size(), false);
  auto judged = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    bool all = true;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int finished = 0;
      check_mpi(MPI_Test(&requests[i], &finished, MPI_STATUS_IGNORE), what.c_str());
      done[i] = finished != 0;
      all = all && done[i];
    }
    if (all) {
      live.progressed();
      return;
    }
    if (polls % 1000 == 999) {
      const bool resumed = live.look(watch, Liveness::kResumedNs);
      if (const int dead = group.dead_process(); dead >= 0)
        group.abort(what + ": " + group.gone(dead, resumed) + "; ending the job");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    const auto now = std::chrono::steady_clock::now();
    if (now - judged < std::chrono::milliseconds(10)) continue;
    judged = now;
    waiting.account();
    // Who sent nothing; else who has not taken what this process sent.
    std::vector<int> silent, not_taking;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      auto& list = sends[i] ? not_taking : silent;
      if (std::find(list.begin(), list.end(), peers[i]) == list.end()) list.push_back(peers[i]);
    }
    const Liveness::Verdict verdict =
        live.judge(watch, silent.empty() ? not_taking : silent, timeout_ns, &ProcessGroup::state_of, &group);
    if (!verdict.note.empty()) group.note(verdict.note);
    if (!verdict.lost) continue;
    const std::string who =
        !silent.empty()
            ? list_processes(silent) + " sent nothing for it: stopped, hung, or in another part "
                                       "of the program (another collective or exchange)"
            : list_processes(not_taking) + " did not take this process's data";
    group.abort(what + " did not complete: " + who + "; " + verdict.headline +
                " (MESHVK_WAIT_TIMEOUT_MS=" + std::to_string(host_timeout_ms()) + ")" +
                verdict.peers + "; ending the job");
  }
}

}  // namespace

void ProcessGroup::barrier(const char* what) { (void)allgather(nullptr, 0, what); }

std::vector<uint8_t> ProcessGroup::allgather(const void* data, size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT32_MAX))
    throw Error("internal: allgather of " + std::to_string(bytes) + " bytes per process");
  ExchangeHeader mine{++exchanges_, bytes, {}};
  std::snprintf(mine.what, sizeof mine.what, "%s", what);
  const std::string at = describe(mine);
  std::vector<uint8_t> out(bytes * static_cast<size_t>(size_));
  if (bytes) std::memcpy(out.data() + bytes * static_cast<size_t>(rank_), data, bytes);
  // First the headers: every process learns where every other is before any data moves, so a
  // mismatch is named instead of truncating or mixing up messages.
  std::vector<ExchangeHeader> theirs(static_cast<size_t>(size_));
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  std::vector<bool> sends;
  auto post = [&](bool send, void* buffer, size_t n, int peer, int tag) {
    requests.emplace_back();
    check_mpi(send ? MPI_Isend(buffer, static_cast<int>(n), MPI_BYTE, peer, tag, mpi_->exchange,
                               &requests.back())
                   : MPI_Irecv(buffer, static_cast<int>(n), MPI_BYTE, peer, tag, mpi_->exchange,
                               &requests.back()),
              send ? "MPI_Isend" : "MPI_Irecv");
    peers.push_back(peer);
    sends.push_back(send);
  };
  constexpr int kHeaderTag = 1, kDataTag = 2;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    post(false, &theirs[r], sizeof(ExchangeHeader), r, kHeaderTag);
    post(true, &mine, sizeof mine, r, kHeaderTag);
  }
  complete_exchange(*this, requests, peers, sends,
                    "process " + std::to_string(rank_) + " at " + at);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const ExchangeHeader& h = theirs[r];
    if (h.count != mine.count || h.bytes != mine.bytes ||
        std::strncmp(h.what, mine.what, sizeof h.what) != 0)
      abort("process " + std::to_string(r) + " runs a different program: it is at " +
            describe(h) + " while process " + std::to_string(rank_) + " is at " + at +
            "; every process must run the same program; ending the job");
  }
  if (bytes == 0) return out;
  requests.clear();
  peers.clear();
  sends.clear();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    post(false, out.data() + bytes * static_cast<size_t>(r), bytes, r, kDataTag);
    post(true, const_cast<void*>(data), bytes, r, kDataTag);
  }
  complete_exchange(*this, requests, peers, sends,
                    "process " + std::to_string(rank_) + " at " + at + ", sending its data");
  return out;
}

void ProcessGroup::abort(const std::string& message) {
  std::fprintf(stderr, "meshvk: process %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  if (static_cast<size_t>(rank_) < heartbeat_slots_.size() && heartbeat_slots_[rank_]) {
    uint64_t* mine = heartbeat_slots_[rank_];
    std::atomic_ref<uint64_t>(mine[2]).store(Liveness::kEndingJob, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(mine[0]).fetch_add(1, std::memory_order_release);
  }
  // MPI_Abort asks mpirun to end every process; with the link to mpirun or to another node
  // gone it may never return (issue 27: mpirun and its remote daemon hung until the link came
  // back). The process ends itself after a grace period whatever Open MPI does.
  uint64_t grace_ms = 10000;
  try {
    grace_ms = env_unsigned("MESHVK_ABORT_GRACE_MS", 0, 3600000, "ms").value_or(grace_ms);
  } catch (const Error&) {  // a bad value: the default, rather than no end
  }
  const int rank = rank_;
  std::thread([grace_ms, rank] {
    std::this_thread::sleep_for(std::chrono::milliseconds(grace_ms));
    std::fprintf(stderr, "meshvk: process %d: MPI_Abort did not end the job within %llu ms; exiting\n", rank,
                 static_cast<unsigned long long>(grace_ms));
    std::fflush(stderr);
    std::_Exit(2);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

std::string ProcessGroup::allocate_shared(uint64_t bytes, uint64_t reset_bytes) {
  // Every process of the job holds segments, or none does (each call is collective).
  const bool kept = !segments_.empty() && segment_bytes_ == bytes;
  if (!segments_.empty() && !kept) {
    for (uint8_t*& p : segments_) munmap(p, segment_bytes_);
    segments_.clear();
    segment_bytes_ = 0;
  }
  if (kept) {
    // The previous runtime's values and heartbeat, gone before any process reads the new ones.
    std::memset(segments_[rank_], 0, std::min(reset_bytes, bytes));
    barrier("shared memory set-up: each process clearing what the previous Runtime published");
    return "";
  }
  if (!single_node_)
    throw Error("the job's processes run on several nodes; meshvk moves bytes between "
                "processes through the node's shared memory only, so run every process on one "
                "node (mpirun --host with one host)");
  // POSIX shared memory rather than an MPI window: mmap gives every segment page alignment,
  // which Vulkan's host-pointer import needs. Named after process 0's pid and a clock reading,
  // opened by every process, then unlinked: the mappings live until the processes exit.
  char name[64];
  const uint64_t stamp[2] = {static_cast<uint64_t>(getpid()),
                             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  const std::vector<uint8_t> stamps = allgather(stamp, sizeof stamp);
  uint64_t job[2];
  std::memcpy(job, stamps.data(), sizeof job);  // process 0's
  auto segment_name = [&](int r) {
    std::snprintf(name, sizeof name, "/meshvk-%llu-%llx-%d", static_cast<unsigned long long>(job[0]),
                  static_cast<unsigned long long>(job[1]), r);
    return std::string(name);
  };
  // Every step's outcome goes through an allgather rather than an exception, so that no process
  // is left waiting at a barrier for one that threw; the own segment's name goes on every path.
  const std::string own = segment_name(rank_);
  std::string failure;
  auto agree = [&](const char* step) {
    char mine[200] = {};
    std::snprintf(mine, sizeof mine, "%s", failure.c_str());
    const std::vector<uint8_t> all = allgather(mine, sizeof mine, step);
    for (int r = 0; r < size_; ++r)
      if (const char* theirs = reinterpret_cast<const char*>(all.data()) + r * sizeof mine; *theirs)
        return std::string(theirs, strnlen(theirs, sizeof mine));
    return std::string();
  };
  const int fd = shm_open(own.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  // The pages reserved now (posix_fallocate), so a /dev/shm too small for them is this error
  // rather than a SIGBUS inside a transfer.
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      (errno = posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0)
    failure = "process " + std::to_string(rank_) + " could not make " + std::to_string(bytes >> 20) +
              " MiB of shared memory in /dev/shm: " + std::strerror(errno) +
              " (free space there or lower MESHVK_PEER_RING_MIB)";
  if (fd >= 0) close(fd);
  std::string agreed = agree("shared memory set-up: each process making its segment");
  std::vector<uint8_t*> mapped(size_, nullptr);
  auto unmap = [&] {
    for (uint8_t*& p : mapped)
      if (p) munmap(p, bytes), p = nullptr;
  };
  if (agreed.empty()) {
    for (int r = 0; r < size_ && failure.empty(); ++r) {
      const std::string other = segment_name(r);
      const int rfd = shm_open(other.c_str(), O_RDWR, 0600);
      // Populated now, as the staged tier's rings are: a page first touched inside a transfer
      // costs a fault in each process (1-4 MiB all-reduce between 2 processes: 0.74 -> 1.53
      // and 0.85 -> 2.44 GB/s busbw while the rings were in their first lap).
      void* p = rfd < 0 ? MAP_FAILED
                        : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, rfd, 0);
      const int err = errno;
      if (rfd >= 0) close(rfd);
      if (p == MAP_FAILED)
        failure = "process " + std::to_string(rank_) + " cannot map process " + std::to_string(r) +
                  "'s shared memory " + other + ": " + std::strerror(err) +
                  (err == ENOENT ? " (the two do not share /dev/shm)" : "");
      else
        mapped[r] = static_cast<uint8_t*>(p);
    }
    agreed = agree("shared memory set-up: each process mapping the others' segments");
  }
  shm_unlink(own.c_str());
  if (!agreed.empty()) {
    unmap();
    return agreed;
  }
  segment_bytes_ = bytes;
  segments_ = std::move(mapped);
  return "";
}

#else  // built without Open MPI

struct ProcessGroup::Mpi {};

ProcessGroup& ProcessGroup::initialize(int, int) {
  throw Error(
      "distributed::initialize: this meshvk was built without Open MPI; install libopenmpi-dev "
      "and openmpi-bin (the README's set-up does) and build again");
}
ProcessGroup::~ProcessGroup() = default;
void ProcessGroup::barrier(const char*) {}
std::vector<uint8_t> ProcessGroup::allgather(const void* data, size_t bytes, const char*) {
  const auto* p = static_cast<const uint8_t*>(data);
  return std::vector<uint8_t>(p, p + bytes);
}
void ProcessGroup::abort(const std::string& message) {
  std::fprintf(stderr, "meshvk: %s\n", message.c_str());
  std::abort();
}
std::string ProcessGroup::allocate_shared(uint64_t, uint64_t) {
  throw Error("internal: shared memory without Open MPI");
}

#endif

void ProcessGroup::note(const std::string& message) {
  std::fprintf(stderr, "meshvk: process %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
}

std::string ProcessGroup::gone(int r, bool resumed) const {
  const std::string name = "process " + std::to_string(r);
  if (resumed)
    return name + " of the job has ended, while this process was stopped (it most likely ended "
                  "the job because of that)";
  if (static_cast<size_t>(r) < heartbeat_slots_.size() && heartbeat_slots_[r] &&
      std::atomic_ref<uint64_t>(heartbeat_slots_[r][2]).load(std::memory_order_acquire) ==
          Liveness::kEndingJob)
    return name + " of the job has ended the job (its own message says why)";
  return name + " of the job died";
}

char ProcessGroup::state_of(int r) const {
  if (!single_node_ || r == rank_ || pids_.size() <= static_cast<size_t>(r)) return '?';
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pids_[r]);
  FILE* f = std::fopen(path, "r");
  if (!f) return 'X';
  char state = '?';
  if (std::fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = '?';
  std::fclose(f);
  return state;
}

int ProcessGroup::dead_process() const {
  if (!single_node_) return -1;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || pids_.size() <= static_cast<size_t>(r)) continue;
    // Gone, or a zombie its parent (Open MPI's daemon) has not reaped yet.
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pids_[r]);
    FILE* f = std::fopen(path, "r");
    if (!f) return r;
    char state = '?';
    const int read = std::fscanf(f, "%*d (%*[^)]) %c", &state);
    std::fclose(f);
    if (read == 1 && (state == 'Z' || state == 'X')) return r;
  }
  return -1;
}

ProcessGroup* ProcessGroup::get() {
  std::lock_guard lock(group_mutex());
  return the_group().get();
}

bool ProcessGroup::launched_by_mpirun() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size && std::atoi(size) > 1;
}

}  // namespace meshvk::detail

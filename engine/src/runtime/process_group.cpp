#include "runtime/process_group.hpp"

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
};

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string("Open MPI: ") + what + " failed: " + std::string(text, length));
}

namespace {

// Completes `request`, polling, or ends the job when a process has not joined within the wait
// timeout: a blocking MPI call would hang forever on a process that died or hangs.
void complete(const ProcessGroup& group, MPI_Request& request, const char* what, int rank) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(host_timeout_ms());
  for (int done = 0, polls = 0;; ++polls) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (polls % 1000 == 999) {
      if (const int dead = group.dead_process(); dead >= 0) {
        std::fprintf(stderr, "meshvk: process %d: %s: process %d of the job died; ending the job\n",
                     rank, what, dead);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "meshvk: process %d: %s did not complete within MESHVK_WAIT_TIMEOUT_MS=%llu: "
                   "another process of the job died, hangs or runs a different program; "
                   "ending the job\n",
                   rank, what, static_cast<unsigned long long>(host_timeout_ms()));
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

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
    int node_size = 0;
    MPI_Comm_size(made->mpi_->node, &node_size);
    made->single_node_ = node_size == made->size_;
    const int pid = getpid();
    made->pids_.resize(made->size_);
    check_mpi(MPI_Allgather(&pid, 1, MPI_INT, made->pids_.data(), 1, MPI_INT, MPI_COMM_WORLD),
              "MPI_Allgather");
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
  for (uint8_t* p : segments_) munmap(p, segment_bytes_);
  mpi_.reset();
}

void ProcessGroup::barrier() {
  MPI_Request r;
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &r), "MPI_Ibarrier");
  complete(*this, r, "a barrier of every process", rank_);
}

std::vector<uint8_t> ProcessGroup::allgather(const void* data, size_t bytes) {
  if (bytes > static_cast<size_t>(INT32_MAX))
    throw Error("internal: allgather of " + std::to_string(bytes) + " bytes per process");
  std::vector<uint8_t> out(bytes * static_cast<size_t>(size_));
  MPI_Request r;
  check_mpi(MPI_Iallgather(data, static_cast<int>(bytes), MPI_BYTE, out.data(),
                           static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD, &r),
            "MPI_Iallgather");
  complete(*this, r, "an exchange between every process", rank_);
  return out;
}

void ProcessGroup::abort(const std::string& message) {
  std::fprintf(stderr, "meshvk: process %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

void ProcessGroup::allocate_shared(uint64_t bytes) {
  if (!segments_.empty()) throw Error("internal: the node's shared memory exists");
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
  const std::string own = segment_name(rank_);
  const int fd = shm_open(own.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    shm_unlink(own.c_str());
    throw Error("shared memory of " + std::to_string(bytes >> 20) + " MiB for process " +
                std::to_string(rank_) + ": " + std::strerror(err) +
                "; free space in /dev/shm or lower MESHVK_PEER_RING_MIB");
  }
  close(fd);
  barrier();
  segment_bytes_ = bytes;
  segments_.assign(size_, nullptr);
  for (int r = 0; r < size_; ++r) {
    const std::string other = segment_name(r);
    const int rfd = shm_open(other.c_str(), O_RDWR, 0600);
    void* p = rfd < 0 ? MAP_FAILED : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    const int err = errno;
    if (rfd >= 0) close(rfd);
    if (p == MAP_FAILED)
      throw Error("process " + std::to_string(rank_) + " cannot map process " + std::to_string(r) +
                  "'s shared memory: " + std::strerror(err));
    segments_[r] = static_cast<uint8_t*>(p);
  }
  barrier();
  shm_unlink(own.c_str());
}

#else  // built without Open MPI

struct ProcessGroup::Mpi {};

ProcessGroup& ProcessGroup::initialize(int, int) {
  throw Error(
      "distributed::initialize: this meshvk was built without Open MPI; install libopenmpi-dev "
      "and openmpi-bin (the README's set-up does) and build again");
}
ProcessGroup::~ProcessGroup() = default;
void ProcessGroup::barrier() {}
std::vector<uint8_t> ProcessGroup::allgather(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  return std::vector<uint8_t>(p, p + bytes);
}
void ProcessGroup::abort(const std::string& message) {
  std::fprintf(stderr, "meshvk: %s\n", message.c_str());
  std::abort();
}
void ProcessGroup::allocate_shared(uint64_t) {
  throw Error("internal: shared memory without Open MPI");
}

#endif

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

#include "runtime/staged_link.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "meshvk/error.hpp"
#include "runtime/process_group.hpp"

#if MESHVK_HAVE_MPI
#include <mpi.h>
#endif

namespace meshvk::detail {

namespace {
enum Kind : uint64_t { kData = 1, kProgress = 2, kGoodbye = 3, kHeartbeat = 4 };
// Headers (data, progress, goodbye) on one tag, so they arrive in the order they were sent;
// a data message's bytes follow its header on another, matched by source once the header is in.
constexpr int kHeaderTag = 1, kPayloadTag = 2;
// MPI counts in int: a ring piece (up to 2 GiB) goes in chunks.
constexpr uint64_t kChunk = 1ull << 30;
}  // namespace

uint64_t StagedLink::outbound(int dst) const {
  return static_cast<uint64_t>(dst < rank_ ? dst : dst - 1) * ring_bytes_;
}

uint64_t StagedLink::inbound(int src) const {
  return static_cast<uint64_t>(size_ - 1 + (src < rank_ ? src : src - 1)) * ring_bytes_;
}

#if MESHVK_HAVE_MPI

struct StagedLink::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
};

struct StagedLink::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  Header header{};  // what a header's request sends from
};

struct StagedLink::Arrival {
  Header header{};
  std::vector<MPI_Request> requests;  // the payload's receives (none for a value alone)
};

namespace {

// A runtime that outlives MPI (held past the exit handler that finalizes it) has nobody left to
// talk to: its link goes quiet rather than call MPI after MPI_Finalize.
bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}
}  // namespace

StagedLink::StagedLink(ProcessGroup& group, int timelines, uint64_t ring_bytes)
    : group_(&group),
      rank_(group.rank()),
      size_(group.size()),
      timelines_(static_cast<uint64_t>(timelines)),
      ring_bytes_(ring_bytes) {
  if (!group.threads_multiple())
    throw Error(
        "MESHVK_PROCESS_TRANSPORT=staged (or processes on several nodes) needs an Open MPI "
        "that supports MPI_THREAD_MULTIPLE, and this one does not; run every process on "
        "one node with MESHVK_PROCESS_TRANSPORT=shared");
  bytes_ = 2 * static_cast<uint64_t>(size_ - 1) * ring_bytes_;
  // Populated now: a ring's pages are all touched within its first lap anyway, and a first touch
  // costs a page fault per 4 KiB inside the device's copy in (or MPI's copy out of the socket):
  // a 4 MiB piece took 2-5 ms instead of 0.2 until the ring had gone round once.
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED)
    throw Error("the staged transport's rings: " + std::to_string(bytes_ >> 20) +
                " MiB of host memory for process " + std::to_string(rank_) + ": " +
                std::strerror(errno) + "; lower MESHVK_PEER_RING_MIB");
  memory_ = static_cast<uint8_t*>(p);
  mirror_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(timelines));
  for (int t = 0; t < timelines; ++t) mirror_[t].store(0);
  arrivals_.resize(static_cast<size_t>(size_));
  outbox_.resize(static_cast<size_t>(size_));
  payload_.resize(static_cast<size_t>(size_));
  comm_ = std::make_unique<Comm>();
  // A communicator of its own: no message of the program's host collectives can match.
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_->comm), "MPI_Comm_dup");
}

StagedLink::~StagedLink() {
  if (!finalized()) {
    // Requests left by a shutdown that gave up (a peer gone): not waited for.
    for (auto& p : pending_)
      if (p->request != MPI_REQUEST_NULL) MPI_Request_free(&p->request);
    for (auto& p : payload_)
      if (p && p->request != MPI_REQUEST_NULL) MPI_Request_free(&p->request);
    for (auto& from : arrivals_)
      for (auto& a : from)
        for (MPI_Request& r : a->requests)
          if (r != MPI_REQUEST_NULL) {
            MPI_Cancel(&r);
            MPI_Request_free(&r);
          }
    if (comm_ && comm_->comm != MPI_COMM_NULL) MPI_Comm_free(&comm_->comm);
  }
  if (memory_) munmap(memory_, bytes_);
}

void StagedLink::post_payloads() {
  for (int dst = 0; dst < size_; ++dst) {
    auto& on_way = payload_[dst];
    if (on_way) {
      int finished = 0;
      check_mpi(MPI_Test(&on_way->request, &finished, MPI_STATUS_IGNORE), "MPI_Test");
      if (!finished) continue;
      on_way.reset();
    }
    if (outbox_[dst].empty()) continue;
    const Outgoing next = outbox_[dst].front();
    outbox_[dst].pop_front();
    on_way = std::make_unique<Pending>();
    check_mpi(MPI_Isend(next.from, static_cast<int>(next.bytes), MPI_BYTE, dst, kPayloadTag,
                        comm_->comm, &on_way->request),
              "MPI_Isend");
  }
}

size_t StagedLink::sends_in_flight() const {
  size_t n = pending_.size();
  for (int dst = 0; dst < size_; ++dst) n += outbox_[dst].size() + (payload_[dst] ? 1 : 0);
  return n;
}

void StagedLink::post(const void* data, uint64_t bytes, int dst, int tag) {
  auto p = std::make_unique<Pending>();
  check_mpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dst, tag, comm_->comm, &p->request),
            "MPI_Isend");
  pending_.push_back(std::move(p));
}

void StagedLink::post_header(const Header& h, int dst) {
  auto p = std::make_unique<Pending>();
  p->header = h;
  check_mpi(
      MPI_Isend(&p->header, sizeof(Header), MPI_BYTE, dst, kHeaderTag, comm_->comm, &p->request),
      "MPI_Isend");
  pending_.push_back(std::move(p));
}

void StagedLink::send_data(int dst, int timeline, uint64_t value, uint64_t offset, uint64_t bytes,
                           const uint8_t* from) {
  if (finalized()) return;
  post_header({kData, static_cast<uint64_t>(timeline), value, offset, bytes}, dst);
  if (!from) from = memory_ + outbound(dst) + offset;
  for (uint64_t at = 0; at < bytes; at += kChunk)
    outbox_[dst].push_back({from + at, std::min(kChunk, bytes - at)});
  post_payloads();
}

void StagedLink::send_progress(int dst, int timeline, uint64_t value) {
  if (finalized()) return;
  post_header({kProgress, static_cast<uint64_t>(timeline), value, 0, 0}, dst);
}

void StagedLink::send_heartbeat(uint64_t tick, uint64_t progress, uint64_t waiting) {
  // Not after the goodbye: a process that heard every goodbye takes no more messages.
  if (said_goodbye_ || finalized()) return;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) post_header({kHeartbeat, 0, tick, progress, waiting}, r);
}

void StagedLink::raise(const Header& h) {
  std::atomic<uint64_t>& m = mirror_[h.timeline];
  if (h.value > m.load(std::memory_order_relaxed)) m.store(h.value, std::memory_order_release);
}

bool StagedLink::complete_arrivals() {
  bool any = false;
  for (auto& from : arrivals_) {
    while (!from.empty()) {
      Arrival& a = *from.front();
      if (!a.requests.empty()) {
        int finished = 0;
        check_mpi(MPI_Testall(static_cast<int>(a.requests.size()), a.requests.data(), &finished,
                              MPI_STATUSES_IGNORE),
                  "MPI_Testall");
        if (!finished) break;
      }
      // The bytes are in place before the value that releases their readers.
      raise(a.header);
      from.pop_front();
      any = true;
    }
  }
  return any;
}

bool StagedLink::receive() {
  if (finalized()) return false;
  bool any = complete_arrivals();
  while (true) {
    int arrived = 0;
    MPI_Status status;
    check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kHeaderTag, comm_->comm, &arrived, &status), "MPI_Iprobe");
    if (!arrived) break;
    any = true;
    const int src = status.MPI_SOURCE;
    Header h{};
    check_mpi(MPI_Recv(&h, sizeof h, MPI_BYTE, src, kHeaderTag, comm_->comm, MPI_STATUS_IGNORE),
              "MPI_Recv");
    if (h.kind == kGoodbye) {
      ++goodbyes_;
      group_->liveness().forget(src);
      continue;
    }
    if (h.kind == kHeartbeat) {
      group_->liveness().heard(src, {h.value, h.offset, h.bytes});
      continue;
    }
    if (h.timeline >= timelines_)
      throw Error("internal: process " + std::to_string(src) + " sent a value of timeline " +
                  std::to_string(h.timeline) + " of " + std::to_string(timelines_));
    auto a = std::make_unique<Arrival>();
    a->header = h;
    if (h.kind == kData) {
      if (h.offset > ring_bytes_ || h.bytes > ring_bytes_ - h.offset)
        throw Error("internal: process " + std::to_string(src) + " sent " +
                    std::to_string(h.bytes) + " bytes at " + std::to_string(h.offset) +
                    " of a ring of " + std::to_string(ring_bytes_));
      // The sender's bytes follow on the payload tag, in order; received without waiting, so
      // that this thread goes on shipping its own sends while they stream in (both directions
      // at once). Nothing reads this range: the sender waited for this process's receive of
      // what was there before (a progress message).
      uint8_t* to = memory_ + inbound(src) + h.offset;
      for (uint64_t at = 0; at < h.bytes; at += kChunk) {
        a->requests.emplace_back(MPI_REQUEST_NULL);
        check_mpi(MPI_Irecv(to + at, static_cast<int>(std::min(kChunk, h.bytes - at)), MPI_BYTE,
                            src, kPayloadTag, comm_->comm, &a->requests.back()),
                  "MPI_Irecv");
      }
    }
    // A value goes behind the bytes its process sent before it.
    auto& from = arrivals_[src];
    if (from.empty() && a->requests.empty())
      raise(h);
    else
      from.push_back(std::move(a));
  }
  return complete_arrivals() || any;
}

bool StagedLink::busy() const {
  if (sends_in_flight()) return true;
  for (const auto& from : arrivals_)
    if (!from.empty()) return true;
  return false;
}

bool StagedLink::sends_done() {
  if (finalized()) return true;
  for (auto it = pending_.begin(); it != pending_.end();) {
    int finished = 0;
    check_mpi(MPI_Test(&(*it)->request, &finished, MPI_STATUS_IGNORE), "MPI_Test");
    it = finished ? pending_.erase(it) : it + 1;
  }
  post_payloads();
  return sends_in_flight() == 0;
}

void StagedLink::say_goodbye() {
  if (said_goodbye_ || finalized()) return;
  said_goodbye_ = true;
  for (int r = 0; r < size_; ++r)
    if (r != rank_) post_header({kGoodbye, 0, 0, 0, 0}, r);
}

bool StagedLink::done() {
  if (finalized()) return true;
  receive();
  return sends_done() && goodbyes_ >= size_ - 1 && !busy();
}

#else  // built without Open MPI: no job of several processes is ever joined

struct StagedLink::Comm {};
struct StagedLink::Pending {};

StagedLink::StagedLink(ProcessGroup& group, int, uint64_t)
    : group_(&group), rank_(0), size_(1), timelines_(0), ring_bytes_(0) {
  throw Error("internal: the staged transport without Open MPI");
}
StagedLink::~StagedLink() = default;
void StagedLink::send_data(int, int, uint64_t, uint64_t, uint64_t, const uint8_t*) {}
void StagedLink::send_progress(int, int, uint64_t) {}
void StagedLink::send_heartbeat(uint64_t, uint64_t, uint64_t) {}
bool StagedLink::receive() {
  return false;
}
bool StagedLink::busy() const {
  return false;
}
size_t StagedLink::sends_in_flight() const {
  return 0;
}
bool StagedLink::sends_done() {
  return true;
}
void StagedLink::say_goodbye() {}
bool StagedLink::done() {
  return true;
}

#endif

}  // namespace meshvk::detail

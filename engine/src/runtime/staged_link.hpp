#pragma once
// The staged transport between processes (MESHVK_PROCESS_TRANSPORT=staged, and the only one
// between nodes): no memory is shared. Each process holds, in page-aligned host memory its
// VkDevices import by pointer, an outbound ring per destination process and an inbound ring per
// source process; a ring (p -> q) has the same offsets on both sides (RuntimeState::reserve_ring
// runs alike everywhere). When a send into an outbound ring has completed on the device, the
// communication thread ships its bytes as MPI messages into the receiver's inbound ring at the
// same offset, and the receiver raises its mirror of the sender's peer timeline to the send's
// value; other values of local peer timelines (the receives a sender's ring reuse waits for)
// travel as progress messages. Everything goes from one thread per process on one communicator,
// headers on one tag and the bytes on another, in order: MPI's non-overtaking rule keeps a
// progress message behind the header of every earlier send of its timeline, and the receiver
// raises no value of a source process before the bytes that source sent ahead of it are in.
// Nothing blocks the thread: a header's bytes are received with MPI_Irecv, and a destination's
// payloads go one at a time (see outbox_), so the two directions stream at once and pieces
// complete in order, each as soon as its bytes are in.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace meshvk::detail {

class ProcessGroup;

class StagedLink {
 public:
  // Collective: every process makes it at the same point, with the same arguments.
  StagedLink(ProcessGroup& group, int timelines, uint64_t ring_bytes);
  ~StagedLink();
  StagedLink(const StagedLink&) = delete;
  StagedLink& operator=(const StagedLink&) = delete;

  // The host memory holding every ring, page-aligned, and its size.
  uint8_t* memory() const { return memory_; }
  uint64_t bytes() const { return bytes_; }
  // Where the ring to `dst` (outbound) or from `src` (inbound) starts in memory().
  uint64_t outbound(int dst) const;
  uint64_t inbound(int src) const;

  // The value this process last heard a remote timeline reached (0: nothing yet). Any thread.
  uint64_t mirror(int timeline) const { return mirror_[timeline].load(std::memory_order_acquire); }

  // Communication thread only, from here on.
  // Ships [offset, offset + bytes) of the ring (or, where `from` is not null, the bytes there)
  // into `dst`'s ring at `offset`, then tells it `timeline` reached `value`.
  void send_data(int dst, int timeline, uint64_t value, uint64_t offset, uint64_t bytes,
                 const uint8_t* from = nullptr);
  // Tells `dst` that `timeline` reached `value`.
  void send_progress(int dst, int timeline, uint64_t value);
  // This process's heartbeat to every other (runtime/liveness.hpp); arriving ones go to the
  // group's Liveness, and a goodbye tells it that nothing more comes from that process.
  void send_heartbeat(uint64_t tick, uint64_t progress, uint64_t waiting);
  // Handles every message that arrived: a data message's bytes are received into the inbound
  // ring without waiting (MPI_Irecv, posted as soon as its header is in), and a timeline's value
  // is raised once every earlier byte of its process arrived. True when anything arrived or
  // completed.
  bool receive();
  // Whether a message is on its way either way (then the thread should look again soon: MPI
  // moves bytes only while some thread calls it).
  bool busy() const;
  // Completes the sends MPI finished; true when none is left.
  bool sends_done();
  // Messages not yet completed (posted or waiting their turn).
  size_t sends_in_flight() const;
  // Shutdown: tells every other process this one sends nothing more; done() once every other
  // process said so too and every send completed (no message is left unmatched at exit).
  void say_goodbye();
  bool done();

 private:
  struct Header {
    uint64_t kind, timeline, value, offset, bytes;
  };
  struct Pending;
  struct Arrival;
  bool complete_arrivals();
  void raise(const Header& h);
  void post(const void* data, uint64_t bytes, int dst, int tag);
  void post_payloads();
  void post_header(const Header& h, int dst);
  ProcessGroup* group_;
  int rank_, size_;
  uint64_t timelines_;
  uint64_t ring_bytes_;
  uint8_t* memory_ = nullptr;
  uint64_t bytes_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> mirror_;
  std::deque<std::unique_ptr<Pending>> pending_;
  // Per destination, the payloads (ring bytes) in order: one on its way at a time, the rest
  // waiting. Open MPI interleaves messages posted together on one connection, so pieces posted
  // at once all arrive at the end, and the receiver cannot fold the first while the next comes.
  struct Outgoing {
    const uint8_t* from;
    uint64_t bytes;
  };
  std::vector<std::deque<Outgoing>> outbox_;
  std::vector<std::unique_ptr<Pending>> payload_;
  // Per source process, what arrived in order: data whose bytes are still on their way, and the
  // values behind them, which wait for them.
  std::vector<std::deque<std::unique_ptr<Arrival>>> arrivals_;
  int goodbyes_ = 0;
  bool said_goodbye_ = false;
  struct Comm;
  std::unique_ptr<Comm> comm_;
};

}  // namespace meshvk::detail

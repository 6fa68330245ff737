#include "collectives/transport.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "collectives/host_fold.hpp"
#include "collectives/peer_reduce.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"
#include "runtime/peer_memory.hpp"
#include "profile/hooks.hpp"
#include "vk/copy.hpp"

namespace meshvk::collectives {

namespace {
uint64_t total_bytes(std::span<const VkBufferCopy> regions) {
  uint64_t bytes = 0;
  for (const VkBufferCopy& r : regions) bytes += r.size;
  return bytes;
}
}  // namespace

void Transport::copy(detail::RuntimeState& rt, detail::Recording& dst_rec,
                     const detail::DeviceBuffer& src, uint64_t src_offset,
                     const detail::DeviceBuffer& dst, uint64_t dst_offset, uint64_t bytes) {
  const VkBufferCopy region{src.offset() + src_offset, dst.offset() + dst_offset, bytes};
  copy_regions(rt, dst_rec, src, dst, std::span(&region, bytes ? 1 : 0), "copy");
}

void IntraAdapterTransport::copy_regions(detail::RuntimeState&, detail::Recording& dst_rec,
                                         const detail::DeviceBuffer& src,
                                         const detail::DeviceBuffer& dst,
                                         std::span<const VkBufferCopy> regions, const char* what) {
  dst_rec.wait_for(src.ready());
  if (regions.empty() || dst_rec.remote) return;
  const profile::DeviceSpan span(dst_rec.profile.get(), what, total_bytes(regions),  // profile hook
                                 {src.ready().timeline, src.ready().value});
  vk::copy_buffer(dst_rec.cb, src.vk_buffer(), dst.vk_buffer(),
                  static_cast<uint32_t>(regions.size()), regions.data());
}

void SharedMemoryTransport::copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                                         const detail::DeviceBuffer& src,
                                         const detail::DeviceBuffer& dst,
                                         std::span<const VkBufferCopy> regions, const char* what) {
  // A wait on another VkDevice's timeline: RuntimeState holds the submission on the host until
  // it is reached.
  dst_rec.wait_for(src.ready());
  if (regions.empty() || dst_rec.remote) return;
  const VkBuffer imported = rt.buffer_on(src, dst_rec.device);
  const profile::DeviceSpan span(dst_rec.profile.get(), what, total_bytes(regions),  // profile hook
                                 {src.ready().timeline, src.ready().value});
  vk::copy_buffer(dst_rec.cb, imported, dst.vk_buffer(), static_cast<uint32_t>(regions.size()),
                  regions.data());
}

void HostStagedTransport::copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                                       const detail::DeviceBuffer& src,
                                       const detail::DeviceBuffer& dst,
                                       std::span<const VkBufferCopy> regions, const char* what) {
  if (regions.empty() || dst_rec.remote) {
    dst_rec.wait_for(src.ready());
    return;
  }
  const uint64_t bytes = total_bytes(regions);
  auto host = rt.host_staging(src.device(), dst_rec.device, bytes);
  std::vector<VkBufferCopy> out, in;
  uint64_t packed = 0;
  for (const VkBufferCopy& r : regions) {
    out.push_back({r.srcOffset, packed, r.size});
    in.push_back({packed, r.dstOffset, r.size});
    packed += r.size;
  }
  // 1. The source's device writes the regions, packed, into the host memory.
  detail::Recording send = rt.begin_transfer(src.device());
  send.wait_for(src.ready());
  {
    const profile::DeviceSpan span(send.profile.get(), profile::Kind::copy, "stage out",
                                   bytes);  // profile hook
    vk::copy_buffer(send.cb, src.vk_buffer(), host->view(0), static_cast<uint32_t>(out.size()),
                    out.data());
  }
  kernels::barrier_to_host(send.cb);
  send.keep_alive.push_back(host);
  const detail::Fence sent = rt.submit(std::move(send));
  const_cast<detail::DeviceBuffer&>(src).used_by(sent);
  // 2. The destination copies them out once that is done (held on the host until then).
  dst_rec.wait_for(sent);
  dst_rec.keep_alive.push_back(host);
  const profile::DeviceSpan span(dst_rec.profile.get(), what, bytes,  // profile hook
                                 {sent.timeline, sent.value});
  vk::copy_buffer(dst_rec.cb, host->view(1), dst.vk_buffer(), static_cast<uint32_t>(in.size()),
                  in.data());
}

namespace {

// Records the destination's side of one piece into `receive` (on the destination's receive
// stream): its bytes lie at `ring_at` in `ring`, packed in the order of `piece`.
using ReceiveSide =
    std::function<void(detail::Recording& receive, VkBuffer ring, uint64_t ring_at,
                       std::span<const VkBufferCopy> piece, const detail::Fence& sent)>;
// The same on the host (RuntimeState::host_transfers): what the communication thread runs once
// the piece has arrived; `bytes` finds its first byte then (in the ring, or in the source's
// memory where the processes map each other's).
using PieceBytes = std::function<const uint8_t*()>;
using HostReceiveSide =
    std::function<std::function<void()>(PieceBytes bytes, std::vector<VkBufferCopy> piece)>;

// Tier 3 for any receiving side: `regions` go from `src` through the ring, a piece at a time, and
// `receive_side` takes each piece on `dst_device`, after what wrote each of `dst_waits`; those are
// kept (used_by) until it is done, and dst_rec waits for every piece. Where the destination
// reads the source in place (the staged tier's sends out of device memory, host transfers with
// peer_mapping), nothing orders a later write of the source after that read: `src_rewritten`
// (the caller writes it in place later) keeps such a source to the ring.
void through_processes(detail::RuntimeState& rt, detail::Recording& dst_rec,
                       const detail::DeviceBuffer& src, int dst_device,
                       std::span<const VkBufferCopy> regions,
                       const std::vector<const detail::DeviceBuffer*>& dst_waits,
                       bool src_rewritten, const ReceiveSide& receive_side,
                       const HostReceiveSide& host_receive_side) {
  if (regions.empty()) return;
  const int sp = rt.process_of(src.device()), dp = rt.process_of(dst_device);
  const bool host = rt.host_transfers();
  const bool in_place = host && rt.peer_mapping() && !src_rewritten;
  // Pieces of at most half the ring, so that one transfer never waits on itself, and of at most
  // 4 MiB, so that the destination takes one piece while the source copies the next in (two
  // processes, two cores) rather than after the whole. Smaller pieces cost more than they
  // overlap: each is a hop between processes (64 MiB all-reduce on 2 cores: 3.0-3.3 GB/s with
  // pieces of 1 MiB, 3.5-3.8 with 4, 3.96-4.1 with 16).
  // A region read in place (by_reference below) goes whole: the source is complete before its
  // piece is sent, so smaller pieces would overlap nothing and cost a hop each.
  const uint64_t most = in_place && regions.size() == 1
                            ? regions.front().size
                            : std::min<uint64_t>(rt.ring_bytes() / 2, 4ull << 20);
  std::vector<std::vector<VkBufferCopy>> pieces(1);
  uint64_t in_piece = 0;
  for (VkBufferCopy r : regions) {
    while (r.size) {
      if (in_piece == most) {
        pieces.emplace_back();
        in_piece = 0;
      }
      const uint64_t take = std::min(r.size, most - in_piece);
      pieces.back().push_back({r.srcOffset, r.dstOffset, take});
      r.srcOffset += take;
      r.dstOffset += take;
      r.size -= take;
      in_piece += take;
    }
  }
  for (const auto& piece : pieces) {
    const uint64_t piece_bytes = total_bytes(piece);
    // Host transfers between processes that map each other's device memory: a piece of one
    // region goes as where it lies (a runtime::PeerPiece in the ring), and the destination
    // copies or folds it straight out of the source. Both sides decide alike.
    const bool by_reference = in_place && piece.size() == 1;
    const uint64_t reserved = by_reference ? sizeof(runtime::PeerPiece) : piece_bytes;
    const detail::RuntimeState::RingRange range = rt.reserve_ring(sp, dp, reserved);
    // 1. The source's process writes the piece into the ring. Staged, where device memory is
    //    host memory and the piece is one region, the communication thread sends it straight
    //    from the source instead, once this (empty) send is done. The source then stays
    //    unchanged and allocated until the destination took the bytes (used_by(received)
    //    below: a replay rewrites its buffers, and memory is reused, only after their last use),
    //    so no MPI request still reads it.
    detail::Recording send = rt.begin_peer(src.device());
    send.wait_for(src.ready());
    for (const detail::Fence& f : range.waits) send.wait_for(f);
    const uint8_t* direct =
        send.remote || piece.size() != 1 || host || src_rewritten
            ? nullptr
            : rt.sendable_bytes(src, piece.front().srcOffset, piece.front().size);
    if (by_reference && !send.remote) {
      const auto where = rt.peer_piece(src, piece.front().srcOffset, piece.front().size);
      if (!where) throw Error("internal: a buffer the node's processes cannot map");
      uint8_t* to = rt.ring_memory(sp, dp) + range.offset;
      send.host_work = [to, where = *where] { std::memcpy(to, &where, sizeof where); };
    } else if (host && !send.remote) {
      // The regions' offsets count from the VkBuffer's start, as the copy commands' do.
      const uint8_t* from = rt.host_bytes(src) - src.offset();
      uint8_t* to = rt.ring_memory(sp, dp) + range.offset;
      send.host_work = [from, to, piece] {
        uint64_t at = 0;
        for (const VkBufferCopy& r : piece) {
          std::memcpy(to + at, from + r.srcOffset, r.size);
          at += r.size;
        }
      };
    } else if (direct) {
      kernels::barrier_to_host(send.cb);  // what wrote the source, visible to the host
    } else if (!send.remote) {
      uint64_t start = 0;
      const VkBuffer ring = rt.ring_view(src.device(), sp, dp, start);
      std::vector<VkBufferCopy> out;
      uint64_t at = start + range.offset;
      for (const VkBufferCopy& r : piece) {
        out.push_back({r.srcOffset, at, r.size});
        at += r.size;
      }
      {
        const profile::DeviceSpan span(send.profile.get(), profile::Kind::copy, "send",
                                       piece_bytes);  // profile hook
        vk::copy_buffer(send.cb, src.vk_buffer(), ring, static_cast<uint32_t>(out.size()),
                        out.data());
      }
      kernels::barrier_to_host(send.cb);
    }
    // Staged between processes, the communication thread ships the bytes once the send is done:
    // it learns of the send before the send can be done.
    std::unique_lock held(rt.mutex());
    if (!send.remote)
      rt.note_send(send.timeline, rt.last_submitted(send.timeline) + 1, dp, range.offset,
                   piece_bytes, direct);
    const detail::Fence sent = rt.submit(std::move(send));
    held.unlock();
    if (!sent.none() && rt.is_local(src.device()))
      const_cast<detail::DeviceBuffer&>(src).used_by(sent);
    // 2. The destination's process takes it once it is there, on its own receive timeline
    //    (which the other processes count), after whatever wrote the destination before; the
    //    destination's recording, which goes on after, waits for it.
    detail::Recording receive = rt.begin_peer_receive(dst_device);
    receive.wait_for(sent);
    for (const detail::DeviceBuffer* b : dst_waits) receive.wait_for(b->ready());
    if (by_reference && !receive.remote) {
      // The source's bytes, found when the piece arrives (the ring holds where they lie).
      const uint8_t* ring = rt.ring_memory(sp, dp) + range.offset;
      detail::RuntimeState* state = &rt;
      receive.host_work = host_receive_side(
          [ring, state, sp] {
            runtime::PeerPiece where;
            std::memcpy(&where, ring, sizeof where);
            return state->peer_bytes(sp, where);
          },
          piece);
    } else if (host && !receive.remote) {
      const uint8_t* ring = rt.ring_memory(sp, dp) + range.offset;
      receive.host_work = host_receive_side([ring] { return ring; }, piece);
    } else if (!receive.remote) {
      uint64_t start = 0;
      const VkBuffer ring = rt.ring_view(dst_device, sp, dp, start);
      receive_side(receive, ring, start + range.offset, piece, sent);
    }
    const detail::Fence received = rt.submit(std::move(receive));
    rt.ring_read_by(sp, dp, range.offset, reserved, received);
    // Read in place by the destination: unchanged and allocated until it has.
    if ((direct || by_reference) && !received.none() && rt.is_local(src.device()))
      const_cast<detail::DeviceBuffer&>(src).used_by(received);
    for (detail::Capture* c : rt.captures())
      c->ring_uses.push_back({sp, dp, range.offset, reserved, sent, received, direct});
    if (!received.none())
      for (const detail::DeviceBuffer* b : dst_waits)
        const_cast<detail::DeviceBuffer*>(b)->used_by(received);
    dst_rec.wait_for(received);
  }
}

}  // namespace

void ProcessTransport::copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                                    const detail::DeviceBuffer& src,
                                    const detail::DeviceBuffer& dst,
                                    std::span<const VkBufferCopy> regions, const char* what) {
  through_processes(rt, dst_rec, src, dst.device(), regions, {&dst}, false,
                    [&](detail::Recording& receive, VkBuffer ring, uint64_t ring_at,
                        std::span<const VkBufferCopy> piece, const detail::Fence& sent) {
                      std::vector<VkBufferCopy> in;
                      for (const VkBufferCopy& r : piece) {
                        in.push_back({ring_at, r.dstOffset, r.size});
                        ring_at += r.size;
                      }
                      const profile::DeviceSpan span(receive.profile.get(), what,
                                                     total_bytes(piece),
                                                     {sent.timeline, sent.value});  // profile hook
                      vk::copy_buffer(receive.cb, ring, dst.vk_buffer(),
                                      static_cast<uint32_t>(in.size()), in.data());
                    },
                    [&](PieceBytes bytes, std::vector<VkBufferCopy> piece) {
                      uint8_t* to = rt.host_bytes(dst) - dst.offset();
                      return std::function<void()>([bytes = std::move(bytes), to,
                                                    piece = std::move(piece)] {
                        const uint8_t* ring = bytes();
                        uint64_t at = 0;
                        for (const VkBufferCopy& r : piece) {
                          std::memcpy(to + r.dstOffset, ring + at, r.size);
                          at += r.size;
                        }
                      });
                    });
}

bool ProcessTransport::fold_into(detail::RuntimeState& rt, detail::Recording& dst_rec,
                                 const detail::DeviceBuffer& src, uint64_t src_elem,
                                 const detail::DeviceBuffer& local, uint64_t local_elem,
                                 const detail::DeviceBuffer& out, uint64_t out_elem, uint64_t count,
                                 DType dtype, Reduction op, bool src_first, bool src_rewritten) {
  if (!fold_kernel_supports(dtype)) return false;
  // One region whose dstOffset counts the bytes from the transfer's start.
  const VkBufferCopy region{src.offset() + src_elem * 4, 0, count * 4};
  through_processes(rt, dst_rec, src, out.device(), std::span(&region, count ? 1 : 0),
                    {&local, &out}, src_rewritten,
                    [&](detail::Recording& receive, VkBuffer ring, uint64_t ring_at,
                        std::span<const VkBufferCopy> piece, const detail::Fence&) {
                      const uint64_t from = piece.front().dstOffset / 4;
                      const uint64_t n = total_bytes(piece) / 4;
                      record_pair_fold(rt, receive, local, local_elem + from,
                                       {ring, ring_at, n * 4}, n, dtype, op, out, out_elem + from,
                                       src_first);
                    },
                    [&](PieceBytes bytes, std::vector<VkBufferCopy> piece) {
                      const uint64_t from = piece.front().dstOffset / 4;
                      const uint64_t n = total_bytes(piece) / 4;
                      const uint8_t* mine = rt.host_bytes(local) + (local_elem + from) * 4;
                      uint8_t* to = rt.host_bytes(out) + (out_elem + from) * 4;
                      return std::function<void()>([=, bytes = std::move(bytes)] {
                        const uint8_t* ring = bytes();
                        host_fold(src_first ? ring : mine, src_first ? mine : ring, to, n, dtype,
                                  op);
                      });
                    });
  return true;
}

Transport& transport_between(const detail::RuntimeState& rt, int src_device, int dst_device) {
  static IntraAdapterTransport intra;
  static SharedMemoryTransport shared;
  static HostStagedTransport staged;
  static ProcessTransport processes;
  if (rt.process_of(src_device) != rt.process_of(dst_device)) return processes;
  if (rt.adapter_of(src_device) == rt.adapter_of(dst_device)) return intra;
  return rt.cross_adapter() == detail::RuntimeState::CrossAdapter::shared
             ? static_cast<Transport&>(shared)
             : static_cast<Transport&>(staged);
}

}  // namespace meshvk::collectives

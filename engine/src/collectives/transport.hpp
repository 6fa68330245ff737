#pragma once
// How bytes move from one virtual device's buffer to another's, in tiers by where the two devices
// live (transport_between picks one):
//   1. the same VkDevice (one adapter split into virtual devices): copy commands;
//   2. another VkDevice of this process (RuntimeOptions::adapters), either
//      shared: the source's memory block imported into the destination's VkDevice (an opaque
//        fd: the same physical device opened twice), read there by copy commands, or
//      staged: the source's device copies into host memory both VkDevices import by pointer
//        (VK_EXT_external_memory_host), the destination's device copies it out;
//      either way the destination's submission is held on the host until the source's is done
//      (RuntimeState's communication thread), since no semaphore spans two VkDevices;
//   3. another process of the job (meshvk/distributed.hpp): the source's process copies into a
//      ring on the source's send timeline, the destination's copies it into place on its own
//      receive timeline (two peer timelines per device, so sends never queue behind
//      receives), and the destination's recording waits for that; every process runs this
//      for every transfer (the ones of other processes only count), so each knows the values it
//      waits for. The destination's regions must not be read or written by what dst_rec
//      recorded before the call (they are written before dst_rec runs); every caller copies
//      into memory dst_rec has not touched. The ring is either
//      shared: the node's shared memory, which both processes' VkDevices import (where device
//        memory is host memory, the communication threads copy and fold on the host instead of
//        recording commands: RuntimeState::host_transfers), or
//      staged (between nodes, or MESHVK_PROCESS_TRANSPORT=staged): each process's own host
//        memory; once the send is done, the source's communication thread sends the bytes as
//        MPI messages into the destination's copy of the ring, then the send's value
//        (RuntimeState::note_send, runtime/staged_link.hpp).
// Every tier records the reading side into the destination's recording, so collectives and
// reshards are written once for all of them.
#include <cstdint>
#include <span>

#include "collectives/collectives.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::collectives {

class Transport {
 public:
  virtual ~Transport() = default;
  // Records, into `dst_rec` (a recording of dst's device), copies of `regions` from `src` to
  // `dst` after `src` is ready. Offsets are within src.vk_buffer() and dst.vk_buffer(), that is
  // they include the buffers' offset(). The caller marks src used and dst written by dst_rec's
  // submission, as for a local copy.
  virtual void copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                            const detail::DeviceBuffer& src, const detail::DeviceBuffer& dst,
                            std::span<const VkBufferCopy> regions, const char* what) = 0;
  // Records, into `dst_rec` (a recording of out's device), what makes out[out_elem..] =
  // op(local[local_elem..], src[src_elem..]) (op(src, local) where src_first) over `count`
  // elements of `dtype`, `local` and `out` on one device, with the fold kernel's bits; the caller
  // treats local and out as read and written by dst_rec. False, with nothing recorded, where the
  // tier folds no better than a copy followed by the caller's own fold (the caller then does
  // that). `src_rewritten`: the caller writes src again in place later (a ring's running
  // reduction), so the tier must not leave it to be read in place after this step.
  virtual bool fold_into(detail::RuntimeState&, detail::Recording&, const detail::DeviceBuffer&,
                         uint64_t, const detail::DeviceBuffer&, uint64_t,
                         const detail::DeviceBuffer&, uint64_t, uint64_t, DType, Reduction,
                         bool /*src_first*/ = false, bool /*src_rewritten*/ = false) {
    return false;
  }
  // One region of `bytes`, at `src_offset` and `dst_offset` from the buffers' starts.
  void copy(detail::RuntimeState& rt, detail::Recording& dst_rec, const detail::DeviceBuffer& src,
            uint64_t src_offset, const detail::DeviceBuffer& dst, uint64_t dst_offset,
            uint64_t bytes);
};

// Tier 1: devices of one VkDevice, vkCmdCopyBuffer between their memory pools.
class IntraAdapterTransport final : public Transport {
 public:
  void copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                    const detail::DeviceBuffer& src, const detail::DeviceBuffer& dst,
                    std::span<const VkBufferCopy> regions, const char* what) override;
};

// Tier 2, shared: the destination's VkDevice copies straight out of the source's imported memory.
class SharedMemoryTransport final : public Transport {
 public:
  void copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                    const detail::DeviceBuffer& src, const detail::DeviceBuffer& dst,
                    std::span<const VkBufferCopy> regions, const char* what) override;
};

// Tier 2, staged: one copy into host memory on the source's transfer stream, one out of it into
// the destination.
class HostStagedTransport final : public Transport {
 public:
  void copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                    const detail::DeviceBuffer& src, const detail::DeviceBuffer& dst,
                    std::span<const VkBufferCopy> regions, const char* what) override;
};

// Tier 3: between processes, through the node's shared memory or MPI messages. It folds
// straight out of the ring: the destination's kernel reads the piece where it arrived, so a
// reducing collective saves a copy and a submission per piece.
class ProcessTransport final : public Transport {
 public:
  void copy_regions(detail::RuntimeState& rt, detail::Recording& dst_rec,
                    const detail::DeviceBuffer& src, const detail::DeviceBuffer& dst,
                    std::span<const VkBufferCopy> regions, const char* what) override;
  bool fold_into(detail::RuntimeState& rt, detail::Recording& dst_rec,
                 const detail::DeviceBuffer& src, uint64_t src_elem,
                 const detail::DeviceBuffer& local, uint64_t local_elem,
                 const detail::DeviceBuffer& out, uint64_t out_elem, uint64_t count, DType dtype,
                 Reduction op, bool src_first, bool src_rewritten) override;
};

// The transport for copies from `src_device` to `dst_device` on `rt`. The transports hold no
// state of their own: everything they touch belongs to the runtime.
Transport& transport_between(const detail::RuntimeState& rt, int src_device, int dst_device);

}  // namespace meshvk::collectives

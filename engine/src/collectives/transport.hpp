#pragma once
// How bytes move from one virtual device's buffer to another's. Today every device is a slice of
// one adapter, so a transfer is a copy command; devices on other adapters or other processes
// will be other transports (host-staged, MPI) behind the same interface.
#include <cstdint>

#include "runtime/runtime_state.hpp"

namespace meshvk::collectives {

class Transport {
 public:
  virtual ~Transport() = default;
  // Records, into the destination device's recording, a copy of `bytes` from `src` at
  // `src_offset` to `dst` at `dst_offset`, after `src` is ready.
  virtual void copy(detail::Recording& dst_rec, const detail::DeviceBuffer& src, uint64_t src_offset,
                    const detail::DeviceBuffer& dst, uint64_t dst_offset, uint64_t bytes) = 0;
};

// Devices of one adapter: vkCmdCopyBuffer between their memory pools.
class IntraAdapterTransport final : public Transport {
 public:
  void copy(detail::Recording& dst_rec, const detail::DeviceBuffer& src, uint64_t src_offset,
            const detail::DeviceBuffer& dst, uint64_t dst_offset, uint64_t bytes) override;
};

Transport& transport_between(int src_device, int dst_device);

}  // namespace meshvk::collectives

#include "collectives/transport.hpp"

#include "profile/hooks.hpp"

namespace meshvk::collectives {

void IntraAdapterTransport::copy(detail::Recording& dst_rec, const detail::DeviceBuffer& src,
                                 uint64_t src_offset, const detail::DeviceBuffer& dst, uint64_t dst_offset,
                                 uint64_t bytes) {
  dst_rec.wait_for(src.ready());
  if (bytes == 0) return;
  const VkBufferCopy region{src.offset() + src_offset, dst.offset() + dst_offset, bytes};
  const profile::DeviceSpan span(dst_rec.profile.get(), "copy", bytes,  // profile hook
                                 {src.ready().timeline, src.ready().value});
  vkCmdCopyBuffer(dst_rec.cb, src.vk_buffer(), dst.vk_buffer(), 1, &region);
}

Transport& transport_between(int, int) {
  static IntraAdapterTransport intra;
  return intra;
}

}  // namespace meshvk::collectives

#include "vk/copy.hpp"

#include <algorithm>
#include <vector>

namespace meshvk::vk {

void copy_buffer(VkCommandBuffer cb, VkBuffer src, VkBuffer dst, uint32_t region_count, const VkBufferCopy* regions) {
  bool large = false;
  for (uint32_t i = 0; i < region_count; ++i) large = large || regions[i].size > kMaxCopyBytes;
  if (!large) {
    vkCmdCopyBuffer(cb, src, dst, region_count, regions);
    return;
  }
  std::vector<VkBufferCopy> cut;
  for (uint32_t i = 0; i < region_count; ++i)
    for (VkDeviceSize at = 0; at < regions[i].size; at += kMaxCopyBytes)
      cut.push_back({regions[i].srcOffset + at, regions[i].dstOffset + at, std::min(kMaxCopyBytes, regions[i].size - at)});
  vk::copy_buffer(cb, src, dst, static_cast<uint32_t>(cut.size()), cut.data());
}

}  // namespace meshvk::vk

#pragma once
// vkCmdCopyBuffer with every region cut into pieces of at most kMaxCopyBytes: lavapipe's copy of
// 2 GiB or more in one region crashes (a 32-bit size inside it), so no region reaches that.
#include <vulkan/vulkan.h>

#include <cstdint>

namespace meshvk::vk {

constexpr VkDeviceSize kMaxCopyBytes = VkDeviceSize{1} << 30;

void copy_buffer(VkCommandBuffer cb, VkBuffer src, VkBuffer dst, uint32_t region_count, const VkBufferCopy* regions);

}  // namespace meshvk::vk

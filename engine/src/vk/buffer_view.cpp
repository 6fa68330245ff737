#include "vk/buffer_view.hpp"

#include "vk/check.hpp"

namespace meshvk::vk {

BufferView::BufferView(VkDevice device, VkBuffer buffer, VkFormat format, uint64_t offset,
                       uint64_t range)
    : device_(device) {
  VkBufferViewCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO};
  info.buffer = buffer;
  info.format = format;
  info.offset = offset;
  info.range = range;
  check(vkCreateBufferView(device_, &info, nullptr, &view_), "vkCreateBufferView");
}

BufferView::~BufferView() {
  if (view_) vkDestroyBufferView(device_, view_, nullptr);
}

}  // namespace meshvk::vk

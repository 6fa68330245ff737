#include "vk/sync.hpp"

#include "vk/check.hpp"

namespace meshvk::vk {

TimelineSemaphore::TimelineSemaphore(VkDevice device) : device_(device) {
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  info.pNext = &type;
  check(vkCreateSemaphore(device_, &info, nullptr, &semaphore_), "vkCreateSemaphore");
}

TimelineSemaphore::~TimelineSemaphore() {
  if (semaphore_) vkDestroySemaphore(device_, semaphore_, nullptr);
}

uint64_t TimelineSemaphore::value() const {
  uint64_t v = 0;
  check(vkGetSemaphoreCounterValue(device_, semaphore_, &v), "vkGetSemaphoreCounterValue");
  return v;
}

void TimelineSemaphore::signal(uint64_t value) {
  VkSemaphoreSignalInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO};
  info.semaphore = semaphore_;
  info.value = value;
  check(vkSignalSemaphore(device_, &info), "vkSignalSemaphore");
}

bool TimelineSemaphore::wait(uint64_t value, uint64_t timeout_ns) const {
  VkSemaphoreWaitInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  info.semaphoreCount = 1;
  info.pSemaphores = &semaphore_;
  info.pValues = &value;
  const VkResult r = vkWaitSemaphores(device_, &info, timeout_ns);
  if (r == VK_TIMEOUT) return false;
  check(r, "vkWaitSemaphores");
  return true;
}

CommandPool::CommandPool(VkDevice device, uint32_t family) : device_(device) {
  VkCommandPoolCreateInfo info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  info.queueFamilyIndex = family;
  check(vkCreateCommandPool(device_, &info, nullptr, &pool_), "vkCreateCommandPool");
}

CommandPool::~CommandPool() {
  if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
}

VkCommandBuffer CommandPool::allocate(bool secondary) {
  VkCommandBufferAllocateInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  info.commandPool = pool_;
  info.level = secondary ? VK_COMMAND_BUFFER_LEVEL_SECONDARY : VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  info.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  check(vkAllocateCommandBuffers(device_, &info, &cb), "vkAllocateCommandBuffers");
  return cb;
}

void CommandPool::free(VkCommandBuffer cb) { vkFreeCommandBuffers(device_, pool_, 1, &cb); }

}  // namespace meshvk::vk

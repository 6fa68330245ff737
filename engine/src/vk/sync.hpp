#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>

namespace meshvk::vk {

// A timeline semaphore: work signals increasing values, anyone may wait for a value.
class TimelineSemaphore {
 public:
  explicit TimelineSemaphore(VkDevice device);
  ~TimelineSemaphore();
  TimelineSemaphore(const TimelineSemaphore&) = delete;
  TimelineSemaphore& operator=(const TimelineSemaphore&) = delete;

  VkSemaphore handle() const { return semaphore_; }
  uint64_t value() const;
  // True when `value` was reached within `timeout_ns`.
  bool wait(uint64_t value, uint64_t timeout_ns) const;
  void signal(uint64_t value);  // from the host

 private:
  VkDevice device_;
  VkSemaphore semaphore_ = VK_NULL_HANDLE;
};

// A command pool whose buffers can be reset one by one.
class CommandPool {
 public:
  CommandPool(VkDevice device, uint32_t family);
  ~CommandPool();
  CommandPool(const CommandPool&) = delete;
  CommandPool& operator=(const CommandPool&) = delete;
  VkCommandBuffer allocate(bool secondary = false);
  void free(VkCommandBuffer cb);

 private:
  VkDevice device_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
};

}  // namespace meshvk::vk

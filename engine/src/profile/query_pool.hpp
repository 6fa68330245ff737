#pragma once
// A VkQueryPool of timestamp queries (RAII). vk/ has no query wrapper yet; this one lives with
// its only user.
#include <vulkan/vulkan.h>

#include <cstdint>

namespace meshvk::profile {

class QueryPool {
 public:
  QueryPool(VkDevice device, uint32_t count);
  ~QueryPool();
  QueryPool(const QueryPool&) = delete;
  QueryPool& operator=(const QueryPool&) = delete;
  VkQueryPool handle() const { return pool_; }
  uint32_t count() const { return count_; }

 private:
  VkDevice device_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t count_;
};

}  // namespace meshvk::profile

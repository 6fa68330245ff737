#include "profile/query_pool.hpp"

#include "vk/check.hpp"

namespace meshvk::profile {

QueryPool::QueryPool(VkDevice device, uint32_t count) : device_(device), count_(count) {
  VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = count;
  vk::check(vkCreateQueryPool(device_, &info, nullptr, &pool_), "vkCreateQueryPool");
}

QueryPool::~QueryPool() {
  if (pool_) vkDestroyQueryPool(device_, pool_, nullptr);
}

}  // namespace meshvk::profile

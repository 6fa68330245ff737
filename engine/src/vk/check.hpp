#pragma once
#include <vulkan/vulkan.h>

#include <string>

namespace meshvk::vk {

const char* result_name(VkResult result);
// Throws meshvk::Error naming `what` and the Vulkan result when `result` is an error.
void check(VkResult result, const char* what);

}  // namespace meshvk::vk

#include "vk/check.hpp"

#include "meshvk/error.hpp"

namespace meshvk::vk {

const char* result_name(VkResult result) {
  switch (result) {
#define MESHVK_RESULT(r) \
  case r:                \
    return #r;
    MESHVK_RESULT(VK_SUCCESS)
    MESHVK_RESULT(VK_NOT_READY)
    MESHVK_RESULT(VK_TIMEOUT)
    MESHVK_RESULT(VK_INCOMPLETE)
    MESHVK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    MESHVK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    MESHVK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    MESHVK_RESULT(VK_ERROR_DEVICE_LOST)
    MESHVK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    MESHVK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    MESHVK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    MESHVK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    MESHVK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    MESHVK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    MESHVK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
    MESHVK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
#undef MESHVK_RESULT
    default:
      return "VK_ERROR_UNKNOWN";
  }
}

void check(VkResult result, const char* what) {
  if (result >= 0) return;
  throw Error(std::string("Vulkan: ") + what + " failed with " + result_name(result));
}

}  // namespace meshvk::vk

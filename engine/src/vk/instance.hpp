#pragma once
#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>

namespace meshvk::vk {

// The VkInstance, with the Khronos validation layer and a messenger that counts what it reports
// when validation is asked for.
class Instance {
 public:
  explicit Instance(bool validation);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  bool validation_enabled() const { return messenger_ != VK_NULL_HANDLE; }
  uint64_t validation_messages() const { return messages_.load(); }
  // Messages reported to every Instance of the process.
  static uint64_t validation_messages_in_process();

 private:
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT type,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                   void* self);
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::atomic<uint64_t> messages_{0};
};

}  // namespace meshvk::vk

#include "vk/device.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "meshvk/error.hpp"
#include "vk/check.hpp"

namespace meshvk::vk {

static bool has_device_extension(VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

static int find_memory_type(const VkPhysicalDeviceMemoryProperties& mem,
                            VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred) {
  int fallback = -1;
  for (uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mem.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    if ((f & preferred) == preferred) return static_cast<int>(i);
    if (fallback < 0) fallback = static_cast<int>(i);
  }
  return fallback;
}

Device::Device(const Adapter& adapter) : adapter_(adapter) {
  // The compute family with the most queues, so virtual devices spread over as many as exist.
  int family = -1;
  for (size_t i = 0; i < adapter_.queue_families.size(); ++i) {
    const auto& f = adapter_.queue_families[i];
    if (!(f.queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    if (family < 0 || f.queueCount > adapter_.queue_families[family].queueCount)
      family = static_cast<int>(i);
  }
  if (family < 0) throw Error("Vulkan adapter " + adapter_.name + " has no compute queue");
  compute_family_ = static_cast<uint32_t>(family);
  const uint32_t count = adapter_.queue_families[family].queueCount;
  const std::vector<float> priorities(count, 1.0f);
  VkDeviceQueueCreateInfo q{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  q.queueFamilyIndex = compute_family_;
  q.queueCount = count;
  q.pQueuePriorities = priorities.data();

  if (!has_device_extension(adapter_.handle, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
    throw Error("Vulkan adapter " + adapter_.name + " lacks " +
                VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME + ", which meshvk's kernels need");
  std::vector<const char*> extensions{VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  // profile hook: device timestamps paired with the host clock (profile/clock.cpp), where offered.
  if (has_device_extension(adapter_.handle, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME))
    extensions.push_back(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  // Memory shared with the runtime's other VkDevices (several adapters in one process).
  if (has_device_extension(adapter_.handle, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME)) {
    VkPhysicalDeviceExternalBufferInfo query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO};
    query.usage = kDeviceBufferUsage;
    query.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkExternalBufferProperties props{VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES};
    vkGetPhysicalDeviceExternalBufferProperties(adapter_.handle, &query, &props);
    const auto f = props.externalMemoryProperties.externalMemoryFeatures;
    opaque_fd_ = (f & VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT) &&
                 (f & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT) &&
                 !(f & VK_EXTERNAL_MEMORY_FEATURE_DEDICATED_ONLY_BIT);
    if (opaque_fd_) extensions.push_back(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
  }
  if (has_device_extension(adapter_.handle, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &host;
    vkGetPhysicalDeviceProperties2(adapter_.handle, &props);
    host_pointer_ = host.minImportedHostPointerAlignment > 0;
    host_pointer_alignment_ = std::max<uint64_t>(host.minImportedHostPointerAlignment, 4096);
    if (host_pointer_) extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  }

  VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 supported{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  supported.pNext = &v12;
  vkGetPhysicalDeviceFeatures2(adapter_.handle, &supported);
  if (!v12.timelineSemaphore)
    throw Error("Vulkan adapter " + adapter_.name + " lacks timeline semaphores");

  VkPhysicalDeviceVulkan12Features enable12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  enable12.timelineSemaphore = VK_TRUE;
  VkPhysicalDeviceVulkan11Features enable11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  enable11.storageBuffer16BitAccess = adapter_.storage16 ? VK_TRUE : VK_FALSE;
  enable12.pNext = &enable11;
  VkPhysicalDeviceFeatures2 enable{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  enable.pNext = &enable12;
  enable.features.shaderFloat64 = adapter_.float64 ? VK_TRUE : VK_FALSE;
  enable.features.shaderInt64 = adapter_.int64 ? VK_TRUE : VK_FALSE;
  enable12.storageBuffer8BitAccess = adapter_.storage8 ? VK_TRUE : VK_FALSE;
  enable12.shaderInt8 = adapter_.int8 ? VK_TRUE : VK_FALSE;

  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.pNext = &enable;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &q;
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  check(vkCreateDevice(adapter_.handle, &info, nullptr, &device_), "vkCreateDevice");
  push_descriptor_set_ = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(
      vkGetDeviceProcAddr(device_, "vkCmdPushDescriptorSetKHR"));
  if (!push_descriptor_set_) {
    vkDestroyDevice(device_, nullptr);
    throw Error("Vulkan adapter " + adapter_.name + " offers no vkCmdPushDescriptorSetKHR");
  }

  for (uint32_t i = 0; i < count; ++i) {
    auto queue = std::make_unique<Queue>();
    queue->family = compute_family_;
    queue->index = i;
    vkGetDeviceQueue(device_, compute_family_, i, &queue->handle);
    queues_.push_back(std::move(queue));
  }

  const int dev = find_memory_type(adapter_.memory, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  const int any = find_memory_type(adapter_.memory, 0, 0);
  device_type_ = static_cast<uint32_t>(dev >= 0 ? dev : any);
  {
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    device_memory_is_host_ =
        adapter_.is_cpu() && (adapter_.memory.memoryTypes[device_type_].propertyFlags & host) == host;
  }
  const int staging = find_memory_type(
      adapter_.memory, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
      VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (staging < 0) throw Error("Vulkan adapter " + adapter_.name + " has no host-visible coherent memory");
  staging_type_ = static_cast<uint32_t>(staging);
}

Device::~Device() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    vkDestroyDevice(device_, nullptr);
  }
}

uint64_t Device::device_heap_size() const {
  return adapter_.memory.memoryHeaps[adapter_.memory.memoryTypes[device_type_].heapIndex].size;
}

Memory::Memory(VkDevice device, uint32_t type, uint64_t size, bool map, const void* next)
    : device_(device), size_(size) {
  VkMemoryAllocateInfo info{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  info.pNext = next;
  info.allocationSize = size;
  info.memoryTypeIndex = type;
  check(vkAllocateMemory(device_, &info, nullptr, &memory_), "vkAllocateMemory");
  if (map) {
    const VkResult r = vkMapMemory(device_, memory_, 0, VK_WHOLE_SIZE, 0, &mapped_);
    if (r != VK_SUCCESS) {
      vkFreeMemory(device_, memory_, nullptr);
      check(r, "vkMapMemory");
    }
  }
}

Memory::~Memory() {
  if (memory_) vkFreeMemory(device_, memory_, nullptr);
}

Buffer::Buffer(const Device& device, uint64_t size, VkBufferUsageFlags usage,
               uint32_t memory_type, bool map, bool exportable)
    : device_(device.handle()), size_(size) {
  VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  external.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkExportMemoryAllocateInfo export_info{VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO};
  export_info.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  if (exportable) info.pNext = &external;
  info.size = size;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &info, nullptr, &buffer_), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, buffer_, &req);
  uint32_t type = memory_type;
  if (!(req.memoryTypeBits & (1u << type))) {
    vkDestroyBuffer(device_, buffer_, nullptr);
    throw Error("Vulkan: memory type " + std::to_string(type) + " cannot back a buffer here");
  }
  try {
    memory_ = std::make_unique<Memory>(device_, type, req.size, map, exportable ? &export_info : nullptr);
  } catch (...) {
    vkDestroyBuffer(device_, buffer_, nullptr);
    throw;
  }
  check(vkBindBufferMemory(device_, buffer_, memory_->handle(), 0), "vkBindBufferMemory");
}

Buffer::~Buffer() {
  if (buffer_) vkDestroyBuffer(device_, buffer_, nullptr);
}

}  // namespace meshvk::vk

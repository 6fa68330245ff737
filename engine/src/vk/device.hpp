#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "vk/adapter.hpp"

namespace meshvk::vk {

// One hardware queue; vkQueueSubmit on it must be externally synchronized.
struct Queue {
  VkQueue handle = VK_NULL_HANDLE;
  uint32_t family = 0;
  uint32_t index = 0;
  std::mutex submit_mutex;
};

// The VkDevice with every queue of its compute family, and the memory types meshvk uses.
class Device {
 public:
  explicit Device(const Adapter& adapter);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  const Adapter& adapter() const { return adapter_; }
  const VkPhysicalDeviceLimits& limits() const { return adapter_.properties.limits; }
  size_t queue_count() const { return queues_.size(); }
  Queue& queue(size_t i) { return *queues_[i]; }
  uint32_t compute_family() const { return compute_family_; }
  // vkCmdPushDescriptorSetKHR of this VkDevice: device-level entry points belong to their
  // device, so each Device looks up its own (one kept process-wide would outlive it).
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_set() const { return push_descriptor_set_; }

  // Memory type for device buffers (device-local first) and for host staging (host-visible,
  // coherent; cached preferred for reads back).
  uint32_t device_memory_type() const { return device_type_; }
  uint32_t staging_memory_type() const { return staging_type_; }
  // Size of the heap device buffers come from.
  uint64_t device_heap_size() const;
  // Device memory is the host's own (a CPU adapter whose device type is host-visible and
  // coherent): mapping it costs nothing and the host may read it directly.
  bool device_memory_is_host_memory() const { return device_memory_is_host_; }

  // External memory, for sharing memory with the runtime's other VkDevices: device memory
  // exported and imported as an opaque fd (VK_KHR_external_memory_fd, exportable storage
  // buffers without a dedicated allocation), and host memory imported by pointer
  // (VK_EXT_external_memory_host) at a multiple of host_pointer_alignment().
  bool opaque_fd() const { return opaque_fd_; }
  bool host_pointer() const { return host_pointer_; }
  uint64_t host_pointer_alignment() const { return host_pointer_alignment_; }

 private:
  Adapter adapter_;
  VkDevice device_ = VK_NULL_HANDLE;
  uint32_t compute_family_ = 0;
  std::vector<std::unique_ptr<Queue>> queues_;
  uint32_t device_type_ = 0;
  uint32_t staging_type_ = 0;
  bool device_memory_is_host_ = false;
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_set_ = nullptr;
  bool opaque_fd_ = false;
  bool host_pointer_ = false;
  uint64_t host_pointer_alignment_ = 0;
};

// A VkDeviceMemory allocation, mapped when host-visible and asked for.
class Memory {
 public:
  // `next`: extension structures chained to the VkMemoryAllocateInfo (export or import info).
  Memory(VkDevice device, uint32_t type, uint64_t size, bool map, const void* next = nullptr);
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  VkDeviceMemory handle() const { return memory_; }
  void* mapped() const { return mapped_; }
  uint64_t size() const { return size_; }

 private:
  VkDevice device_;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  void* mapped_ = nullptr;
  uint64_t size_ = 0;
};

// A VkBuffer bound to the start of its own Memory.
class Buffer {
 public:
  // `exportable`: its memory can be exported as an opaque fd (Device::opaque_fd()).
  Buffer(const Device& device, uint64_t size, VkBufferUsageFlags usage, uint32_t memory_type,
         bool map, bool exportable = false);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  VkBuffer handle() const { return buffer_; }
  uint64_t size() const { return size_; }
  void* mapped() const { return memory_->mapped(); }
  const Memory& memory() const { return *memory_; }

 private:
  VkDevice device_;
  uint64_t size_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  std::unique_ptr<Memory> memory_;
};

// Every use meshvk makes of device buffers: storage, texel views and copies.
constexpr VkBufferUsageFlags kDeviceBufferUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
    VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
    VK_BUFFER_USAGE_TRANSFER_DST_BIT;

}  // namespace meshvk::vk

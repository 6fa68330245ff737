#pragma once
#include <vulkan/vulkan.h>

#include <string>
#include <vector>

namespace meshvk::vk {

// A physical device as meshvk sees it.
struct Adapter {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  int index = 0;
  std::string name;
  VkPhysicalDeviceProperties properties{};
  VkPhysicalDeviceMemoryProperties memory{};
  std::vector<VkQueueFamilyProperties> queue_families;
  // shaderSignedZeroInfNanPreserveFloat32: shaders may ask that float32 arithmetic keep
  // infinities, NaN and signed zeros (no x - x -> 0, x * 0 -> 0 rewrites).
  bool preserves_inf_nan32 = false;
  // VkPhysicalDeviceIDProperties: memory exported as an opaque fd imports only into a device
  // with the same driver and device UUIDs (the same physical device, opened again).
  uint8_t device_uuid[VK_UUID_SIZE] = {};
  uint8_t driver_uuid[VK_UUID_SIZE] = {};
  bool preserves_denorm32 = false;  // shaderDenormPreserveFloat32: subnormal float32 results kept
  // shaderFloat64: shaders may use double (the math library's float64 variants, mathlib.hpp);
  // the VkDevice enables it where the adapter has it.
  bool float64 = false;
  // storageBuffer16BitAccess: shaders may load and store 16-bit values in storage buffers, as the
  // kernels writing bfloat16 and float16 arrays (2 bytes per element) do; the VkDevice enables it
  // where the adapter has it, and those kernels raise an Error naming it where it does not.
  bool storage16 = false;
  // storageBuffer8BitAccess and shaderInt8 (int8 and uint8 arrays, 1 byte per element, loaded
  // and stored as 8-bit values), shaderInt64 (int64 arithmetic): enabled where the adapter has
  // them; kernels touching those dtypes raise an Error naming the missing one.
  bool storage8 = false;
  bool int8 = false;
  bool int64 = false;
  bool is_cpu() const { return properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU; }
  std::string type_name() const;
};

std::vector<Adapter> list_adapters(VkInstance instance);

// One line per adapter ("\n  0: llvmpipe (LLVM 15.0.6, 256 bits) (CPU)"), for errors that
// name the valid choices.
std::string describe_adapters(const std::vector<Adapter>& adapters);

// `selector` is an index or a substring of the adapter name (empty: the first discrete GPU, else
// the first integrated GPU, else a CPU adapter such as lavapipe, else the first one). Throws
// Error listing the adapters when nothing matches.
Adapter choose_adapter(VkInstance instance, const std::string& selector);

}  // namespace meshvk::vk

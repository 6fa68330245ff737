#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <span>
#include <vector>

namespace meshvk::vk {

// A compute pipeline whose descriptors (bindings 0..n-1, of the given types) are pushed with
// vkCmdPushDescriptorSetKHR and whose parameters are push constants.
class ComputePipeline {
 public:
  ComputePipeline(VkDevice device, std::span<const uint32_t> spirv,
                  std::vector<VkDescriptorType> bindings, uint32_t push_constant_bytes);
  ~ComputePipeline();
  ComputePipeline(const ComputePipeline&) = delete;
  ComputePipeline& operator=(const ComputePipeline&) = delete;

  VkPipeline handle() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  const std::vector<VkDescriptorType>& bindings() const { return binding_types_; }
  uint32_t push_constant_bytes() const { return push_bytes_; }

 private:
  void release();
  VkDevice device_;
  std::vector<VkDescriptorType> binding_types_;
  uint32_t push_bytes_;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

}  // namespace meshvk::vk

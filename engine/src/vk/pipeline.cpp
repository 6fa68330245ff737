#include "vk/pipeline.hpp"

#include <vector>

#include "vk/check.hpp"

namespace meshvk::vk {

ComputePipeline::ComputePipeline(VkDevice device, std::span<const uint32_t> spirv,
                                 std::vector<VkDescriptorType> binding_types,
                                 uint32_t push_constant_bytes)
    : device_(device), binding_types_(std::move(binding_types)), push_bytes_(push_constant_bytes) {
  // Built step by step; the destructor releases whatever was made if a later step throws.
  struct Cleanup {
    ComputePipeline* self;
    bool armed = true;
    ~Cleanup() {
      if (armed) self->release();
    }
  } cleanup{this};

  VkShaderModuleCreateInfo mod{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mod.codeSize = spirv.size_bytes();
  mod.pCode = spirv.data();
  check(vkCreateShaderModule(device_, &mod, nullptr, &module_), "vkCreateShaderModule");

  const auto count = static_cast<uint32_t>(binding_types_.size());
  std::vector<VkDescriptorSetLayoutBinding> bindings(count);
  for (uint32_t i = 0; i < count; ++i) {
    bindings[i].binding = i;
    bindings[i].descriptorType = binding_types_[i];
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo set{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
  set.bindingCount = count;
  set.pBindings = bindings.data();
  check(vkCreateDescriptorSetLayout(device_, &set, nullptr, &set_layout_),
        "vkCreateDescriptorSetLayout");

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_constant_bytes};
  VkPipelineLayoutCreateInfo layout{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout.setLayoutCount = 1;
  layout.pSetLayouts = &set_layout_;
  layout.pushConstantRangeCount = push_constant_bytes ? 1 : 0;
  layout.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(device_, &layout, nullptr, &layout_), "vkCreatePipelineLayout");

  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module_;
  info.stage.pName = "main";
  info.layout = layout_;
  check(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &pipeline_),
        "vkCreateComputePipelines");
  cleanup.armed = false;
}

ComputePipeline::~ComputePipeline() { release(); }

void ComputePipeline::release() {
  if (pipeline_) vkDestroyPipeline(device_, pipeline_, nullptr);
  if (layout_) vkDestroyPipelineLayout(device_, layout_, nullptr);
  if (set_layout_) vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  if (module_) vkDestroyShaderModule(device_, module_, nullptr);
  pipeline_ = VK_NULL_HANDLE;
  layout_ = VK_NULL_HANDLE;
  set_layout_ = VK_NULL_HANDLE;
  module_ = VK_NULL_HANDLE;
}

}  // namespace meshvk::vk

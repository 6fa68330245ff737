#include "kernels/simd.hpp"

namespace meshvk::kernels {

Simd simd_of(detail::RuntimeState& rt) {
  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &sg;
  vkGetPhysicalDeviceProperties2(rt.device().adapter().handle, &props);
  Simd s;
  // Only the widths the kernels were tuned for; others run as 8 without shuffles.
  if (sg.subgroupSize != 8 && sg.subgroupSize != 16) return s;
  s.lanes = sg.subgroupSize;
  s.shuffle = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
              (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  return s;
}

}  // namespace meshvk::kernels

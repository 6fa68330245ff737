#include "vk/adapter.hpp"

#include <algorithm>
#include <cctype>

#include "meshvk/error.hpp"
#include "runtime/env.hpp"
#include "vk/check.hpp"

namespace meshvk::vk {

namespace {

// MESHVK_HIDE_FEATURES=shaderInt64,shaderFloat64,storageBuffer8BitAccess: the adapter is treated
// as lacking the named features, so the Errors an adapter without them gives can be tested on
// one that has them.
void hide_features(Adapter& a) {
  const auto text = detail::env_text("MESHVK_HIDE_FEATURES");
  if (!text) return;
  size_t at = 0;
  while (at <= text->size()) {
    const size_t end = std::min(text->find(',', at), text->size());
    const std::string name = text->substr(at, end - at);
    if (name == "shaderInt64") {
      a.int64 = false;
    } else if (name == "shaderFloat64") {
      a.float64 = false;
    } else if (name == "storageBuffer8BitAccess") {
      a.storage8 = false;
    } else if (name == "shaderInt8") {
      a.int8 = false;
    } else {
      throw Error("MESHVK_HIDE_FEATURES: '" + name +
                  "' is not a feature it hides; give a comma-separated list of shaderInt64, "
                  "shaderFloat64, storageBuffer8BitAccess and shaderInt8");
    }
    at = end + 1;
  }
}

}  // namespace

std::string Adapter::type_name() const {
  switch (properties.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "CPU";
    default:
      return "other";
  }
}

std::vector<Adapter> list_adapters(VkInstance instance) {
  uint32_t n = 0;
  check(vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> handles(n);
  check(vkEnumeratePhysicalDevices(instance, &n, handles.data()), "vkEnumeratePhysicalDevices");
  std::vector<Adapter> adapters;
  for (uint32_t i = 0; i < n; ++i) {
    Adapter a;
    a.handle = handles[i];
    a.index = static_cast<int>(i);
    vkGetPhysicalDeviceProperties(a.handle, &a.properties);
    vkGetPhysicalDeviceMemoryProperties(a.handle, &a.memory);
    a.name = a.properties.deviceName;
    uint32_t q = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(a.handle, &q, nullptr);
    a.queue_families.resize(q);
    vkGetPhysicalDeviceQueueFamilyProperties(a.handle, &q, a.queue_families.data());
    // meshvk needs Vulkan 1.2 (timeline semaphores in core).
    if (a.properties.apiVersion < VK_API_VERSION_1_2) continue;
    VkPhysicalDeviceFloatControlsProperties float_controls{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
    VkPhysicalDeviceIDProperties ids{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
    float_controls.pNext = &ids;
    VkPhysicalDeviceProperties2 properties2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    properties2.pNext = &float_controls;
    vkGetPhysicalDeviceProperties2(a.handle, &properties2);
    a.preserves_inf_nan32 = float_controls.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE;
    std::copy(std::begin(ids.deviceUUID), std::end(ids.deviceUUID), a.device_uuid);
    std::copy(std::begin(ids.driverUUID), std::end(ids.driverUUID), a.driver_uuid);
    a.preserves_denorm32 = float_controls.shaderDenormPreserveFloat32 == VK_TRUE;
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    v11.pNext = &v12;
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &v11;
    vkGetPhysicalDeviceFeatures2(a.handle, &features);
    a.float64 = features.features.shaderFloat64 == VK_TRUE;
    a.int64 = features.features.shaderInt64 == VK_TRUE;
    a.storage16 = v11.storageBuffer16BitAccess == VK_TRUE;
    a.storage8 = v12.storageBuffer8BitAccess == VK_TRUE;
    a.int8 = v12.shaderInt8 == VK_TRUE;
    hide_features(a);
    adapters.push_back(std::move(a));
  }
  return adapters;
}

static std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string describe_adapters(const std::vector<Adapter>& adapters) {
  std::string available;
  for (const auto& a : adapters)
    available += "\n  " + std::to_string(a.index) + ": " + a.name + " (" + a.type_name() + ")";
  return available;
}

Adapter choose_adapter(VkInstance instance, const std::string& selector) {
  std::vector<Adapter> adapters = list_adapters(instance);
  if (adapters.empty())
    throw Error(
        "no Vulkan 1.2 adapter found; install a Vulkan driver (on Debian: apt-get install "
        "mesa-vulkan-drivers for lavapipe)");
  const std::string available = describe_adapters(adapters);

  if (!selector.empty()) {
    const bool numeric = std::all_of(selector.begin(), selector.end(),
                                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    for (const auto& a : adapters) {
      if (numeric ? std::to_string(a.index) == selector
                  : lower(a.name).find(lower(selector)) != std::string::npos)
        return a;
    }
    throw Error("no Vulkan adapter matches \"" + selector +
                "\"; give an index or part of a name from:" + available);
  }
  for (VkPhysicalDeviceType want :
       {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
        VK_PHYSICAL_DEVICE_TYPE_CPU}) {
    for (const auto& a : adapters)
      if (a.properties.deviceType == want) return a;
  }
  return adapters.front();
}

}  // namespace meshvk::vk

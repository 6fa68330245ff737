#include "vk/instance.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#if defined(MESHVK_PIN_DRIVER_MODULES)
#include <dlfcn.h>
#include <link.h>
#endif
#include <string>
#include <vector>

#include "meshvk/error.hpp"
#include "vk/check.hpp"

namespace meshvk::vk {

static bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

static bool has_instance_extension(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

#if defined(MESHVK_PIN_DRIVER_MODULES)
// Sanitizer builds: the loader unloads lavapipe, LLVM and the validation layer when the last
// instance is destroyed, so LeakSanitizer's report at exit reads their frames as
// "<unknown module>" and tests/lsan.supp (which names those libraries) cannot match the few
// allocations they keep. RTLD_NODELETE on every module loaded now keeps them mapped to the end.
// The paths are collected first: dlopen inside dl_iterate_phdr's callback would take the loader's
// locks in the other order than a dlopen on another thread does.
static void pin_loaded_modules() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name && info->dlpi_name[0] == '/')
          static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
        return 0;
      },
      &paths);
  for (const std::string& path : paths) dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}
#endif

// lavapipe (llvmpipe) runs shaders at LP_NATIVE_VECTOR_WIDTH bits, 256 by default even on
// AVX-512 CPUs; at 512 the matmul runs ~1.3x faster (docs/LAVAPIPE.md). The driver reads the
// variable once per process, when the first instance loads it, so it is set here, before this
// process's first loader call, once: later runtimes share what the first one chose, and a
// process that created a Vulkan instance before meshvk keeps what the driver read then (the
// kernels ask the adapter its subgroup size, so they are right either way). setenv is
// process-wide and not safe against getenv on other threads: programs that read the environment
// on other threads while creating their first runtime should set LP_NATIVE_VECTOR_WIDTH or
// MESHVK_LAVAPIPE_LANES themselves. Other drivers ignore the variable; child processes inherit
// it.
static void choose_lavapipe_lanes() {
  const char* env = std::getenv("MESHVK_LAVAPIPE_LANES");
  const std::string lanes = env ? env : "";
  if (!lanes.empty() && lanes != "auto" && lanes != "8" && lanes != "16")
    throw Error("MESHVK_LAVAPIPE_LANES=" + lanes +
                " is not a lane count; use 8 (lavapipe's default 256-bit vectors), 16 (512-bit) "
                "or auto (16 where the CPU has AVX-512F)");
  static std::once_flag once;
  std::call_once(once, [&] {
    // The user's own setting always wins.
    if (std::getenv("LP_NATIVE_VECTOR_WIDTH") || lanes == "8") return;
    bool wide = lanes == "16";
#if defined(__x86_64__) || defined(__i386__)
    wide = wide || __builtin_cpu_supports("avx512f");
#endif
    if (wide) setenv("LP_NATIVE_VECTOR_WIDTH", "512", 0);
  });
}

Instance::Instance(bool validation) {
  choose_lavapipe_lanes();
  const char* layer = "VK_LAYER_KHRONOS_validation";
  validation = validation && has_layer(layer) && has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "meshvk";
  app.apiVersion = VK_API_VERSION_1_2;

  std::vector<const char*> extensions;
  std::vector<const char*> layers;
  if (validation) {
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    layers.push_back(layer);
  }
  const bool portability = has_instance_extension("VK_KHR_portability_enumeration");
  if (portability) extensions.push_back("VK_KHR_portability_enumeration");

  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  if (portability) info.flags |= 0x00000001;  // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
  check(vkCreateInstance(&info, nullptr, &instance_), "vkCreateInstance");
#if defined(MESHVK_PIN_DRIVER_MODULES)
  pin_loaded_modules();
#endif

  if (validation) {
    VkDebugUtilsMessengerCreateInfoEXT m{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                        VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    m.pfnUserCallback = &Instance::on_message;
    m.pUserData = this;
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create) check(create(instance_, &m, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
  }
}

Instance::~Instance() {
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

namespace {
std::atomic<uint64_t>& process_messages() {
  static std::atomic<uint64_t> count{0};
  return count;
}
}  // namespace

uint64_t Instance::validation_messages_in_process() {
  return process_messages().load();
}

VKAPI_ATTR VkBool32 VKAPI_CALL Instance::on_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
    const VkDebugUtilsMessengerCallbackDataEXT* data, void* self) {
  static_cast<Instance*>(self)->messages_.fetch_add(1);
  process_messages().fetch_add(1);
  std::fprintf(stderr, "[vulkan validation %s] %s\n",
               severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
               data && data->pMessage ? data->pMessage : "");
  return VK_FALSE;
}

}  // namespace meshvk::vk

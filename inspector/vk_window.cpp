#include "vk_window.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#define GLFW_INCLUDE_VULKAN
#include <GLFW/glfw3.h>

namespace inspector {
namespace {

constexpr size_t kFramesInFlight = 2;

void check(VkResult result, const char* what) {
  if (result != VK_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed (VkResult " + std::to_string(result) +
                             ")");
}

bool has_layer(const char* name) {
  uint32_t count = 0;
  vkEnumerateInstanceLayerProperties(&count, nullptr);
  std::vector<VkLayerProperties> layers(count);
  vkEnumerateInstanceLayerProperties(&count, layers.data());
  return std::any_of(layers.begin(), layers.end(), [&](const VkLayerProperties& l) {
    return std::strcmp(l.layerName, name) == 0;
  });
}

uint32_t memory_type(VkPhysicalDevice physical, uint32_t bits, VkMemoryPropertyFlags flags) {
  VkPhysicalDeviceMemoryProperties props;
  vkGetPhysicalDeviceMemoryProperties(physical, &props);
  for (uint32_t i = 0; i < props.memoryTypeCount; ++i)
    if ((bits & (1u << i)) && (props.memoryTypes[i].propertyFlags & flags) == flags) return i;
  throw std::runtime_error("no host-visible memory type for the screenshot buffer");
}

}  // namespace

VkBool32 VKAPI_CALL VkWindow::on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                            VkDebugUtilsMessageTypeFlagsEXT,
                                            const VkDebugUtilsMessengerCallbackDataEXT* data,
                                            void* user) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    static_cast<VkWindow*>(user)->validation_messages_ += 1;
    std::fprintf(stderr, "inspector validation: %s\n", data->pMessage);
  }
  return VK_FALSE;
}

VkWindow::VkWindow(const WindowOptions& options) : low_latency_(options.low_latency) {
  glfwSetErrorCallback(
      [](int code, const char* text) { std::fprintf(stderr, "GLFW error %d: %s\n", code, text); });
  if (!glfwInit())
    throw std::runtime_error("cannot initialise GLFW (is DISPLAY set? try xvfb-run)");
  if (!glfwVulkanSupported()) {
    glfwTerminate();
    throw std::runtime_error("GLFW finds no Vulkan loader");
  }
  glfwWindowHint(GLFW_CLIENT_API, GLFW_NO_API);
  int width = options.width, height = options.height;
  if (GLFWmonitor* monitor = glfwGetPrimaryMonitor(); monitor && options.fit_screen) {
    int x = 0, y = 0, w = 0, h = 0;
    glfwGetMonitorWorkarea(monitor, &x, &y, &w, &h);
    if (w > 0 && h > 0) {
      width = std::min(width, w);
      height = std::min(height, h);
    }
  }
  window_ = glfwCreateWindow(width, height, options.title.c_str(), nullptr, nullptr);
  if (!window_) {
    glfwTerminate();
    throw std::runtime_error("cannot create a window");
  }
  try {
    create_instance(options);
    VkSurfaceKHR surface = VK_NULL_HANDLE;
    check(glfwCreateWindowSurface(instance_.get(), window_, nullptr, &surface),
          "glfwCreateWindowSurface");
    const VkInstance instance = instance_.get();
    surface_ = {surface, [instance](VkSurfaceKHR s) { vkDestroySurfaceKHR(instance, s, nullptr); }};
    pick_device();
    create_device();
    create_render_pass();
    create_swapchain();
  } catch (...) {
    release();
    throw;
  }
}

VkWindow::~VkWindow() {
  release();
}

void VkWindow::release() {
  if (device_) vkDeviceWaitIdle(device_.get());
  // Everything the device made, then the device, the surface and the instance, then the window.
  capture_buffer_.reset();
  capture_memory_.reset();
  destroy_swapchain();
  frames_.clear();
  descriptor_pool_.reset();
  render_pass_.reset();
  device_.reset();
  surface_.reset();
  messenger_.reset();
  instance_.reset();
  if (window_) {
    glfwDestroyWindow(window_);
    glfwTerminate();
  }
  window_ = nullptr;
}

bool VkWindow::should_close() const {
  return glfwWindowShouldClose(window_);
}

void VkWindow::create_instance(const WindowOptions& options) {
  uint32_t glfw_count = 0;
  const char** glfw_exts = glfwGetRequiredInstanceExtensions(&glfw_count);
  std::vector<const char*> extensions(glfw_exts, glfw_exts + glfw_count);
  std::vector<const char*> layers;
  const bool validation = options.validation && has_layer("VK_LAYER_KHRONOS_validation");
  if (options.validation && !validation)
    std::fprintf(
        stderr,
        "inspector: MESHVK_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed\n");
  if (validation) {
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "meshvk-inspector";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  VkInstance instance = VK_NULL_HANDLE;
  check(vkCreateInstance(&info, nullptr, &instance), "vkCreateInstance");
  instance_ = {instance, [](VkInstance i) { vkDestroyInstance(i, nullptr); }};
  if (!validation) return;

  VkDebugUtilsMessengerCreateInfoEXT m{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                  VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                  VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  m.pfnUserCallback = on_validation;
  m.pUserData = this;
  auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
  auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
  if (!create || !destroy) return;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  check(create(instance, &m, nullptr, &messenger), "vkCreateDebugUtilsMessengerEXT");
  messenger_ = {messenger,
                [instance, destroy](VkDebugUtilsMessengerEXT h) { destroy(instance, h, nullptr); }};
}

void VkWindow::pick_device() {
  uint32_t count = 0;
  vkEnumeratePhysicalDevices(instance_.get(), &count, nullptr);
  std::vector<VkPhysicalDevice> devices(count);
  vkEnumeratePhysicalDevices(instance_.get(), &count, devices.data());
  // Like the meshvk runtime: a discrete or integrated GPU first, else whatever presents (lavapipe).
  int best_score = -1;
  for (VkPhysicalDevice d : devices) {
    uint32_t families = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d, &families, nullptr);
    std::vector<VkQueueFamilyProperties> props(families);
    vkGetPhysicalDeviceQueueFamilyProperties(d, &families, props.data());
    for (uint32_t f = 0; f < families; ++f) {
      VkBool32 present = VK_FALSE;
      vkGetPhysicalDeviceSurfaceSupportKHR(d, f, surface_.get(), &present);
      if (!present || !(props[f].queueFlags & VK_QUEUE_GRAPHICS_BIT)) continue;
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(d, &p);
      const int score = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? 3
                        : p.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? 2
                                                                                 : 1;
      if (score > best_score) {
        best_score = score;
        physical_ = d;
        queue_family_ = f;
      }
      break;
    }
  }
  if (!physical_) throw std::runtime_error("no Vulkan adapter can draw to this window");
}

std::string VkWindow::adapter_name() const {
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(physical_, &p);
  return p.deviceName;
}

void VkWindow::create_device() {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueFamilyIndex = queue_family_;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  const char* extensions[] = {VK_KHR_SWAPCHAIN_EXTENSION_NAME};
  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  info.enabledExtensionCount = 1;
  info.ppEnabledExtensionNames = extensions;
  VkDevice device = VK_NULL_HANDLE;
  check(vkCreateDevice(physical_, &info, nullptr, &device), "vkCreateDevice");
  device_ = {device, [](VkDevice d) { vkDestroyDevice(d, nullptr); }};
  vkGetDeviceQueue(device, queue_family_, 0, &queue_);

  // Dear ImGui's Vulkan backend takes one combined image sampler for its font.
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 16};
  VkDescriptorPoolCreateInfo pool{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  pool.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
  pool.maxSets = 16;
  pool.poolSizeCount = 1;
  pool.pPoolSizes = &size;
  VkDescriptorPool dp = VK_NULL_HANDLE;
  check(vkCreateDescriptorPool(device, &pool, nullptr, &dp), "vkCreateDescriptorPool");
  descriptor_pool_ = {
      dp, [device](VkDescriptorPool p) { vkDestroyDescriptorPool(device, p, nullptr); }};

  for (size_t i = 0; i < kFramesInFlight; ++i) {
    Frame f;
    VkCommandPoolCreateInfo cp{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    cp.queueFamilyIndex = queue_family_;
    VkCommandPool cmd_pool = VK_NULL_HANDLE;
    check(vkCreateCommandPool(device, &cp, nullptr, &cmd_pool), "vkCreateCommandPool");
    f.pool = {cmd_pool, [device](VkCommandPool p) { vkDestroyCommandPool(device, p, nullptr); }};
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = cmd_pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device, &ai, &f.cmd), "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    fi.flags = VK_FENCE_CREATE_SIGNALED_BIT;
    VkFence fence = VK_NULL_HANDLE;
    check(vkCreateFence(device, &fi, nullptr, &fence), "vkCreateFence");
    f.fence = {fence, [device](VkFence h) { vkDestroyFence(device, h, nullptr); }};
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    VkSemaphore sem = VK_NULL_HANDLE;
    check(vkCreateSemaphore(device, &si, nullptr, &sem), "vkCreateSemaphore");
    f.acquired = {sem, [device](VkSemaphore h) { vkDestroySemaphore(device, h, nullptr); }};
    frames_.push_back(std::move(f));
  }
}

void VkWindow::create_render_pass() {
  uint32_t count = 0;
  vkGetPhysicalDeviceSurfaceFormatsKHR(physical_, surface_.get(), &count, nullptr);
  std::vector<VkSurfaceFormatKHR> formats(count);
  vkGetPhysicalDeviceSurfaceFormatsKHR(physical_, surface_.get(), &count, formats.data());
  if (formats.empty()) throw std::runtime_error("the surface offers no formats");
  // A UNORM format: Dear ImGui's colours are meant as stored values, so tiles come out exactly
  // the tab20b bytes the terminal shows.
  format_ = formats.front();
  for (VkFormat want : {VK_FORMAT_B8G8R8A8_UNORM, VK_FORMAT_R8G8B8A8_UNORM}) {
    const auto it = std::find_if(formats.begin(), formats.end(), [&](const VkSurfaceFormatKHR& f) {
      return f.format == want && f.colorSpace == VK_COLOR_SPACE_SRGB_NONLINEAR_KHR;
    });
    if (it != formats.end()) {
      format_ = *it;
      break;
    }
  }
  VkAttachmentDescription color{};
  color.format = format_.format;
  color.samples = VK_SAMPLE_COUNT_1_BIT;
  color.loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR;
  color.storeOp = VK_ATTACHMENT_STORE_OP_STORE;
  color.stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
  color.stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
  color.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
  color.finalLayout = VK_IMAGE_LAYOUT_PRESENT_SRC_KHR;
  VkAttachmentReference ref{0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
  VkSubpassDescription subpass{};
  subpass.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS;
  subpass.colorAttachmentCount = 1;
  subpass.pColorAttachments = &ref;
  // The image comes from the acquire semaphore, waited at colour output.
  VkSubpassDependency dep{};
  dep.srcSubpass = VK_SUBPASS_EXTERNAL;
  dep.dstSubpass = 0;
  dep.srcStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
  dep.dstStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
  dep.dstAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT;
  VkRenderPassCreateInfo info{VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO};
  info.attachmentCount = 1;
  info.pAttachments = &color;
  info.subpassCount = 1;
  info.pSubpasses = &subpass;
  info.dependencyCount = 1;
  info.pDependencies = &dep;
  VkRenderPass rp = VK_NULL_HANDLE;
  const VkDevice device = device_.get();
  check(vkCreateRenderPass(device, &info, nullptr, &rp), "vkCreateRenderPass");
  render_pass_ = {rp, [device](VkRenderPass h) { vkDestroyRenderPass(device, h, nullptr); }};
}

void VkWindow::destroy_swapchain() {
  rendered_.clear();
  framebuffers_.clear();
  views_.clear();
  images_.clear();
  swapchain_.reset();
}

void VkWindow::create_swapchain() {
  const VkDevice device = device_.get();
  VkSurfaceCapabilitiesKHR caps;
  check(vkGetPhysicalDeviceSurfaceCapabilitiesKHR(physical_, surface_.get(), &caps),
        "vkGetPhysicalDeviceSurfaceCapabilitiesKHR");
  int fb_w = 0, fb_h = 0;
  glfwGetFramebufferSize(window_, &fb_w, &fb_h);
  VkExtent2D extent = caps.currentExtent;
  if (extent.width == UINT32_MAX) {
    extent.width = std::clamp(static_cast<uint32_t>(fb_w), caps.minImageExtent.width,
                              caps.maxImageExtent.width);
    extent.height = std::clamp(static_cast<uint32_t>(fb_h), caps.minImageExtent.height,
                               caps.maxImageExtent.height);
  }
  if (extent.width == 0 || extent.height == 0) return;  // minimized: try again later

  uint32_t mode_count = 0;
  vkGetPhysicalDeviceSurfacePresentModesKHR(physical_, surface_.get(), &mode_count, nullptr);
  std::vector<VkPresentModeKHR> modes(mode_count);
  vkGetPhysicalDeviceSurfacePresentModesKHR(physical_, surface_.get(), &mode_count, modes.data());
  VkPresentModeKHR mode = VK_PRESENT_MODE_FIFO_KHR;  // always there
  if (low_latency_) {
    for (VkPresentModeKHR want : {VK_PRESENT_MODE_MAILBOX_KHR, VK_PRESENT_MODE_IMMEDIATE_KHR})
      if (std::find(modes.begin(), modes.end(), want) != modes.end()) {
        mode = want;
        break;
      }
  }
  uint32_t min_images = std::max(2u, caps.minImageCount);
  if (caps.maxImageCount > 0)
    min_images = std::min(min_images + 1, caps.maxImageCount);
  else
    min_images += 1;
  can_capture_ = (caps.supportedUsageFlags & VK_IMAGE_USAGE_TRANSFER_SRC_BIT) != 0;

  VkSwapchainCreateInfoKHR info{VK_STRUCTURE_TYPE_SWAPCHAIN_CREATE_INFO_KHR};
  info.surface = surface_.get();
  info.minImageCount = min_images;
  info.imageFormat = format_.format;
  info.imageColorSpace = format_.colorSpace;
  info.imageExtent = extent;
  info.imageArrayLayers = 1;
  info.imageUsage =
      VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT | (can_capture_ ? VK_IMAGE_USAGE_TRANSFER_SRC_BIT : 0);
  info.imageSharingMode = VK_SHARING_MODE_EXCLUSIVE;
  info.preTransform = caps.currentTransform;
  info.compositeAlpha = VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR;
  if (!(caps.supportedCompositeAlpha & VK_COMPOSITE_ALPHA_OPAQUE_BIT_KHR))
    info.compositeAlpha = VK_COMPOSITE_ALPHA_INHERIT_BIT_KHR;
  info.presentMode = mode;
  info.clipped = VK_TRUE;
  VkSwapchainKHR swapchain = VK_NULL_HANDLE;
  check(vkCreateSwapchainKHR(device, &info, nullptr, &swapchain), "vkCreateSwapchainKHR");
  swapchain_ = {swapchain,
                [device](VkSwapchainKHR h) { vkDestroySwapchainKHR(device, h, nullptr); }};
  extent_ = extent;

  uint32_t count = 0;
  vkGetSwapchainImagesKHR(device, swapchain, &count, nullptr);
  if (!images_.empty() && count != images_.size()) image_count_changed_ = true;
  images_.resize(count);
  vkGetSwapchainImagesKHR(device, swapchain, &count, images_.data());
  if (min_images != min_image_count_) image_count_changed_ = true;
  min_image_count_ = std::min(min_images, count);
  for (VkImage image : images_) {
    VkImageViewCreateInfo vi{VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO};
    vi.image = image;
    vi.viewType = VK_IMAGE_VIEW_TYPE_2D;
    vi.format = format_.format;
    vi.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
    VkImageView view = VK_NULL_HANDLE;
    check(vkCreateImageView(device, &vi, nullptr, &view), "vkCreateImageView");
    views_.emplace_back(view, [device](VkImageView h) { vkDestroyImageView(device, h, nullptr); });
    VkFramebufferCreateInfo fi{VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO};
    fi.renderPass = render_pass_.get();
    fi.attachmentCount = 1;
    fi.pAttachments = &view;
    fi.width = extent.width;
    fi.height = extent.height;
    fi.layers = 1;
    VkFramebuffer fb = VK_NULL_HANDLE;
    check(vkCreateFramebuffer(device, &fi, nullptr, &fb), "vkCreateFramebuffer");
    framebuffers_.emplace_back(
        fb, [device](VkFramebuffer h) { vkDestroyFramebuffer(device, h, nullptr); });
    VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    VkSemaphore sem = VK_NULL_HANDLE;
    check(vkCreateSemaphore(device, &si, nullptr, &sem), "vkCreateSemaphore");
    rendered_.emplace_back(sem,
                           [device](VkSemaphore h) { vkDestroySemaphore(device, h, nullptr); });
  }
}

VkCommandBuffer VkWindow::begin_frame(const float clear_rgba[4]) {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  if (w == 0 || h == 0) return VK_NULL_HANDLE;  // minimized
  if (rebuild_ || !swapchain_ || static_cast<uint32_t>(w) != extent_.width ||
      static_cast<uint32_t>(h) != extent_.height) {
    vkDeviceWaitIdle(device_.get());
    destroy_swapchain();
    create_swapchain();
    rebuild_ = false;
    if (!swapchain_) return VK_NULL_HANDLE;
  }
  Frame& f = frames_[frame_];
  const VkFence fence = f.fence.get();
  check(vkWaitForFences(device_.get(), 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  const VkResult acquired = vkAcquireNextImageKHR(device_.get(), swapchain_.get(), UINT64_MAX,
                                                  f.acquired.get(), VK_NULL_HANDLE, &image_);
  if (acquired == VK_ERROR_OUT_OF_DATE_KHR) {
    rebuild_ = true;
    return VK_NULL_HANDLE;
  }
  if (acquired == VK_SUBOPTIMAL_KHR)
    rebuild_ = true;  // draw this one, rebuild after
  else
    check(acquired, "vkAcquireNextImageKHR");
  // Only now: a fence reset before a failed acquire would never be signalled.
  check(vkResetFences(device_.get(), 1, &fence), "vkResetFences");
  check(vkResetCommandPool(device_.get(), f.pool.get(), 0), "vkResetCommandPool");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(f.cmd, &begin), "vkBeginCommandBuffer");
  VkClearValue clear;
  std::memcpy(clear.color.float32, clear_rgba, sizeof(float) * 4);
  VkRenderPassBeginInfo rp{VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO};
  rp.renderPass = render_pass_.get();
  rp.framebuffer = framebuffers_[image_].get();
  rp.renderArea.extent = extent_;
  rp.clearValueCount = 1;
  rp.pClearValues = &clear;
  vkCmdBeginRenderPass(f.cmd, &rp, VK_SUBPASS_CONTENTS_INLINE);
  return f.cmd;
}

void VkWindow::record_capture(VkCommandBuffer cmd) {
  const VkDevice device = device_.get();
  const VkDeviceSize size = VkDeviceSize{extent_.width} * extent_.height * 4;
  if (size != capture_size_) {
    capture_buffer_.reset();
    capture_memory_.reset();
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    VkBuffer buffer = VK_NULL_HANDLE;
    check(vkCreateBuffer(device, &bi, nullptr, &buffer), "vkCreateBuffer");
    capture_buffer_ = {buffer, [device](VkBuffer h) { vkDestroyBuffer(device, h, nullptr); }};
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, buffer, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex =
        memory_type(physical_, req.memoryTypeBits,
                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    VkDeviceMemory memory = VK_NULL_HANDLE;
    check(vkAllocateMemory(device, &ai, nullptr, &memory), "vkAllocateMemory");
    capture_memory_ = {memory, [device](VkDeviceMemory h) { vkFreeMemory(device, h, nullptr); }};
    check(vkBindBufferMemory(device, buffer, memory, 0), "vkBindBufferMemory");
    capture_size_ = size;
  }
  VkImageMemoryBarrier to_copy{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
  to_copy.srcAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT;
  to_copy.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  to_copy.oldLayout = VK_IMAGE_LAYOUT_PRESENT_SRC_KHR;
  to_copy.newLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
  to_copy.srcQueueFamilyIndex = to_copy.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  to_copy.image = images_[image_];
  to_copy.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, nullptr, 0, nullptr, 1, &to_copy);
  VkBufferImageCopy region{};
  region.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
  region.imageExtent = {extent_.width, extent_.height, 1};
  vkCmdCopyImageToBuffer(cmd, images_[image_], VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
                         capture_buffer_.get(), 1, &region);
  VkImageMemoryBarrier to_present = to_copy;
  to_present.srcAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  to_present.dstAccessMask = 0;
  to_present.oldLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
  to_present.newLayout = VK_IMAGE_LAYOUT_PRESENT_SRC_KHR;
  VkBufferMemoryBarrier to_host{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
  to_host.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  to_host.srcQueueFamilyIndex = to_host.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  to_host.buffer = capture_buffer_.get();
  to_host.size = VK_WHOLE_SIZE;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, 0, 0,
                       nullptr, 1, &to_host, 1, &to_present);
}

void VkWindow::end_frame(Capture* capture) {
  Frame& f = frames_[frame_];
  vkCmdEndRenderPass(f.cmd);
  const bool capturing = capture && can_capture_;
  if (capture && !can_capture_)
    std::fprintf(stderr, "inspector: this swapchain cannot be read back\n");
  if (capturing) record_capture(f.cmd);
  check(vkEndCommandBuffer(f.cmd), "vkEndCommandBuffer");

  const VkSemaphore wait = f.acquired.get();
  const VkSemaphore signal = rendered_[image_].get();
  const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.waitSemaphoreCount = 1;
  submit.pWaitSemaphores = &wait;
  submit.pWaitDstStageMask = &stage;
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &f.cmd;
  submit.signalSemaphoreCount = 1;
  submit.pSignalSemaphores = &signal;
  check(vkQueueSubmit(queue_, 1, &submit, f.fence.get()), "vkQueueSubmit");

  if (capturing) {
    const VkFence fence = f.fence.get();
    check(vkWaitForFences(device_.get(), 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    void* mapped = nullptr;
    check(vkMapMemory(device_.get(), capture_memory_.get(), 0, VK_WHOLE_SIZE, 0, &mapped),
          "vkMapMemory");
    capture->width = static_cast<int>(extent_.width);
    capture->height = static_cast<int>(extent_.height);
    capture->rgba.assign(static_cast<const uint8_t*>(mapped),
                         static_cast<const uint8_t*>(mapped) + capture_size_);
    vkUnmapMemory(device_.get(), capture_memory_.get());
    const bool bgra =
        format_.format == VK_FORMAT_B8G8R8A8_UNORM || format_.format == VK_FORMAT_B8G8R8A8_SRGB;
    for (size_t i = 0; i < capture->rgba.size(); i += 4) {
      if (bgra) std::swap(capture->rgba[i], capture->rgba[i + 2]);
      capture->rgba[i + 3] = 255;  // the window is opaque whatever alpha ImGui left
    }
  }

  VkPresentInfoKHR present{VK_STRUCTURE_TYPE_PRESENT_INFO_KHR};
  present.waitSemaphoreCount = 1;
  present.pWaitSemaphores = &signal;
  present.swapchainCount = 1;
  const VkSwapchainKHR swapchain = swapchain_.get();
  present.pSwapchains = &swapchain;
  present.pImageIndices = &image_;
  const VkResult presented = vkQueuePresentKHR(queue_, &present);
  if (presented == VK_ERROR_OUT_OF_DATE_KHR || presented == VK_SUBOPTIMAL_KHR)
    rebuild_ = true;
  else
    check(presented, "vkQueuePresentKHR");
  frame_ = (frame_ + 1) % frames_.size();
}

void VkWindow::submit_now(const std::function<void(VkCommandBuffer)>& record) {
  Frame& f = frames_[frame_];
  const VkFence fence = f.fence.get();
  check(vkWaitForFences(device_.get(), 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(device_.get(), 1, &fence), "vkResetFences");
  check(vkResetCommandPool(device_.get(), f.pool.get(), 0), "vkResetCommandPool");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(f.cmd, &begin), "vkBeginCommandBuffer");
  record(f.cmd);
  check(vkEndCommandBuffer(f.cmd), "vkEndCommandBuffer");
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &f.cmd;
  check(vkQueueSubmit(queue_, 1, &submit, fence), "vkQueueSubmit");
  check(vkWaitForFences(device_.get(), 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
}

void VkWindow::wait_idle() const {
  vkDeviceWaitIdle(device_.get());
}

}  // namespace inspector

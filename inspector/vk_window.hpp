#pragma once
// The inspector's window: GLFW with a Vulkan surface and swapchain, a render pass Dear ImGui
// draws into, two frames in flight, and a read-back of the presented image for screenshots.
// This is the app's own Vulkan device, separate from the meshvk Runtime's.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "vk_unique.hpp"

struct GLFWwindow;

namespace inspector {

struct WindowOptions {
  int width = 1600;
  int height = 1000;
  std::string title = "meshvk inspector";
  bool validation = false;   // the Khronos validation layer, counting what it reports
  bool low_latency = false;  // prefer a present mode that never waits for vertical blank
  // At most the work area of the screen it opens on (a 1600x1000 window on a 1024x700 screen
  // put the program panel off-screen). Off when the size was asked for (--size).
  bool fit_screen = true;
};

// RGBA8 pixels of one presented frame, top row first.
struct Capture {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgba;
};

class VkWindow {
 public:
  explicit VkWindow(const WindowOptions& options);  // throws std::runtime_error
  ~VkWindow();
  VkWindow(const VkWindow&) = delete;
  VkWindow& operator=(const VkWindow&) = delete;

  GLFWwindow* glfw() const { return window_; }
  bool should_close() const;

  // Starts a frame and its render pass; VK_NULL_HANDLE when nothing can be drawn now (the window
  // is minimized, or the swapchain was just rebuilt), in which case skip end_frame.
  VkCommandBuffer begin_frame(const float clear_rgba[4]);
  // Ends the render pass, submits and presents. With `capture`, the frame's pixels are copied
  // out and returned in it once the GPU is done.
  void end_frame(Capture* capture = nullptr);
  // Records and runs commands once, waiting for them (font upload).
  void submit_now(const std::function<void(VkCommandBuffer)>& record);
  void wait_idle() const;

  VkInstance instance() const { return instance_.get(); }
  VkPhysicalDevice physical_device() const { return physical_; }
  VkDevice device() const { return device_.get(); }
  uint32_t queue_family() const { return queue_family_; }
  VkQueue queue() const { return queue_; }
  VkRenderPass render_pass() const { return render_pass_.get(); }
  VkDescriptorPool descriptor_pool() const { return descriptor_pool_.get(); }
  uint32_t min_image_count() const { return min_image_count_; }
  uint32_t image_count() const { return static_cast<uint32_t>(images_.size()); }
  bool image_count_changed() { return std::exchange(image_count_changed_, false); }
  VkExtent2D extent() const { return extent_; }
  std::string adapter_name() const;

  uint64_t validation_messages() const { return validation_messages_; }
  bool validation_enabled() const { return static_cast<bool>(messenger_); }

 private:
  struct Frame {
    VkUnique<VkCommandPool> pool;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkUnique<VkFence> fence;
    VkUnique<VkSemaphore> acquired;
  };

  void release();  // everything, in reverse order of creation
  void create_instance(const WindowOptions& options);
  void pick_device();
  void create_device();
  void create_render_pass();
  void create_swapchain();
  void destroy_swapchain();
  void record_capture(VkCommandBuffer cmd);
  static VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                           VkDebugUtilsMessageTypeFlagsEXT type,
                                           const VkDebugUtilsMessengerCallbackDataEXT* data,
                                           void* user);

  GLFWwindow* window_ = nullptr;
  bool low_latency_ = false;
  uint64_t validation_messages_ = 0;

  // Declared in creation order: members are destroyed in reverse.
  VkUnique<VkInstance> instance_;
  VkUnique<VkDebugUtilsMessengerEXT> messenger_;
  VkUnique<VkSurfaceKHR> surface_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkUnique<VkDevice> device_;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkSurfaceFormatKHR format_{};
  VkUnique<VkRenderPass> render_pass_;
  VkUnique<VkDescriptorPool> descriptor_pool_;
  std::vector<Frame> frames_;
  size_t frame_ = 0;

  // The swapchain and what hangs off it, rebuilt on resize.
  VkUnique<VkSwapchainKHR> swapchain_;
  std::vector<VkImage> images_;
  std::vector<VkUnique<VkImageView>> views_;
  std::vector<VkUnique<VkFramebuffer>> framebuffers_;
  std::vector<VkUnique<VkSemaphore>> rendered_;  // per image: presentation waits on it
  VkExtent2D extent_{};
  uint32_t min_image_count_ = 2;
  bool image_count_changed_ = false;
  bool rebuild_ = false;
  bool can_capture_ = false;
  uint32_t image_ = 0;

  // Screenshot read-back buffer.
  VkUnique<VkBuffer> capture_buffer_;
  VkUnique<VkDeviceMemory> capture_memory_;
  VkDeviceSize capture_size_ = 0;
};

}  // namespace inspector

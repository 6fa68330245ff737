#pragma once
// Dear ImGui on the window: its context, the GLFW platform backend and the Vulkan renderer
// backend, set up and torn down together.
#include <vulkan/vulkan.h>

namespace inspector {

class VkWindow;

class ImGuiLayer {
 public:
  explicit ImGuiLayer(VkWindow& window);
  ~ImGuiLayer();
  ImGuiLayer(const ImGuiLayer&) = delete;
  ImGuiLayer& operator=(const ImGuiLayer&) = delete;

  void new_frame();
  // ImGui::Render and the draw commands into `cmd` (inside the window's render pass).
  void render(VkCommandBuffer cmd);
  // Ends a frame that will not be drawn (minimized window).
  void skip_frame();

 private:
  VkWindow& window_;
};

}  // namespace inspector

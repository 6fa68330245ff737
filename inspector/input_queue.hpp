#pragma once
// Input events in arrival order, handed to Dear ImGui a frame at a time so that none is lost.
// Debian's Dear ImGui 1.86 keeps only the state of each key and button at the start of a frame:
// a key pressed and released between two frames was never down, so at a low frame rate a short
// Ctrl+A or click vanished. Here an event that would undo one already given this frame (the
// release of a key pressed in it, a move after a click, a modifier let go after a key went down)
// waits for the next frame, and the main loop draws that frame at once.
#include <deque>

struct GLFWwindow;
struct ImGuiIO;

namespace inspector {

struct InputEvent {
  enum class Kind { key, character, button, move, scroll, enter, focus } kind = Kind::key;
  int code = 0;    // key, button, character, entered, focused
  int action = 0;  // GLFW_PRESS, GLFW_RELEASE, GLFW_REPEAT
  double x = 0, y = 0;
};

class InputQueue {
 public:
  // Takes over the window's input callbacks (Dear ImGui's backend installs none).
  explicit InputQueue(GLFWwindow* window);
  InputQueue(const InputQueue&) = delete;
  InputQueue& operator=(const InputQueue&) = delete;

  void push(const InputEvent& event) { events_.push_back(event); }
  // Gives ImGui this frame's share of the queue; call between the platform backend's NewFrame
  // (which reads the window's live mouse state, overwritten here) and ImGui::NewFrame.
  void apply(ImGuiIO& io);
  bool pending() const { return !events_.empty(); }
  // Whether any event arrived since the last call (the main loop then draws a few frames).
  bool take_activity();
  double mouse_x() const { return x_; }
  double mouse_y() const { return y_; }

 private:
  std::deque<InputEvent> events_;
  double x_ = -1, y_ = -1;
  bool inside_ = false;
  bool down_[5] = {};
  bool activity_ = false;
};

}  // namespace inspector

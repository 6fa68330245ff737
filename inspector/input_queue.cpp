#include "input_queue.hpp"

#include <GLFW/glfw3.h>
#include <imgui.h>

#include <backends/imgui_impl_glfw.h>
#include <cfloat>
#include <set>

namespace inspector {
namespace {

InputQueue* queue_of(GLFWwindow* window) {
  return static_cast<InputQueue*>(glfwGetWindowUserPointer(window));
}

bool modifier(int key) {
  return key == GLFW_KEY_LEFT_CONTROL || key == GLFW_KEY_RIGHT_CONTROL ||
         key == GLFW_KEY_LEFT_SHIFT || key == GLFW_KEY_RIGHT_SHIFT || key == GLFW_KEY_LEFT_ALT ||
         key == GLFW_KEY_RIGHT_ALT || key == GLFW_KEY_LEFT_SUPER || key == GLFW_KEY_RIGHT_SUPER;
}

}  // namespace

InputQueue::InputQueue(GLFWwindow* window) {
  glfwSetWindowUserPointer(window, this);
  glfwSetKeyCallback(window, [](GLFWwindow* w, int key, int, int action, int) {
    queue_of(w)->push({InputEvent::Kind::key, key, action});
  });
  glfwSetCharCallback(window, [](GLFWwindow* w, unsigned int c) {
    queue_of(w)->push({InputEvent::Kind::character, static_cast<int>(c)});
  });
  glfwSetMouseButtonCallback(window, [](GLFWwindow* w, int button, int action, int) {
    queue_of(w)->push({InputEvent::Kind::button, button, action});
  });
  glfwSetCursorPosCallback(window, [](GLFWwindow* w, double x, double y) {
    queue_of(w)->push({InputEvent::Kind::move, 0, 0, x, y});
  });
  glfwSetScrollCallback(window, [](GLFWwindow* w, double x, double y) {
    queue_of(w)->push({InputEvent::Kind::scroll, 0, 0, x, y});
  });
  glfwSetCursorEnterCallback(window, [](GLFWwindow* w, int entered) {
    queue_of(w)->push({InputEvent::Kind::enter, entered});
  });
  glfwSetWindowFocusCallback(window, [](GLFWwindow* w, int focused) {
    queue_of(w)->push({InputEvent::Kind::focus, focused});
  });
  // Where the pointer is now: no event comes until it moves.
  int width = 0, height = 0;
  glfwGetWindowSize(window, &width, &height);
  glfwGetCursorPos(window, &x_, &y_);
  inside_ = x_ >= 0 && y_ >= 0 && x_ < width && y_ < height;
}

bool InputQueue::take_activity() {
  const bool a = activity_ || !events_.empty();
  activity_ = false;
  return a;
}

void InputQueue::apply(ImGuiIO& io) {
  std::set<int> keys_changed;
  bool buttons_changed = false;
  // Text and editing keys must reach InputText in order: it reads a frame's characters before
  // its keys, so "Ctrl+A, then type" in one frame would type first. A frame holds either.
  bool had_text = false, had_command = false;
  // A modifier's change waits for the next frame once a key went down in this one: Dear ImGui
  // reads io.KeyCtrl as it stands at the end of the frame's events, so "Ctrl down, A down,
  // Ctrl up" in one frame was a plain A (xdotool releases Ctrl before A: Ctrl+A was lost 3 of 6
  // times in a spec field at its 12 ms key delay, Ctrl+Q 2 of 12).
  bool key_went_down = false;
  const auto command_key = [&](int key) {
    const bool printable = key >= GLFW_KEY_SPACE && key <= GLFW_KEY_GRAVE_ACCENT;
    return !modifier(key) && (!printable || io.KeyCtrl || io.KeyAlt || io.KeySuper);
  };
  if (!events_.empty()) activity_ = true;
  while (!events_.empty()) {
    const InputEvent& e = events_.front();
    bool stop = false;
    switch (e.kind) {
      case InputEvent::Kind::key: {
        if (e.action == GLFW_REPEAT) break;  // ImGui repeats held keys itself
        const bool command = command_key(e.code);
        if (keys_changed.count(e.code) || (command && had_text) ||
            (modifier(e.code) && key_went_down)) {
          stop = true;
          break;
        }
        keys_changed.insert(e.code);
        had_command = had_command || command;
        key_went_down = key_went_down || (!modifier(e.code) && e.action == GLFW_PRESS);
        if (e.code >= 0 && e.code < IM_ARRAYSIZE(io.KeysDown))
          io.KeysDown[e.code] = e.action == GLFW_PRESS;
        io.KeyCtrl = io.KeysDown[GLFW_KEY_LEFT_CONTROL] || io.KeysDown[GLFW_KEY_RIGHT_CONTROL];
        io.KeyShift = io.KeysDown[GLFW_KEY_LEFT_SHIFT] || io.KeysDown[GLFW_KEY_RIGHT_SHIFT];
        io.KeyAlt = io.KeysDown[GLFW_KEY_LEFT_ALT] || io.KeysDown[GLFW_KEY_RIGHT_ALT];
        io.KeySuper = io.KeysDown[GLFW_KEY_LEFT_SUPER] || io.KeysDown[GLFW_KEY_RIGHT_SUPER];
        break;
      }
      case InputEvent::Kind::character:
        if (had_command) {
          stop = true;
          break;
        }
        had_text = true;
        io.AddInputCharacter(static_cast<unsigned int>(e.code));
        break;
      case InputEvent::Kind::button:
        if (buttons_changed) {
          stop = true;
          break;
        }
        buttons_changed = true;
        if (e.code >= 0 && e.code < 5) down_[e.code] = e.action == GLFW_PRESS;
        break;
      case InputEvent::Kind::move:
        // The click happened where the pointer was; a move after it belongs to the next frame.
        if (buttons_changed) {
          stop = true;
          break;
        }
        x_ = e.x;
        y_ = e.y;
        inside_ = true;
        break;
      case InputEvent::Kind::scroll:
        io.MouseWheelH += static_cast<float>(e.x);
        io.MouseWheel += static_cast<float>(e.y);
        break;
      case InputEvent::Kind::enter:
        inside_ = e.code != 0;
        break;
      case InputEvent::Kind::focus:
        io.AddFocusEvent(e.code != 0);
        break;
    }
    if (stop) break;
    events_.pop_front();
  }
  io.MousePos =
      inside_ ? ImVec2(static_cast<float>(x_), static_cast<float>(y_)) : ImVec2(-FLT_MAX, -FLT_MAX);
  for (int i = 0; i < 5; ++i) io.MouseDown[i] = down_[i];
}

}  // namespace inspector

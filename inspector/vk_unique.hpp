#pragma once
// Ownership of one Vulkan handle: destroyed by the function it was given, once, when the owner
// goes away. Movable, not copyable.
#include <functional>
#include <utility>

#include <vulkan/vulkan.h>

namespace inspector {

template <class T>
class VkUnique {
 public:
  VkUnique() = default;
  VkUnique(T handle, std::function<void(T)> destroy)
      : handle_(handle), destroy_(std::move(destroy)) {}
  ~VkUnique() { reset(); }
  VkUnique(VkUnique&& other) noexcept { *this = std::move(other); }
  VkUnique& operator=(VkUnique&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, T{});
      destroy_ = std::move(other.destroy_);
    }
    return *this;
  }
  VkUnique(const VkUnique&) = delete;
  VkUnique& operator=(const VkUnique&) = delete;

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }
  void reset() {
    if (handle_ != T{} && destroy_) destroy_(handle_);
    handle_ = T{};
  }

 private:
  T handle_{};
  std::function<void(T)> destroy_;
};

}  // namespace inspector

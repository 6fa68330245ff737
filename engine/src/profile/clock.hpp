#pragma once
// The host clock every event uses, and the map from an adapter's timestamp ticks to it.
#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>

#include <time.h>

namespace meshvk::vk {
class Device;
struct Queue;
}  // namespace meshvk::vk

namespace meshvk::profile {

// CLOCK_MONOTONIC in nanoseconds: the domain VK_EXT_calibrated_timestamps can pair with device
// ticks, and what std::chrono::steady_clock reads on Linux.
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// host_ns = host_at_sync + (ticks - ticks_at_sync) * period, with the tick difference taken
// modulo 2^valid_bits so a counter narrower than 64 bits may wrap once between the two.
struct ClockMap {
  uint64_t ticks_at_sync = 0;
  int64_t host_at_sync = 0;
  double period_ns = 1;  // VkPhysicalDeviceLimits::timestampPeriod
  uint32_t valid_bits = 64;
  std::string source;  // how it was obtained, for the trace and the report
  int64_t to_host(uint64_t ticks) const;
};

class Calibrator {
 public:
  // `queue` runs the measuring submission when the adapter cannot pair clocks itself.
  Calibrator(VkInstance instance, vk::Device& device, vk::Queue& queue, uint32_t valid_bits);
  // True when VK_EXT_calibrated_timestamps is enabled on the device with a CLOCK_MONOTONIC
  // domain: then calibrating is one call and can be repeated to follow drift.
  bool calibrated_extension() const { return get_timestamps_ != nullptr; }
  // A fresh map: from the extension when available, else measured by submitting a timestamp
  // write between two host clock reads (best of several tries).
  ClockMap calibrate();
  // The two ways, for tests: from_extension() needs calibrated_extension().
  ClockMap from_extension();
  ClockMap measured();

 private:
  vk::Device& device_;
  vk::Queue& queue_;
  uint32_t valid_bits_;
  PFN_vkGetCalibratedTimestampsEXT get_timestamps_ = nullptr;
};

}  // namespace meshvk::profile

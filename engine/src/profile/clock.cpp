#include "profile/clock.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "profile/query_pool.hpp"
#include "vk/check.hpp"
#include "vk/device.hpp"
#include "vk/sync.hpp"

namespace meshvk::profile {

int64_t ClockMap::to_host(uint64_t ticks) const {
  const uint64_t mask = valid_bits >= 64 ? ~0ull : (1ull << valid_bits) - 1;
  uint64_t delta = (ticks - ticks_at_sync) & mask;
  // A tick before the sync point shows up as a huge delta: sign-extend it.
  int64_t signed_delta = static_cast<int64_t>(delta);
  if (valid_bits < 64 && delta > (mask >> 1))
    signed_delta = static_cast<int64_t>(delta) - static_cast<int64_t>(mask) - 1;
  return host_at_sync + static_cast<int64_t>(static_cast<double>(signed_delta) * period_ns);
}

namespace {

std::string microseconds(double ns) {
  char s[64];
  std::snprintf(s, sizeof s, "%.1f us", ns / 1000);
  return s;
}

// Whether the adapter pairs its ticks with CLOCK_MONOTONIC, the host clock events use.
bool has_monotonic_domain(VkInstance instance, VkPhysicalDevice pd) {
  const auto get_domains = reinterpret_cast<PFN_vkGetPhysicalDeviceCalibrateableTimeDomainsEXT>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCalibrateableTimeDomainsEXT"));
  if (!get_domains) return false;
  uint32_t n = 0;
  if (get_domains(pd, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkTimeDomainEXT> domains(n);
  if (get_domains(pd, &n, domains.data()) != VK_SUCCESS) return false;
  const bool device =
      std::find(domains.begin(), domains.end(), VK_TIME_DOMAIN_DEVICE_EXT) != domains.end();
  const bool host = std::find(domains.begin(), domains.end(), VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT) !=
                    domains.end();
  return device && host;
}

}  // namespace

Calibrator::Calibrator(VkInstance instance, vk::Device& device, vk::Queue& queue,
                       uint32_t valid_bits)
    : device_(device), queue_(queue), valid_bits_(valid_bits) {
  // Present only when the device was created with VK_EXT_calibrated_timestamps (vk/device.cpp
  // enables it where the adapter has it): vkGetDeviceProcAddr answers null otherwise.
  get_timestamps_ = reinterpret_cast<PFN_vkGetCalibratedTimestampsEXT>(
      vkGetDeviceProcAddr(device.handle(), "vkGetCalibratedTimestampsEXT"));
  if (get_timestamps_ && !has_monotonic_domain(instance, device.adapter().handle))
    get_timestamps_ = nullptr;
}

ClockMap Calibrator::calibrate() {
  return get_timestamps_ ? from_extension() : measured();
}

ClockMap Calibrator::from_extension() {
  VkCalibratedTimestampInfoEXT infos[2] = {{VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT},
                                           {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT}};
  infos[0].timeDomain = VK_TIME_DOMAIN_DEVICE_EXT;
  infos[1].timeDomain = VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT;
  uint64_t stamps[2] = {0, 0};
  uint64_t deviation = 0;
  vk::check(get_timestamps_(device_.handle(), 2, infos, stamps, &deviation),
            "vkGetCalibratedTimestampsEXT");
  ClockMap m;
  m.ticks_at_sync = stamps[0];
  m.host_at_sync = static_cast<int64_t>(stamps[1]);
  m.period_ns = device_.limits().timestampPeriod;
  m.valid_bits = valid_bits_;
  m.source = "VK_EXT_calibrated_timestamps (max deviation " +
             microseconds(static_cast<double>(deviation)) + ")";
  return m;
}

ClockMap Calibrator::measured() {
  // A timestamp written by a tiny submission lies between the host reads just before the submit
  // and just after the wait; the narrowest of a few tries bounds the error best.
  const VkDevice dev = device_.handle();
  QueryPool pool(dev, 1);
  vk::CommandPool commands(dev, queue_.family);
  vk::TimelineSemaphore done(dev);
  const VkCommandBuffer cb = commands.allocate();
  ClockMap best;
  int64_t best_width = -1;
  for (uint64_t attempt = 1; attempt <= 5; ++attempt) {
    vk::check(vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    vk::check(vkBeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer");
    vkCmdResetQueryPool(cb, pool.handle(), 0, 1);
    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, pool.handle(), 0);
    vk::check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    VkTimelineSemaphoreSubmitInfo timeline{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    timeline.signalSemaphoreValueCount = 1;
    timeline.pSignalSemaphoreValues = &attempt;
    const VkSemaphore signal = done.handle();
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.pNext = &timeline;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cb;
    submit.signalSemaphoreCount = 1;
    submit.pSignalSemaphores = &signal;
    const int64_t before = now_ns();
    {
      std::lock_guard lock(queue_.submit_mutex);
      vk::check(vkQueueSubmit(queue_.handle, 1, &submit, VK_NULL_HANDLE), "vkQueueSubmit");
    }
    done.wait(attempt, 10'000'000'000ull);
    const int64_t after = now_ns();
    uint64_t ticks = 0;
    vk::check(vkGetQueryPoolResults(dev, pool.handle(), 0, 1, sizeof ticks, &ticks, sizeof ticks,
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults");
    if (best_width < 0 || after - before < best_width) {
      best_width = after - before;
      best.ticks_at_sync = ticks;
      best.host_at_sync = before + (after - before) / 2;
    }
  }
  commands.free(cb);
  best.period_ns = device_.limits().timestampPeriod;
  best.valid_bits = valid_bits_;
  best.source = "measured offset (timestamp write within a " +
                microseconds(static_cast<double>(best_width)) + " submit and wait)";
  return best;
}

}  // namespace meshvk::profile

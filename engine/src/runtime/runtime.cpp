#include "meshvk/runtime.hpp"

#include <algorithm>
#include <mutex>

#include "meshvk/error.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk {

namespace {
// Live Runtime objects, newest last: the newest is current.
std::mutex g_current_mutex;
std::vector<Runtime*> g_current;
}  // namespace

std::string DeviceInfo::repr() const { return device_repr(id, platform); }

Runtime::Runtime(RuntimeOptions options)
    : state_(std::make_shared<detail::RuntimeState>(options)) {
  std::lock_guard lock(g_current_mutex);
  g_current.push_back(this);
}

Runtime::~Runtime() {
  try {
    state_->wait_all("Runtime shutdown");
  } catch (const Error&) {
    // A device that never finishes cannot be helped here; the VkDevice waits once more when
    // the last array lets go of it.
  }
  std::lock_guard lock(g_current_mutex);
  g_current.erase(std::remove(g_current.begin(), g_current.end(), this), g_current.end());
}

Runtime& Runtime::current() {
  std::lock_guard lock(g_current_mutex);
  if (g_current.empty())
    throw Error(
        "no meshvk::Runtime is alive; create one first, e.g. meshvk::Runtime rt({.num_devices = "
        "8});");
  return *g_current.back();
}

int Runtime::num_devices() const { return state_->num_devices(); }

Runtime::MemoryStats Runtime::memory_stats(int device) const {
  const auto s = state_->pool_stats(device);
  return {s.in_use, s.peak, s.limit};
}

void Runtime::reset_peak_memory() { state_->reset_peak_memory(); }
const std::string& Runtime::platform() const& {
  return state_->platform();
}
const std::string& Runtime::adapter_name() const& {
  return state_->adapter_name();
}
std::vector<DeviceInfo> Runtime::devices() const {
  std::lock_guard lock(state_->mutex());
  return state_->devices();
}
void Runtime::synchronize() { state_->wait_all("Runtime::synchronize"); }
uint64_t Runtime::validation_messages() const { return state_->instance().validation_messages(); }
uint64_t Runtime::validation_messages_in_process() {
  return vk::Instance::validation_messages_in_process();
}
bool Runtime::validation_enabled() const { return state_->instance().validation_enabled(); }

std::vector<DeviceInfo> devices() { return Runtime::current().devices(); }

}  // namespace meshvk

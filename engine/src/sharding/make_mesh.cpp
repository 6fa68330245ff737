#include "meshvk/error.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/runtime.hpp"

namespace meshvk {

Mesh make_mesh(std::vector<int> axis_sizes, std::vector<std::string> axis_names,
               std::vector<AxisType> axis_types, std::vector<int> devices) {
  const Runtime& rt = Runtime::current();
  // The mesh's own checks first (names, sizes of at least 1, at most 2^20 devices), so that a
  // product past the limit is named as such, not as a Runtime of that many devices to start.
  try {
    (void)Mesh(axis_sizes, axis_names, axis_types);
  } catch (const Error& e) {
    throw Error(std::string("make_mesh: ") + e.what());
  }
  int64_t total = 1;
  bool overflow = false;
  for (const int s : axis_sizes)
    overflow = overflow || __builtin_mul_overflow(total, int64_t{s}, &total);
  if (overflow) {
    std::string sizes;
    for (size_t i = 0; i < axis_sizes.size(); ++i)
      sizes += (i ? "x" : "") + std::to_string(axis_sizes[i]);
    throw Error("make_mesh: axis sizes " + sizes + " multiply past int64; the runtime has " +
                std::to_string(rt.num_devices()) + " devices");
  }
  if (devices.empty()) {
    if (total != rt.num_devices())
      throw Error("make_mesh: axis sizes multiply to " + std::to_string(total) +
                  " devices but the runtime has " + std::to_string(rt.num_devices()) +
                  "; choose axis sizes whose product is " + std::to_string(rt.num_devices()) +
                  ", pass the devices to use, or start the Runtime with num_devices = " +
                  std::to_string(total));
    for (int d = 0; d < total; ++d) devices.push_back(d);
  }
  for (const int d : devices)
    if (d < 0 || d >= rt.num_devices())
      throw Error("make_mesh: device " + std::to_string(d) + " does not exist; the runtime has devices 0.." +
                  std::to_string(rt.num_devices() - 1));
  return Mesh(std::move(axis_sizes), std::move(axis_names), std::move(axis_types),
              std::move(devices), rt.platform());
}

}  // namespace meshvk

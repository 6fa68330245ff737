// meshvk/distributed.hpp: joining a job of several processes and what JAX offers across them.
#include "meshvk/distributed.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "exec/box.hpp"
#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "runtime/process_group.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

namespace distributed {

void initialize(const InitializeOptions& options) {
  if (options.num_processes && *options.num_processes < 1)
    throw Error("distributed::initialize: num_processes = " + std::to_string(*options.num_processes) +
                "; give at least 1");
  if (options.process_id && *options.process_id < 0)
    throw Error("distributed::initialize: process_id = " + std::to_string(*options.process_id) +
                "; give a rank from 0");
  detail::ProcessGroup& group = detail::ProcessGroup::initialize(
      options.num_processes.value_or(-1), options.process_id.value_or(-1));
  group.initialized_by_user = true;
}

bool is_initialized() { return detail::ProcessGroup::get() != nullptr; }

}  // namespace distributed

int process_index() {
  const detail::ProcessGroup* g = detail::ProcessGroup::get();
  return g ? g->rank() : 0;
}

int process_count() {
  const detail::ProcessGroup* g = detail::ProcessGroup::get();
  return g ? g->size() : 1;
}

std::vector<DeviceInfo> local_devices() {
  std::vector<DeviceInfo> mine;
  for (DeviceInfo& d : Runtime::current().devices())
    if (d.process_index == Runtime::current().state()->process_index()) mine.push_back(std::move(d));
  return mine;
}

int local_device_count() { return Runtime::current().state()->local_device_count(); }

int process_of(int device) {
  const auto& rt = *Runtime::current().state();
  if (device < 0 || device >= rt.num_devices())
    throw Error("process_of: no device " + std::to_string(device) + "; the runtime has devices 0.." +
                std::to_string(rt.num_devices() - 1));
  return rt.process_of(device);
}

Array make_array_from_process_local_data(const Sharding& sharding,
                                         std::span<const float> local_data,
                                         const Shape& local_shape, const Shape& global_shape) {
  const int64_t global_size = checked_size(global_shape, "make_array_from_process_local_data");
  sharding.check_shape(global_shape);
  const auto rt = Runtime::current().state();
  // First, so a device no process has is named as such (not as "nothing on this process").
  exec::check_devices(*rt, sharding);
  // This process's part: the smallest box holding every piece of its devices.
  Index box;
  bool any = false;
  for (const DeviceIndex& di : sharding.devices_indices_map(global_shape)) {
    if (!rt->is_local(di.device)) continue;
    if (!any) {
      box = di.index;
      any = true;
      continue;
    }
    for (size_t d = 0; d < box.size(); ++d)
      box[d] = Slice{std::min(box[d].start, di.index[d].start), std::max(box[d].stop, di.index[d].stop)};
  }
  if (!any)
    throw Error("make_array_from_process_local_data: " + sharding.to_string() +
                " places nothing on process " + std::to_string(rt->process_index()) +
                "'s devices; use a sharding over every process's devices");
  Shape expected;
  for (const Slice& s : box) expected.push_back(s.size());
  if (local_shape != expected)
    throw Error("make_array_from_process_local_data: process " + std::to_string(rt->process_index()) +
                " gave local data of shape " + shape_to_string(local_shape) + ", but its devices hold " +
                shape_to_string(expected) + " of the global " + shape_to_string(global_shape) +
                " under " + sharding.to_string() + "; give that part");
  if (static_cast<int64_t>(local_data.size()) != checked_size(local_shape, "make_array_from_process_local_data"))
    throw Error("make_array_from_process_local_data: " + std::to_string(local_data.size()) +
                " values cannot fill the local shape " + shape_to_string(local_shape));
  // Laid into a global host image: upload reads only this process's pieces from it.
  std::vector<float> image(static_cast<size_t>(global_size));
  exec::for_each_run(box, box, exec::whole(global_shape), [&](uint64_t so, uint64_t doff, uint64_t n) {
    std::memcpy(image.data() + doff, local_data.data() + so, n * 4);
  });
  return device_put(std::span<const float>(image), global_shape, sharding);
}

namespace multihost {

namespace {
void check_readable(const Array& x) {
  if (!x.valid()) throw Error("process_allgather: use of an empty meshvk::Array");
  const auto& a = *x.impl();
  if (a.runtime->capture())
    throw Error("process_allgather: values cannot be read while jit traces a function");
  // As to_host: inside shard_map a value is one device's piece, not the global array.
  if (const NamedSharding* n = a.value.sharding.named())
    for (const AxisType t : n->mesh().axis_types())
      if (t == AxisType::Manual)
        throw Error("process_allgather: this is a per-device value inside shard_map; return it "
                    "through the out_specs and gather the result");
}
}  // namespace

namespace detail {

void process_allgather_into(const Array& x, void* out, DType expected) {
  check_readable(x);
  if (x.dtype() != expected)
    throw Error("process_allgather<" + std::string(dtype_name(expected)) + ">: the array is " + type_of(x) +
                "; ask for its own element type (or astype it first)");
  const auto& a = *x.impl();
  std::lock_guard lock(a.runtime->mutex());
  exec::download(*a.runtime, meshvk::detail::materialized(x), out, true);
}

std::vector<float> process_allgather_floats(const Array& x) {
  check_readable(x);
  const auto& a = *x.impl();
  if (is_64bit(x.dtype()))
    throw Error("process_allgather: x is " + type_of(x) + ", whose values float32 does not hold; read it with process_allgather<" +
                (x.dtype() == DType::int64 ? "int64_t" : "double") + ">(x)");
  if (is_8bit(x.dtype()) || x.dtype() == DType::bool_)  // exact float values of theirs, as numpy's astype
    return process_allgather_floats(astype(x, DType::float32));
  std::vector<float> out(static_cast<size_t>(x.size()));
  std::lock_guard lock(a.runtime->mutex());
  if (is_16bit(x.dtype())) {  // 2 bytes each: their float32 values
    std::vector<uint16_t> halves(out.size());
    exec::download(*a.runtime, meshvk::detail::materialized(x), halves.data(), true);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = x.dtype() == DType::bfloat16 ? bfloat16_to_float(halves[i]) : float16_to_float(halves[i]);
    return out;
  }
  exec::download(*a.runtime, meshvk::detail::materialized(x), out.data(), true);
  if (!is_floating(x.dtype())) {
    // int32 / uint32 bits to their float values, as numpy's astype would.
    for (float& v : out) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      v = x.dtype() == DType::int32 ? static_cast<float>(static_cast<int32_t>(bits))
                                    : static_cast<float>(bits);
    }
  }
  return out;
}

}  // namespace detail

void sync_global_devices(const std::string& name) {
  Runtime& runtime = Runtime::current();
  runtime.synchronize();
  const auto& rt = runtime.state();
  // FNV-1a of the name: a process at another barrier is an error on every process.
  uint64_t hash = 1469598103934665603ull;
  for (const char c : name) hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  const std::vector<uint8_t> all = rt->exchange(&hash, sizeof hash, "sync_global_devices");  // the name is compared below
  for (int p = 0; p < rt->process_count(); ++p) {
    uint64_t theirs;
    std::memcpy(&theirs, all.data() + p * sizeof hash, sizeof hash);
    if (theirs != hash)
      throw Error("sync_global_devices(\"" + name + "\"): process " + std::to_string(p) +
                  " reached another barrier; every process must run the same program");
  }
}

}  // namespace multihost

}  // namespace meshvk

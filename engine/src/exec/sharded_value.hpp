#pragma once
// A global array's value as per-device pieces, and the eager ways to make and move one: upload
// from the host, read back, fill on the device and reshard device to device.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshvk/sharding.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::exec {

struct ShardedValue {
  Shape shape;
  DType dtype = DType::float32;
  Sharding sharding;
  // One buffer per device of sharding.device_ids(), in that order, each holding that device's
  // piece row-major. Pieces may share a buffer with other values (values are immutable).
  std::vector<std::shared_ptr<detail::DeviceBuffer>> shards;
};

// Lays out row-major host data of `shape` over `sharding` (dtype_size bytes per element).
ShardedValue upload(detail::RuntimeState& rt, const void* host, const Shape& shape, DType dtype,
                    const Sharding& sharding);
// Reads the whole value back into row-major `host` (shape_size * dtype_size bytes).
// With several processes, a value some process holds no copy of a piece of is read
// collectively: every process must call it, each contributing its pieces (across_processes);
// else it is JAX's error for a value spanning non-addressable devices.
void download(detail::RuntimeState& rt, const ShardedValue& value, void* host,
              bool across_processes = false);
// start + step * i over a 1-D array on one device (arange).
ShardedValue iota(detail::RuntimeState& rt, int64_t count, DType dtype, double start, double step,
                  const Sharding& single_device);
// One value in every element (zeros, ones, full): `word` is its 32 bits (for bfloat16 and
// float16: the float32 bits of the value, which is one of the format's).
ShardedValue fill(detail::RuntimeState& rt, const Shape& shape, DType dtype, uint32_t word,
                  const Sharding& sharding);
// The same value laid out as `target`: device-to-device copies of the overlapping boxes;
// pieces already in place are shared, not copied.
// `on_every_process`: with several processes, the value is one every process holds a copy of on
// its own device (an uncommitted array: each process made it on its first device), so each
// process fills its own devices' pieces from its copy and nothing crosses processes (JAX's
// device_put of host-local data onto a global sharding).
ShardedValue reshard(detail::RuntimeState& rt, const ShardedValue& value, const Sharding& target,
                     bool on_every_process = false);

// The mesh axes a move from `from` to `to` crosses: those whose use by some dimension differs
// between the two (a value on one device moved onto a mesh: every axis of that mesh).
std::vector<std::string> moved_axes(const Sharding& from, const Sharding& to, size_t rank);

// Bytes a gather_box copied: from other devices, and within the device.
struct Moved {
  uint64_t between = 0, within = 0;
  std::map<int, uint64_t> sent;  // per device: what it sent to others (every copy)
  // The collective record's bytes for a reshard (meshvk::CollectiveRecord): the most one device sent.
  uint64_t most_sent() const {
    uint64_t most = 0;
    for (const auto& kv : sent) most = std::max(most, kv.second);
    return most;
  }
};
// A fresh buffer on `device` holding global `box` of `value` (row-major), copied device to
// device from the pieces that hold its parts: the device's own where it has them, else spread
// over their holders.
std::shared_ptr<detail::DeviceBuffer> gather_box(detail::RuntimeState& rt,
                                                 const ShardedValue& value, const Index& box,
                                                 int device, Moved& moved);

// A copy of every piece in fresh buffers.
ShardedValue copy_value(detail::RuntimeState& rt, const ShardedValue& value);

// Throws Error when `sharding` names devices the runtime does not have.
void check_devices(const detail::RuntimeState& rt, const Sharding& sharding);

}  // namespace meshvk::exec

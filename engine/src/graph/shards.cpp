// jax.Array.addressable_shards: every device's piece as a single-device Array sharing its buffer.
#include <mutex>

#include "graph/array_impl.hpp"
#include "meshvk/array.hpp"
#include "meshvk/error.hpp"
#include "runtime/process_group.hpp"

namespace meshvk {

std::vector<Shard> Array::addressable_shards() const {
  if (!valid())
    throw Error(
        "addressable_shards: use of an empty meshvk::Array (default-constructed or moved from)");
  // Under the runtime's lock: a replay of the jitted function that made this array swaps its
  // buffers (jit.cpp's detach_lent) while another thread might read them here.
  std::lock_guard lock(impl()->runtime->mutex());
  const exec::ShardedValue value = detail::shareable_value(*this);
  const std::vector<DeviceIndex> map = value.sharding.devices_indices_map(value.shape);
  if (map.size() != value.shards.size())
    throw Error("addressable_shards: the array has " + std::to_string(value.shards.size()) +
                " pieces for " + std::to_string(map.size()) + " devices of " +
                value.sharding.to_string());
  // With several processes, a program that initialized meshvk::distributed gets this process's
  // pieces only (JAX's rule); one written for one process and run unchanged under mpirun gets
  // them all, and reads another process's collectively (to_host).
  const detail::ProcessGroup* group = detail::ProcessGroup::get();
  const bool local_only = group && group->initialized_by_user;
  std::vector<Shard> shards;
  for (size_t i = 0; i < map.size(); ++i) {
    if (local_only && !impl()->runtime->is_local(map[i].device)) continue;
    int replica = 0;
    for (size_t j = 0; j < i; ++j) replica += map[j].index == map[i].index ? 1 : 0;
    Shape piece;
    for (const Slice& s : map[i].index) piece.push_back(s.size());
    exec::ShardedValue one{piece,
                           value.dtype,
                           SingleDeviceSharding(map[i].device, value.sharding.platform()),
                           {value.shards[i]}};
    shards.push_back({map[i].device, map[i].index, replica,
                      detail::make_array(impl()->runtime, std::move(one), true)});
  }
  return shards;
}

}  // namespace meshvk

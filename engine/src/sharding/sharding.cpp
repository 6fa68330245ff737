#include "meshvk/sharding.hpp"

#include <algorithm>
#include <set>

#include "meshvk/error.hpp"
#include "meshvk/runtime.hpp"
#include "sharding/axis_name.hpp"

namespace meshvk {

std::string index_to_string(const Index& index) {
  std::string s = "[";
  for (size_t i = 0; i < index.size(); ++i)
    s += (i ? ", " : "") + std::to_string(index[i].start) + ":" + std::to_string(index[i].stop);
  return s + "]";
}

static std::string memory_kind(const std::string& platform) {
  return platform == "CPU" ? "unpinned_host" : "device";
}

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec)
    : mesh_(std::move(mesh)), spec_(std::move(spec)) {
  std::set<std::string> used;
  for (const auto& axis : spec_.axes()) {
    if (!mesh_.has_axis(axis)) {
      std::string names;
      for (const auto& n : mesh_.axis_names()) names += (names.empty() ? "" : ", ") + quote_axis_name(n);
      throw Error("NamedSharding: " + spec_.to_string() + " names mesh axis " +
                  quote_axis_name(axis) + ", which " + mesh_.to_string() +
                  " does not have; valid axes are " + names);
    }
    if (!used.insert(axis).second)
      throw Error("NamedSharding: " + spec_.to_string() + " uses mesh axis " +
                  quote_axis_name(axis) +
                  " more than once; each mesh axis may split at most one dimension, once");
  }
}

int NamedSharding::num_shards(size_t dim) const {
  int n = 1;
  for (const auto& axis : spec_[dim].axes) n *= mesh_.axis_size(axis);
  return n;
}

int NamedSharding::shard_coord(int position, size_t dim) const {
  const std::vector<int> coords = mesh_.coords(position);
  int coord = 0;
  for (const auto& axis : spec_[dim].axes) {
    const int a = mesh_.axis_position(axis);
    coord = coord * mesh_.axis_sizes()[a] + coords[a];
  }
  return coord;
}

std::vector<std::string> NamedSharding::replicated_axes() const {
  const std::vector<std::string> used = spec_.axes();
  std::vector<std::string> free;
  for (const auto& name : mesh_.axis_names())
    if (std::find(used.begin(), used.end(), name) == used.end()) free.push_back(name);
  return free;
}

std::string NamedSharding::to_string() const {
  return "NamedSharding(mesh=" + mesh_.to_string() + ", spec=" + spec_.to_string() +
         ", memory_kind=" + memory_kind(mesh_.platform()) + ")";
}

std::string SingleDeviceSharding::to_string() const {
  return "SingleDeviceSharding(device=" + device_repr(device_, platform_) +
         ", memory_kind=" + memory_kind(platform_) + ")";
}

std::vector<int> Sharding::device_ids() const {
  if (const auto* s = single()) return {s->device()};
  return named()->mesh().device_ids();
}

const std::string& Sharding::platform() const& {
  if (const auto* s = single()) return s->platform();
  return named()->mesh().platform();
}

void Sharding::check_shape(const Shape& shape) const {
  // A negative size would pass the divisibility test below (-8 % 4 == 0) and yield backwards
  // slices.
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 0)
      throw Error("dimension " + std::to_string(d) + " of shape " + shape_to_string(shape) +
                  " has size " + std::to_string(shape[d]) + "; array sizes must be 0 or more");
  const NamedSharding* n = named();
  if (!n) return;
  const PartitionSpec& spec = n->spec();
  if (spec.size() > shape.size())
    throw Error(spec.to_string() + " has " + std::to_string(spec.size()) +
                " entries but the array of shape " + shape_to_string(shape) + " has rank " +
                std::to_string(shape.size()) + "; a spec may have at most one entry per dimension");
  for (size_t d = 0; d < spec.size(); ++d) {
    const int k = n->num_shards(d);
    if (shape[d] % k != 0)
      throw Error("dimension " + std::to_string(d) + " of shape " + shape_to_string(shape) +
                  " has size " + std::to_string(shape[d]) + ", which is not divisible by " +
                  std::to_string(k) + ", the product of mesh axes " + spec[d].to_string() + " in " +
                  spec.to_string() + "; its size must be a multiple of " + std::to_string(k));
  }
}

std::vector<DeviceIndex> Sharding::devices_indices_map(const Shape& shape) const {
  check_shape(shape);
  std::vector<DeviceIndex> map;
  if (const auto* s = single()) {
    Index whole;
    for (const int64_t d : shape) whole.push_back({0, d});
    map.push_back({s->device(), whole});
    return map;
  }
  const NamedSharding& n = *named();
  const auto& ids = n.mesh().device_ids();
  for (int pos = 0; pos < static_cast<int>(ids.size()); ++pos) {
    Index index;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t piece = shape[d] / n.num_shards(d);
      const int64_t c = n.shard_coord(pos, d);
      index.push_back({c * piece, (c + 1) * piece});
    }
    map.push_back({ids[pos], std::move(index)});
  }
  return map;
}

Shape Sharding::shard_shape(const Shape& shape) const {
  check_shape(shape);
  Shape local = shape;
  if (const NamedSharding* n = named())
    for (size_t d = 0; d < shape.size(); ++d) local[d] /= n->num_shards(d);
  return local;
}

bool Sharding::is_fully_replicated() const {
  if (single()) return true;
  for (const auto& axis : named()->spec().axes())
    if (named()->mesh().axis_size(axis) > 1) return false;
  return true;
}

bool Sharding::is_equivalent_to(const Sharding& other, size_t ndim) const {
  if (device_ids() != other.device_ids()) return false;
  // Every shard count divides the device count, so this shape divides evenly for both.
  const Shape probe(ndim, static_cast<int64_t>(device_ids().size()));
  const auto a = devices_indices_map(probe);
  const auto b = other.devices_indices_map(probe);
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].index != b[i].index) return false;
  return true;
}

std::string Sharding::to_string() const {
  if (const auto* s = single()) return s->to_string();
  return named()->to_string();
}

}  // namespace meshvk

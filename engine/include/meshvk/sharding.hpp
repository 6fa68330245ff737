#pragma once
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "meshvk/dtype.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/partition_spec.hpp"

namespace meshvk {

// Half-open range [start, stop) of one dimension.
struct Slice {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t size() const { return stop - start; }
  bool operator==(const Slice&) const = default;
};
// The part of a global array one device holds: one Slice per dimension.
using Index = std::vector<Slice>;
std::string index_to_string(const Index& index);  // "[0:4, 0:2]"

// A device and the part of the array it holds.
struct DeviceIndex {
  int device = 0;
  Index index;
};

// jax.sharding.NamedSharding: an array laid out over a mesh by a PartitionSpec.
class NamedSharding {
 public:
  // Throws Error for an unknown mesh axis or an axis used twice.
  NamedSharding(Mesh mesh, PartitionSpec spec);

  // On a temporary NamedSharding these return copies (see Lowered in jit.hpp).
  const Mesh& mesh() const& { return mesh_; }
  Mesh mesh() const&& { return mesh_; }
  const PartitionSpec& spec() const& { return spec_; }
  PartitionSpec spec() const&& { return spec_; }

  // Number of pieces dimension `dim` is split into (product of its mesh axes).
  int num_shards(size_t dim) const;
  // Which piece of dimension `dim` the device at mesh position `position` holds.
  int shard_coord(int position, size_t dim) const;
  // Mesh axes that split no dimension: the array is replicated along them.
  std::vector<std::string> replicated_axes() const;

  bool operator==(const NamedSharding& other) const = default;
  std::string to_string() const;

 private:
  Mesh mesh_;
  PartitionSpec spec_;
};

// jax.sharding.SingleDeviceSharding: the whole array on one device.
class SingleDeviceSharding {
 public:
  explicit SingleDeviceSharding(int device, std::string platform = "CPU")
      : device_(device), platform_(std::move(platform)) {}
  int device() const { return device_; }
  const std::string& platform() const& { return platform_; }
  std::string platform() const&& { return platform_; }  // a temporary's: a copy
  bool operator==(const SingleDeviceSharding& other) const = default;
  std::string to_string() const;

 private:
  int device_;
  std::string platform_;
};

// Either kind of sharding, with the questions JAX's Sharding answers.
class Sharding {
 public:
  Sharding(NamedSharding named) : kind_(std::move(named)) {}
  Sharding(SingleDeviceSharding single) : kind_(std::move(single)) {}

  const NamedSharding* named() const { return std::get_if<NamedSharding>(&kind_); }
  const SingleDeviceSharding* single() const { return std::get_if<SingleDeviceSharding>(&kind_); }

  // The devices that hold a piece of the array, in mesh order.
  std::vector<int> device_ids() const;
  const std::string& platform() const&;
  std::string platform() const&& { return platform(); }  // a temporary's: a copy

  // Throws Error when `shape` cannot be laid out this way: a spec longer than the rank, or a
  // dimension not divisible by the product of its mesh axes.
  void check_shape(const Shape& shape) const;
  // What each device holds, in device_ids() order.
  std::vector<DeviceIndex> devices_indices_map(const Shape& shape) const;
  // The shape of each device's piece.
  Shape shard_shape(const Shape& shape) const;
  // Every device holds the whole array.
  bool is_fully_replicated() const;
  // Same devices holding the same pieces of an array of this rank (P('a') vs P('a', None)).
  bool is_equivalent_to(const Sharding& other, size_t ndim) const;

  bool operator==(const Sharding& other) const = default;
  std::string to_string() const;

 private:
  std::variant<SingleDeviceSharding, NamedSharding> kind_;
};

}  // namespace meshvk

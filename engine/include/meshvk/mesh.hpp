#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace meshvk {

// How a mesh axis takes part in sharding, as jax.sharding.AxisType.
enum class AxisType { Auto, Explicit, Manual };
std::string_view axis_type_name(AxisType type);

// A named N-dimensional grid of virtual devices (jax.sharding.Mesh). Devices are laid out
// row-major: the device at mesh coordinates (i, j) of a (2, 4) mesh is device_ids()[i * 4 + j].
class Mesh {
 public:
  // `device_ids` defaults to 0..size-1; `platform` labels the devices ("CPU" or "GPU").
  Mesh(std::vector<int> axis_sizes, std::vector<std::string> axis_names,
       std::vector<AxisType> axis_types = {}, std::vector<int> device_ids = {},
       std::string platform = "CPU");

  // On a temporary Mesh these return copies (see Lowered in jit.hpp).
  const std::vector<int>& axis_sizes() const& { return axis_sizes_; }
  std::vector<int> axis_sizes() const&& { return axis_sizes_; }
  const std::vector<std::string>& axis_names() const& { return axis_names_; }
  std::vector<std::string> axis_names() const&& { return axis_names_; }
  const std::vector<AxisType>& axis_types() const& { return axis_types_; }
  std::vector<AxisType> axis_types() const&& { return axis_types_; }
  const std::vector<int>& device_ids() const& { return device_ids_; }
  std::vector<int> device_ids() const&& { return device_ids_; }
  const std::string& platform() const& { return platform_; }
  std::string platform() const&& { return platform_; }
  int ndim() const { return static_cast<int>(axis_sizes_.size()); }
  int size() const { return static_cast<int>(device_ids_.size()); }

  bool has_axis(std::string_view name) const;
  int axis_position(std::string_view name) const;  // throws Error naming the valid axes
  int axis_size(std::string_view name) const;
  AxisType axis_type(std::string_view name) const;
  // Mesh coordinates of the device at flattened position `position` (0 <= position < size(),
  // else Error).
  std::vector<int> coords(int position) const;
  // Flattened position of `device_id` in this mesh, or -1 when the mesh does not hold it.
  int position_of(int device_id) const;

  // "Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto))"
  std::string to_string() const;
  // repr(mesh), as a notebook cell shows a mesh: "Mesh(device_ids=array([[0, 1],\n       [2, 3]]),
  // axis_names=('x', 'y'), axis_types=(Auto, Auto))", the ids as numpy prints an int array.
  std::string repr() const;
  bool operator==(const Mesh& other) const = default;

 private:
  std::vector<int> axis_sizes_;
  std::vector<std::string> axis_names_;
  std::vector<AxisType> axis_types_;
  std::vector<int> device_ids_;
  std::string platform_;
};

// jax.make_mesh: a mesh over `devices` (default: every device of the current Runtime, whose
// count must equal the product of `axis_sizes`).
Mesh make_mesh(std::vector<int> axis_sizes, std::vector<std::string> axis_names,
               std::vector<AxisType> axis_types = {}, std::vector<int> devices = {});

}  // namespace meshvk

#include "meshvk/mesh.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "meshvk/error.hpp"
#include "sharding/axis_name.hpp"

namespace meshvk {

std::string_view axis_type_name(AxisType type) {
  switch (type) {
    case AxisType::Auto:
      return "Auto";
    case AxisType::Explicit:
      return "Explicit";
    case AxisType::Manual:
      return "Manual";
  }
  return "Unknown";
}

// Far more devices than any machine has; a mesh lists its device ids, so sizes past this would
// only allocate gigabytes on the way to an error.
constexpr int64_t kMaxMeshDevices = int64_t{1} << 20;

static std::string quoted_names(const std::vector<std::string>& names) {
  std::string s = "(";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + quote_axis_name(names[i]);
  if (names.size() == 1) s += ",";
  return s + ")";
}

Mesh::Mesh(std::vector<int> axis_sizes, std::vector<std::string> axis_names,
           std::vector<AxisType> axis_types, std::vector<int> device_ids, std::string platform)
    : axis_sizes_(std::move(axis_sizes)),
      axis_names_(std::move(axis_names)),
      axis_types_(std::move(axis_types)),
      device_ids_(std::move(device_ids)),
      platform_(std::move(platform)) {
  if (axis_sizes_.size() != axis_names_.size())
    throw Error("Mesh: " + std::to_string(axis_sizes_.size()) + " axis sizes but " +
                std::to_string(axis_names_.size()) + " axis names " + quoted_names(axis_names_) +
                "; give one name per axis");
  if (axis_types_.empty()) axis_types_.assign(axis_sizes_.size(), AxisType::Auto);
  if (axis_types_.size() != axis_sizes_.size())
    throw Error("Mesh: " + std::to_string(axis_types_.size()) + " axis types for " +
                std::to_string(axis_sizes_.size()) + " axes; give one type per axis or none");
  std::set<std::string> seen;
  int64_t total = 1;
  for (size_t i = 0; i < axis_sizes_.size(); ++i) {
    if (axis_names_[i].empty()) throw Error("Mesh: axis " + std::to_string(i) + " has an empty name");
    if (!seen.insert(axis_names_[i]).second)
      throw Error("Mesh: axis name " + quote_axis_name(axis_names_[i]) + " appears twice in " +
                  quoted_names(axis_names_) + "; axis names must be unique");
    if (axis_sizes_[i] < 1)
      throw Error("Mesh: axis " + quote_axis_name(axis_names_[i]) + " has size " +
                  std::to_string(axis_sizes_[i]) +
                  "; axis sizes must be at least 1");
    // Checked as it grows: 4096^6 wrapped to 0 and made an empty mesh of huge axes.
    if (__builtin_mul_overflow(total, int64_t{axis_sizes_[i]}, &total) || total > kMaxMeshDevices) {
      std::string sizes;
      for (size_t j = 0; j < axis_sizes_.size(); ++j)
        sizes += (j ? "x" : "") + std::to_string(axis_sizes_[j]);
      throw Error("Mesh: axis sizes " + sizes + " multiply to more than " +
                  std::to_string(kMaxMeshDevices) + " devices, the most a mesh may have");
    }
  }
  if (device_ids_.empty()) {
    for (int64_t d = 0; d < total; ++d) device_ids_.push_back(static_cast<int>(d));
  }
  if (static_cast<int64_t>(device_ids_.size()) != total)
    throw Error("Mesh: axis sizes " + std::to_string(total) + " devices in all, but " +
                std::to_string(device_ids_.size()) +
                " device ids were given; the product of the axis sizes must equal the number of "
                "devices");
  std::set<int> unique;
  for (const int id : device_ids_)
    if (!unique.insert(id).second)
      throw Error("Mesh: device id " + std::to_string(id) + " appears twice; each device may appear once in a mesh");
}

bool Mesh::has_axis(std::string_view name) const {
  return std::find(axis_names_.begin(), axis_names_.end(), name) != axis_names_.end();
}

int Mesh::axis_position(std::string_view name) const {
  const auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  if (it == axis_names_.end())
    throw Error("unknown mesh axis " + quote_axis_name(std::string(name)) + "; " + to_string() +
                " has axes " +
                quoted_names(axis_names_));
  return static_cast<int>(it - axis_names_.begin());
}

int Mesh::axis_size(std::string_view name) const { return axis_sizes_[axis_position(name)]; }

AxisType Mesh::axis_type(std::string_view name) const { return axis_types_[axis_position(name)]; }

std::vector<int> Mesh::coords(int position) const {
  // Outside the mesh the arithmetic below would give some device's coordinates.
  if (position < 0 || position >= size())
    throw Error("Mesh::coords: position " + std::to_string(position) + " is outside " + to_string() +
                "; valid positions are 0.." + std::to_string(size() - 1));
  std::vector<int> c(axis_sizes_.size());
  for (int i = static_cast<int>(axis_sizes_.size()) - 1; i >= 0; --i) {
    c[i] = position % axis_sizes_[i];
    position /= axis_sizes_[i];
  }
  return c;
}

int Mesh::position_of(int device_id) const {
  const auto it = std::find(device_ids_.begin(), device_ids_.end(), device_id);
  return it == device_ids_.end() ? -1 : static_cast<int>(it - device_ids_.begin());
}

std::string Mesh::to_string() const {
  std::string s = "Mesh(";
  for (size_t i = 0; i < axis_sizes_.size(); ++i)
    // Quoted as PartitionSpec quotes them, so a name holding a quote prints unambiguously (the
    // text keys jit's cache through shardings and use_mesh contexts).
    s += (i ? ", " : "") + quote_axis_name(axis_names_[i]) + ": " + std::to_string(axis_sizes_[i]);
  s += std::string(axis_sizes_.empty() ? "" : ", ") + "axis_types=(";
  for (size_t i = 0; i < axis_types_.size(); ++i)
    s += (i ? ", " : "") + std::string(axis_type_name(axis_types_[i]));
  if (axis_types_.size() == 1) s += ",";
  return s + "))";
}

std::string Mesh::repr() const {
  size_t width = 1;
  for (const int id : device_ids_) width = std::max(width, std::to_string(id).size());
  const size_t rank = axis_sizes_.size();
  // numpy's repr: rows of one axis separated by ", ", blocks by ",\n" and one blank line per
  // axis below them, each line indented under the first '['.
  size_t next = 0;
  std::function<std::string(size_t)> block = [&](size_t level) {
    std::string s = "[";
    for (int i = 0; i < axis_sizes_[level]; ++i) {
      if (i) {
        s += level + 1 == rank ? ", " : ",\n" + std::string(rank - level - 2, '\n') +
                                            std::string(std::string("array(").size() + level + 1, ' ');
      }
      if (level + 1 == rank) {
        const std::string id = std::to_string(device_ids_[next++]);
        s += std::string(width - id.size(), ' ') + id;
      } else {
        s += block(level + 1);
      }
    }
    return s + "]";
  };
  std::string s = "Mesh(device_ids=array(" + (rank ? block(0) : std::string("[]")) + "), axis_names=(";
  for (size_t i = 0; i < rank; ++i) s += (i ? ", " : "") + quote_axis_name(axis_names_[i]);
  if (rank == 1) s += ",";
  s += "), axis_types=(";
  for (size_t i = 0; i < axis_types_.size(); ++i)
    s += (i ? ", " : "") + std::string(axis_type_name(axis_types_[i]));
  if (axis_types_.size() == 1) s += ",";
  return s + "))";
}

}  // namespace meshvk

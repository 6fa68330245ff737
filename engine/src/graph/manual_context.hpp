#pragma once
// The mesh a shard_map body runs over, for the collectives called inside it.
#include <optional>
#include <string>
#include <vector>

#include "meshvk/mesh.hpp"

namespace meshvk::detail {

// The innermost shard_map's mesh (its axes are Manual), or nothing outside shard_map.
const Mesh* current_manual_mesh();

class ManualScope {
 public:
  explicit ManualScope(const Mesh& mesh);
  ~ManualScope();
  ManualScope(const ManualScope&) = delete;
  ManualScope& operator=(const ManualScope&) = delete;
};

}  // namespace meshvk::detail

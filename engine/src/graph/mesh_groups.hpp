#pragma once
// Groups of a mesh's devices that differ only along some axes: the devices a collective over
// those axes runs among.
#include <string>
#include <vector>

#include "collectives/collectives.hpp"
#include "kernels/strided_copy.hpp"
#include "meshvk/mesh.hpp"

namespace meshvk::detail {

struct MeshGroups {
  std::vector<std::vector<int>> members;  // mesh positions, in rank order within each group
  std::vector<int> rank;                  // rank of each mesh position within its group
  int size = 1;
};

MeshGroups mesh_groups(const Mesh& mesh, const std::vector<std::string>& axes);

// All-reduce of per-device values (buffers in mesh position order) among the devices of each
// group over `axes`; returns the results in mesh position order.
collectives::Buffers all_reduce_over(RuntimeState& rt, const Mesh& mesh, const std::vector<std::string>& axes,
                                     const collectives::Buffers& buffers, uint64_t count, DType dtype,
                                     collectives::Reduction op);

std::string axes_text(const std::vector<std::string>& axes);  // "('x', 'y')"
// HLO's replica_groups of the device ids: "{{0,4},{1,5},{2,6},{3,7}}".
std::string replica_groups_text(const Mesh& mesh, const MeshGroups& groups);
std::string bytes_text(uint64_t bytes);                       // "128 KiB"

// A strided copy on `device` between two of its buffers, ordered after what wrote `from`: the
// packing and unpacking of combined collectives.
void copy_box(RuntimeState& rt, int device, const DeviceBuffer& from, const DeviceBuffer& to, const kernels::StridedCopy& box);
// Contiguous runs between buffers of `device`, in one submission (kernels::record_copy_runs).
void copy_runs(RuntimeState& rt, int device, std::span<const kernels::CopyRun> runs, uint32_t element_bytes);

}  // namespace meshvk::detail

#include "kernels/cost.hpp"
#include "graph/mesh_groups.hpp"

#include <algorithm>
#include <map>

#include "exec/program_log.hpp"
#include "graph/op_scope.hpp"

namespace meshvk::detail {

MeshGroups mesh_groups(const Mesh& mesh, const std::vector<std::string>& axes) {
  MeshGroups g;
  std::map<std::vector<int>, int> by_rest;
  g.rank.resize(mesh.size());
  for (const auto& a : axes) g.size *= mesh.axis_size(a);
  for (int p = 0; p < mesh.size(); ++p) {
    const std::vector<int> c = mesh.coords(p);
    std::vector<int> rest;
    for (int d = 0; d < mesh.ndim(); ++d)
      if (std::find(axes.begin(), axes.end(), mesh.axis_names()[d]) == axes.end()) rest.push_back(c[d]);
    int r = 0;
    for (const auto& a : axes) {
      const int d = mesh.axis_position(a);
      r = r * mesh.axis_sizes()[d] + c[d];
    }
    auto [it, fresh] = by_rest.emplace(rest, static_cast<int>(g.members.size()));
    if (fresh) g.members.emplace_back(g.size, -1);
    g.members[it->second][r] = p;
    g.rank[p] = r;
  }
  return g;
}

std::string replica_groups_text(const Mesh& mesh, const MeshGroups& groups) {
  std::string s = "{";
  for (size_t g = 0; g < groups.members.size(); ++g) {
    s += g ? ",{" : "{";
    for (size_t r = 0; r < groups.members[g].size(); ++r)
      s += (r ? "," : "") + std::to_string(mesh.device_ids()[groups.members[g][r]]);
    s += "}";
  }
  return s + "}";
}

std::string axes_text(const std::vector<std::string>& axes) {
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
  if (axes.size() == 1) s += ",";
  return s + ")";
}

std::string bytes_text(uint64_t bytes) {
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

collectives::Buffers all_reduce_over(RuntimeState& rt, const Mesh& mesh, const std::vector<std::string>& axes,
                                     const collectives::Buffers& buffers, uint64_t count, DType dtype,
                                     collectives::Reduction op) {
  const OpScope op_scope("all-reduce");  // profile hook
  const kernels::CollectiveWork work;  // its submissions: one collective (Lowered::estimate)
  const MeshGroups g = mesh_groups(mesh, axes);
  // Each device's whole operand goes into every other's result: it sends each of its bytes.
  const uint64_t bytes = count * dtype_size(dtype);
  const auto algorithm = collectives::choose_algorithm(bytes);
  static const char* names[] = {"sum", "max", "min"};
  if (exec::logging())  // the text is built only while a trace listens
    exec::log_collective("all-reduce", bytes,
                         "all-reduce(" + std::string(names[static_cast<int>(op)]) + ") over " +
                             axes_text(axes) + ": replica_groups=" + replica_groups_text(mesh, g) +
                             ", " + bytes_text(bytes) + " per device, " +
                             collectives::algorithm_name(algorithm),
                         axes, &mesh);
  collectives::Buffers out(buffers.size());
  for (const auto& members : g.members) {
    collectives::Buffers in;
    for (const int p : members) in.push_back(buffers[p]);
    const collectives::Buffers res = collectives::all_reduce(rt, in, count, dtype, op, algorithm);
    for (size_t r = 0; r < members.size(); ++r) out[members[r]] = res[r];
  }
  if (exec::logging() && !out.empty() && out.front()) exec::name_result(out.front().get(), "all-reduce");
  return out;
}

void copy_box(RuntimeState& rt, int device, const DeviceBuffer& from, const DeviceBuffer& to, const kernels::StridedCopy& box) {
  Recording rec = rt.begin(device);
  rec.wait_for(from.ready());
  kernels::record_strided_copy(rt, rec, box, from, to);
  const Fence f = rt.submit(std::move(rec));
  const_cast<DeviceBuffer&>(from).used_by(f);
  const_cast<DeviceBuffer&>(to).written_by(f);
}

void copy_runs(RuntimeState& rt, int device, std::span<const kernels::CopyRun> runs, uint32_t element_bytes) {
  Recording rec = rt.begin(device);
  for (const kernels::CopyRun& r : runs) rec.wait_for(r.from->ready());
  kernels::record_copy_runs(rt, rec, runs, element_bytes);
  const Fence f = rt.submit(std::move(rec));
  for (const kernels::CopyRun& r : runs) {
    const_cast<DeviceBuffer*>(r.from)->used_by(f);
    const_cast<DeviceBuffer*>(r.to)->written_by(f);
  }
}

}  // namespace meshvk::detail

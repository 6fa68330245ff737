// device_put of a pytree's leaves at one program point, with the moves that are each exactly an
// all-gather of one split dimension over the same mesh axes packed into one all-gather (XLA's
// all-gather combiner, PyTorch FSDP's flat parameter): a layer's weights gathered together.
#include <algorithm>
#include <map>
#include <mutex>

#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/manual_context.hpp"
#include "graph/mesh_groups.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "graph/saved_collectives.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"
#include "meshvk/tree.hpp"

namespace meshvk::detail {

namespace {

// Values resolved together go in all-gathers of at most this many bytes per device (as the
// all-reduce combiner's buckets).
constexpr uint64_t kGatherThresholdBytes = 25ull << 20;

// A move that is exactly an all-gather of one dimension: x committed on a mesh with one
// dimension split (evenly) over `axes`, the target the same mesh with nothing split.
struct Gather {
  size_t leaf = 0;
  int dim = 0;
  std::vector<std::string> axes;
  int64_t members = 1;
};

std::optional<Gather> plain_gather(const Array& x, const Sharding& target, size_t leaf) {
  const NamedSharding* from = x.sharding().named();
  const NamedSharding* to = target.named();
  if (!from || !to || !(from->mesh() == to->mesh()) || !target.is_fully_replicated() ||
      !x.committed() || is_partial(x) || is_pending_scatter(x) || x.size() == 0 ||
      current_manual_mesh())
    return std::nullopt;
  const size_t bytes = dtype_size(x.dtype());
  if (bytes != 4 && bytes != 2)
    return std::nullopt;  // the strided copies move 2- or 4-byte elements
  std::optional<Gather> g;
  for (size_t d = 0; d < from->spec().size() && d < x.ndim(); ++d) {
    const SpecEntry& e = from->spec()[d];
    if (e.is_none()) continue;
    if (g) return std::nullopt;  // more than one split dimension
    g = Gather{leaf, static_cast<int>(d), e.axes, 1};
    for (const auto& a : e.axes) g->members *= from->mesh().axis_size(a);
  }
  if (!g || x.shape()[static_cast<size_t>(g->dim)] % g->members != 0) return std::nullopt;
  return g;
}

// One all-gather for `group` (leaves of one dtype split over the same axes of one mesh): each
// device packs its pieces, the packed value (split along its one dimension over those axes) is
// gathered, and each device copies every member's piece of every leaf into the leaf's rows.
void gather_packed(const std::vector<Array>& leaves, const LeafShardings& placed,
                   const std::vector<Gather>& group, std::vector<Array>& out) {
  const Array& first = leaves[group.front().leaf];
  const auto rt = first.impl()->runtime;
  RuntimeState& state = *rt;
  const Mesh& mesh = first.sharding().named()->mesh();
  const DType dtype = first.dtype();
  const uint32_t element = static_cast<uint32_t>(dtype_size(dtype));
  const int64_t members = group.front().members;
  std::vector<int64_t> offsets;
  int64_t chunk = 0;
  for (const Gather& g : group) {
    offsets.push_back(chunk);
    chunk += leaves[g.leaf].size() / members;
  }
  if (exec::logging())
    exec::log_op("all-gather combiner: " + std::to_string(group.size()) + " values over " +
                 axes_text(group.front().axes) + " packed into one buffer of " +
                 bytes_text(static_cast<uint64_t>(chunk) * element) + " per device");
  collectives::Buffers packed;
  for (int p = 0; p < mesh.size(); ++p) {
    const int device = mesh.device_ids()[static_cast<size_t>(p)];
    packed.push_back(state.allocate(device, static_cast<uint64_t>(chunk) * element));
    for (size_t i = 0; i < group.size(); ++i) {
      const int64_t n = leaves[group[i].leaf].size() / members;
      copy_box(state, device, *materialized(leaves[group[i].leaf]).shards[static_cast<size_t>(p)],
               *packed.back(), {{n}, {1}, {1}, 0, offsets[i], element});
    }
  }
  const exec::ShardedValue pieces{
      Shape{chunk * members}, dtype,
      NamedSharding(mesh, PartitionSpec(std::vector<SpecEntry>{SpecEntry(group.front().axes)})),
      std::move(packed)};
  const exec::ShardedValue whole =
      reshard_saving(rt, pieces, NamedSharding(mesh, PartitionSpec()), false, true, {});
  for (size_t i = 0; i < group.size(); ++i) {
    const Array& x = leaves[group[i].leaf];
    const size_t d = static_cast<size_t>(group[i].dim);
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < d; ++k) outer *= x.shape()[k];
    for (size_t k = d + 1; k < x.ndim(); ++k) inner *= x.shape()[k];
    const int64_t rows = x.shape()[d] / members;
    std::vector<std::shared_ptr<DeviceBuffer>> shards;
    for (int p = 0; p < mesh.size(); ++p) {
      const int device = mesh.device_ids()[static_cast<size_t>(p)];
      shards.push_back(state.allocate(device, static_cast<uint64_t>(x.size()) * element));
      for (int64_t r = 0; r < members; ++r)
        copy_box(state, device, *whole.shards[static_cast<size_t>(p)], *shards.back(),
                 {{outer, rows * inner},
                  {rows * inner, 1},
                  {members * rows * inner, 1},
                  r * chunk + offsets[i],
                  r * rows * inner,
                  element});
    }
    out[group[i].leaf] = make_array(
        rt, exec::ShardedValue{x.shape(), dtype, *placed[group[i].leaf], std::move(shards)}, true,
        x.impl()->varying);
  }
}

}  // namespace

std::vector<Array> device_put_leaves(const std::vector<Array>& leaves,
                                     const LeafShardings& placed) {
  if (placed.size() != leaves.size())
    device_put_tree_error("the shardings do not cover every Array of the value");
  std::vector<Array> out(leaves.size());
  std::vector<std::vector<Gather>> groups;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!placed[i] || !leaves[i].valid() || leaves[i].impl()->runtime != Runtime::current().state())
      continue;
    std::optional<Gather> g = plain_gather(leaves[i], *placed[i], i);
    if (!g) continue;
    auto same = [&](const std::vector<Gather>& group) {
      const Array& y = leaves[group.front().leaf];
      return group.front().axes == g->axes && y.dtype() == leaves[i].dtype() &&
             y.sharding().named()->mesh() == leaves[i].sharding().named()->mesh();
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end())
      groups.push_back({*g});
    else
      it->push_back(*g);
  }
  if (!groups.empty()) {
    RuntimeState& rt = *leaves[groups.front().front().leaf].impl()->runtime;
    std::lock_guard lock(rt.mutex());
    const OpScope op_scope("reshard");  // profile hook: the all-gather's line
    const exec::RuleScope rule([] { return std::string("device_put"); });
    for (const auto& group : groups) {
      std::vector<Gather> bucket;
      uint64_t bytes = 0;
      const auto flush = [&] {
        if (bucket.size() > 1) gather_packed(leaves, placed, bucket, out);
        bucket.clear();
        bytes = 0;
      };
      for (const Gather& g : group) {
        const uint64_t b =
            static_cast<uint64_t>(leaves[g.leaf].size()) * dtype_size(leaves[g.leaf].dtype());
        if (!bucket.empty() && bytes + b > kGatherThresholdBytes) flush();
        bucket.push_back(g);
        bytes += b;
      }
      flush();
    }
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!placed[i])
      out[i] = leaves[i];
    else if (out[i].valid())
      out[i] = device_put_on_tape(leaves[i], out[i]);
    else
      out[i] = device_put(leaves[i], *placed[i]);
  }
  return out;
}

}  // namespace meshvk::detail

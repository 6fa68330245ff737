// Collectives over named mesh axes inside shard_map: the mesh splits into groups of devices that
// differ only along the named axes, and each group runs the collective among its members.
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include "kernels/cost.hpp"
#include "collectives/collectives.hpp"
#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/dtype_support.hpp"
#include "graph/manual_context.hpp"
#include "graph/mesh_groups.hpp"
#include "graph/op_scope.hpp"
#include "graph/saved_collectives.hpp"
#include "graph/tape.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/shard_map.hpp"

namespace meshvk {

static Array all_gather_untaped(const Array& input, const AxisNames& axis_name, int axis, bool tiled);

namespace {

using collectives::Buffers;

using Groups = detail::MeshGroups;

const Mesh& bound_mesh(const char* op, const AxisNames& axes) {
  if (axes.names.empty()) throw Error(std::string(op) + ": give at least one axis name");
  const Mesh* mesh = detail::current_manual_mesh();
  if (!mesh)
    throw Error(std::string(op) + ": axis '" + axes.names.front() +
                "' is not bound; collectives run inside shard_map over a mesh with that axis");
  for (const auto& a : axes.names) {
    if (!mesh->has_axis(a)) {
      std::string names;
      for (const auto& n : mesh->axis_names()) names += (names.empty() ? "'" : ", '") + n + "'";
      throw Error(std::string(op) + ": unbound axis name '" + a + "'; the shard_map mesh has axes " + names);
    }
    if (mesh->axis_type(a) != AxisType::Manual) {
      std::string manual;
      for (int d = 0; d < mesh->ndim(); ++d)
        if (mesh->axis_types()[static_cast<size_t>(d)] == AxisType::Manual)
          manual += (manual.empty() ? "'" : ", '") + mesh->axis_names()[static_cast<size_t>(d)] + "'";
      throw Error(std::string(op) + ": axis '" + a +
                  "' is automatic in this shard_map (its axis_names leave it out), and collectives run only over "
                  "its manual axes: " + manual + "; values are global along '" + a +
                  "' inside the body, so use the global-view ops there (sum, matmul, reshard), or add '" + a +
                  "' to axis_names");
    }
    if (std::count(axes.names.begin(), axes.names.end(), a) > 1)
      throw Error(std::string(op) + ": axis '" + a + "' is named twice");
  }
  return *mesh;
}

Groups groups_of(const Mesh& mesh, const std::vector<std::string>& axes) { return detail::mesh_groups(mesh, axes); }

// `x` as a per-device value over the shard_map mesh: values made inside the body from no input
// (constants) are the same on every device.
Array on_mesh(const Array& x, const Mesh& mesh) {
  const NamedSharding* n = x.sharding().named();
  if (n && n->mesh().device_ids() == mesh.device_ids() && x.sharding().is_fully_replicated()) return x;
  return device_put(x, NamedSharding(mesh, PartitionSpec()));
}

std::vector<std::string> with(std::vector<std::string> v, const std::vector<std::string>& more) {
  for (const auto& a : more)
    if (std::find(v.begin(), v.end(), a) == v.end()) v.push_back(a);
  return v;
}

std::vector<std::string> without(std::vector<std::string> v, const std::vector<std::string>& less) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const std::string& a) { return std::find(less.begin(), less.end(), a) != less.end(); }), v.end());
  return v;
}

// Runs `per_group` on each group's buffers (rank order) and returns a per-device value of
// `shape` from the buffers it returns.
template <class Fn>
Array run_groups(const std::string& op, const std::vector<std::string>& axes, const Array& x, const Mesh& mesh, const Groups& g,
                 Shape shape, DType dtype, std::vector<std::string> varying, Fn per_group) {
  static const std::map<std::string, std::string> hlo = {
      {"psum", "all-reduce"},          {"pmax", "all-reduce"},          {"pmin", "all-reduce"},
      {"all_gather", "all-gather"},    {"psum_scatter", "reduce-scatter"}, {"ppermute", "collective-permute"},
      {"all_to_all", "all-to-all"},    {"pbroadcast", "collective-broadcast"}};
  const auto kind = hlo.count(op) ? hlo.at(op) : std::string(op);
  const exec::RuleScope rule([&] { return op + " (explicit, in shard_map)"; });
  const kernels::CollectiveWork work;  // its submissions: one collective (Lowered::estimate)
  auto rt = x.impl()->runtime;
  std::lock_guard lock(rt->mutex());
  const exec::ShardedValue& v = detail::materialized(x);
  // Inside a scan body whose backward pass runs it again: recorded, or handed back
  // (graph/saved_collectives.hpp).
  const exec::ShardedValue result_like{shape, dtype, NamedSharding(mesh, PartitionSpec()), {}};
  const std::string key = detail::saving_collectives() ? detail::collective_key(op + " " + detail::axes_text(axes), v, result_like) : "";
  std::optional<Buffers> saved = key.empty() ? std::nullopt : detail::saved_result(key, result_like);
  if (!saved && exec::logging()) {  // the text is built only while a trace listens
    // What each device sends, each byte once (meshvk::CollectiveRecord): all of its operand,
    // except for a reduce-scatter and an all-to-all, which keep 1/n of it where it is.
    const uint64_t operand = static_cast<uint64_t>(x.size()) * dtype_size(x.dtype());
    const uint64_t n = g.members.empty() ? 1 : g.members.front().size();
    const bool keeps_a_part = kind == "reduce-scatter" || kind == "all-to-all";
    const uint64_t bytes = keeps_a_part ? operand / n * (n - 1) + operand % n * (n - 1) / n : operand;
    exec::log_collective(
        kind, bytes,
        kind + " (" + op + ") over " + detail::axes_text(axes) +
            ": replica_groups=" + detail::replica_groups_text(mesh, g) + ", local " + type_of(x) +
            ", " + detail::bytes_text(bytes) + " per device",
        axes, &mesh);
  }
  Buffers out = saved ? std::move(*saved) : Buffers(mesh.size());
  for (const auto& members : saved ? decltype(g.members){} : g.members) {
    Buffers in;
    for (const int p : members) in.push_back(v.shards[p]);
    Buffers res = per_group(*rt, in);
    for (size_t r = 0; r < members.size(); ++r) out[members[r]] = res[r];
  }
  if (!key.empty() && !saved)
    detail::record_result(key, detail::make_array(rt, exec::ShardedValue{shape, dtype, result_like.sharding, out}, true, varying));
  if (exec::logging() && !out.empty() && out.front()) exec::name_result(out.front().get(), kind);
  return detail::make_array(rt, exec::ShardedValue{std::move(shape), dtype, NamedSharding(mesh, PartitionSpec()), std::move(out)},
                            true, std::move(varying));
}

// Each collective's work (and its local transposes and reshapes) is tagged with the HLO name its
// program-text line starts with; see graph/op_scope.hpp.
Array reduce_over(const char* op, const Array& input, const AxisNames& axes, collectives::Reduction kind) {
  const detail::OpScope op_scope("all-reduce");  // profile hook
  const Mesh& mesh = bound_mesh(op, axes);
  detail::reject_uint32(op, input);
  if (detail::is_16bit_float(input.dtype()))  // summed in float32, then rounded (exact for max, min)
    return detail::convert_untaped(reduce_over(op, detail::convert_untaped(input, DType::float32), axes, kind),
                                   input.dtype());
  if (is_8bit(input.dtype()))  // summed as int32 and wrapped back: the int8 / uint8 sum modulo 256
    return detail::convert_untaped(reduce_over(op, detail::convert_untaped(input, DType::int32), axes, kind),
                                   input.dtype());
  if (is_64bit(input.dtype())) {
    // int64 / float64: every member's elements gathered, then folded in rank order in the dtype (as
    // the one-shot all-reduce folds), so an int64 sum is exact and wraps as int64 does.
    const Array g = all_gather_untaped(input, axes, 0, false);
    const auto member = [&](int64_t i) {
      std::vector<int64_t> start(g.ndim(), 0), stop(g.shape().begin(), g.shape().end());
      start[0] = i;
      stop[0] = i + 1;
      return reshape(slice(g, start, stop), input.shape());
    };
    Array acc = member(0);
    for (int64_t i = 1; i < g.shape()[0]; ++i)
      acc = kind == collectives::Reduction::sum   ? add(acc, member(i))
            : kind == collectives::Reduction::max ? maximum(acc, member(i))
                                                  : minimum(acc, member(i));
    return acc;
  }
  const Array x = on_mesh(input.dtype() == DType::bool_ ? astype(input, DType::int32) : input, mesh);
  const Groups g = groups_of(mesh, axes.names);
  const uint64_t count = static_cast<uint64_t>(x.size());
  return run_groups(op, axes.names, x, mesh, g, x.shape(), x.dtype(), without(x.impl()->varying, axes.names),
                    [&](detail::RuntimeState& rt, const Buffers& in) {
                      return collectives::all_reduce(rt, in, count, x.dtype(), kind, collectives::choose_algorithm(count * 4));
                    });
}

int normalize(int axis, int rank, const char* op, const char* what) {
  if (axis < -rank || axis >= rank)
    throw Error(std::string(op) + ": " + what + " " + std::to_string(axis) + " is out of range for a local array of rank " +
                std::to_string(rank) + "; valid values are " + std::to_string(-rank) + ".." + std::to_string(rank - 1));
  return axis < 0 ? axis + rank : axis;
}

// Moves dimension `from` of x to position `to`.
Array move_axis(const Array& x, int from, int to) {
  if (from == to) return x;
  std::vector<int> perm(x.ndim());
  std::iota(perm.begin(), perm.end(), 0);
  perm.erase(perm.begin() + from);
  perm.insert(perm.begin() + to, from);
  return transpose(x, perm);
}

}  // namespace

static Array psum_untaped(const Array& x, const AxisNames& axis_name) { return reduce_over("psum", x, axis_name, collectives::Reduction::sum); }
static Array pextreme(const char* op, const Array& x, const AxisNames& axes, collectives::Reduction kind);
Array pmax(const Array& x, const AxisNames& axis_name, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return pextreme("pmax", x, axis_name, collectives::Reduction::max);
}
Array pmin(const Array& x, const AxisNames& axis_name, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return pextreme("pmin", x, axis_name, collectives::Reduction::min);
}

Array pmean(const Array& x, const AxisNames& axis_name, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  // bfloat16 and float16 stay so: their psum, divided in their type (as jax.lax.pmean).
  if (x.valid() && detail::is_16bit_float(x.dtype()))
    return psum(x, axis_name) / static_cast<float>(axis_size(axis_name));
  // int64 and float64: in float64 (JAX's to_inexact_dtype of int64 with x64).
  const DType t = x.valid() && is_64bit(x.dtype()) ? DType::float64 : DType::float32;
  return psum(astype(x, t), axis_name) / static_cast<float>(axis_size(axis_name));
}

int axis_size(const AxisNames& axis_name) {
  const Mesh& mesh = bound_mesh("axis_size", axis_name);
  int n = 1;
  for (const auto& a : axis_name.names) n *= mesh.axis_size(a);
  return n;
}

Array axis_index(const AxisNames& axis_name) {
  const Mesh& mesh = bound_mesh("axis_index", axis_name);
  const detail::PartOpScope op_scope("axis_index");  // profile hook
  const Groups g = groups_of(mesh, axis_name.names);
  auto rt = Runtime::current().state();
  std::lock_guard lock(rt->mutex());
  Buffers out;
  for (int p = 0; p < mesh.size(); ++p) {
    const int32_t rank = g.rank[p];
    auto piece = exec::upload(*rt, &rank, Shape{}, DType::int32, SingleDeviceSharding(mesh.device_ids()[p], mesh.platform()));
    out.push_back(piece.shards.front());
  }
  return detail::make_array(rt, exec::ShardedValue{Shape{}, DType::int32, NamedSharding(mesh, PartitionSpec()), std::move(out)},
                            true, axis_name.names);
}

static Array all_gather_untaped(const Array& input, const AxisNames& axis_name, int axis, bool tiled) {
  const detail::OpScope op_scope("all-gather");  // profile hook
  const Mesh& mesh = bound_mesh("all_gather", axis_name);
  const Array x = on_mesh(input, mesh);
  const int rank = static_cast<int>(x.ndim());
  axis = normalize(axis, tiled ? rank : rank + 1, "all_gather", "axis");
  const Groups g = groups_of(mesh, axis_name.names);
  const uint64_t chunk = static_cast<uint64_t>(x.size());
  Shape stacked = x.shape();
  stacked.insert(stacked.begin(), g.size);
  Array s = run_groups("all_gather", axis_name.names, x, mesh, g, stacked, x.dtype(), without(x.impl()->varying, axis_name.names),
                       [&](detail::RuntimeState& rt, const Buffers& in) {
                         return collectives::all_gather(rt, in, chunk, x.dtype(),
                                                       collectives::choose_algorithm(chunk * dtype_size(x.dtype()) * g.size));
                       });
  // Stacked in rank order along a new leading axis; move it where it was asked for.
  s = move_axis(s, 0, axis);
  if (!tiled) return s;
  Shape merged = x.shape();
  merged[axis] *= g.size;
  return reshape(s, merged);
}

static Array psum_scatter_untaped(const Array& input, const AxisNames& axis_name, int scatter_dimension, bool tiled) {
  const detail::OpScope op_scope("reduce-scatter");  // profile hook
  const Mesh& mesh = bound_mesh("psum_scatter", axis_name);
  detail::reject_uint32("psum_scatter", input);
  if (is_64bit(input.dtype())) {
    // int64 / float64: the whole sum on every member (gathered and added in rank order), then
    // each member's block of it.
    const Array y = reduce_over("psum_scatter", input, axis_name, collectives::Reduction::sum);
    const int dim = normalize(scatter_dimension, static_cast<int>(y.ndim()), "psum_scatter", "scatter_dimension");
    const int n = axis_size(axis_name);
    const int64_t extent = y.shape()[dim];
    if (tiled ? extent % n != 0 : extent != n)
      throw Error("psum_scatter: dimension " + std::to_string(dim) + " of the local shape " + shape_to_string(y.shape()) +
                  (tiled ? " must divide evenly among " : " must equal ") + std::to_string(n) + " members");
    const int64_t chunk = extent / n;
    std::vector<Array> start(y.ndim(), full(Shape{}, 0));
    start[dim] = axis_index(axis_name) * static_cast<int32_t>(chunk);
    Shape sizes = y.shape();
    sizes[dim] = chunk;
    const Array piece = dynamic_slice(y, start, sizes);
    return tiled ? piece : squeeze(piece, {dim});
  }
  if (is_8bit(input.dtype()))  // summed as int32 and wrapped back
    return detail::convert_untaped(
        psum_scatter_untaped(detail::convert_untaped(input, DType::int32), axis_name, scatter_dimension, tiled),
        input.dtype());
  if (detail::is_16bit_float(input.dtype()))  // summed in float32, then rounded
    return detail::convert_untaped(
        psum_scatter_untaped(detail::convert_untaped(input, DType::float32), axis_name, scatter_dimension, tiled),
        input.dtype());
  const Array x0 = on_mesh(input.dtype() == DType::bool_ ? astype(input, DType::int32) : input, mesh);
  const int rank = static_cast<int>(x0.ndim());
  const int dim = normalize(scatter_dimension, rank, "psum_scatter", "scatter_dimension");
  const Groups g = groups_of(mesh, axis_name.names);
  const int64_t extent = x0.shape()[dim];
  if (tiled ? extent % g.size != 0 : extent != g.size)
    throw Error("psum_scatter: dimension " + std::to_string(dim) + " of the local shape " + shape_to_string(x0.shape()) +
                " has size " + std::to_string(extent) + (tiled ? ", which is not divisible by " : ", which must equal ") +
                std::to_string(g.size) + ", the size of the group over " + axis_name.names.front() +
                (tiled ? "" : " (or pass tiled = true)"));
  const Array x = move_axis(x0, dim, 0);  // chunk r is then contiguous
  const uint64_t chunk = static_cast<uint64_t>(x.size() / g.size);
  Shape piece = x.shape();
  piece[0] /= g.size;
  Array r = run_groups("psum_scatter", axis_name.names, x, mesh, g, piece, x.dtype(), with(x.impl()->varying, axis_name.names),
                       [&](detail::RuntimeState& rt, const Buffers& in) {
                         return collectives::reduce_scatter(rt, in, chunk, x.dtype(), collectives::Reduction::sum,
                                                            collectives::choose_algorithm(chunk * 4 * g.size));
                       });
  r = move_axis(r, 0, dim);
  if (tiled) return r;
  Shape squeezed = r.shape();
  squeezed.erase(squeezed.begin() + dim);
  return reshape(r, squeezed);
}

static Array ppermute_untaped(const Array& input, const AxisNames& axis_name, const std::vector<std::pair<int, int>>& perm) {
  const detail::OpScope op_scope("collective-permute");  // profile hook
  const Mesh& mesh = bound_mesh("ppermute", axis_name);
  const Array x = on_mesh(input, mesh);
  const Groups g = groups_of(mesh, axis_name.names);
  std::vector<bool> src_seen(g.size), dst_seen(g.size);
  for (const auto& [src, dst] : perm) {
    if (src < 0 || src >= g.size || dst < 0 || dst >= g.size)
      throw Error("ppermute: pair (" + std::to_string(src) + ", " + std::to_string(dst) + ") is outside 0.." +
                  std::to_string(g.size - 1) + ", the indices along the permuted axes");
    if (src_seen[src] || dst_seen[dst])
      throw Error("ppermute: index " + std::to_string(src_seen[src] ? src : dst) + " appears twice as a " +
                  (src_seen[src] ? "source" : "destination") + "; a permutation sends from and to each index at most once");
    src_seen[src] = dst_seen[dst] = true;
  }
  const uint64_t count = static_cast<uint64_t>(x.size());
  return run_groups("ppermute", axis_name.names, x, mesh, g, x.shape(), x.dtype(), with(x.impl()->varying, axis_name.names),
                    [&](detail::RuntimeState& rt, const Buffers& in) { return collectives::permute(rt, in, count, x.dtype(), perm); });
}

static Array pbroadcast_untaped(const Array& input, const AxisNames& axis_name, int source) {
  const detail::OpScope op_scope("collective-broadcast");  // profile hook
  const Mesh& mesh = bound_mesh("pbroadcast", axis_name);
  const Array x = on_mesh(input, mesh);
  const Groups g = groups_of(mesh, axis_name.names);
  if (source < 0 || source >= g.size)
    throw Error("pbroadcast: source " + std::to_string(source) + " is outside 0.." + std::to_string(g.size - 1));
  const uint64_t count = static_cast<uint64_t>(x.size());
  return run_groups("pbroadcast", axis_name.names, x, mesh, g, x.shape(), x.dtype(), without(x.impl()->varying, axis_name.names),
                    [&](detail::RuntimeState& rt, const Buffers& in) { return collectives::broadcast(rt, in, count, x.dtype(), source); });
}

static Array all_to_all_untaped(const Array& input, const AxisNames& axis_name, int split_axis, int concat_axis, bool tiled) {
  const detail::OpScope op_scope("all-to-all");  // profile hook
  const Mesh& mesh = bound_mesh("all_to_all", axis_name);
  const Array x0 = on_mesh(input, mesh);
  const int rank = static_cast<int>(x0.ndim());
  int split = normalize(split_axis, rank, "all_to_all", "split_axis");
  int concat = normalize(concat_axis, rank, "all_to_all", "concat_axis");
  const Groups g = groups_of(mesh, axis_name.names);
  const int64_t extent = x0.shape()[split];
  if (tiled ? extent % g.size != 0 : extent != g.size)
    throw Error("all_to_all: split_axis " + std::to_string(split) + " of the local shape " + shape_to_string(x0.shape()) +
                " has size " + std::to_string(extent) + (tiled ? ", which is not divisible by " : ", which must equal ") +
                std::to_string(g.size) + ", the size of the group");
  if (!tiled) {
    // As JAX does: a unit axis at concat_axis takes the n received pieces, then the split axis
    // (now of size 1) goes away.
    if (split == concat) return all_to_all_untaped(x0, axis_name, split, concat, true);
    if (split < concat) ++concat;
    Shape expanded = x0.shape();
    expanded.insert(expanded.begin() + concat, 1);
    if (concat <= split) ++split;
    const Array r = all_to_all_untaped(reshape(x0, expanded), axis_name, split, concat, true);
    Shape squeezed = r.shape();
    squeezed.erase(squeezed.begin() + split);
    return reshape(r, squeezed);
  }
  // Chunk j of the split axis goes to member j; member r receives chunk r of every member and
  // stacks them in rank order along a new leading axis.
  const Array x = move_axis(x0, split, 0);
  const uint64_t chunk = static_cast<uint64_t>(x.size() / g.size);
  Shape received = x.shape();
  received[0] /= g.size;
  received.insert(received.begin(), g.size);  // [n, split/n, other dims...]
  Array r = run_groups("all_to_all", axis_name.names, x, mesh, g, received, x.dtype(), with(x.impl()->varying, axis_name.names),
                       [&](detail::RuntimeState& rt, const Buffers& in) { return collectives::all_to_all(rt, in, chunk, x.dtype()); });
  r = move_axis(r, 1, split + 1);  // [n, the input's dimensions with the split one shrunk]
  r = move_axis(r, 0, concat);     // the source index just before the concat dimension, major
  Shape merged = x0.shape();
  merged[split] /= g.size;
  merged[concat] *= g.size;
  return reshape(r, merged);
}

// ---- Taped entry points: a collective's cotangent rule is its transpose.

// A cotangent that varies along an axis holds each device's contribution, to be summed where the
// primal value is the same on every device along it; one that does not is one value, passed on
// (JAX's varying-axes types: psum transposes pvary). And a collective over an axis its operand
// does not vary along first makes the operand vary (JAX inserts pvary): psum adds n equal
// terms, so its transpose multiplies by n.
namespace {
bool varies_over(const Array& x, const std::string& axis) {
  return std::find(x.impl()->varying.begin(), x.impl()->varying.end(), axis) != x.impl()->varying.end();
}
// The axes of `axes` along which x varies, in their order.
std::vector<std::string> varying_among(const Array& x, const AxisNames& axes) {
  std::vector<std::string> out;
  for (const auto& a : axes.names)
    if (varies_over(x, a)) out.push_back(a);
  return out;
}
// The contributions `ct` holds along `axes` summed: one value along each of them.
Array summed_contributions(const Array& ct, const AxisNames& axes) {
  const std::vector<std::string> along = varying_among(ct, axes);
  return along.empty() ? ct : psum(ct, AxisNames(along));
}
// The product of the sizes of the axes of `axes` along which x does not vary.
int invariant_size(const Array& x, const AxisNames& axes) {
  int n = 1;
  for (const auto& a : axes.names)
    if (!varies_over(x, a)) n *= axis_size(AxisNames(a));
  return n;
}
Array times(const Array& x, int n) { return n == 1 ? x : x * static_cast<float>(n); }
}  // namespace

Array psum(const Array& x, const AxisNames& axis_name, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array y = psum_untaped(x, axis_name);
  if (!detail::differentiable(x)) return y;
  // Every device's input fed every device's output: the output's contributions summed reach each
  // input, n times over the axes along which x was the same on every device (x + x + ... + x).
  const int repeats = invariant_size(x, axis_name);
  return detail::on_tape(y, {x}, [axis_name, repeats](const Array& ct) {
    return std::vector<Array>{times(summed_contributions(ct, axis_name), repeats)};
  });
}

Array all_gather(const Array& x, const AxisNames& axis_name, int axis, bool tiled, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array y = all_gather_untaped(x, axis_name, axis, tiled);
  if (!detail::differentiable(x)) return y;
  const int ax = axis < 0 ? axis + static_cast<int>(tiled ? x.ndim() : x.ndim() + 1) : axis;
  return detail::on_tape(y, {x}, [x, axis_name, ax, tiled](const Array& ct_in) {
    // Contributions along every axis: summed and scattered at once.
    if (varying_among(ct_in, axis_name).size() == axis_name.names.size())
      return std::vector<Array>{psum_scatter(ct_in, axis_name, ax, tiled)};
    // One cotangent along the axes: each device keeps the piece it contributed (where x was the
    // same along an axis, the pieces are contributions to it, summed where it is read).
    const Array ct = summed_contributions(ct_in, axis_name);
    std::vector<Array> start(ct.ndim(), scalar(int32_t{0}));
    Shape sizes = ct.shape();
    const int64_t piece = tiled ? x.shape()[ax] : 1;
    start[ax] = axis_index(axis_name) * static_cast<int32_t>(piece);
    sizes[ax] = piece;
    return std::vector<Array>{reshape(dynamic_slice(ct, start, sizes), x.shape())};
  });
}

Array psum_scatter(const Array& x, const AxisNames& axis_name, int scatter_dimension, bool tiled,
                   SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array y = psum_scatter_untaped(x, axis_name, scatter_dimension, tiled);
  if (!detail::differentiable(x)) return y;
  const int dim = scatter_dimension < 0 ? scatter_dimension + static_cast<int>(x.ndim()) : scatter_dimension;
  const int repeats = invariant_size(x, axis_name);
  return detail::on_tape(y, {x}, [axis_name, dim, tiled, repeats](const Array& ct) {
    return std::vector<Array>{times(all_gather(ct, axis_name, dim, tiled), repeats)};
  });
}

Array ppermute(const Array& x, const AxisNames& axis_name, const std::vector<std::pair<int, int>>& perm,
               SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array y = ppermute_untaped(x, axis_name, perm);
  if (!detail::differentiable(x)) return y;
  std::vector<std::pair<int, int>> back;
  for (const auto& [src, dst] : perm) back.push_back({dst, src});
  return detail::on_tape(y, {x}, [axis_name, back](const Array& ct) { return std::vector<Array>{ppermute(ct, axis_name, back)}; });
}

Array all_to_all(const Array& x, const AxisNames& axis_name, int split_axis, int concat_axis, bool tiled,
                 SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array y = all_to_all_untaped(x, axis_name, split_axis, concat_axis, tiled);
  if (!detail::differentiable(x)) return y;
  return detail::on_tape(y, {x}, [axis_name, split_axis, concat_axis, tiled](const Array& ct) {
    return std::vector<Array>{all_to_all(ct, axis_name, concat_axis, split_axis, tiled)};
  });
}

// The devices holding the extreme share its cotangent (ties equally, as in JAX).
static Array pextreme(const char* op, const Array& x, const AxisNames& axes, collectives::Reduction kind) {
  const Array y = reduce_over(op, x, axes, kind);
  if (!detail::differentiable(x)) return y;
  return detail::on_tape(y, {x}, [x, y, axes](const Array& ct) {
    const Array c = summed_contributions(ct, axes);
    const Array hit = astype(equal(x, y), x.dtype());
    // Ties counted over the devices that hold x's values: along an axis x does not vary over,
    // its devices hold one value, not as many ties.
    const std::vector<std::string> along = varying_among(x, axes);
    return std::vector<Array>{along.empty() ? c * hit : c * hit / psum(hit, AxisNames(along))};
  });
}

Array pvary(const Array& input, const AxisNames& axis_name) {
  const Mesh& mesh = bound_mesh("pvary", axis_name);
  const Array x = on_mesh(input, mesh);
  auto rt = x.impl()->runtime;
  std::lock_guard lock(rt->mutex());
  const Array y = detail::make_array(rt, detail::shareable_value(x), x.committed(), with(x.impl()->varying, axis_name.names));
  if (!detail::differentiable(x)) return y;
  // The identity on values; the cotangent, which now varies along the axes, is summed over them
  // where it reaches x (the backward pass's rule for values that do not vary: autodiff.cpp).
  return detail::on_tape(y, {x}, [](const Array& ct) { return std::vector<Array>{ct}; });
}

// Every member's cotangent flows back to the source.
Array pbroadcast(const Array& x, const AxisNames& axis_name, int source) {
  const Array y = pbroadcast_untaped(x, axis_name, source);
  if (!detail::differentiable(x)) return y;
  return detail::on_tape(y, {x}, [axis_name, source](const Array& ct) {
    const Array c = summed_contributions(ct, axis_name);
    return std::vector<Array>{where(equal(axis_index(axis_name), source), c, 0.0f)};
  });
}

}  // namespace meshvk

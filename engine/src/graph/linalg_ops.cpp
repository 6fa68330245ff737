// matmul, dot and einsum. Each device multiplies the pieces it holds: the result takes the
// batch and row sharding of the left operand and the column sharding of the right one, and the
// contracting dimension is gathered whole where it was split (until collectives replace that
// with a local product plus an all-reduce).
#include <algorithm>
#include <map>
#include <optional>
#include <mutex>
#include <set>

#include "collectives/transport.hpp"
#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/dtype_support.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/einsum.hpp"
#include "graph/manual_context.hpp"
#include "graph/mesh_groups.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "graph/saved_collectives.hpp"
#include "graph/tape.hpp"
#include "kernels/launch.hpp"
#include "kernels/matmul.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/shard_map.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

using detail::DeviceBuffer;
using detail::Recording;

namespace {

// A replicated B's pack is copied from the first device that made it from this many elements up;
// below, the copy's command costs about what packing it again does.
constexpr int64_t kMinSharedPack = 8192;

// Why a contraction communicates: its summed dimension is split, so each device holds a partial sum.
std::string contraction_rule(size_t dim, const std::vector<std::string>& axes) {
  std::string names;
  for (const auto& axis : axes) names += (names.empty() ? "'" : ", '") + axis + "'";
  return "dot_general contracts dim " + std::to_string(dim) + " sharded on " + names;
}

Array batched_matmul(const Array& a0, const Array& b0, const std::optional<Sharding>& out_sharding, bool apply_out,
                     bool ta = false, bool tb = false);

// a is [batch..., m, k] and b is [batch..., k, n] with equal batch shapes (or no batch on one
// side); the result is [batch..., m, n].
// out_sharding, when given, settles explicit mode's ambiguity; with apply_out the result is also
// laid out that way (einsum applies it after its own transposes instead).
// With ta (tb), a (b) holds its matrices transposed: the kernel reads them that way instead of
// a separate transpose pass.
Array batched_matmul(const Array& a0, const Array& b0, const std::optional<Sharding>& out_sharding,
                     bool apply_out, bool ta, bool tb) {
  detail::require_one_runtime("matmul", {&a0, &b0});
  const detail::OpScope op_scope("dot_general");  // profile hook: the line this prints
  detail::reject_uint32("matmul", a0);
  detail::reject_uint32("matmul", b0);
  // The products are summed in float32 for floating operands (bfloat16 and float16 too, as XLA
  // on CPU accumulates them) and the result rounded to the operands' promoted type.
  const DType promoted = detail::matmul_result_dtype(a0, b0);
  // int8 / uint8 products sum in int32 and wrap back (the same values modulo 256 as 8-bit sums).
  if (is_64bit(promoted)) {
    // int64 / float64: a broadcast product summed in the dtype (the kernel computes in float32 /
    // int32 words).
    const auto last_two = [](const Array& x) {
      std::vector<int> perm(x.ndim());
      for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int>(d);
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      return transpose(x, perm);
    };
    const Array a = ta ? last_two(astype(a0, promoted)) : astype(a0, promoted);
    const Array b = tb ? last_two(astype(b0, promoted)) : astype(b0, promoted);
    const Array r = detail::matmul64(a, b);
    return apply_out && out_sharding ? device_put(r, *out_sharding) : r;
  }
  const DType dtype = is_floating(promoted) ? DType::float32 : DType::int32;
  Array a = astype(a0, dtype), b = astype(b0, dtype);
  const size_t ra = a.ndim(), rb = b.ndim();
  const size_t am = ta ? ra - 1 : ra - 2, ak = ta ? ra - 2 : ra - 1;
  const size_t bk = tb ? rb - 1 : rb - 2, bn = tb ? rb - 2 : rb - 1;
  const int64_t m = a.shape()[am], n = b.shape()[bn];
  const size_t batch_rank = std::max(ra, rb) - 2;
  Shape shape(batch_rank == ra - 2 ? a.shape().begin() : b.shape().begin(),
              batch_rank == ra - 2 ? a.shape().end() - 2 : b.shape().end() - 2);
  shape.push_back(m);
  shape.push_back(n);
  checked_size(shape, "matmul");

  // Devices: the first committed operand's; layout as described at the top of the file.
  const Array& anchor = (!a.committed() && b.committed()) ? b : a;
  if (a.committed() && b.committed() && a.sharding().device_ids() != b.sharding().device_ids())
    throw Error("matmul: operands are committed to different devices (" + a.sharding().to_string() + " and " +
                b.sharding().to_string() + "); device_put one onto the other's devices");
  Sharding result = anchor.sharding();
  std::vector<std::string> contract_axes;
  if (const NamedSharding* ns = anchor.sharding().named()) {
    const Mesh& mesh = ns->mesh();
    auto entry = [&](const Array& x, size_t d) {
      const NamedSharding* s = x.sharding().named();
      return (s && s->mesh() == mesh) ? s->spec()[d] : SpecEntry();
    };
    std::vector<SpecEntry> spec(shape.size());
    std::set<std::string> used;
    auto take = [&](size_t out_dim, const SpecEntry& e) {
      for (const auto& axis : e.axes)
        if (used.count(axis)) {
          // Explicit mode: the result's type would name the axis twice (JAX raises too); in
          // automatic mode the second dimension is gathered.
          if (mesh.axis_type(axis) == AxisType::Explicit && !out_sharding)
            throw Error("dot_general: the result of " + type_of(a) + " and " + type_of(b) + " would be sharded over '" +
                        axis + "' along two dimensions; pass out_sharding to matmul/einsum, or reshard an operand");
          return;
        }
      spec[out_dim] = e;
      used.insert(e.axes.begin(), e.axes.end());
    };
    for (size_t d = 0; d < batch_rank; ++d) take(d, ra - 2 == batch_rank ? entry(a, d) : entry(b, d));
    take(batch_rank, entry(a, am));
    take(batch_rank + 1, entry(b, bn));
    result = NamedSharding(mesh, PartitionSpec(spec).trimmed());
    // Explicit mode: k split the same way on both sides could give a replicated result (all-reduce)
    // or a sharded one (reduce-scatter); the caller has to say which.
    const SpecEntry ka = entry(a, ak), kb = entry(b, bk);
    bool explicit_k = false;
    for (const auto& axis : ka.axes) explicit_k = explicit_k || mesh.axis_type(axis) == AxisType::Explicit;
    if (explicit_k && ka == kb && !out_sharding)
      throw Error("dot_general: the contracting dimension is sharded over " + ka.to_string() + " on both operands (" +
                  type_of(a) + " and " + type_of(b) +
                  "), so the result could be replicated (all-reduce) or sharded (reduce-scatter); pass out_sharding "
                  "to matmul/einsum, or reshard an operand");
    // A contracting dimension split over mesh axes stays split: each device multiplies its slice
    // of k and the partial products are all-reduced (the other operand is sliced to match).
    for (const SpecEntry& k_entry : {entry(a, ak), entry(b, bk)}) {
      if (k_entry.is_none() || !contract_axes.empty()) continue;
      bool clash = false;
      for (const auto& axis : k_entry.axes) clash = clash || used.count(axis);
      if (!clash) contract_axes = k_entry.axes;
    }
    std::vector<SpecEntry> sa(ra), sb(rb);
    if (!contract_axes.empty()) {
      sa[ak] = SpecEntry(contract_axes);
      sb[bk] = SpecEntry(contract_axes);
    }
    for (size_t d = 0; d + 2 < ra; ++d) sa[d] = spec[d + batch_rank - (ra - 2)];
    for (size_t d = 0; d + 2 < rb; ++d) sb[d] = spec[d + batch_rank - (rb - 2)];
    sa[am] = spec[batch_rank];
    sb[bn] = spec[batch_rank + 1];
    const Sharding want_a = NamedSharding(mesh, PartitionSpec(sa).trimmed()), want_b = NamedSharding(mesh, PartitionSpec(sb).trimmed());
    const exec::RuleScope rule([&] { return "dot_general: operands laid out for the result's " + result.named()->spec().to_string(); });
    if (!a.sharding().is_equivalent_to(want_a, ra)) a = device_put(a, want_a);
    if (!b.sharding().is_equivalent_to(want_b, rb)) b = device_put(b, want_b);
  } else {
    const exec::RuleScope rule([] { return std::string("dot_general: operands moved onto the result's devices"); });
    if (!(a.sharding() == result)) a = device_put(a, result);
    if (!(b.sharding() == result)) b = device_put(b, result);
  }

  auto rt = a.impl()->runtime;
  std::lock_guard lock(rt->mutex());
  const exec::ShardedValue& va = detail::materialized(a);
  const exec::ShardedValue& vb = detail::materialized(b);
  const auto map_a = a.sharding().devices_indices_map(a.shape());
  const auto map_b = b.sharding().devices_indices_map(b.shape());
  exec::ShardedValue out{shape, dtype, result, {}};
  const auto map_out = result.devices_indices_map(shape);
  // Under a scan's forward pass the product is saved for its backward pass, whose run of the
  // body's forward pass gets it back instead of multiplying again (graph/saved_collectives.hpp).
  std::string saved_key;
  if (detail::saving_collectives()) {
    saved_key = detail::product_key(va, vb, ta, tb, out);
    if (std::optional<collectives::Buffers> saved = detail::saved_result(saved_key, out)) {
      out.shards = *saved;
      saved_key.clear();
    }
  }
  // Devices of one VkDevice that multiply by the same piece of a B whose pieces are replicas (a
  // replicated weight in data parallelism): the first packs B for the kernel, the others copy its
  // pack (a copy moves the bytes several times faster than the pack kernel on lavapipe) instead of
  // packing their own. Each still has a pack of its own, and counts the whole product.
  struct SharedPack {
    std::shared_ptr<DeviceBuffer> packed;
    kernels::MatmulShape shape;
  };
  std::map<std::pair<int, std::vector<std::pair<int64_t, int64_t>>>, SharedPack> b_packs;
  const bool share_b = !detail::replicas_may_differ(b);
  auto same_b = [](const kernels::MatmulShape& x, const kernels::MatmulShape& y) {
    return x.k == y.k && x.n == y.n && x.trans_b == y.trans_b && x.b_batch_stride == y.b_batch_stride &&
           x.batch == y.batch && x.dtype == y.dtype;
  };
  for (size_t i = 0; i < map_out.size() && out.shards.size() < map_out.size(); ++i) {
    const Index& piece = map_out[i].index;
    const Index& pa = map_a[i].index;
    const Index& pb = map_b[i].index;
    kernels::MatmulShape ms;
    ms.m = pa[am].size();
    ms.k = pa[ak].size();
    ms.n = pb[bn].size();
    ms.trans_a = ta;
    ms.trans_b = tb;
    ms.dtype = dtype;
    ms.batch = 1;
    for (size_t d = 0; d < batch_rank; ++d) ms.batch *= piece[d].size();
    ms.a_batch_stride = ra > 2 ? ms.m * ms.k : 0;
    ms.b_batch_stride = rb > 2 ? ms.k * ms.n : 0;
    auto buffer = rt->allocate(map_out[i].device, static_cast<uint64_t>(ms.batch * ms.m * ms.n) * dtype_size(dtype));
    Recording rec = rt->begin(map_out[i].device);
    const DeviceBuffer& ba = *va.shards[i];
    const DeviceBuffer& bb = *vb.shards[i];
    rec.wait_for(ba.ready());
    rec.wait_for(bb.ready());
    SharedPack* shared = nullptr;
    if (share_b && rt->is_local(map_out[i].device) && ms.k * ms.n >= kMinSharedPack) {
      std::vector<std::pair<int64_t, int64_t>> box;
      for (const Slice& sl : pb) box.emplace_back(sl.start, sl.stop);
      shared = &b_packs[{rt->adapter_of(map_out[i].device), std::move(box)}];
      if (shared->packed && !same_b(shared->shape, ms)) shared = nullptr;
    }
    std::shared_ptr<DeviceBuffer> packed, copied_from;
    if (shared && shared->packed) {
      copied_from = shared->packed;
      packed = rt->allocate(map_out[i].device, copied_from->bytes());
      rec.wait_for_replica(copied_from->ready());
      const VkBufferCopy whole{copied_from->offset(), packed->offset(), copied_from->bytes()};
      collectives::transport_between(*rt, copied_from->device(), map_out[i].device)
          .copy_regions(*rt, rec, *copied_from, *packed, std::span<const VkBufferCopy>(&whole, 1), "replica pack");
      kernels::barrier(rec.cb);
    } else if (shared) {
      packed = kernels::record_pack_b(*rt, rec, ms, bb);
    }
    kernels::record_matmul(*rt, rec, ms, ba, bb, *buffer, packed);
    const detail::Fence f = rt->submit(std::move(rec));
    if (copied_from) copied_from->used_by(f);
    if (packed) packed->written_by(f);
    if (shared && !shared->packed && packed) *shared = {packed, ms};
    const_cast<DeviceBuffer&>(ba).used_by(f);
    const_cast<DeviceBuffer&>(bb).used_by(f);
    buffer->written_by(f);
    out.shards.push_back(std::move(buffer));
  }
  const bool handed_back = detail::saving_collectives() && saved_key.empty();
  if (!saved_key.empty()) {
    // With k split, each device's product is a summand (replicas in name only): never shared.
    // Committed as the result below is (an uncommitted pair's product stays uncommitted, so a
    // scan's backward pass that reads it back does not commit the gradient).
    const Array product = detail::make_array(rt, out, a.committed() || b.committed(), {});
    product.impl()->summands = !contract_axes.empty();
    detail::record_result(saved_key, product);
  }
  const Shape la = a.sharding().shard_shape(a.shape()), lb = b.sharding().shard_shape(b.shape());
  if (exec::logging() && !handed_back)  // the text is built only while a trace listens
    exec::log_op("dot_general: local " + std::string(dtype_name(dtype)) + shape_to_string(la) +
                 " x " + shape_to_string(lb) + " -> " + shape_to_string(result.shard_shape(shape)) +
                 " on each of " + std::to_string(map_out.size()) + " devices");
  if (!contract_axes.empty()) {
    const exec::RuleScope rule([&] { return contraction_rule(ak, contract_axes); });
    const Mesh& mesh = result.named()->mesh();
    // Wanted sharded over the contracted axes along a result dimension: a reduce-scatter gives each
    // device its piece of the sum directly, instead of an all-reduce and a local slice.
    int scatter_dim = -1;
    if (out_sharding && out_sharding->named() && out_sharding->named()->mesh().device_ids() == mesh.device_ids()) {
      const PartitionSpec& want = out_sharding->named()->spec();
      const Shape local = result.shard_shape(shape);
      int group = 1;
      for (const auto& axis : contract_axes) group *= mesh.axis_size(axis);
      for (size_t d = 0; d < shape.size() && scatter_dim < 0; ++d)
        if (want[d].axes == contract_axes && result.named()->spec()[d].is_none() && local[d] % group == 0)
          scatter_dim = static_cast<int>(d);
    }
    if (scatter_dim >= 0) {
      out.shards = detail::reduce_scatter_over(rt, mesh, contract_axes, out.shards, result.shard_shape(shape), dtype,
                                               scatter_dim);
      std::vector<SpecEntry> spec = result.named()->spec().entries();
      spec.resize(shape.size());
      spec[scatter_dim] = SpecEntry(contract_axes);
      result = NamedSharding(mesh, PartitionSpec(spec).trimmed());
      out.sharding = result;
      contract_axes.clear();
    }
  }
  // With k split, each device's product is a summand: the result stays partial over those axes
  // until a consumer needs it summed (graph/partial_sum.hpp), so sums of products (dQ + dK + dV's
  // input gradients) are added first and all-reduced once. The sum is what later lines read.
  if (exec::logging() && !out.shards.empty() && contract_axes.empty())
    exec::name_result(out.shards.front().get(), "dot_general");
  std::optional<exec::RuleScope> partial_rule;  // recorded with the partial value, for its sum
  if (!contract_axes.empty()) partial_rule.emplace([&] { return contraction_rule(ak, contract_axes); });
  Array r = detail::make_partial(
      detail::make_array(rt, std::move(out), a.committed() || b.committed(), detail::varying_of({&a, &b})),
      contract_axes, "dot_general");
  if (detail::taping() && dtype == DType::float32) {
    // d(a @ b) = ct @ b^T for a and a^T @ ct for b, summed over batch dimensions broadcasting added.
    // C = op(A) op(B): dA = ct op(B)^T (or its transpose when A is held transposed), and alike
    // for B; the transposes are the kernel's flags, not copies.
    r = detail::on_tape(r, {a, b}, [a, b, ta, tb](const Array& ct) {
      Array da, db;
      if (detail::wants(0))
        da = ta ? batched_matmul(b, ct, std::nullopt, true, tb, true) : batched_matmul(ct, b, std::nullopt, true, false, !tb);
      if (detail::wants(1))
        db = tb ? batched_matmul(ct, a, std::nullopt, true, true, ta) : batched_matmul(a, ct, std::nullopt, true, !ta, false);
      return std::vector<Array>{da.valid() ? detail::unbroadcast(da, a.shape()) : da,
                                db.valid() ? detail::unbroadcast(db, b.shape()) : db};
    });
  }
  if (promoted != dtype) r = astype(r, promoted);
  const exec::RuleScope rule([] { return std::string("matmul's out_sharding"); });
  return out_sharding && apply_out ? device_put(r, *out_sharding) : r;
}

}  // namespace

Array matmul(const Array& a, const Array& b, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return matmul(a, b, std::nullopt);
}

Array matmul(const Array& a, const Array& b, const std::optional<Sharding>& out_sharding, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const detail::OpScope op_scope("dot_general");  // profile hook: its broadcasts and reshapes too
  if (a.ndim() == 0 || b.ndim() == 0)
    throw Error("matmul: operands must not be scalars (shapes " + shape_to_string(a.shape()) + " and " +
                shape_to_string(b.shape()) + "); use multiply for scalars");
  // numpy: a 1-D operand gains a unit dimension (in front for a, behind for b), dropped after.
  const Array a2 = a.ndim() == 1 ? reshape(a, {1, a.shape()[0]}) : a;
  const Array b2 = b.ndim() == 1 ? reshape(b, {b.shape()[0], 1}) : b;
  const int64_t ka = a2.shape().back(), kb = b2.shape()[b2.ndim() - 2];
  if (ka != kb)
    throw Error("matmul: contracting dimensions differ: " + shape_to_string(a.shape()) + " @ " + shape_to_string(b.shape()) +
                " (" + std::to_string(ka) + " vs " + std::to_string(kb) + "); a's last dimension must equal b's second to last");
  // Batch dimensions broadcast as numpy does.
  const Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "matmul");
  Array x = a2, y = b2;
  if (!ba.empty() && ba != batch) {
    Shape s = batch;
    s.insert(s.end(), a2.shape().end() - 2, a2.shape().end());
    x = broadcast_to(a2, s);
  }
  if (!bb.empty() && bb != batch) {
    Shape s = batch;
    s.insert(s.end(), b2.shape().end() - 2, b2.shape().end());
    y = broadcast_to(b2, s);
  }
  if (!ba.empty() && !bb.empty() && x.ndim() != y.ndim()) {
    // Equal batch shapes after broadcasting; both carry them.
  }
  const bool squeeze = a.ndim() == 1 || b.ndim() == 1;
  Array r = batched_matmul(x, y, squeeze ? std::nullopt : out_sharding, true);
  Shape out = r.shape();
  if (a.ndim() == 1) out.erase(out.end() - 2);
  if (b.ndim() == 1) out.erase(out.end() - 1);
  r = out == r.shape() ? r : reshape(r, out);
  const exec::RuleScope rule([] { return std::string("matmul's out_sharding"); });
  return squeeze && out_sharding ? device_put(r, *out_sharding) : r;
}

namespace detail {

// JAX's promotion of the two (int8 @ int8 is int8); bool @ bool is bool, as jnp.matmul and numpy
// give it (an or of ands: the int32 count of true products, then whether it is nonzero).
DType matmul_result_dtype(const Array& a, const Array& b) {
  if (a.dtype() == DType::bool_ && b.dtype() == DType::bool_) return DType::bool_;
  return ew::promote({{a.dtype(), false}, {b.dtype(), false}});
}

std::vector<Array> for_preferred_type(const char* op, const std::vector<Array>& operands, DType preferred) {
  check_dtype(op, preferred);
  bool any_float = false;
  for (const Array& x : operands) {
    if (!x.valid()) throw Error(std::string(op) + ": an operand is an empty meshvk::Array");
    reject_uint32(op, x);
    any_float = any_float || is_floating(x.dtype());
  }
  if (any_float ? !is_floating(preferred)
                : !(is_floating(preferred) || preferred == DType::int32 || preferred == DType::int64))
    throw Error(std::string(op) + ": preferred_element_type " + std::string(dtype_name(preferred)) + " for " +
                (any_float ? "floating" : "integer") + " operands; " +
                (any_float ? "use DType::float32, DType::float64, DType::bfloat16 or DType::float16 (astype the operands to compute with integers)"
                           : "use DType::int32, DType::int64 or a floating dtype"));
  // Integer operands (int8 ones too) sum in int32 (or int64), not wrapped to their own type
  // first; float64 is summed in float64, the other floats in float32.
  const DType sum_in = preferred == DType::float64 || preferred == DType::int64 ? preferred
                       : is_floating(preferred)                                ? DType::float32
                                                                               : DType::int32;
  std::vector<Array> out;
  for (const Array& x : operands) out.push_back(astype(x, sum_in));
  return out;
}

}  // namespace detail

Array matmul(const Array& a, const Array& b, DType preferred_element_type, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const auto ops = detail::for_preferred_type("matmul", {a, b}, preferred_element_type);
  return astype(matmul(ops[0], ops[1]), preferred_element_type);
}

Array dot(const Array& a, const Array& b, DType preferred_element_type, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const auto ops = detail::for_preferred_type("dot", {a, b}, preferred_element_type);
  return astype(dot(ops[0], ops[1]), preferred_element_type);
}

Array dot(const Array& a, const Array& b, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  if (a.ndim() == 0 || b.ndim() == 0) return multiply(a, b);
  if (a.ndim() <= 2 && b.ndim() <= 2) return matmul(a, b);
  throw Error("dot: operands of rank above 2 (" + shape_to_string(a.shape()) + ", " + shape_to_string(b.shape()) +
              ") are not supported; use matmul or einsum");
}

namespace {
int position(const std::string& labels, char c) { return static_cast<int>(labels.find(c)); }
}  // namespace

namespace detail {

// Labels are already checked by the parser (einsum.cpp): one per dimension, none repeated within
// an operand, every output label in an operand.
Array einsum_pair(const std::string& subscripts, std::string la, std::string lb, const std::string& output,
                  const Array& a0, const Array& b0, const std::optional<Sharding>& out_sharding) {
  const detail::OpScope op_scope("dot_general");  // profile hook: its transposes and reshapes too
  struct {
    std::string inputs[2];
    const std::string& output;
  } const s{{la, lb}, output};
  std::map<char, int64_t> size;
  auto record = [&](const std::string& labels, const Array& x) {
    for (size_t d = 0; d < labels.size(); ++d) {
      const auto [it, fresh] = size.emplace(labels[d], x.shape()[d]);
      if (!fresh && it->second != x.shape()[d])
        throw Error("einsum: label '" + std::string(1, labels[d]) + "' has size " + std::to_string(it->second) +
                    " in one operand and " + std::to_string(x.shape()[d]) + " in the other (" + subscripts + ")");
    }
  };
  record(la, a0);
  record(lb, b0);
  // Labels only one operand has and the output lacks are summed away first.
  auto sum_lone = [&](const Array& x, std::string& labels, const std::string& other) {
    std::vector<int> axes;
    std::string kept;
    for (size_t d = 0; d < labels.size(); ++d) {
      if (other.find(labels[d]) == std::string::npos && s.output.find(labels[d]) == std::string::npos)
        axes.push_back(static_cast<int>(d));
      else
        kept += labels[d];
    }
    labels = kept;
    return axes.empty() ? x : sum(x, axes);
  };
  Array a = sum_lone(a0, la, s.inputs[1]);
  Array b = sum_lone(b0, lb, s.inputs[0]);
  std::string batch, contracted, free_a, free_b;
  for (const char c : s.output) {
    const bool in_a = la.find(c) != std::string::npos, in_b = lb.find(c) != std::string::npos;
    if (in_a && in_b) batch += c;
    else if (in_a) free_a += c;
    else free_b += c;
  }
  for (const char c : la)
    if (lb.find(c) != std::string::npos && s.output.find(c) == std::string::npos) contracted += c;
  // Within a group of labels that merge into one matrix dimension, a label split over mesh axes
  // goes first: the merged dimension is then split as it was and each device multiplies its own
  // piece. Later in the group, the reshape that merges them gathers the operand whole on every
  // device (a [batch, seq, d] activation split by seq times a weight). The order of free labels
  // changes no bit; a split contracting label was summed in pieces and all-reduced anyway.
  const auto split_first =
      [](std::string& group,
         const std::vector<std::pair<const Array*, const std::string*>>& sources) {
        const auto is_split = [&](char c) {
          for (const auto& [x, labels] : sources) {
            const NamedSharding* n = x->sharding().named();
            const size_t d = labels->find(c);
            if (n && d != std::string::npos && !n->spec()[d].is_none()) return true;
          }
          return false;
        };
        std::stable_partition(group.begin(), group.end(), is_split);
      };
  split_first(free_a, {{&a, &la}});
  split_first(free_b, {{&b, &lb}});
  split_first(contracted, {{&a, &la}, {&b, &lb}});
  // a as [batch..., free_a..., contracted...] and b as [batch..., contracted..., free_b...].
  auto arrange = [&](const Array& x, const std::string& labels, const std::string& order) {
    std::vector<int> perm;
    for (const char c : order) perm.push_back(position(labels, c));
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int>(i);
    return identity ? x : transpose(x, perm);
  };
  // A two-dimensional group swap (e.g. 'oi' needed as 'io') is left to the kernel's flags.
  const bool ta = free_a.size() == 1 && contracted.size() == 1 && la == batch + contracted + free_a;
  const bool tb = free_b.size() == 1 && contracted.size() == 1 && lb == batch + free_b + contracted;
  a = ta ? a : arrange(a, la, batch + free_a + contracted);
  b = tb ? b : arrange(b, lb, batch + contracted + free_b);
  auto product = [&](const std::string& labels) {
    int64_t p = 1;
    for (const char c : labels) p *= size[c];
    return p;
  };
  Shape batch_shape;
  for (const char c : batch) batch_shape.push_back(size[c]);
  Shape sa = batch_shape, sb = batch_shape;
  sa.push_back(product(ta ? contracted : free_a));
  sa.push_back(product(ta ? free_a : contracted));
  sb.push_back(product(tb ? free_b : contracted));
  sb.push_back(product(tb ? contracted : free_b));
  if (a.shape() != sa) a = reshape(a, sa);
  if (b.shape() != sb) b = reshape(b, sb);
  Array r = batched_matmul(a, b, out_sharding, false, ta, tb);
  Shape full = batch_shape;
  for (const char c : free_a) full.push_back(size[c]);
  for (const char c : free_b) full.push_back(size[c]);
  if (r.shape() != full) r = reshape(r, full);
  const std::string have = batch + free_a + free_b;
  std::vector<int> perm;
  for (const char c : s.output) perm.push_back(position(have, c));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int>(i);
  r = identity ? r : transpose(r, perm);
  const exec::RuleScope rule([] { return std::string("dot's out_sharding"); });
  return out_sharding && !(r.sharding() == *out_sharding) ? device_put(r, *out_sharding) : r;
}

}  // namespace detail

}  // namespace meshvk

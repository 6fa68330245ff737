// Partial values (partial_sum.hpp): making them, and taking their sums where they are needed.
#include "graph/partial_sum.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "exec/program_log.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/manual_context.hpp"
#include "graph/mesh_groups.hpp"
#include "graph/op_scope.hpp"
#include "graph/saved_collectives.hpp"
#include "kernels/strided_copy.hpp"
#include "meshvk/error.hpp"
#include "meshvk/shard_map.hpp"

namespace meshvk::detail {

namespace {

// Values resolved together are packed into all-reduces of at most this many bytes per device
// (PyTorch DDP's default bucket; XLA's GPU combiner threshold is of the same order).
constexpr uint64_t kCombineThresholdBytes = 25ull << 20;

const Mesh& mesh_of(const Array& summands) {
  const NamedSharding* n = summands.sharding().named();
  if (!n) throw Error("internal: a partial value's summands are not laid out on a mesh");
  return n->mesh();
}

uint64_t local_count(const Array& x) { return static_cast<uint64_t>(shape_size(x.sharding().shard_shape(x.shape()))); }

}  // namespace

bool shards_over_any(const Sharding& s, const std::vector<std::string>& axes) {
  const NamedSharding* n = s.named();
  if (!n) return false;
  for (const auto& axis : n->spec().axes())
    if (std::find(axes.begin(), axes.end(), axis) != axes.end()) return true;
  return false;
}

bool is_partial(const Array& x) { return x.valid() && x.impl()->partial != nullptr && x.impl()->partial->scatter_dim < 0; }

bool is_pending_scatter(const Array& x) {
  return x.valid() && x.impl()->partial != nullptr && x.impl()->partial->scatter_dim >= 0;
}


const std::vector<std::string>& partial_axes(const Array& x) {
  static const std::vector<std::string> none;
  return is_partial(x) ? x.impl()->partial->axes : none;
}

Array summands_of(const Array& x) { return is_partial(x) ? x.impl()->partial->summands : x; }

const Array& addend_of(const Array& x) {
  static const Array none;
  return is_partial(x) ? x.impl()->partial->addend : none;
}

Array make_partial(const Array& summands, std::vector<std::string> axes, const std::string& op,
                   const Array* made_from, const Array& addend) {
  if (axes.empty()) return addend.valid() ? ew::elementwise("add", kernels::EwOp::add, {summands, addend}, summands.dtype(), summands.dtype()) : summands;
  // Summands that are themselves a sum plus an addend: the addend would be summed along `axes`
  // too, so that sum is taken first.
  if (addend_of(summands).valid()) materialized(summands);
  const Array& base = summands_of(summands);
  for (const auto& axis : partial_axes(summands))
    if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
  const Mesh& mesh = mesh_of(base);
  if (shards_over_any(base.sharding(), axes))
    throw Error("internal: a partial value's summands are split over one of its partial axes " + axes_text(axes));
  // One order per set of axes, so values partial over the same axes sum alike.
  std::sort(axes.begin(), axes.end(),
            [&](const std::string& a, const std::string& b) { return mesh.axis_position(a) < mesh.axis_position(b); });
  const ArrayImpl& s = *base.impl();
  s.summands = true;
  auto impl = std::make_shared<ArrayImpl>(
      ArrayImpl{s.runtime, exec::ShardedValue{s.value.shape, s.value.dtype, s.value.sharding, {}}, s.committed, nullptr,
                s.varying});
  // The rule in force (the contraction's); a value made from a partial one (a sum of two, a
  // reshape) keeps that one's: its sum is the contraction's, whatever op reads it.
  std::string rule = exec::current_rule();
  exec::CallSite site = exec::current_call_site();
  const Array* from = is_partial(summands) ? &summands : made_from && is_partial(*made_from) ? made_from : nullptr;
  if (from && (!from->impl()->partial->rule.empty() || rule.empty())) {
    rule = from->impl()->partial->rule;
    site = from->impl()->partial->site;
  }
  impl->partial = std::make_shared<const PartialSum>(PartialSum{std::move(axes), base, op, std::move(rule), site, addend});
  return Array(std::shared_ptr<const ArrayImpl>(std::move(impl)));
}

namespace {

// The sum just taken (impl.value.shards, laid out as the summands) plus the addend, laid out as
// the value.
void add_addend(RuntimeState& rt, const ArrayImpl& impl, const Array& addend) {
  if (!addend.valid()) return;
  const Array sum = make_array(impl.runtime, impl.value, impl.committed, impl.varying);
  exec::ShardedValue v = materialized(ew::elementwise("add", kernels::EwOp::add, {sum, addend}, impl.value.dtype, impl.value.dtype));
  if (!v.sharding.is_equivalent_to(impl.value.sharding, v.shape.size())) v = exec::reshard(rt, v, impl.value.sharding);
  impl.value.shards = std::move(v.shards);
}

}  // namespace

const exec::ShardedValue& resolve_partial(const Array& x) {
  const ArrayImpl& impl = *x.impl();
  RuntimeState& rt = *impl.runtime;
  std::lock_guard lock(rt.mutex());
  if (!impl.partial) return impl.value;
  const std::shared_ptr<const PartialSum> p = impl.partial;
  const exec::ShardedValue& s = materialized(p->summands);
  const uint64_t count = local_count(p->summands);
  const exec::CallSiteScope site(p->site.known() ? p->site : exec::current_call_site());
  const exec::RuleOverride rule(p->rule.empty() ? exec::current_rule() : p->rule);
  if (p->scatter_dim >= 0) {
    impl.value.shards = reduce_scatter_over(impl.runtime, mesh_of(p->summands), p->axes, s.shards,
                                            s.sharding.shard_shape(s.shape), s.dtype, p->scatter_dim);
    impl.partial = nullptr;
    return impl.value;
  }
  // Nothing to sum in an empty value: its (empty) pieces are already the value.
  if (count == 0) {
    impl.value.shards = s.shards;
  } else {
    // Inside a scan body whose backward pass runs it again: recorded, or handed back
    // (saved_collectives.hpp).
    const exec::ShardedValue summed{s.shape, s.dtype, s.sharding, {}};
    const std::string key = saving_collectives() ? collective_key("all-reduce " + axes_text(p->axes), s, summed) : "";
    if (std::optional<collectives::Buffers> saved = key.empty() ? std::nullopt : saved_result(key, summed)) {
      impl.value.shards = std::move(*saved);
    } else {
      impl.value.shards = all_reduce_over(rt, mesh_of(p->summands), p->axes, s.shards, count, s.dtype,
                                          collectives::Reduction::sum);
      if (!key.empty())
        record_result(key, make_array(impl.runtime, exec::ShardedValue{s.shape, s.dtype, s.sharding, impl.value.shards},
                                      impl.committed, impl.varying));
    }
  }
  if (exec::logging() && !p->op.empty() && !impl.value.shards.empty() && impl.value.shards.front())
    exec::name_result(impl.value.shards.front().get(), p->op);  // later lines read it as the op's result
  impl.partial = nullptr;
  add_addend(rt, impl, p->addend);
  return impl.value;
}

namespace {

// One reduce-scatter for `group` (deferred scatters over the same axes of one mesh, of one
// dtype): each device packs, for each member of its group in rank order, that member's piece of
// every value (the member's rows along the value's scatter dimension, a strided box), the packed
// buffers are reduce-scattered, and each value's piece is copied out of what each device got.
void resolve_scatters_packed(RuntimeState& rt, const std::vector<Array>& group) {
  const PartialSum& lead = *group.front().impl()->partial;
  const Array first = lead.summands;
  const Mesh& mesh = mesh_of(first);
  const std::vector<std::string> axes = lead.axes;
  const DType dtype = first.dtype();
  const uint32_t element = static_cast<uint32_t>(dtype_size(dtype));
  int64_t members = 1;
  for (const auto& a : axes) members *= mesh.axis_size(a);
  struct Part {
    const exec::ShardedValue* summands;
    int64_t outer, rows, inner, offset;  // the piece: outer x rows x inner elements at `offset` in a chunk
  };
  std::vector<Part> parts;
  int64_t chunk = 0;
  for (const Array& x : group) {
    const PartialSum& p = *x.impl()->partial;
    const exec::ShardedValue& v = materialized(p.summands);
    const Shape local = v.sharding.shard_shape(v.shape);
    const size_t d = static_cast<size_t>(p.scatter_dim);
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < d; ++k) outer *= local[k];
    for (size_t k = d + 1; k < local.size(); ++k) inner *= local[k];
    parts.push_back({&v, outer, local[d] / members, inner, chunk});
    chunk += outer * (local[d] / members) * inner;
  }
  if (exec::logging())
    exec::log_op("reduce-scatter combiner: " + std::to_string(group.size()) + " values over " + axes_text(axes) +
                 " packed into one buffer of " + bytes_text(static_cast<uint64_t>(chunk * members) * element) +
                 " per device");
  collectives::Buffers packed;
  for (int p = 0; p < mesh.size(); ++p) {
    const int device = mesh.device_ids()[static_cast<size_t>(p)];
    packed.push_back(rt.allocate(device, static_cast<uint64_t>(chunk * members) * element));
    for (const Part& part : parts)
      for (int64_t r = 0; r < members; ++r)
        copy_box(rt, device, *part.summands->shards[static_cast<size_t>(p)], *packed.back(),
                 {{part.outer, part.rows * part.inner},
                  {members * part.rows * part.inner, 1},
                  {part.rows * part.inner, 1},
                  r * part.rows * part.inner,
                  r * chunk + part.offset,
                  element});
  }
  const exec::CallSiteScope site(lead.site.known() ? lead.site : exec::current_call_site());
  const exec::RuleOverride rule((lead.rule.empty() ? exec::current_rule() : lead.rule) +
                                " (and " + std::to_string(group.size() - 1) + " more values, combined)");
  const collectives::Buffers scattered = reduce_scatter_over(group.front().impl()->runtime, mesh, axes, packed, Shape{chunk * members},
                                                             dtype, 0);
  for (size_t i = 0; i < group.size(); ++i) {
    const ArrayImpl& impl = *group[i].impl();
    const Part& part = parts[i];
    const int64_t n = part.outer * part.rows * part.inner;
    std::vector<std::shared_ptr<DeviceBuffer>> shards;
    for (int p = 0; p < mesh.size(); ++p) {
      const int device = mesh.device_ids()[static_cast<size_t>(p)];
      shards.push_back(rt.allocate(device, static_cast<uint64_t>(n) * element));
      copy_box(rt, device, *scattered[static_cast<size_t>(p)], *shards.back(), {{n}, {1}, {1}, part.offset, 0, element});
    }
    impl.value.shards = std::move(shards);
    impl.partial = nullptr;
  }
}

// One all-reduce for `group` (values partial over the same axes, of one dtype): each device
// packs its summands into one buffer, the buffers are all-reduced, and each value's part is
// copied out again.
void resolve_packed(RuntimeState& rt, const std::vector<Array>& group) {
  const Array first = group.front().impl()->partial->summands;  // a copy: the loop below clears it
  const Mesh& mesh = mesh_of(first);
  const std::vector<std::string> axes = group.front().impl()->partial->axes;
  const DType dtype = first.dtype();
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  std::vector<const exec::ShardedValue*> values;
  for (const Array& x : group) {
    offsets.push_back(total);
    total += local_count(x);
    values.push_back(&materialized(x.impl()->partial->summands));
  }
  if (exec::logging())
    exec::log_op("all-reduce combiner: " + std::to_string(group.size()) + " values partial over " + axes_text(axes) +
                 " packed into one buffer of " + bytes_text(total * dtype_size(dtype)) + " per device");
  const uint32_t element = static_cast<uint32_t>(dtype_size(dtype));
  collectives::Buffers packed;
  for (int p = 0; p < mesh.size(); ++p) {
    const int device = mesh.device_ids()[static_cast<size_t>(p)];
    packed.push_back(rt.allocate(device, total * element));
    std::vector<kernels::CopyRun> runs;
    for (size_t i = 0; i < group.size(); ++i)
      runs.push_back({values[i]->shards[static_cast<size_t>(p)].get(), packed.back().get(), 0, offsets[i],
                      local_count(group[i])});
    copy_runs(rt, device, runs, element);
  }
  // Named after the first value's rule and line, with how many more it carries.
  const PartialSum& lead = *group.front().impl()->partial;
  const exec::CallSiteScope site(lead.site.known() ? lead.site : exec::current_call_site());
  const exec::RuleOverride rule(
      (lead.rule.empty() ? exec::current_rule() : lead.rule) +
      (group.size() > 1 ? " (and " + std::to_string(group.size() - 1) + " more values, combined)" : ""));
  const collectives::Buffers summed = all_reduce_over(rt, mesh, axes, packed, total, dtype, collectives::Reduction::sum);
  // Each device copies every value's part out in one submission.
  std::vector<std::vector<std::shared_ptr<DeviceBuffer>>> shards(group.size());
  for (int p = 0; p < mesh.size(); ++p) {
    const int device = mesh.device_ids()[static_cast<size_t>(p)];
    std::vector<kernels::CopyRun> runs;
    for (size_t i = 0; i < group.size(); ++i) {
      const uint64_t n = local_count(group[i]);
      shards[i].push_back(rt.allocate(device, n * element));
      runs.push_back({summed[static_cast<size_t>(p)].get(), shards[i].back().get(), offsets[i], 0, n});
    }
    copy_runs(rt, device, runs, element);
  }
  for (size_t i = 0; i < group.size(); ++i) {
    const ArrayImpl& impl = *group[i].impl();
    impl.value.shards = std::move(shards[i]);
    const Array addend = impl.partial->addend;
    impl.partial = nullptr;
    add_addend(rt, impl, addend);
  }
}

}  // namespace

namespace {

// The values of one group in buckets of up to the threshold, in the values' order (a larger value
// is a bucket alone): `packed` takes a bucket of several, a bucket of one is summed on its own.
template <class Bytes, class Packed>
void in_buckets(const std::vector<Array>& group, Bytes bytes_of, Packed packed) {
  std::vector<Array> bucket;
  uint64_t bytes = 0;
  const auto flush = [&] {
    if (bucket.size() == 1) materialized(bucket.front());
    if (bucket.size() > 1) packed(bucket);
    bucket.clear();
    bytes = 0;
  };
  for (const Array& x : group) {
    const uint64_t b = bytes_of(x);
    if (!bucket.empty() && bytes + b > kCombineThresholdBytes) flush();
    bucket.push_back(x);
    bytes += b;
  }
  flush();
}

}  // namespace

void resolve_together(const std::vector<Array>& values) {
  // Values partial (or scattered) over the same axes of one mesh, of one dtype, each once.
  std::vector<std::vector<Array>> groups, scatters;
  const auto add = [](std::vector<std::vector<Array>>& into, const Array& x) {
    const PartialSum& p = *x.impl()->partial;
    auto same = [&](const std::vector<Array>& g) {
      const PartialSum& q = *g.front().impl()->partial;
      return q.axes == p.axes && q.summands.dtype() == p.summands.dtype() && mesh_of(q.summands) == mesh_of(p.summands) &&
             std::none_of(g.begin(), g.end(), [&](const Array& y) { return y.impl() == x.impl(); });
    };
    auto it = std::find_if(into.begin(), into.end(), same);
    if (it == into.end()) into.push_back({x});
    else it->push_back(x);
  };
  for (const Array& x : values) {
    if (is_pending_scatter(x)) add(scatters, x);
    else if (is_partial(x) && local_count(x) > 0) add(groups, x);
  }
  if (groups.empty() && scatters.empty()) return;
  RuntimeState& rt = *(groups.empty() ? scatters : groups).front().front().impl()->runtime;
  std::lock_guard lock(rt.mutex());
  for (const auto& group : scatters)
    in_buckets(group, [](const Array& x) { return local_count(x.impl()->partial->summands) * dtype_size(x.dtype()); },
               [&](const std::vector<Array>& bucket) { resolve_scatters_packed(rt, bucket); });
  for (const auto& group : groups)
    in_buckets(group, [](const Array& x) { return local_count(x) * dtype_size(x.dtype()); },
               [&](const std::vector<Array>& bucket) { resolve_packed(rt, bucket); });
}

namespace {

thread_local std::vector<std::weak_ptr<const ArrayImpl>> with_gradients;

}  // namespace

void sum_with_gradients(const Array& value) {
  std::erase_if(with_gradients, [](const auto& w) { return w.expired() || !w.lock()->partial; });
  with_gradients.push_back(value.impl());
}

void resolve_gradients(const std::vector<Array>& gradients) {
  std::vector<Array> values = gradients;
  bool any = false;
  for (const Array& g : gradients) any = any || is_partial(g);
  // Only beside gradients that are summed here: else the value waits for its own reader.
  if (any)
    for (const auto& w : with_gradients)
      if (const auto impl = w.lock(); impl && impl->partial && impl->partial->scatter_dim < 0 &&
                                      impl->runtime == gradients.front().impl()->runtime)
        values.push_back(Array(impl));
  std::erase_if(with_gradients, [](const auto& w) { return w.expired() || !w.lock()->partial; });
  resolve_together(values);
}

Array on_summands(const Array& x, const std::function<Array(const Array&)>& op, bool moves_only) {
  if (!is_partial(x)) return op(x);
  const Array& addend = addend_of(x);
  if (!addend.valid() || (moves_only && addend.shape() == x.shape())) {
    const std::vector<std::string> axes = partial_axes(x);
    const Array r = op(summands_of(x));
    // A layout over a partial axis would mean data moved between the summands: take the sum first.
    if (!shards_over_any(r.sharding(), axes)) return make_partial(r, axes, "", &x, addend.valid() ? op(addend) : Array());
  }
  materialized(x);
  return op(x);
}

collectives::Buffers reduce_scatter_over(const std::shared_ptr<RuntimeState>& rt, const Mesh& mesh,
                                         const std::vector<std::string>& axes, const collectives::Buffers& summands,
                                         const Shape& local, DType dtype, int dim) {
  // psum_scatter over a manual copy of the mesh, on the per-device summands as shard_map sees them.
  const Mesh manual(mesh.axis_sizes(), mesh.axis_names(), std::vector<AxisType>(mesh.ndim(), AxisType::Manual),
                    mesh.device_ids(), mesh.platform());
  const Array pieces =
      make_array(rt, exec::ShardedValue{local, dtype, NamedSharding(manual, PartitionSpec()), summands}, true, axes);
  Array scattered;
  {
    const ManualScope scope(manual);
    scattered = psum_scatter(pieces, axes, dim, true);
  }
  return materialized(scattered).shards;
}

std::optional<Array> scatter_partial(const Array& x, const Sharding& target) {
  const NamedSharding* from = x.sharding().named();
  const NamedSharding* to = target.named();
  // A value with an addend is summed whole (an all-reduce) and then laid out.
  if (!is_partial(x) || addend_of(x).valid() || !from || !to || !(to->mesh() == from->mesh())) return std::nullopt;
  const Mesh& mesh = from->mesh();
  const std::vector<std::string>& axes = partial_axes(x);
  const Shape local = x.sharding().shard_shape(x.shape());
  for (size_t d = 0; d < x.ndim(); ++d) {
    const SpecEntry want = d < to->spec().size() ? to->spec()[d] : SpecEntry();
    const SpecEntry have = d < from->spec().size() ? from->spec()[d] : SpecEntry();
    if (want.is_none() || !have.is_none()) continue;
    int64_t group = 1;
    bool within = true;
    for (const auto& axis : want.axes) {
      within = within && std::find(axes.begin(), axes.end(), axis) != axes.end();
      group *= mesh.axis_size(axis);
    }
    if (!within || local[d] % group != 0) continue;
    auto rt = x.impl()->runtime;
    std::lock_guard lock(rt->mutex());
    const Array s = summands_of(x);
    const PartialSum& made = *x.impl()->partial;
    std::vector<SpecEntry> split = from->spec().entries();
    split.resize(x.ndim());
    split[d] = want;
    const NamedSharding split_layout(mesh, PartitionSpec(split).trimmed());
    const Sharding scattered_layout = Sharding(split_layout).is_equivalent_to(target, x.ndim()) ? target : Sharding(split_layout);
    if (want.axes.size() == axes.size() && shape_size(local) > 0) {
      // The scatter takes the whole sum: deferred, as a sum is, so that the values an optimizer
      // reads (fsdp's gradients) go as one packed reduce-scatter (resolve_together).
      auto impl = std::make_shared<ArrayImpl>(ArrayImpl{rt, exec::ShardedValue{x.shape(), x.dtype(), scattered_layout, {}},
                                                        true, nullptr, x.impl()->varying});
      PartialSum pending{want.axes, s, made.op, made.rule, made.site, Array()};
      pending.scatter_dim = static_cast<int>(d);
      impl->partial = std::make_shared<const PartialSum>(std::move(pending));
      return Array(std::shared_ptr<const ArrayImpl>(std::move(impl)));
    }
    const exec::CallSiteScope site(made.site.known() ? made.site : exec::current_call_site());
    const exec::RuleOverride rule(made.rule.empty() ? exec::current_rule() : made.rule);
    const collectives::Buffers shards =
        reduce_scatter_over(rt, mesh, want.axes, materialized(s).shards, local, x.dtype(), static_cast<int>(d));
    std::vector<SpecEntry> spec = from->spec().entries();
    spec.resize(x.ndim());
    spec[d] = want;
    const Array scattered = make_array(
        rt, exec::ShardedValue{x.shape(), x.dtype(), NamedSharding(mesh, PartitionSpec(spec).trimmed()), shards},
        x.committed(), x.impl()->varying);
    std::vector<std::string> rest;
    for (const auto& axis : axes)
      if (std::find(want.axes.begin(), want.axes.end(), axis) == want.axes.end()) rest.push_back(axis);
    return make_partial(scattered, rest, "", &x);
  }
  return std::nullopt;
}

}  // namespace meshvk::detail

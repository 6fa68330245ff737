// The transforms of meshvk/transforms.hpp on leaves: vjp and jvp from the tape's vjp_leaves,
// checkpoint and custom_vjp as one rule recorded for a function run with the tapes suspended.
#include "meshvk/transforms.hpp"

#include <numeric>

#include "graph/tape.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::detail {

bool any_tape_active() { return taping(); }

LinearizedLeaves linearize_leaves(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                                  const std::vector<Array>& primals) {
  for (size_t i = 0; i < primals.size(); ++i)
    if (!primals[i].valid()) throw Error("vjp: primal leaf " + std::to_string(i) + " is an empty Array");
  Linearized lin = vjp_leaves(f, primals);
  return {std::move(lin.outputs), std::move(lin.backward)};
}

std::pair<std::vector<Array>, std::vector<Array>> jvp_leaves(
    const std::function<std::vector<Array>(const std::vector<Array>&)>& f, const std::vector<Array>& primals,
    const std::vector<Array>& tangents) {
  if (tangents.size() != primals.size())
    throw Error("jvp: " + std::to_string(tangents.size()) + " tangents for " + std::to_string(primals.size()) +
                " primals; give one per primal");
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!primals[i].valid() || !tangents[i].valid())
      throw Error("jvp: primal or tangent leaf " + std::to_string(i) + " is an empty Array");
    if (tangents[i].shape() != primals[i].shape())
      throw Error("jvp: tangent " + std::to_string(i) + " is " + type_of(tangents[i]) + " for a primal " +
                  type_of(primals[i]) + "; a tangent has its primal's shape");
    if (tangents[i].dtype() != primals[i].dtype())
      throw Error("jvp: tangent " + std::to_string(i) + " is " + type_of(tangents[i]) + " for a primal " +
                  type_of(primals[i]) + "; a tangent has its primal's dtype (JAX raises TypeError too)");
  }
  const Linearized lin = [&] {
    const BackwardDifferentiated transposed_later;
    return vjp_leaves(f, primals);
  }();
  // The backward pass is linear in the output cotangent u: its transpose, applied to the
  // tangents, is J t.
  std::vector<Array> u;
  for (const Array& o : lin.outputs) u.push_back(zeros_like(o));
  std::vector<Array> t;
  for (size_t i = 0; i < tangents.size(); ++i)
    t.push_back(is_floating(primals[i].dtype()) ? tangents[i] : Array());
  const Linearized transposed = vjp_leaves(
      [&](const std::vector<Array>& cts) { return zeros_where_none(lin.backward(cts), primals); }, u);
  std::vector<Array> out_tangents = transposed.backward(t);
  for (size_t k = 0; k < out_tangents.size(); ++k)
    if (!out_tangents[k].valid()) out_tangents[k] = zeros_like(lin.outputs[k]);
  out_tangents.resize(lin.outputs.size());
  return {lin.outputs, out_tangents};
}

std::vector<Array> checkpoint_leaves(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                                     const std::vector<Array>& args) {
  if (!taping()) return f(args);
  std::vector<Array> outputs, closure;
  {
    const TapeIsolation isolated(args);
    outputs = f(args);
    closure = isolated.closure();
  }
  std::vector<Array> inputs = args;
  inputs.insert(inputs.end(), closure.begin(), closure.end());
  on_tape(outputs, inputs, [f, args, closure](const std::vector<Array>& cts) {
    // Recomputed now: the intermediates live only while this rule runs.
    return vjp_leaves(f, args, closure).backward(cts);
  });
  return outputs;
}

std::vector<Array> custom_vjp_leaves(
    const std::function<std::pair<std::vector<Array>, std::vector<Array>>(const std::vector<Array>&)>& fwd,
    std::function<std::vector<Array>(const std::vector<Array>& residuals, const std::vector<Array>& cotangents)> bwd,
    const std::vector<Array>& args) {
  std::pair<std::vector<Array>, std::vector<Array>> r;
  {
    const TapeIsolation isolated(args);
    r = fwd(args);
  }
  const size_t n = args.size();
  on_tape(r.first, args, [bwd = std::move(bwd), residuals = r.second, n](const std::vector<Array>& cts) {
    std::vector<Array> g = bwd(residuals, cts);
    if (g.size() != n)
      throw Error("custom_vjp: bwd returned " + std::to_string(g.size()) + " cotangent leaves for " +
                  std::to_string(n) + " argument leaves");
    return g;
  });
  return r.first;
}

std::vector<Array> keep_batch_sharding(std::vector<Array> ys, const Array& mapped) {
  const NamedSharding* in = mapped.sharding().named();
  if (!in || !mapped.committed() || in->spec().size() == 0 || in->spec()[0].axes.empty()) return ys;
  const SpecEntry& batch = in->spec()[0];
  int64_t ways = 1;
  for (const auto& axis : batch.axes) ways *= in->mesh().axis_size(axis);
  for (Array& y : ys) {
    if (!y.valid() || y.ndim() == 0 || y.shape()[0] % ways != 0) continue;
    std::vector<SpecEntry> spec;
    const NamedSharding* out = y.sharding().named();
    if (out && !(out->mesh() == in->mesh())) continue;
    for (size_t d = 0; d < y.ndim(); ++d)
      spec.push_back(d == 0 ? batch : out && d < out->spec().size() ? out->spec()[d] : SpecEntry());
    bool free = out == nullptr || out->spec().size() == 0 || out->spec()[0].axes.empty();
    for (size_t d = 1; d < spec.size() && free; ++d)
      for (const auto& axis : spec[d].axes)
        free = free && std::find(batch.axes.begin(), batch.axes.end(), axis) == batch.axes.end();
    if (!free) continue;
    const Sharding target = NamedSharding(in->mesh(), PartitionSpec(spec).trimmed());
    if (!y.sharding().is_equivalent_to(target, y.ndim())) y = device_put(y, target);
  }
  return ys;
}

Array move_axis(const Array& x, int from, int to, const char* op) {
  const int rank = static_cast<int>(x.ndim());
  const int f = from < 0 ? from + rank : from;
  const int t = to < 0 ? to + rank : to;
  if (f < 0 || f >= rank || t < 0 || t >= rank)
    throw Error(std::string(op) + ": axis " + std::to_string(from < 0 || f >= rank ? from : to) + " is out of range for " +
                type_of(x) + "; valid axes are -" + std::to_string(rank) + ".." + std::to_string(rank - 1));
  if (f == t) return x;
  std::vector<int> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  perm.erase(perm.begin() + f);
  perm.insert(perm.begin() + t, f);
  return transpose(x, perm);
}

}  // namespace meshvk::detail

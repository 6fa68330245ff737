// Several pending results that read the same arrays run as one kernel with several outputs (XLA's
// multi-output fusion): an optimizer's new parameter, first and second moments all read the
// gradient and the moments, and each alone would read them again in a kernel of its own.
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/op_scope.hpp"
#include "kernels/elementwise.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

namespace {

using kernels::EwNode;
using kernels::EwOp;

bool fusable_result(const Array& a) {
  const ArrayImpl& impl = *a.impl();
  if (!impl.pending || impl.partial || shape_size(a.shape()) == 0) return false;
  const DType d = impl.pending->program.nodes.back().dtype;
  return dtype_size(d) == 4;
}

// Programs merged into one: common nodes computed once, inputs read once.
struct Merged {
  kernels::EwProgram program;
  std::vector<Array> inputs;
  std::vector<int> results;
  std::vector<size_t> members;  // indices into the arrays given
  std::map<const ArrayImpl*, int> input_of;
  std::map<std::tuple<int, int, int, int, int, int, uint32_t>, int> node_of;

  // The inputs `p` would add.
  size_t new_inputs(const PendingElementwise& p) const {
    size_t k = 0;
    for (const Array& a : p.inputs) k += input_of.count(a.impl().get()) ? 0 : 1;
    return k;
  }

  void add(const PendingElementwise& p, size_t member) {
    std::vector<int> remap(p.program.nodes.size());
    for (size_t i = 0; i < p.program.nodes.size(); ++i) {
      EwNode n = p.program.nodes[i];
      if (n.op == EwOp::input) {
        const Array& a = p.inputs[static_cast<size_t>(n.input)];
        auto [it, added] = input_of.emplace(a.impl().get(), static_cast<int>(inputs.size()));
        if (added) inputs.push_back(a);
        n.input = it->second;
      }
      for (int* operand : {&n.a, &n.b, &n.c})
        if (*operand >= 0) *operand = remap[static_cast<size_t>(*operand)];
      const auto key = std::make_tuple(static_cast<int>(n.op), static_cast<int>(n.dtype), n.a, n.b, n.c, n.input, n.bits);
      auto [it, added] = node_of.emplace(key, static_cast<int>(program.nodes.size()));
      if (added) program.nodes.push_back(n);
      remap[i] = it->second;
    }
    program.num_inputs = static_cast<int>(inputs.size());
    results.push_back(remap.back());
    members.push_back(member);
  }
};

// Union-find over the candidates: joined where they share an input that is not a scalar.
size_t root(std::vector<size_t>& parent, size_t i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

void run_merged(const Merged& m, const std::vector<Array>& arrays) {
  const ArrayImpl& first = *arrays[m.members.front()].impl();
  RuntimeState& rt = *first.runtime;
  std::lock_guard lock(rt.mutex());  // this group's runtime (a jit's results may span several)
  const OpScope op_scope("fusion");  // profile hook
  const PendingElementwise merged{m.program, m.inputs};
  const PendingInputs in = materialize_inputs(merged);
  const Shape& shape = first.value.shape;
  const auto pieces = first.value.sharding.devices_indices_map(shape);
  bool differ = false;
  for (const size_t j : m.members)
    differ = differ || pieces_may_differ(*arrays[j].impl(), *arrays[j].impl()->pending);
  auto shards = run_pending_pieces(rt, m.program, m.results, in, shape, pieces, first.value.sharding, differ);
  if (exec::logging()) {  // the text is built only while a trace listens
    std::string text;
    for (size_t j = 0; j < m.members.size(); ++j) {
      const ArrayImpl& impl = *arrays[m.members[j]].impl();
      const PendingInputs own = materialize_inputs(*impl.pending);
      text += (j ? "; " : "") + pending_text(*impl.pending, own);
    }
    exec::log_op("fusion of " + std::to_string(m.members.size()) + " results in one kernel: " + text + ": local " +
                 shape_to_string(first.value.sharding.shard_shape(shape)) + " on each of " +
                 std::to_string(pieces.size()) + " devices");
  }
  for (size_t j = 0; j < m.members.size(); ++j) {
    const ArrayImpl& impl = *arrays[m.members[j]].impl();
    impl.value.shards = std::move(shards[j]);
    if (exec::logging() && !impl.value.shards.empty()) exec::name_result(impl.value.shards.front().get(), "fusion");
    impl.pending.reset();
  }
}

}  // namespace

void materialize_together(const std::vector<Array>& arrays) {
  std::vector<size_t> candidates;
  for (size_t i = 0; i < arrays.size(); ++i)
    if (arrays[i].valid() && fusable_result(arrays[i])) candidates.push_back(i);
  if (candidates.size() < 2) return;
  // The pending programs are read under their runtime's lock (a jit's results are on one runtime
  // but for the rare mixed call; each group locks its own again to run).
  std::lock_guard lock(arrays[candidates.front()].impl()->runtime->mutex());
  std::vector<size_t> parent(arrays.size());
  std::iota(parent.begin(), parent.end(), size_t{0});
  std::map<const ArrayImpl*, size_t> reader;  // an input array: the first candidate reading it
  for (const size_t i : candidates) {
    const ArrayImpl& impl = *arrays[i].impl();
    for (const Array& a : impl.pending->inputs) {
      if (shape_size(a.shape()) == 1) continue;  // scalars (a step count, a learning rate) join nothing
      auto [it, added] = reader.emplace(a.impl().get(), i);
      if (added) continue;
      const Array& other = arrays[it->second];
      // One kernel computes pieces of one shape and layout, on one runtime.
      if (other.shape() == arrays[i].shape() && other.sharding() == arrays[i].sharding() &&
          other.impl()->runtime == impl.runtime)
        parent[root(parent, i)] = root(parent, it->second);
    }
  }
  std::map<size_t, std::vector<size_t>> groups;
  for (const size_t i : candidates) groups[root(parent, i)].push_back(i);
  for (const auto& [r, members] : groups) {
    if (members.size() < 2) continue;
    // Greedily, within the kernels' input limit; the same array given twice is computed once.
    std::vector<Merged> merged(1);
    std::map<const ArrayImpl*, bool> taken;
    for (const size_t i : members) {
      if (!taken.emplace(arrays[i].impl().get(), true).second) continue;
      const PendingElementwise& p = *arrays[i].impl()->pending;
      if (p.inputs.size() > kernels::kMaxKernelInputs) continue;
      if (merged.back().inputs.size() + merged.back().new_inputs(p) > kernels::kMaxKernelInputs) merged.emplace_back();
      merged.back().add(p, i);
    }
    for (const Merged& m : merged)
      if (m.members.size() >= 2) run_merged(m, arrays);
  }
}

}  // namespace meshvk::detail

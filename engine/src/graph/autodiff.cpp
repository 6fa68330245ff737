// Tape, backward pass and the public grad functions.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "graph/array_impl.hpp"
#include "graph/manual_context.hpp"
#include "graph/tape.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

namespace detail {

namespace {

struct Node {
  Array output;
  std::vector<Array> inputs;
  Vjp vjp;
  std::optional<Mesh> manual;  // the shard_map mesh the op ran under, for collectives in its rule
};

struct Tape {
  std::vector<Node> nodes;
  std::set<const ArrayImpl*> tracked;
  bool is_tracked(const Array& a) const { return a.valid() && tracked.count(a.impl().get()); }
};

// The tapes of the value_and_grad calls in progress on this thread, outermost first: grad of
// grad records every op on each tape that tracks one of its inputs, so the inner backward pass
// (run while only the outer tapes are active) is itself differentiated by the outer one.
thread_local std::vector<Tape*> active;
thread_local const std::vector<bool>* wanted = nullptr;

}  // namespace

bool taping() { return !active.empty(); }
bool wants(size_t k) { return !wanted || (k < wanted->size() && (*wanted)[k]); }

Array on_tape(const Array& output, const std::vector<Array>& inputs, Vjp vjp) {
  if (active.empty() || !output.valid()) return output;
  for (const Array& in : inputs)
    if (in.valid() && in.impl() == output.impl()) return output;  // the op returned its input
  const Mesh* m = current_manual_mesh();
  for (Tape* tape : active) {
    bool any = false;
    for (const Array& in : inputs) any = any || tape->is_tracked(in);
    if (!any) continue;
    tape->tracked.insert(output.impl().get());
    tape->nodes.push_back({output, inputs, vjp, m ? std::optional<Mesh>(*m) : std::nullopt});
  }
  return output;
}

Array unbroadcast(const Array& ct, const Shape& shape) {
  if (ct.shape() == shape) return ct;
  const size_t lead = ct.ndim() - shape.size();
  std::vector<int> axes;
  for (size_t d = 0; d < ct.ndim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && ct.shape()[d] != 1)) axes.push_back(static_cast<int>(d));
  Array r = axes.empty() ? ct : sum(ct, axes, true);
  if (lead) {
    Shape s(r.shape().begin() + lead, r.shape().end());
    r = reshape(r, s);
  }
  return r.shape() == shape ? r : reshape(r, shape);
}

}  // namespace detail

std::pair<Array, std::vector<Array>> value_and_grad_call(const std::function<Array(const std::vector<Array>&)>& f,
                                                          const std::vector<Array>& args, std::vector<int> argnums) {
  if (argnums.empty())
    for (size_t i = 0; i < args.size(); ++i) argnums.push_back(static_cast<int>(i));
  std::vector<std::string> names;
  for (size_t i = 0; i < args.size(); ++i) names.push_back("argument " + std::to_string(i));
  for (const int i : argnums)
    if (i < 0 || i >= static_cast<int>(args.size())) detail::grad_argnum_error(i, args.size(), true);
  return detail::value_and_grad_leaves(f, args, argnums, names);
}

namespace detail {

void grad_argnum_error(int argnum, size_t arguments, bool in_range) {
  if (in_range)
    throw Error("grad: argnums has " + std::to_string(argnum) +
                ", an argument that is neither an Array nor Params; only those can be differentiated (leave it out of argnums)");
  throw Error("grad: argnums has " + std::to_string(argnum) + " but the function was called with " + std::to_string(arguments) +
              " arguments" +
              (arguments ? "; valid argnums are 0.." + std::to_string(arguments - 1) : std::string("; there is nothing to differentiate")));
}

std::pair<Array, std::vector<Array>> value_and_grad_leaves(const std::function<Array(const std::vector<Array>&)>& f,
                                                            const std::vector<Array>& args, const std::vector<int>& argnums,
                                                            const std::vector<std::string>& names) {
  for (const int i : argnums) {
    if (!args[i].valid()) throw Error("grad: " + names[i] + " is an empty Array");
    if (!is_floating(args[i].dtype()))
      throw Error("grad: " + names[i] + " is " + type_of(args[i]) +
                  "; gradients are defined for floating (float32, bfloat16, float16) inputs (astype it, or leave it out of argnums)");
  }
  detail::Tape tape;
  // Fresh identities for the differentiated arguments, so the tape tells them apart; under an
  // outer grad each is the identity of its argument there, so the outer gradient flows through.
  std::vector<Array> inputs = args;
  std::set<int> fresh;
  for (const int i : argnums) {
    if (!fresh.insert(i).second) continue;  // asked for twice: one identity, one gradient
    const auto& impl = *args[i].impl();
    inputs[i] = detail::on_tape(
        detail::make_array(impl.runtime, detail::materialized(args[i]), impl.committed, impl.varying),
        {args[i]}, [](const Array& ct) { return std::vector<Array>{ct}; });
    tape.tracked.insert(inputs[i].impl().get());
  }
  detail::active.push_back(&tape);
  Array value;
  try {
    value = f(inputs);
  } catch (...) {
    detail::active.pop_back();
    throw;
  }
  detail::active.pop_back();
  if (!value.valid() || value.ndim() != 0 || !is_floating(value.dtype()))
    throw Error("grad: the function must return a floating (float32, bfloat16, float16) scalar to differentiate, got " +
                (value.valid() ? type_of(value) : std::string("an empty Array")) +
                "; reduce it (sum, mean) or differentiate each output separately");

  // Backward: cotangents flow from the result through the recorded nodes in reverse order.
  std::map<const detail::ArrayImpl*, Array> cotangent;
  cotangent[value.impl().get()] = ones_like(value);
  for (auto it = tape.nodes.rbegin(); it != tape.nodes.rend(); ++it) {
    const auto found = cotangent.find(it->output.impl().get());
    if (found == cotangent.end()) continue;
    const Array ct = found->second;
    std::optional<detail::ManualScope> scope;
    if (it->manual) scope.emplace(*it->manual);
    std::vector<bool> needs;
    for (const Array& in : it->inputs) needs.push_back(tape.is_tracked(in));
    detail::wanted = &needs;
    std::vector<Array> in_ct;
    try {
      in_ct = it->vjp(ct);
    } catch (...) {
      detail::wanted = nullptr;
      throw;
    }
    detail::wanted = nullptr;
    for (size_t k = 0; k < it->inputs.size() && k < in_ct.size(); ++k) {
      if (!in_ct[k].valid() || !tape.is_tracked(it->inputs[k])) continue;
      const auto* key = it->inputs[k].impl().get();
      auto [slot, fresh] = cotangent.emplace(key, in_ct[k]);
      if (!fresh) slot->second = slot->second + in_ct[k];
    }
  }
  std::vector<Array> grads;
  for (const int i : argnums) {
    const auto found = cotangent.find(inputs[i].impl().get());
    Array g = found != cotangent.end() ? found->second : zeros_like(inputs[i]);
    // Gradients take their parameter's layout (and stay as free to move as it is).
    if (!g.sharding().is_equivalent_to(args[i].sharding(), args[i].ndim())) {
      g = device_put(g, args[i].sharding());
      if (!args[i].committed()) {
        const Array placed = g;  // an outer grad differentiates through the uncommitted copy
        g = detail::on_tape(detail::make_array(g.impl()->runtime, detail::materialized(g), false,
                                               g.impl()->varying),
                            {placed}, [](const Array& ct) { return std::vector<Array>{ct}; });
      }
    }
    grads.push_back(g);
  }
  // f returned a differentiated argument itself: hand back the caller's Array, not the fresh
  // identity sharing its buffers (a jitted result's buffers are moved to a copy at the
  // function's next call only for the Array it handed out).
  for (const int i : argnums)
    if (value.impl() == inputs[i].impl()) value = args[i];
  return {value, grads};
}

}  // namespace detail

std::pair<Array, Params> value_and_grad_params(const std::function<Array(const Params&)>& f, const Params& params) {
  std::vector<std::string> names;
  std::vector<Array> values;
  for (const auto& [name, value] : params) {
    names.push_back(name);
    values.push_back(value);
  }
  auto [value, grads] = value_and_grad_call(
      [&](const std::vector<Array>& a) {
        Params p;
        for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], a[i]);
        return f(p);
      },
      values, {});
  Params out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace(names[i], grads[i]);
  return {value, out};
}

}  // namespace meshvk

namespace meshvk {

Array stop_gradient(const Array& x) {
  if (!x.valid()) throw Error("stop_gradient: use of an empty meshvk::Array");
  const detail::ArrayImpl& a = *x.impl();
  std::lock_guard lock(a.runtime->mutex());
  // A new handle on the same value (or the same pending elementwise work, so it still fuses into
  // its consumer): the tape knows values by their handle, so nothing flows back through it.
  if (const auto pending = a.pending)
    return detail::make_pending(a.runtime, a.value.shape, a.value.dtype, a.value.sharding,
                                a.committed, *pending, a.varying);
  return detail::make_array(a.runtime, detail::shareable_value(x), a.committed, a.varying);
}

}  // namespace meshvk

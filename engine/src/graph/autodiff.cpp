// Tape, backward pass and the public grad functions.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/manual_context.hpp"
#include "graph/partial_sum.hpp"
#include "graph/tape.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/shard_map.hpp"

namespace meshvk {

namespace detail {

namespace {

struct Node {
  std::vector<Array> outputs;
  std::vector<Array> inputs;
  MultiVjp vjp;
  std::optional<Mesh> manual;  // the shard_map mesh the op ran under, for collectives in its rule
  exec::CallSite site;         // the user's line of the op: its rule's collectives name it
};

struct Tape {
  std::vector<Node> nodes;
  std::set<const ArrayImpl*> tracked;
  // A TapeIsolation's probe: the tapes it suspended, and what the function read that they track.
  std::vector<Tape*>* suspended = nullptr;
  std::vector<Array> closure;
  // A probe whose function reads values an enclosing probe's function computed (its carry, or
  // values made from it), rather than values that function closes over.
  bool reads_enclosing_body = false;
  bool is_tracked(const Array& a) const { return a.valid() && tracked.count(a.impl().get()); }
  bool in_closure(const Array& a) const {
    for (const Array& c : closure)
      if (c.impl() == a.impl()) return true;
    return false;
  }
  // A probe: an input no op of the function made but a suspended tape tracks is closed over.
  void probe(const Array& in) {
    if (!suspended || !in.valid() || is_tracked(in)) return;
    for (Tape* t : *suspended) {
      t->probe(in);  // a probe inside a probe: what the outer function closes over too
      if (t->is_tracked(in)) {
        if (t->suspended && !t->in_closure(in)) reads_enclosing_body = true;
        tracked.insert(in.impl().get());
        closure.push_back(in);
        return;
      }
    }
  }
};

// The tapes of the value_and_grad calls in progress on this thread, outermost first: grad of
// grad records every op on each tape that tracks one of its inputs, so the inner backward pass
// (run while only the outer tapes are active) is itself differentiated by the outer one.
thread_local std::vector<Tape*> active;
thread_local const std::vector<bool>* wanted = nullptr;

void record(const std::vector<Array>& outputs, const std::vector<Array>& inputs, const MultiVjp& vjp) {
  const Mesh* m = current_manual_mesh();
  for (Tape* tape : active) {
    bool any = false;
    for (const Array& in : inputs) {
      tape->probe(in);
      any = any || tape->is_tracked(in);
    }
    if (!any) continue;
    for (const Array& out : outputs)
      if (out.valid()) tape->tracked.insert(out.impl().get());
    tape->nodes.push_back({outputs, inputs, vjp, m ? std::optional<Mesh>(*m) : std::nullopt, exec::current_call_site()});
  }
}

// The reverse pass: cotangents flow from the seeds through the recorded nodes in reverse order.
std::map<const ArrayImpl*, Array> backprop(const Tape& tape, std::map<const ArrayImpl*, Array> cotangent) {
  for (auto it = tape.nodes.rbegin(); it != tape.nodes.rend(); ++it) {
    std::vector<Array> cts;
    bool any = false;
    for (const Array& out : it->outputs) {
      const auto found = out.valid() ? cotangent.find(out.impl().get()) : cotangent.end();
      any = any || found != cotangent.end();
      cts.push_back(found != cotangent.end() ? found->second : Array());
    }
    if (!any) continue;
    for (size_t k = 0; k < cts.size(); ++k)
      if (!cts[k].valid() && it->outputs[k].valid()) cts[k] = zeros_like(it->outputs[k]);
    std::optional<detail::ManualScope> scope;
    if (it->manual) scope.emplace(*it->manual);
    exec::CallSite backward_site = it->site;
    backward_site.backward = backward_site.known();
    const exec::CallSiteScope site_scope(backward_site);
    std::vector<bool> needs;
    for (const Array& in : it->inputs) needs.push_back(tape.is_tracked(in));
    detail::wanted = &needs;
    std::vector<Array> in_ct;
    try {
      in_ct = it->vjp(cts);
    } catch (...) {
      detail::wanted = nullptr;
      throw;
    }
    detail::wanted = nullptr;
    for (size_t k = 0; k < it->inputs.size() && k < in_ct.size(); ++k) {
      if (!in_ct[k].valid() || !tape.is_tracked(it->inputs[k])) continue;
      // In a shard_map body, an input the same on every device along an axis whose cotangent
      // differs along it (the op mixed it with a value that varies: JAX's pvary) gets the
      // devices' contributions summed here, as pvary transposes: a cotangent then never varies
      // where its value does not, so one added to it later (an L2 term's) is not summed again.
      if (it->manual) {
        std::vector<std::string> extra;
        for (const std::string& axis : in_ct[k].impl()->varying)
          if (std::find(it->inputs[k].impl()->varying.begin(), it->inputs[k].impl()->varying.end(), axis) ==
              it->inputs[k].impl()->varying.end())
            extra.push_back(axis);
        if (!extra.empty()) in_ct[k] = psum(in_ct[k], AxisNames(extra));
      }
      const auto* key = it->inputs[k].impl().get();
      auto [slot, fresh] = cotangent.emplace(key, in_ct[k]);
      if (!fresh) slot->second = slot->second + in_ct[k];
    }
  }
  return cotangent;
}

// A fresh identity for a differentiated argument, so a tape tells it apart; under an outer grad
// it is the identity of its argument there, so the outer gradient flows through.
Array fresh_identity(const Array& x) {
  const auto& impl = *x.impl();
  return on_tape(make_array(impl.runtime, materialized(x), impl.committed, impl.varying), {x},
                 [](const Array& ct) { return std::vector<Array>{ct}; });
}

}  // namespace

bool taping() { return !active.empty(); }

namespace {
thread_local int backward_differentiated_depth = 0;
}
BackwardDifferentiated::BackwardDifferentiated() { ++backward_differentiated_depth; }
BackwardDifferentiated::~BackwardDifferentiated() { --backward_differentiated_depth; }
// Tapes, not TapeIsolation's probes: the backward loop of a scan traces its body's vjp under
// the scan's own probe, and a scan in that body is differentiated once there.
bool backward_differentiated() {
  if (!taping()) return false;
  if (backward_differentiated_depth > 0) return true;
  return std::count_if(active.begin(), active.end(), [](const Tape* t) { return !t->suspended; }) > 1;
}
bool tracked(const Array& x) {
  for (Tape* t : active) {
    t->probe(x);
    if (t->is_tracked(x)) return true;
  }
  return false;
}
bool tracked_by_a_transform(const Array& x) {
  for (const Tape* t : active)
    if (!t->suspended && t->is_tracked(x)) return true;
  return false;
}
bool wants(size_t k) { return !wanted || (k < wanted->size() && (*wanted)[k]); }

Array on_tape(const Array& output, const std::vector<Array>& inputs, Vjp vjp) {
  if (active.empty() || !output.valid()) return output;
  for (const Array& in : inputs)
    if (in.valid() && in.impl() == output.impl()) return output;  // the op returned its input
  record({output}, inputs, [vjp = std::move(vjp)](const std::vector<Array>& cts) { return vjp(cts.front()); });
  return output;
}

void on_tape(const std::vector<Array>& outputs, const std::vector<Array>& inputs, MultiVjp vjp) {
  if (active.empty()) return;
  record(outputs, inputs, vjp);
}

TapeIsolation::TapeIsolation(const std::vector<Array>& inputs) {
  if (active.empty()) return;
  auto probe = std::make_shared<Tape>();
  auto suspended = std::make_shared<std::vector<Tape*>>(active);
  probe->suspended = suspended.get();
  for (const Array& in : inputs)
    if (in.valid()) probe->tracked.insert(in.impl().get());
  for (Tape* t : active) saved_.push_back(t);
  active = {probe.get()};
  // The probe owns the list of the tapes it suspended.
  probe_ = std::shared_ptr<void>(probe.get(), [probe, suspended](void*) {});
}

TapeIsolation::~TapeIsolation() {
  if (saved_.empty()) return;
  active.clear();
  for (void* t : saved_) active.push_back(static_cast<Tape*>(t));
}

bool TapeIsolation::reads_enclosing_body() const {
  return probe_ && static_cast<const Tape*>(probe_.get())->reads_enclosing_body;
}

const std::vector<Array>& TapeIsolation::closure() const {
  static const std::vector<Array> none;
  return probe_ ? static_cast<const Tape*>(probe_.get())->closure : none;
}

std::function<std::vector<Array>(const std::vector<Array>&)> TapeIsolation::backward(
    const std::vector<Array>& outputs) const {
  return [probe = probe_, outputs](const std::vector<Array>& cotangents) {
    const Tape* tape = static_cast<const Tape*>(probe.get());
    if (!tape) return std::vector<Array>{};
    std::map<const ArrayImpl*, Array> seeds;
    for (size_t k = 0; k < outputs.size() && k < cotangents.size(); ++k) {
      if (!cotangents[k].valid() || !outputs[k].valid()) continue;
      auto [slot, fresh] = seeds.emplace(outputs[k].impl().get(), cotangents[k]);
      if (!fresh) slot->second = slot->second + cotangents[k];
    }
    const std::map<const ArrayImpl*, Array> all = backprop(*tape, std::move(seeds));
    std::vector<Array> out;
    for (const Array& c : tape->closure) {
      const auto found = all.find(c.impl().get());
      out.push_back(found != all.end() ? found->second : Array());
    }
    return out;
  };
}

Linearized vjp_leaves(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                      const std::vector<Array>& primals, const std::vector<Array>& closure) {
  auto tape = std::make_shared<Tape>();
  std::vector<Array> inputs = primals;
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!primals[i].valid() || !is_floating(primals[i].dtype())) continue;
    inputs[i] = fresh_identity(primals[i]);
    tape->tracked.insert(inputs[i].impl().get());
  }
  for (const Array& c : closure)
    if (c.valid()) tape->tracked.insert(c.impl().get());
  active.push_back(tape.get());
  std::vector<Array> outputs;
  try {
    outputs = f(inputs);
  } catch (...) {
    active.erase(std::find(active.begin(), active.end(), tape.get()));
    throw;
  }
  active.erase(std::find(active.begin(), active.end(), tape.get()));
  // An output that is a primal itself: the caller's Array, not the fresh identity.
  for (Array& out : outputs)
    for (size_t i = 0; i < primals.size(); ++i)
      if (out.valid() && out.impl() == inputs[i].impl()) out = primals[i];
  Linearized result{outputs, {}};
  result.backward = [tape, inputs, primals, closure, outputs](const std::vector<Array>& cotangents) {
    if (cotangents.size() != outputs.size())
      throw Error("vjp: " + std::to_string(cotangents.size()) + " cotangents for " +
                  std::to_string(outputs.size()) + " outputs; give one per output");
    std::map<const ArrayImpl*, Array> seeds;
    std::vector<Array> direct(primals.size());  // outputs that are a primal: their cotangent
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!cotangents[k].valid() || !outputs[k].valid()) continue;
      if (cotangents[k].shape() != outputs[k].shape())
        throw Error("vjp: the cotangent of output " + std::to_string(k) + " is " + type_of(cotangents[k]) +
                    ", the output is " + type_of(outputs[k]) + "; give one of the output's shape");
      const ArrayImpl* key = outputs[k].impl().get();
      for (size_t i = 0; i < primals.size(); ++i)
        if (outputs[k].impl() == primals[i].impl()) key = inputs[i].impl().get();
      auto [slot, fresh] = seeds.emplace(key, cotangents[k]);
      if (!fresh) slot->second = slot->second + cotangents[k];
    }
    const auto ct = backprop(*tape, std::move(seeds));
    std::vector<Array> grads;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto found = inputs[i].valid() && tape->is_tracked(inputs[i]) ? ct.find(inputs[i].impl().get()) : ct.end();
      grads.push_back(found != ct.end() ? found->second
                      : tape->is_tracked(inputs[i]) ? zeros_like(primals[i])
                                                    : Array());
    }
    for (const Array& c : closure) {
      const auto found = c.valid() ? ct.find(c.impl().get()) : ct.end();
      grads.push_back(found != ct.end() ? found->second : c.valid() && is_floating(c.dtype()) ? zeros_like(c) : Array());
    }
    return grads;
  };
  return result;
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
                ", an argument that is neither an Array nor Params nor another pytree of Arrays; only those can be differentiated (leave it out of argnums)");
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
                  "; gradients are defined for floating (float32, float64, bfloat16, float16) inputs (astype it, or leave it out of argnums)");
  }
  detail::Tape tape;
  std::vector<Array> inputs = args;
  std::set<int> fresh;
  for (const int i : argnums) {
    if (!fresh.insert(i).second) continue;  // asked for twice: one identity, one gradient
    inputs[i] = detail::fresh_identity(args[i]);
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
    throw Error("grad: the function must return a floating (float32, float64, bfloat16, float16) scalar to differentiate, got " +
                (value.valid() ? type_of(value) : std::string("an empty Array")) +
                "; reduce it (sum, mean) or differentiate each output separately");
  std::map<const detail::ArrayImpl*, Array> seed;
  seed[value.impl().get()] = ones_like(value);
  const std::map<const detail::ArrayImpl*, Array> cotangent = detail::backprop(tape, std::move(seed));
  std::vector<Array> grads;
  for (const int i : argnums) {
    const auto found = cotangent.find(inputs[i].impl().get());
    Array g = found != cotangent.end() ? found->second : zeros_like(inputs[i]);
    // Gradients take their parameter's layout (and stay as free to move as it is).
    if (!g.sharding().is_equivalent_to(args[i].sharding(), args[i].ndim())) {
      const exec::RuleScope rule([] { return std::string("grad: the gradient laid out as its argument"); });
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
  // A loss still partial (a mean over a split batch) is summed with the gradients where an
  // optimizer takes theirs: one packed all-reduce, as XLA's combiner merges the two.
  if (is_partial(value)) sum_with_gradients(value);
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
  if (detail::is_partial(x))  // still a sum not taken, under a new handle
    return detail::make_partial(detail::summands_of(x), detail::partial_axes(x), "", &x);
  if (const auto pending = a.pending)
    return detail::make_pending(a.runtime, a.value.shape, a.value.dtype, a.value.sharding,
                                a.committed, *pending, a.varying);
  return detail::make_array(a.runtime, detail::shareable_value(x), a.committed, a.varying);
}

}  // namespace meshvk

// optax's gradient transformations, optimizers and the state's jit tree. The formulas follow
// optax (_src/transform.py, alias.py, clipping.py, combine.py) operation by operation, so that a
// step computes what optax computes in float32.
#include "meshvk/optax.hpp"

#include <cmath>
#include <map>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/partial_sum.hpp"
#include "graph/dtype_support.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::optax {

using meshvk::detail::number_text;

namespace {

std::string quoted(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? "none" : s;
}

template <class M>
std::vector<std::string> keys(const M& m) {
  std::vector<std::string> k;
  for (const auto& kv : m) k.push_back(kv.first);
  return k;
}

// `got` must have exactly the names of `want`, each with its shape: an Error names every name
// missing and every extra one.
void require_like(const std::string& op, const Params& want, const std::string& want_what,
                  const Params& got, const std::string& got_what) {
  std::vector<std::string> missing, extra;
  for (const auto& kv : want)
    if (!got.count(kv.first)) missing.push_back(kv.first);
  for (const auto& kv : got)
    if (!want.count(kv.first)) extra.push_back(kv.first);
  if (!missing.empty() || !extra.empty()) {
    std::string what = op + ": " + got_what;
    if (!missing.empty()) what += " lack " + quoted(missing);
    if (!missing.empty() && !extra.empty()) what += " and";
    if (!extra.empty()) what += " have " + quoted(extra) + " that " + want_what + " lack";
    throw Error(what + "; give exactly the names of " + want_what + " (" + quoted(keys(want)) +
                ")");
  }
  for (const auto& [name, x] : got) {
    const Array& w = want.at(name);
    if (x.shape() != w.shape())
      throw Error(op + ": " + got_what + "['" + name + "'] is " + type_of(x) + " but " + want_what +
                  "['" + name + "'] is " + type_of(w) + "; each must have its parameter's shape");
  }
}

std::string op_name(const std::string& transformation) {
  return "optax." + transformation;
}

void require_kind(const std::string& name, const OptState& state, const std::string& kind) {
  if (state.kind != kind)
    throw Error(op_name(name) + ": the state was made by " +
                (state.kind.empty() ? std::string("no transformation (an empty OptState)")
                                    : "optax." + state.kind + "'s init") +
                ", not optax." + kind + "'s; pass the state this transformation's init() made");
}

// The state's step count: an int32 scalar, checked before anything changes.
const Array& require_count(const std::string& name, const OptState& state) {
  const auto it = state.scalars.find("count");
  if (it == state.scalars.end() || !it->second.valid())
    throw Error(op_name(name) +
                ": the state has no count; use the state init() made (it counts steps in an "
                "int32 scalar)");
  if (it->second.dtype() != DType::int32 || it->second.ndim() != 0)
    throw Error(op_name(name) + ": the state's count is " + type_of(it->second) +
                "; init() counts steps in an int32 scalar (int32[])");
  return it->second;
}

// optax's safe_int32_increment: count + 1, stopping at 2^31 - 1 rather than wrapping.
Array safe_increment(const Array& count) {
  return where(count < std::numeric_limits<int32_t>::max(), count + 1, count);
}

void require_unit(const std::string& name, const char* what, float b) {
  if (!(b >= 0.0f && b < 1.0f))
    throw Error(op_name(name) + ": " + what + " = " + number_text(b) +
                "; give a decay rate in [0, 1) (at 1 the bias correction divides by 0)");
}

void require_nonnegative(const std::string& name, const char* what, float x) {
  if (!(x >= 0.0f) || !std::isfinite(x))
    throw Error(op_name(name) + ": " + what + " = " + number_text(x) +
                "; give a finite value >= 0");
}

OptState empty_state(const std::string& kind) {
  return OptState{kind, {}, {}, {}};
}

GradientTransformation stateless(
    const std::string& kind, std::function<Params(const Params& updates, const Params& params)> f) {
  return GradientTransformation(
      kind, [kind](const Params&) { return empty_state(kind); },
      [kind, f](const Params& updates, const OptState& state, const Params& params) {
        require_kind(kind, state, kind);
        return std::make_pair(f(updates, params), state);
      });
}

GradientTransformation named_chain(const std::string& name,
                                   std::vector<GradientTransformation> ts) {
  auto init = [ts](const Params& params) {
    OptState s = empty_state("chain");
    for (const GradientTransformation& t : ts) s.inner.push_back(t.init(params));
    return s;
  };
  auto update = [name, ts](const Params& updates, const OptState& state, const Params& params) {
    require_kind(name, state, "chain");
    if (state.inner.size() != ts.size())
      throw Error(op_name(name) + ": the state holds " + std::to_string(state.inner.size()) +
                  " transformations' states, the chain has " + std::to_string(ts.size()) +
                  "; pass the state this chain's init() made");
    OptState next = empty_state("chain");
    Params u = updates;
    for (size_t i = 0; i < ts.size(); ++i) {
      auto r = ts[i].update(u, state.inner[i], params);
      u = std::move(r.first);
      next.inner.push_back(std::move(r.second));
    }
    return std::make_pair(std::move(u), std::move(next));
  };
  return GradientTransformation(name, std::move(init), std::move(update));
}

}  // namespace

// ---- OptState

const Params& OptState::tree(const std::string& name) const {
  const auto it = trees.find(name);
  if (it == trees.end())
    throw Error("OptState::tree: a " + (kind.empty() ? std::string("default") : kind) +
                " state has no tree '" + name + "'; it has " + quoted(keys(trees)));
  return it->second;
}

const Array& OptState::scalar(const std::string& name) const {
  const auto it = scalars.find(name);
  if (it == scalars.end())
    throw Error("OptState::scalar: a " + (kind.empty() ? std::string("default") : kind) +
                " state has no scalar '" + name + "'; it has " + quoted(keys(scalars)));
  return it->second;
}

namespace {
const Array* find_count(const OptState& s) {
  if (const auto it = s.scalars.find("count"); it != s.scalars.end()) return &it->second;
  for (const OptState& i : s.inner)
    if (const Array* c = find_count(i)) return c;
  return nullptr;
}
}  // namespace

const Array& OptState::count() const {
  if (const Array* c = find_count(*this)) return *c;
  throw Error("OptState::count: this " + (kind.empty() ? std::string("default") : kind) +
              " state holds no step count (none of its transformations counts steps: sgd "
              "with a constant learning rate keeps none)");
}

Mask::Mask(std::map<std::string, bool> by_name)
    : fn_([by_name = std::move(by_name)](const std::string& name, const Array&) {
        const auto it = by_name.find(name);
        if (it == by_name.end())
          throw Error("optax mask: no entry for the parameter '" + name + "'; the mask has " +
                      quoted(keys(by_name)) + " (give a bool for every parameter)");
        return it->second;
      }) {
  for (const auto& kv : by_name) names_.push_back(kv.first);
}

// ---- GradientTransformation

std::pair<Params, OptState> GradientTransformation::update(const Params& updates,
                                                           const OptState& state,
                                                           const Params& params) const {
  if (!params.empty()) require_like(op_name(name_), params, "the params", updates, "the updates");
  // Gradients still partial (over 'data' in data parallelism) are summed here together, packed
  // into few all-reduces (XLA's combiner, DDP's buckets), before the transformation reads them.
  std::vector<Array> partial;
  for (const auto& [name, u] : updates) partial.push_back(u);
  meshvk::detail::resolve_gradients(partial);
  return update_(updates, state, params);
}

Params apply_updates(const Params& params, const Params& updates) {
  require_like("optax.apply_updates", params, "the params", updates, "the updates");
  Params out;
  for (const auto& [name, p] : params) {
    const Array sum_ = p + updates.at(name);
    out.emplace(name, sum_.dtype() == p.dtype() ? sum_ : astype(sum_, p.dtype()));
  }
  return out;
}

Array global_norm(const Params& updates) {
  std::optional<Array> total;
  for (const auto& [name, g] : updates) {
    const Array s = sum(g * g);
    total = total ? *total + s : s;
  }
  return total ? sqrt(*total) : scalar(0.0f);
}

namespace detail {
namespace {
Sharding replicated_over(const Sharding& s) {
  if (const NamedSharding* n = s.named()) return NamedSharding(n->mesh(), PartitionSpec());
  return s;
}
}  // namespace

Array count_like(const Params& params) {
  std::optional<Sharding> home;
  for (const auto& [name, p] : params) {
    if (!p.committed()) return zeros({}, DType::int32);
    const Sharding here = replicated_over(p.sharding());
    if (home && !(*home == here)) return zeros({}, DType::int32);
    home = here;
  }
  return home ? zeros({}, DType::int32, *home) : zeros({}, DType::int32);
}
}  // namespace detail

// ---- Transformations

GradientTransformation identity() {
  return stateless("identity", [](const Params& updates, const Params&) { return updates; });
}

GradientTransformation scale(float step_size) {
  return stateless("scale", [step_size](const Params& updates, const Params&) {
    Params out;
    for (const auto& [name, g] : updates) out.emplace(name, step_size * g);
    return out;
  });
}

GradientTransformation scale_by_schedule(Schedule step_size_fn) {
  if (!step_size_fn)
    throw Error(
        "optax.scale_by_schedule: the schedule is empty; give a function of the int32 "
        "step count returning a float32 scalar");
  const std::string kind = "scale_by_schedule";
  auto init = [kind](const Params& params) {
    OptState s = empty_state(kind);
    s.scalars.emplace("count", detail::count_like(params));
    return s;
  };
  auto update = [kind, step_size_fn](const Params& updates, const OptState& state, const Params&) {
    require_kind(kind, state, kind);
    const Array& count = require_count(kind, state);
    Array step_size = step_size_fn(count);
    if (!step_size.valid() || step_size.ndim() != 0)
      throw Error("optax.scale_by_schedule: the schedule gave " +
                  (step_size.valid() ? type_of(step_size) : std::string("an empty Array")) +
                  " for the step count; a schedule returns a scalar (float32[])");
    if (step_size.dtype() != DType::float32) step_size = astype(step_size, DType::float32);
    Params out;
    for (const auto& [name, g] : updates) out.emplace(name, step_size * g);
    OptState next = empty_state(kind);
    next.scalars.emplace("count", safe_increment(count));
    return std::make_pair(std::move(out), std::move(next));
  };
  return GradientTransformation(kind, std::move(init), std::move(update));
}

GradientTransformation scale_by_learning_rate(ScalarOrSchedule learning_rate, bool flip_sign) {
  const float m = flip_sign ? -1.0f : 1.0f;
  if (learning_rate.is_schedule()) {
    Schedule f = learning_rate.schedule();
    return scale_by_schedule([f, m](const Array& count) { return m * f(count); });
  }
  return scale(m * learning_rate.value());
}

GradientTransformation scale_by_adam(float b1, float b2, float eps, float eps_root, bool nesterov) {
  const std::string kind = "scale_by_adam";
  require_unit(kind, "b1", b1);
  require_unit(kind, "b2", b2);
  require_nonnegative(kind, "eps", eps);
  require_nonnegative(kind, "eps_root", eps_root);
  auto init = [kind](const Params& params) {
    OptState s = empty_state(kind);
    Params mu, nu;
    for (const auto& [name, p] : params) {
      mu.emplace(name, zeros_like(p));
      nu.emplace(name, zeros_like(p));
    }
    s.trees.emplace("mu", std::move(mu));
    s.trees.emplace("nu", std::move(nu));
    s.scalars.emplace("count", detail::count_like(params));
    return s;
  };
  auto update = [=](const Params& updates, const OptState& state, const Params&) {
    require_kind(kind, state, kind);
    const Params& mu = state.tree("mu");
    const Params& nu = state.tree("nu");
    require_like(op_name(kind), mu, "the state's mu (init() made it for the params)", updates,
                 "the updates");
    require_like(op_name(kind), nu, "the state's nu (init() made it for the params)", updates,
                 "the updates");
    const Array count_inc = safe_increment(require_count(kind, state));
    // bias_correction(moment, decay, count): moment / (1 - decay^count), on the device, in
    // float32, or in float64 for float64 moments (1 - b2^t in float32 loses 1e-5 to
    // cancellation at small t); then in the moment's dtype, as optax's astype(moment.dtype)
    // (bfloat16 params get bfloat16 updates).
    struct Corrections {
      Array c1, c2;
      std::optional<Array> c1_next;
    };
    std::map<DType, Corrections> by_dtype;
    const auto corrections = [&](const Array& like) -> const Corrections& {
      const DType t = like.dtype() == DType::float64 ? DType::float64 : DType::float32;
      auto it = by_dtype.find(t);
      if (it == by_dtype.end()) {
        const auto correction = [&](float decay, const Array& count) { return 1.0f - power(decay, astype(count, t)); };
        Corrections c{correction(b1, count_inc), correction(b2, count_inc), std::nullopt};
        if (nesterov) c.c1_next = correction(b1, safe_increment(count_inc));
        it = by_dtype.emplace(t, std::move(c)).first;
      }
      return it->second;
    };
    const auto in = [](const Array& c, const Array& like) {
      return is_floating(like.dtype()) && c.dtype() != like.dtype() ? astype(c, like.dtype()) : c;
    };
    Params out, mu_out, nu_out;
    for (const auto& [name, g] : updates) {
      const Array m = (1.0f - b1) * g + b1 * mu.at(name);
      const Array v = (1.0f - b2) * (g * g) + b2 * nu.at(name);
      const Corrections& c = corrections(m);
      const Array m_hat = nesterov ? b1 * (m / in(*c.c1_next, m)) + (1.0f - b1) * (g / in(c.c1, g)) : m / in(c.c1, m);
      const Array v_hat = v / in(c.c2, v);
      out.emplace(name, m_hat / (sqrt(eps_root != 0.0f ? v_hat + eps_root : v_hat) + eps));
      mu_out.emplace(name, m);
      nu_out.emplace(name, v);
    }
    OptState next = empty_state(kind);
    next.trees.emplace("mu", std::move(mu_out));
    next.trees.emplace("nu", std::move(nu_out));
    next.scalars.emplace("count", count_inc);
    return std::make_pair(std::move(out), std::move(next));
  };
  return GradientTransformation(kind, std::move(init), std::move(update));
}

GradientTransformation trace(float decay, bool nesterov) {
  const std::string kind = "trace";
  if (!std::isfinite(decay))
    throw Error("optax.trace: decay = " + number_text(decay) + "; give a finite momentum");
  auto init = [kind](const Params& params) {
    OptState s = empty_state(kind);
    Params t;
    for (const auto& [name, p] : params) t.emplace(name, zeros_like(p));
    s.trees.emplace("trace", std::move(t));
    return s;
  };
  auto update = [=](const Params& updates, const OptState& state, const Params&) {
    require_kind(kind, state, kind);
    const Params& tr = state.tree("trace");
    require_like(op_name(kind), tr, "the state's trace (init() made it for the params)", updates,
                 "the updates");
    Params out, next_trace;
    for (const auto& [name, g] : updates) {
      const Array t = g + decay * tr.at(name);
      out.emplace(name, nesterov ? g + decay * t : t);
      next_trace.emplace(name, t);
    }
    OptState next = empty_state(kind);
    next.trees.emplace("trace", std::move(next_trace));
    return std::make_pair(std::move(out), std::move(next));
  };
  return GradientTransformation(kind, std::move(init), std::move(update));
}

GradientTransformation add_decayed_weights(float weight_decay, Mask mask) {
  if (!std::isfinite(weight_decay))
    throw Error("optax.add_decayed_weights: weight_decay = " + number_text(weight_decay) +
                "; give a finite weight decay");
  return stateless(
      "add_decayed_weights", [weight_decay, mask](const Params& updates, const Params& params) {
        if (params.empty() && !updates.empty())
          throw Error(
              "optax.add_decayed_weights (adamw's weight decay) needs the params: pass them "
              "as update()'s third argument, update(grads, state, params)");
        require_like("optax.add_decayed_weights", params, "the params", updates, "the updates");
        for (const std::string& name : mask.names())
          if (!params.count(name))
            throw Error("optax mask: the entry '" + name + "' names no parameter; the params are " +
                        quoted(keys(params)) + " (give the mask exactly the params' names)");
        Params out;
        for (const auto& [name, g] : updates) {
          const Array& p = params.at(name);
          out.emplace(name, mask.empty() || mask(name, p) ? g + weight_decay * p : g);
        }
        return out;
      });
}

GradientTransformation clip_by_global_norm(float max_norm) {
  if (!(max_norm > 0.0f) || !std::isfinite(max_norm))
    throw Error("optax.clip_by_global_norm: max_norm = " + number_text(max_norm) +
                "; give a finite max_norm > 0");
  return stateless("clip_by_global_norm", [max_norm](const Params& updates, const Params&) {
    if (updates.empty()) return updates;
    const Array g_norm = global_norm(updates);
    const Array trigger = g_norm < max_norm;
    Params out;
    for (const auto& [name, t] : updates)
      out.emplace(name, where(trigger, t, (t / g_norm) * max_norm));
    return out;
  });
}

GradientTransformation chain(std::vector<GradientTransformation> transformations) {
  return named_chain("chain", std::move(transformations));
}

// ---- Optimizers

GradientTransformation sgd(ScalarOrSchedule learning_rate, float momentum, bool nesterov) {
  return named_chain("sgd", {momentum != 0.0f ? trace(momentum, nesterov) : identity(),
                             scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation adam(ScalarOrSchedule learning_rate, float b1, float b2, float eps,
                            float eps_root, bool nesterov) {
  return named_chain("adam", {scale_by_adam(b1, b2, eps, eps_root, nesterov),
                              scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation adamw(ScalarOrSchedule learning_rate, float b1, float b2, float eps,
                             float eps_root, float weight_decay, Mask mask, bool nesterov) {
  return named_chain("adamw", {scale_by_adam(b1, b2, eps, eps_root, nesterov),
                               add_decayed_weights(weight_decay, std::move(mask)),
                               scale_by_learning_rate(std::move(learning_rate))});
}

// ---- Shardings for out_shardings

ShardingTree state_shardings(const OptState& state, const ShardingTree& params,
                             const ShardingTree& scalars) {
  std::vector<ShardingTree> entries;
  for (size_t i = 0; i < state.trees.size(); ++i) entries.push_back(params);
  for (size_t i = 0; i < state.scalars.size(); ++i) entries.push_back(scalars);
  for (const OptState& inner : state.inner)
    entries.push_back(state_shardings(inner, params, scalars));
  return ShardingTree::list(std::move(entries));
}

}  // namespace meshvk::optax

namespace meshvk::detail {

using optax::OptState;

void Tree<OptState>::flatten(const OptState& s, std::vector<Array>& out) {
  for (const auto& kv : s.trees) Tree<Params>::flatten(kv.second, out);
  for (const auto& kv : s.scalars) out.push_back(kv.second);
  for (const OptState& i : s.inner) flatten(i, out);
}

void Tree<OptState>::structure(const OptState& s, std::string& key) {
  key += "Opt" + std::to_string(s.kind.size()) + ":" + s.kind + "(";
  for (const auto& kv : s.trees) {
    key += std::to_string(kv.first.size()) + ":" + kv.first;
    Tree<Params>::structure(kv.second, key);
  }
  key += ";";
  for (const auto& kv : s.scalars) key += std::to_string(kv.first.size()) + ":" + kv.first + "A";
  key += ";";
  for (const OptState& i : s.inner) structure(i, key);
  key += ")";
}

OptState Tree<OptState>::skeleton(const OptState& s) {
  OptState k{s.kind, {}, {}, {}};
  for (const auto& kv : s.trees) k.trees.emplace(kv.first, Tree<Params>::skeleton(kv.second));
  for (const auto& kv : s.scalars) k.scalars.emplace(kv.first, Array());
  for (const OptState& i : s.inner) k.inner.push_back(skeleton(i));
  return k;
}

OptState Tree<OptState>::unflatten(const OptState& like, const std::vector<Array>& leaves,
                                   size_t& pos) {
  OptState s{like.kind, {}, {}, {}};
  for (const auto& kv : like.trees)
    s.trees.emplace(kv.first, Tree<Params>::unflatten(kv.second, leaves, pos));
  for (const auto& kv : like.scalars) s.scalars.emplace(kv.first, leaves.at(pos++));
  for (const OptState& i : like.inner) s.inner.push_back(unflatten(i, leaves, pos));
  return s;
}

void Tree<OptState>::shardings(const OptState& s, const ShardingTree& t, LeafShardings& out,
                               const TreePlace& where) {
  if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(s, t, out);
  std::vector<std::string> parts;
  for (const auto& kv : s.trees) parts.push_back(kv.first);
  for (const auto& kv : s.scalars) parts.push_back(kv.first);
  for (size_t i = 0; i < s.inner.size(); ++i) parts.push_back("inner[" + std::to_string(i) + "]");
  std::string what =
      "an optax::OptState of " + (s.kind.empty() ? std::string("no kind") : s.kind) + " (";
  for (size_t i = 0; i < parts.size(); ++i) what += (i ? ", " : "") + parts[i];
  what += "; optax::state_shardings makes the list)";
  const size_t trees = s.trees.size(), scalars = s.scalars.size();
  list_shardings(
      parts.size(), t, where, what, [&](size_t i, const ShardingTree& e, const TreePlace& at) {
        if (i < trees) {
          Tree<Params>::shardings(std::next(s.trees.begin(), static_cast<long>(i))->second, e, out,
                                  at);
        } else if (i < trees + scalars) {
          Tree<Array>::shardings(std::next(s.scalars.begin(), static_cast<long>(i - trees))->second,
                                 e, out, at);
        } else {
          shardings(s.inner[i - trees - scalars], e, out, at);
        }
      });
}

}  // namespace meshvk::detail

#pragma once
// Optimizers as pure functions, in optax's shape: a GradientTransformation is a pair of
// functions, init(params) -> state and update(updates, state, params) -> (updates, new state),
// composed with chain() and applied with apply_updates(). Every number a step changes lives in
// the state on the device (the moments laid out as their parameters, the step count an int32
// scalar), so a jitted training step takes the state and returns the next one and is traced once.
// params and updates are Params or any other pytree of Arrays (a registered struct, std::pair,
// std::tuple, std::vector, nested Params): as in optax, the updates have the params' structure.
// A state keeps a tree's leaves as Params keyed by their paths (".w1", "[1][0]", "['w']": see
// leaf_paths), so one state type serves every tree and stays a jit argument.
//
//   auto opt = optax::chain(optax::clip_by_global_norm(1.0f),
//                           optax::adamw(optax::warmup_cosine_decay_schedule(0, 1e-3, 10, 100)));
//   optax::OptState state = opt.init(params);
//   auto step = jit([&](const Params& p, const optax::OptState& s, const Array& x) {
//     auto [updates, next] = opt.update(grad(loss)(p, x), s, p);
//     return std::make_pair(optax::apply_updates(p, updates), next);
//   });
#include <algorithm>
#include <concepts>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/tree.hpp"

namespace meshvk::optax {

// A transformation's state, as optax's NamedTuple states: what made it (`kind`, e.g.
// "scale_by_adam"), its trees laid out like the params (adam's "mu" and "nu", trace's "trace":
// zeros_like each parameter, so a sharded parameter's moments have its sharding), its scalars
// (the step "count", int32[] on the device), and for chain() the state of each transformation in
// turn. jit takes it as an argument and returns it (its Arrays in a fixed order: the trees by
// name, the scalars by name, then the inner states).
struct OptState {
  std::string kind;
  std::map<std::string, Params> trees;
  std::map<std::string, Array> scalars;
  std::vector<OptState> inner;

  // The named tree or scalar (an Error lists those there are).
  const Params& tree(const std::string& name) const;
  const Array& scalar(const std::string& name) const;
  // The first step count, depth first (this state's, else its inner states' in order): an Error
  // when there is none (the transformations hold no count, as sgd with a constant rate).
  const Array& count() const;
};

// A function of the int32 step count (an int32[] Array) giving a float32 scalar Array, computed
// with meshvk's ops so that it runs on the device and under jit (optax.Schedule).
using Schedule = std::function<Array(const Array& count)>;

// A learning rate: a number, or a Schedule of the step count (optax.ScalarOrSchedule).
class ScalarOrSchedule {
 public:
  ScalarOrSchedule(double value) : value_(static_cast<float>(value)) {}
  template <class F>
  requires(std::is_invocable_r_v<Array, const F&, const Array&> &&
           !std::is_convertible_v<F, double>) ScalarOrSchedule(F schedule)
      : schedule_(Schedule(std::move(schedule))) {}
  bool is_schedule() const { return static_cast<bool>(schedule_); }
  float value() const { return value_; }
  const Schedule& schedule() const { return schedule_; }

 private:
  float value_ = 0.0f;
  Schedule schedule_;
};

// Which parameters a weight decay applies to (optax's mask): a function of the name and the
// parameter (true: decayed), or a map with a bool for every parameter name. Empty: all of them.
// For params that are another pytree, the name is the Array's path in it (".w1" for a registered
// struct's field, "[0]" for an element, "['w']" for a Params entry: see leaf_paths).
class Mask {
 public:
  Mask() = default;
  template <class F>
  requires std::is_invocable_r_v<bool, const F&, const std::string&, const Array&> Mask(F f)
      : fn_(std::move(f)) {}
  Mask(std::map<std::string, bool> by_name);
  // optax's mask tree of bools for a pytree: one bool per Array of `params`, in flatten's order
  // (jax.tree.leaves' order); the state and the updates name the Arrays by path (leaf_paths).
  template <class T>
    requires(meshvk::detail::is_leafy_v<T> && !std::is_same_v<T, Params>)
  Mask(const T& params, const std::vector<bool>& per_leaf);
  bool empty() const { return !fn_; }
  bool operator()(const std::string& name, const Array& param) const { return fn_(name, param); }
  // The parameter names a by-name mask was made for (none for a function mask): one naming no
  // parameter is an Error where the mask is applied, as optax's tree mismatch.
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::function<bool(const std::string&, const Array&)> fn_;
  std::vector<std::string> names_;
};

// A pytree other than Params that the transformations take as params and updates: an Array,
// a registered struct, std::pair, std::tuple, std::vector, or nestings of them and Params.
template <class T>
concept ParamTree = meshvk::detail::is_leafy_v<T> && !std::is_same_v<T, Params> &&
                    !std::is_same_v<T, OptState>;

// The path of each Array of a pytree, in flatten's order (jax.tree_util.keystr's spelling):
// ".w1" for a registered struct's field, "[1]" for an element of a pair, tuple or vector,
// "['w']" for a Params entry, "" for a lone Array; a Params' own are its names.
template <class T>
  requires meshvk::detail::is_leafy_v<T>
std::vector<std::string> leaf_paths(const T& tree);

using InitFn = std::function<OptState(const Params& params)>;
using UpdateFn = std::function<std::pair<Params, OptState>(
    const Params& updates, const OptState& state, const Params& params)>;

// optax.GradientTransformation. update() checks, before anything is computed, that the updates
// have the params' names and shapes (when params are given: an Error names the missing and the
// extra ones) and that the state is the one init() made for them. params may be left empty for
// transformations that do not read them (all but add_decayed_weights / adamw).
class GradientTransformation {
 public:
  GradientTransformation(std::string name, InitFn init, UpdateFn update)
      : name_(std::move(name)), init_(std::move(init)), update_(std::move(update)) {}
  OptState init(const Params& params) const { return init_(params); }
  std::pair<Params, OptState> update(const Params& updates, const OptState& state,
                                     const Params& params = {}) const;
  // The same for any other pytree of Arrays (see ParamTree): the state holds its Arrays by path,
  // the updates come back with the structure of the updates given. With params, the two must be
  // the same tree (an Error names both structures' paths otherwise).
  template <class T>
    requires ParamTree<T>
  OptState init(const T& params) const;
  template <class T>
    requires ParamTree<T>
  std::pair<T, OptState> update(const T& updates, const OptState& state) const;
  template <class T>
    requires ParamTree<T>
  std::pair<T, OptState> update(const T& updates, const OptState& state, const T& params) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  InitFn init_;
  UpdateFn update_;
};

// params + updates, each parameter keeping its sharding (the names must match).
Params apply_updates(const Params& params, const Params& updates);
// sqrt of the sum of every element's square, a float32 scalar (optax.global_norm).
Array global_norm(const Params& updates);
// The same for any other pytree (params and updates the same tree: an Error otherwise). The
// norm sums the Arrays in their paths' order, as clip_by_global_norm does.
template <class T>
  requires ParamTree<T>
T apply_updates(const T& params, const T& updates);
template <class T>
  requires ParamTree<T>
Array global_norm(const T& updates);

// ---- Transformations (optax._src.transform, clipping, combine).
GradientTransformation identity();
GradientTransformation scale(float step_size);  // updates * step_size
// updates * step_size_fn(count), count from 0 (then incremented, stopping at 2^31 - 1).
GradientTransformation scale_by_schedule(Schedule step_size_fn);
// -learning_rate (flip_sign) as scale or scale_by_schedule.
GradientTransformation scale_by_learning_rate(ScalarOrSchedule learning_rate,
                                              bool flip_sign = true);
// Adam's rescaling: mu = b1 mu + (1 - b1) g, nu = b2 nu + (1 - b2) g^2, count += 1, updates
// mu_hat / (sqrt(nu_hat + eps_root) + eps) with mu_hat = mu / (1 - b1^count) and nu_hat likewise
// (nesterov: Nadam's mu_hat = b1 mu / (1 - b1^(count+1)) + (1 - b1) g / (1 - b1^count)).
// b1 and b2 lie in [0, 1), eps and eps_root are finite and >= 0.
GradientTransformation scale_by_adam(float b1 = 0.9f, float b2 = 0.999f, float eps = 1e-8f,
                                     float eps_root = 0.0f, bool nesterov = false);
// Momentum: trace = updates + decay * trace; updates = trace, or with nesterov
// updates + decay * trace.
GradientTransformation trace(float decay, bool nesterov = false);
// updates + weight_decay * params for the parameters the mask selects (all when empty).
GradientTransformation add_decayed_weights(float weight_decay = 0.0f, Mask mask = {});
// Every update scaled by max_norm / global_norm when global_norm >= max_norm (stateless).
GradientTransformation clip_by_global_norm(float max_norm);
// optax.chain: each transformation's updates go to the next; the state holds theirs in order.
GradientTransformation chain(std::vector<GradientTransformation> transformations);
template <class... T>
requires(std::same_as<T, GradientTransformation>&&...) GradientTransformation
    chain(GradientTransformation first, T... rest) {
  return chain(std::vector<GradientTransformation>{std::move(first), std::move(rest)...});
}

// ---- Optimizers (optax._src.alias), with optax's argument order and defaults.
// momentum 0 adds no trace (optax's momentum=None; its values are the same).
GradientTransformation sgd(ScalarOrSchedule learning_rate, float momentum = 0.0f,
                           bool nesterov = false);
GradientTransformation adam(ScalarOrSchedule learning_rate, float b1 = 0.9f, float b2 = 0.999f,
                            float eps = 1e-8f, float eps_root = 0.0f, bool nesterov = false);
// Decoupled weight decay: updates = -lr * (adam's update + weight_decay * param).
GradientTransformation adamw(ScalarOrSchedule learning_rate, float b1 = 0.9f, float b2 = 0.999f,
                             float eps = 1e-8f, float eps_root = 0.0f, float weight_decay = 1e-4f,
                             Mask mask = {}, bool nesterov = false);

// ---- Schedules (optax.schedules), evaluated on the device from the int32 count.
Schedule constant_schedule(float value);
// init_value to end_value linearly over transition_steps after transition_begin, then end_value
// (transition_steps <= 0: init_value throughout; a negative transition_begin counts as 0).
Schedule linear_schedule(float init_value, float end_value, int transition_steps,
                         int transition_begin = 0);
Schedule polynomial_schedule(float init_value, float end_value, float power, int transition_steps,
                             int transition_begin = 0);
// init_value * decay_rate^((count - transition_begin) / transition_steps) (floored with
// staircase), init_value up to transition_begin, bounded by end_value when given (below when
// decay_rate < 1, else above). transition_steps <= 0 or decay_rate 0: init_value throughout.
Schedule exponential_decay(float init_value, int transition_steps, float decay_rate,
                           int transition_begin = 0, bool staircase = false,
                           std::optional<float> end_value = std::nullopt);
// init_value * ((1 - alpha) * (0.5 (1 + cos(pi min(count, decay_steps) / decay_steps)))^exponent
// + alpha); decay_steps must be positive.
Schedule cosine_decay_schedule(float init_value, int decay_steps, float alpha = 0.0f,
                               float exponent = 1.0f);
// linear_schedule(init_value, peak_value, warmup_steps) until warmup_steps, then
// cosine_decay_schedule(peak_value, decay_steps - warmup_steps, end_value / peak_value) of
// count - warmup_steps (decay_steps counts the warmup: it must exceed warmup_steps).
Schedule warmup_cosine_decay_schedule(float init_value, float peak_value, int warmup_steps,
                                      int decay_steps, float end_value = 0.0f,
                                      float exponent = 1.0f);
// schedules[0] before boundaries[0], then schedules[i + 1] of count - boundaries[i].
Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int> boundaries);

// Shardings for jit's out_shardings of a state: `params` (a Sharding for all, or
// ShardingTree::dict by name, as for the params) for each of its trees, `scalars` for its counts.
ShardingTree state_shardings(const OptState& state, const ShardingTree& params,
                             const ShardingTree& scalars = std::nullopt);
// The same for a state of another pytree: `params` laid out by `shardings`, a tree shaped like
// them or a prefix of it (as jit's out_shardings for them), each Array's sharding given to the
// state's entries of its path.
template <class T>
  requires ParamTree<T>
ShardingTree state_shardings(const OptState& state, const T& params, const ShardingTree& shardings,
                             const ShardingTree& scalars = std::nullopt);

namespace detail {
// Where a step count goes: with the params when they all lie on one mesh (replicated there) or
// one device, so that no step moves it; otherwise uncommitted, as optax's jnp.zeros([], int32).
Array count_like(const Params& params);

// A tree's Arrays as Params keyed by path (what the transformations compute on), and back.
Params params_by_path(const std::vector<std::string>& paths, const std::vector<Array>& leaves);
std::vector<Array> leaves_by_path(const std::string& op, const std::vector<std::string>& paths,
                                  const Params& by_path);
// `b` must be the same tree as `a` (the same structure key): an Error naming both trees' paths.
void require_same_tree(const std::string& op, const std::string& a_what, const std::string& a_key,
                       const std::vector<std::string>& a_paths, const std::string& b_what,
                       const std::string& b_key, const std::vector<std::string>& b_paths);
std::function<bool(const std::string&, const Array&)> mask_of_leaves(
    const std::vector<std::string>& paths, const std::vector<bool>& per_leaf);

template <class T>
Params as_params(const T& tree) {
  std::vector<Array> leaves;
  meshvk::detail::Tree<T>::flatten(tree, leaves);
  return params_by_path(leaf_paths(tree), leaves);
}

template <class T>
T from_params(const std::string& op, const T& like, const Params& by_path) {
  const std::vector<Array> leaves = leaves_by_path(op, leaf_paths(like), by_path);
  size_t pos = 0;
  return meshvk::detail::Tree<T>::unflatten(like, leaves, pos);
}

template <class T>
void require_same_tree(const std::string& op, const T& a, const std::string& a_what, const T& b,
                       const std::string& b_what) {
  std::string a_key, b_key;
  meshvk::detail::Tree<T>::structure(a, a_key);
  meshvk::detail::Tree<T>::structure(b, b_key);
  if (a_key != b_key)
    require_same_tree(op, a_what, a_key, leaf_paths(a), b_what, b_key, leaf_paths(b));
}
}  // namespace detail

template <class T>
  requires meshvk::detail::is_leafy_v<T>
std::vector<std::string> leaf_paths(const T& tree) {
  std::vector<std::string> paths;
  if constexpr (std::is_same_v<T, Params>) {
    for (const auto& kv : tree) paths.push_back(kv.first);
  } else {
    meshvk::detail::leaf_paths(tree, "", paths);
  }
  return paths;
}

template <class T>
  requires(meshvk::detail::is_leafy_v<T> && !std::is_same_v<T, Params>)
Mask::Mask(const T& params, const std::vector<bool>& per_leaf)
    : fn_(detail::mask_of_leaves(leaf_paths(params), per_leaf)) {}

template <class T>
  requires ParamTree<T>
OptState GradientTransformation::init(const T& params) const {
  return init_(detail::as_params(params));
}

template <class T>
  requires ParamTree<T>
std::pair<T, OptState> GradientTransformation::update(const T& updates,
                                                      const OptState& state) const {
  auto [u, next] = update(detail::as_params(updates), state);
  return {detail::from_params("optax." + name_, updates, u), std::move(next)};
}

template <class T>
  requires ParamTree<T>
std::pair<T, OptState> GradientTransformation::update(const T& updates, const OptState& state,
                                                      const T& params) const {
  // update(grads, state, {}) leaves the params out, as optax's params=None: a value-initialised
  // tree has no Arrays, or only empty ones.
  std::vector<Array> given;
  meshvk::detail::Tree<T>::flatten(params, given);
  if (std::none_of(given.begin(), given.end(), [](const Array& x) { return x.valid(); }))
    return update(updates, state);
  detail::require_same_tree("optax." + name_, params, "the params", updates, "the updates");
  auto [u, next] = update(detail::as_params(updates), state, detail::as_params(params));
  return {detail::from_params("optax." + name_, updates, u), std::move(next)};
}

template <class T>
  requires ParamTree<T>
T apply_updates(const T& params, const T& updates) {
  detail::require_same_tree("optax.apply_updates", params, "the params", updates, "the updates");
  return detail::from_params("optax.apply_updates", params,
                             apply_updates(detail::as_params(params), detail::as_params(updates)));
}

template <class T>
  requires ParamTree<T>
Array global_norm(const T& updates) {
  return global_norm(detail::as_params(updates));
}

template <class T>
  requires ParamTree<T>
ShardingTree state_shardings(const OptState& state, const T& params, const ShardingTree& shardings,
                             const ShardingTree& scalars) {
  meshvk::detail::LeafShardings per_leaf;
  const std::string name = "optax.state_shardings";
  meshvk::detail::Tree<T>::shardings(params, shardings, per_leaf,
                                     meshvk::detail::TreePlace{name, "the params"});
  const std::vector<std::string> paths = leaf_paths(params);
  std::vector<std::pair<std::string, ShardingTree>> by_path;
  for (size_t i = 0; i < paths.size(); ++i) by_path.emplace_back(paths[i], ShardingTree(per_leaf[i]));
  return state_shardings(state, ShardingTree::dict(std::move(by_path)), scalars);
}

}  // namespace meshvk::optax

namespace meshvk::detail {

// jit's tree of an OptState: its trees by name, its scalars by name, then its inner states. A
// leaf of out_shardings lays out all of it, a ShardingTree::list has one entry per tree, scalar
// and inner state in that order (optax::state_shardings makes one).
template <>
struct Tree<optax::OptState> {
  static constexpr bool leafy = true;
  static void flatten(const optax::OptState& s, std::vector<Array>& out);
  static void structure(const optax::OptState& s, std::string& key);
  static optax::OptState skeleton(const optax::OptState& s);
  static optax::OptState unflatten(const optax::OptState& like, const std::vector<Array>& leaves,
                                   size_t& pos);
  static void shardings(const optax::OptState& s, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where);
};

}  // namespace meshvk::detail

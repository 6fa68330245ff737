#pragma once
// jax.lax's control flow: scan, fori_loop, while_loop and cond over pytrees of Arrays (Array,
// Params, std::vector / std::pair / std::tuple of them, std::nullopt for None).
//
// A loop's body is traced once: its first iteration runs under a capture of its own, and the
// device runs the recorded command buffers again for every further iteration, with the carry
// copied from the outputs into the inputs in between. So a scan over 48 layers records the
// program of one layer, inside jit or not. The body must be a function of its arguments and of
// values it closes over (as in JAX): what it does on the host runs once, at the trace.
//
// Where a decision needs a device value on the host it costs a round trip (a wait for the
// device): while_loop reads its predicate after every iteration, and cond outside jit reads its
// predicate once. Inside a jit trace cond runs both branches and selects each result on the
// device (what JAX does for cond under vmap), so the program serves every later call; a jit
// function that runs a while_loop is traced again at each call (its trip count is data), and a
// loop body that runs one is run iteration by iteration instead of replayed.
//
// Gradients: scan (and fori_loop, a scan of upper - lower steps) is differentiated as JAX does,
// by a scan of the body's vjp running the other way; the forward pass keeps each iteration's
// carry (the residuals) and the backward pass recomputes the body from it, so memory holds
// the carries, not every intermediate of every iteration. Values the body closes over get
// gradients too. while_loop is not differentiable (nor in JAX): an Error says so.
// Higher order: where a scan's backward pass will itself be differentiated (inside jvp, which
// transposes the vjp, or under two nested gradients: a Hessian-vector product), the scan runs
// unrolled on the tapes, op by op, so every order is exact; JAX keeps the loop there, meshvk's
// trace time and jit program size then grow with the length. Under jvp that includes scans
// inside a checkpointed or custom_vjp function, whose forward pass jvp differentiates too.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/tree.hpp"

namespace meshvk {

namespace detail {

using LoopFn = std::function<std::vector<Array>(const std::vector<Array>&)>;
struct LoopResult {
  std::vector<Array> carry;
  size_t recorded = 0;     // command buffers the body recorded (its size as a program)
  bool unrolled = false;   // run iteration by iteration (the body decided on the host)
};
// body(carry) returns the next carry followed by per-iteration outputs, which `each` sees
// (valid until the next iteration: copy what is kept).
LoopResult run_loop(const std::string& name, const LoopFn& body, const std::vector<Array>& init,
                    int64_t iterations,
                    const std::function<void(int64_t, const std::vector<Array>&)>& each);
using ScanBody = std::function<std::pair<std::vector<Array>, std::vector<Array>>(
    const std::vector<Array>& carry, const std::vector<Array>& x)>;
struct ScanLeaves {
  std::vector<Array> carry, ys;
  size_t recorded = 0;
};
ScanLeaves scan_leaves(const ScanBody& body, const std::vector<Array>& init,
                       const std::vector<Array>& xs, std::optional<int64_t> length, bool reverse);
std::vector<Array> while_leaves(const std::function<Array(const std::vector<Array>&)>& cond,
                                const LoopFn& body, const std::vector<Array>& init);
std::vector<Array> cond_leaves(const Array& pred, const std::function<std::vector<Array>()>& on_true,
                               const std::function<std::vector<Array>()>& on_false);

template <class T>
std::vector<Array> leaves_of(const T& x) {
  std::vector<Array> out;
  Tree<T>::flatten(x, out);
  return out;
}
template <class T>
T unflatten_like(const T& like, const std::vector<Array>& leaves) {
  size_t pos = 0;
  return Tree<T>::unflatten(like, leaves, pos);
}
template <class T>
std::string structure_of(const T& x) {
  std::string key;
  Tree<T>::structure(x, key);
  return key;
}
[[noreturn]] void carry_structure_error(const char* op, const std::string& given, const std::string& returned);

}  // namespace detail

namespace lax {

// jax.lax.scan(f, init, xs, length, reverse): f(carry, x) -> std::pair(carry, y); returns
// std::pair(final carry, ys), ys stacked along a new leading axis. xs is a pytree of arrays
// sliced along their leading axis (std::nullopt and `length` for none); y may be std::nullopt.
// The carry keeps its structure, shapes and dtypes; a carry the body lays out differently is
// moved back to its input's sharding.
template <class F, class C, class X>
auto scan(F f, const C& init, const X& xs, std::optional<int64_t> length = std::nullopt,
          bool reverse = false) {
  static_assert(detail::is_leafy_v<C>, "scan: the carry must be a pytree of Arrays");
  static_assert(detail::is_leafy_v<X>, "scan: xs must be a pytree of Arrays (std::nullopt for none)");
  using R = std::decay_t<std::invoke_result_t<const F&, const C&, const X&>>;
  static_assert(detail::is_pair<R>::value, "scan: the body must return std::pair(carry, y)");
  static_assert(std::is_convertible_v<typename R::first_type, C>,
                "scan: the body must return the carry's type as the pair's first element");
  using Y = std::decay_t<typename R::second_type>;
  static_assert(detail::is_leafy_v<Y>, "scan: y must be a pytree of Arrays (std::nullopt for none)");
  auto y_like = std::make_shared<std::shared_ptr<Y>>();  // not optional: Y may be std::nullopt_t
  const std::string structure = detail::structure_of(init);
  // By value: the backward pass runs the body again after scan returns.
  const detail::ScanBody body = [f = std::move(f), init, xs, y_like, structure](const std::vector<Array>& c,
                                                                               const std::vector<Array>& x) {
    R r = f(detail::unflatten_like(init, c), detail::unflatten_like(xs, x));
    C carry = std::move(r.first);
    if (detail::structure_of(carry) != structure) detail::carry_structure_error("scan", structure, detail::structure_of(carry));
    if (!*y_like) *y_like = std::make_shared<Y>(detail::Tree<Y>::skeleton(r.second));
    return std::make_pair(detail::leaves_of(carry), detail::leaves_of(r.second));
  };
  detail::ScanLeaves out = detail::scan_leaves(body, detail::leaves_of(init), detail::leaves_of(xs), length, reverse);
  return std::make_pair(detail::unflatten_like(init, out.carry), detail::unflatten_like(**y_like, out.ys));
}

// jax.lax.fori_loop(lower, upper, body, init) with host bounds: body(i, carry) -> carry, i an
// int32 scalar Array running from lower to upper - 1. A scan of upper - lower steps (traced once,
// differentiable).
template <class F, class C>
C fori_loop(int64_t lower, int64_t upper, F body, const C& init) {
  static_assert(detail::is_leafy_v<C>, "fori_loop: the carry must be a pytree of Arrays");
  if (upper <= lower) return init;
  if (lower < INT32_MIN || upper > static_cast<int64_t>(INT32_MAX) + 1)
    throw Error("fori_loop: bounds [" + std::to_string(lower) + ", " + std::to_string(upper) +
                ") leave int32, the index's dtype");
  using IC = std::pair<Array, C>;
  auto [last, none] = scan(
      [body = std::move(body)](const IC& ic, std::nullopt_t) {
        C next = body(ic.first, ic.second);
        return std::make_pair(IC(ic.first + 1, std::move(next)), std::nullopt);
      },
      IC(scalar(static_cast<int32_t>(lower)), init), std::nullopt, upper - lower);
  return last.second;
}

// jax.lax.while_loop(cond_fun, body_fun, init): while cond_fun(carry) (a scalar bool, or a
// number compared with 0), carry = body_fun(carry). The body is traced once and replayed; the
// predicate is read on the host after each iteration. Not differentiable (an Error under grad).
template <class CondF, class BodyF, class C>
C while_loop(const CondF& cond_fun, const BodyF& body_fun, const C& init) {
  static_assert(detail::is_leafy_v<C>, "while_loop: the carry must be a pytree of Arrays");
  const std::string structure = detail::structure_of(init);
  const auto out = detail::while_leaves(
      [&](const std::vector<Array>& c) -> Array { return cond_fun(detail::unflatten_like(init, c)); },
      [&](const std::vector<Array>& c) {
        C next = body_fun(detail::unflatten_like(init, c));
        if (detail::structure_of(next) != structure)
          detail::carry_structure_error("while_loop", structure, detail::structure_of(next));
        return detail::leaves_of(next);
      },
      detail::leaves_of(init));
  return detail::unflatten_like(init, out);
}

// jax.lax.cond(pred, true_fun, false_fun, *operands): true_fun(operands...) where pred (a scalar)
// is true, else false_fun(operands...). Both must return the same pytree of types. Outside jit
// one branch runs (pred read on the host); inside a jit trace both run and each result is
// selected on the device.
template <class T, class F, class... Ops>
auto cond(const Array& pred, const T& true_fun, const F& false_fun, const Ops&... operands) {
  using R = std::decay_t<std::invoke_result_t<const T&, const Ops&...>>;
  static_assert(detail::is_leafy_v<R>, "cond: the branches must return a pytree of Arrays");
  static_assert(std::is_convertible_v<std::invoke_result_t<const F&, const Ops&...>, R>,
                "cond: both branches must return the same type");
  std::unique_ptr<R> like;
  std::string structure;
  auto run = [&](const auto& branch) {
    R r = branch(operands...);
    // Under jit both branches run: the same leaf count is not enough (Params named apart, a
    // vector split differently), their structures must be equal, as JAX requires.
    if (!like) {
      like = std::make_unique<R>(detail::Tree<R>::skeleton(r));
      structure = detail::structure_of(r);
    } else if (detail::structure_of(r) != structure) {
      throw Error("cond: the true branch returned a pytree of structure " + structure + " and the false branch one of " +
                  detail::structure_of(r) +
                  " (A: an Array, [..]: a vector, (..): a pair or tuple, {..}: Params, N: nullopt); both branches must "
                  "return the same structure");
    }
    return detail::leaves_of(r);
  };
  const auto leaves = detail::cond_leaves(pred, [&] { return run(true_fun); }, [&] { return run(false_fun); });
  return detail::unflatten_like(*like, leaves);
}

// jax.lax.switch(index, branches, *operands): branches[index](operands...), the index (an int32
// scalar) clamped into [0, branches.size()), as JAX's. Spelled switch_ (switch is a C++
// keyword). A tree of conds: outside jit one branch runs (so branches that disagree on the
// result's types are found only under jit, where JAX finds them always); inside a jit trace every
// branch runs and the results are selected on the device, as cond's.
template <class R, class... Ops>
R switch_(const Array& index, const std::vector<std::function<R(const Ops&...)>>& branches,
          const Ops&... operands) {
  if (branches.empty()) throw Error("switch_: no branches; give at least one");
  if (!index.valid() || index.ndim() != 0 || !is_integer(index.dtype()))
    throw Error("switch_: the index must be an integer scalar Array");
  std::function<R(size_t, size_t, const Ops&...)> pick = [&](size_t lo, size_t hi, const Ops&... ops) -> R {
    if (hi - lo == 1) return branches[lo](ops...);  // branches [lo, hi)
    const size_t mid = lo + (hi - lo) / 2;
    return cond(index < static_cast<int32_t>(mid), [&](const Ops&... o) { return pick(lo, mid, o...); },
                [&](const Ops&... o) { return pick(mid, hi, o...); }, ops...);
  };
  return pick(0, branches.size(), operands...);
}

}  // namespace lax

}  // namespace meshvk

#pragma once
// jax.vjp, jax.jvp, jax.checkpoint (remat), jax.custom_vjp and jax.vmap over pytrees of Arrays
// (Array, Params, std::vector / std::pair / std::tuple of them, registered structs).
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/control_flow.hpp"
#include "meshvk/error.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/tree.hpp"

namespace meshvk {

namespace detail {

// See graph/tape.hpp: f's outputs at `primals` and its backward pass (cotangents of the outputs
// to cotangents of the primals, then of `closure`; invalid where none flows).
struct LinearizedLeaves {
  std::vector<Array> outputs;
  std::function<std::vector<Array>(const std::vector<Array>& cotangents)> backward;
};
LinearizedLeaves linearize_leaves(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                                  const std::vector<Array>& primals);
// jvp as the transpose of the vjp: J t.
std::pair<std::vector<Array>, std::vector<Array>> jvp_leaves(
    const std::function<std::vector<Array>(const std::vector<Array>&)>& f, const std::vector<Array>& primals,
    const std::vector<Array>& tangents);
// Runs f with the active tapes suspended and records one rule for it: the backward pass calls
// f again (checkpoint).
std::vector<Array> checkpoint_leaves(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                                     const std::vector<Array>& args);
// Runs fwd with the active tapes suspended (it returns the outputs, then the residuals) and
// records bwd(residuals, output cotangents) -> argument cotangents as the rule.
std::vector<Array> custom_vjp_leaves(
    const std::function<std::pair<std::vector<Array>, std::vector<Array>>(const std::vector<Array>&)>& fwd,
    std::function<std::vector<Array>(const std::vector<Array>& residuals, const std::vector<Array>& cotangents)> bwd,
    const std::vector<Array>& args);
// Whether a grad is recording on this thread.
bool any_tape_active();
// moveaxis for vmap's in_axes / out_axes.
Array move_axis(const Array& x, int from, int to, const char* op);
// vmap's outputs (stacked along axis 0) split along it as the first mapped input `mapped` is
// along its mapped axis (moved to 0), as JAX's batched outputs are, where the mesh axes are
// free in the output and its length divides over them; others as they are.
std::vector<Array> keep_batch_sharding(std::vector<Array> ys, const Array& mapped);

template <class T>
inline constexpr bool is_tuple_v = false;
template <class... T>
inline constexpr bool is_tuple_v<std::tuple<T...>> = true;

// Arguments as leaves and back: start[i] is argument i's first leaf.
template <class... A>
struct ArgLeaves {
  std::vector<Array> leaves;
  std::array<size_t, sizeof...(A) + 1> start{};
  explicit ArgLeaves(const A&... args) {
    size_t i = 0;
    ((start[i++] = leaves.size(), Tree<A>::flatten(args, leaves)), ...);
    start[sizeof...(A)] = leaves.size();
  }
  // f called with arguments rebuilt from `l` (shaped like `like`).
  template <class F>
  static decltype(auto) call(const F& f, const std::tuple<const A&...>& like, const std::vector<Array>& l) {
    return [&]<size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
      std::array<size_t, sizeof...(A)> pos{};
      size_t p = 0;
      ((pos[I] = p, p += leaf_count_of(std::get<I>(like))), ...);
      return f(Tree<A>::unflatten(std::get<I>(like), l, pos[I])...);
    }(std::index_sequence_for<A...>{});
  }
  template <class T>
  static size_t leaf_count_of(const T& x) {
    std::vector<Array> tmp;
    Tree<T>::flatten(x, tmp);
    return tmp.size();
  }
};

// Cotangents as leaves, int leaves (no gradient) as zeros of their primal.
inline std::vector<Array> zeros_where_none(std::vector<Array> g, const std::vector<Array>& like) {
  for (size_t i = 0; i < g.size() && i < like.size(); ++i)
    if (!g[i].valid()) g[i] = zeros_like(like[i]);
  return g;
}

}  // namespace detail

// jax.vjp(f, *primals): (f(*primals), vjp_fn), where vjp_fn(cotangent of the output) returns
// std::tuple of one cotangent per primal, shaped like it (int leaves: zeros, JAX's float0).
// vjp_fn runs the recorded backward pass: it does not call f again, and may be called several
// times. Differentiating vjp_fn itself (under grad) works op by op, except through a lax::scan
// that f ran: an Error then; take the gradient of a function that calls vjp inside it.
template <class F, class... A>
auto vjp(F f, const A&... primals) {
  static_assert((detail::is_leafy_v<A> && ...), "vjp: primals must be pytrees of Arrays");
  using Out = std::decay_t<std::invoke_result_t<const F&, const A&...>>;
  static_assert(detail::is_leafy_v<Out>, "vjp: f must return a pytree of Arrays");
  const detail::ArgLeaves<A...> args(primals...);
  const std::tuple<const A&...> like(primals...);
  auto out_like = std::make_shared<std::shared_ptr<Out>>();
  detail::LinearizedLeaves lin = detail::linearize_leaves(
      [&](const std::vector<Array>& l) {
        Out o = detail::ArgLeaves<A...>::call(f, like, l);
        *out_like = std::make_shared<Out>(o);
        return detail::leaves_of(o);
      },
      args.leaves);
  Out out = detail::unflatten_like(**out_like, lin.outputs);
  auto vjp_fn = [backward = lin.backward, leaves = args.leaves, start = args.start,
                 likes = std::tuple<A...>(primals...), shape = *out_like, outputs = lin.outputs](const Out& cotangent) {
    std::vector<Array> ct = detail::leaves_of(cotangent);
    if (detail::structure_of(cotangent) != detail::structure_of(*shape))
      throw Error("vjp: the cotangent's structure " + detail::structure_of(cotangent) + " differs from the output's " +
                  detail::structure_of(*shape));
    for (size_t k = 0; k < ct.size() && k < outputs.size(); ++k)
      if (ct[k].valid() && outputs[k].valid() && ct[k].dtype() != outputs[k].dtype())
        throw Error("vjp: the cotangent of output " + std::to_string(k) + " is " + type_of(ct[k]) + ", the output is " +
                    type_of(outputs[k]) + "; give one of the output's dtype (JAX raises TypeError too)");
    const std::vector<Array> g = detail::zeros_where_none(backward(ct), leaves);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      std::array<size_t, sizeof...(A)> pos{start[I]...};
      return std::tuple<A...>(detail::Tree<A>::unflatten(std::get<I>(likes), g, pos[I])...);
    }(std::index_sequence_for<A...>{});
  };
  return std::make_pair(std::move(out), std::move(vjp_fn));
}

// jax.jvp(f, primals, tangents): (f(*primals), J tangents). primals and tangents are
// std::tuple of the arguments (or one pytree for a function of one argument). Computed as the
// transpose of the vjp (two backward passes); a lax::scan (fori_loop, vmap) inside f runs
// unrolled, as under a gradient of a gradient (control_flow.hpp).
template <class F, class P>
auto jvp(F f, const P& primals, const P& tangents) {
  if constexpr (detail::is_tuple_v<P>) {
    return std::apply(
        [&](const auto&... p) {
          using Out = std::decay_t<std::invoke_result_t<const F&, decltype(p)...>>;
          static_assert(detail::is_leafy_v<Out>, "jvp: f must return a pytree of Arrays");
          const auto args = detail::ArgLeaves<std::decay_t<decltype(p)>...>(p...);
          const auto like = std::tuple<const std::decay_t<decltype(p)>&...>(p...);
          const auto tan = detail::leaves_of(tangents);
          if (detail::structure_of(tangents) != detail::structure_of(primals))
            throw Error("jvp: the tangents' structure " + detail::structure_of(tangents) + " differs from the primals' " +
                        detail::structure_of(primals));
          std::shared_ptr<Out> out_like;
          auto [out, jt] = detail::jvp_leaves(
              [&](const std::vector<Array>& l) {
                Out o = detail::ArgLeaves<std::decay_t<decltype(p)>...>::call(f, like, l);
                out_like = std::make_shared<Out>(o);
                return detail::leaves_of(o);
              },
              args.leaves, tan);
          return std::make_pair(detail::unflatten_like(*out_like, out), detail::unflatten_like(*out_like, jt));
        },
        primals);
  } else {
    return jvp([&](const P& x) { return f(x); }, std::tuple<P>(primals), std::tuple<P>(tangents));
  }
}

// jax.checkpoint (jax.remat): f as it is, except that under grad its intermediates are not kept
// for the backward pass; the backward pass runs f again (so it holds f's intermediates only
// while it differentiates f). f is kept by value and called again when the gradient is taken:
// it must not refer to locals that end before then (capture by value; Arrays are handles).
template <class F>
auto checkpoint(F f) {
  return [f = std::move(f)](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    using Out = std::decay_t<std::invoke_result_t<const F&, decltype(args)...>>;
    static_assert(detail::is_leafy_v<Out>, "checkpoint: f must return a pytree of Arrays");
    using Args = detail::ArgLeaves<std::decay_t<decltype(args)>...>;
    const Args leaves(args...);
    auto like = std::make_shared<std::tuple<std::decay_t<decltype(args)>...>>(args...);
    auto out_like = std::make_shared<std::shared_ptr<Out>>();
    const std::vector<Array> out = detail::checkpoint_leaves(
        [f, like, out_like](const std::vector<Array>& l) {
          Out o = std::apply(
              [&](const auto&... a) {
                return Args::call(f, std::tuple<const std::decay_t<decltype(a)>&...>(a...), l);
              },
              *like);
          *out_like = std::make_shared<Out>(o);
          return detail::leaves_of(o);
        },
        leaves.leaves);
    return detail::unflatten_like(**out_like, out);
  };
}
template <class F>
auto remat(F f) {
  return checkpoint(std::move(f));
}

// jax.custom_vjp: a function with a gradient rule of its own. fwd(args...) returns
// std::pair(output, residuals); bwd(residuals, output cotangent) returns std::tuple of one
// cotangent per argument, shaped like it. Outside grad, f(args...) runs; under grad, fwd runs
// (its ops are not differentiated) and bwd is the rule. bwd is kept by value and called when
// the gradient is taken.
template <class F, class Fwd, class Bwd>
auto custom_vjp(F f, Fwd fwd, Bwd bwd) {
  return [f = std::move(f), fwd = std::move(fwd), bwd = std::move(bwd)](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    using Out = std::decay_t<std::invoke_result_t<const F&, decltype(args)...>>;
    using FwdOut = std::decay_t<std::invoke_result_t<const Fwd&, decltype(args)...>>;
    static_assert(detail::is_pair<FwdOut>::value, "custom_vjp: fwd must return std::pair(output, residuals)");
    static_assert(std::is_convertible_v<typename FwdOut::first_type, Out>,
                  "custom_vjp: fwd's output must have f's type");
    using Res = std::decay_t<typename FwdOut::second_type>;
    static_assert(detail::is_leafy_v<Out> && detail::is_leafy_v<Res>,
                  "custom_vjp: outputs and residuals must be pytrees of Arrays");
    if (!detail::any_tape_active()) return Out(f(args...));
    using ArgTuple = std::tuple<std::decay_t<decltype(args)>...>;
    const ArgTuple likes(args...);
    auto out_like = std::make_shared<std::shared_ptr<Out>>();
    auto res_like = std::make_shared<std::shared_ptr<Res>>();
    const std::vector<Array> out = detail::custom_vjp_leaves(
        [&](const std::vector<Array>&) {
          FwdOut r = fwd(args...);
          *out_like = std::make_shared<Out>(r.first);
          *res_like = std::make_shared<Res>(r.second);
          return std::make_pair(detail::leaves_of(Out(r.first)), detail::leaves_of(r.second));
        },
        [bwd, likes, out_like, res_like](const std::vector<Array>& residuals, const std::vector<Array>& cts) {
          const auto g = bwd(detail::unflatten_like(**res_like, residuals), detail::unflatten_like(**out_like, cts));
          static_assert(std::is_convertible_v<decltype(g), ArgTuple>,
                        "custom_vjp: bwd must return std::tuple of one cotangent per argument, typed like it");
          const ArgTuple grads(g);
          if (detail::structure_of(grads) != detail::structure_of(likes))
            throw Error("custom_vjp: bwd returned cotangents of structure " + detail::structure_of(grads) +
                        " for arguments of structure " + detail::structure_of(likes));
          return detail::leaves_of(grads);
        },
        detail::ArgLeaves<std::decay_t<decltype(args)>...>(args...).leaves);
    return detail::unflatten_like(**out_like, out);
  };
}

// jax.vmap(f, in_axes, out_axes): f mapped over an axis of its arguments. in_axes has one
// entry per argument (empty: axis 0 of every argument), applying to every Array in it; nullopt
// passes the argument to every call unmapped. out_axes places the mapped axis in every output.
// The map is a lax.map: a scan over the mapped axis whose body (f on one slice) is traced once
// and replayed per slice. It does not batch f's ops into wider kernels (JAX's batching rules);
// the values, gradients (through scan's rule) and shardings are the same.
template <class F>
auto vmap(F f, std::vector<std::optional<int>> in_axes = {}, int out_axes = 0) {
  return [f = std::move(f), in_axes, out_axes](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    using Out = std::decay_t<std::invoke_result_t<const F&, decltype(args)...>>;
    static_assert(detail::is_leafy_v<Out>, "vmap: f must return a pytree of Arrays");
    using Args = detail::ArgLeaves<std::decay_t<decltype(args)>...>;
    constexpr size_t n = sizeof...(args);
    if (!in_axes.empty() && in_axes.size() != n)
      throw Error("vmap: " + std::to_string(in_axes.size()) + " in_axes for " + std::to_string(n) +
                  " arguments; give one per argument (nullopt: not mapped), or none to map axis 0 of each");
    const Args a(args...);
    std::vector<Array> xs;
    std::vector<size_t> mapped;
    int64_t size = -1;
    for (size_t i = 0; i < n; ++i) {
      const std::optional<int> axis = in_axes.empty() ? std::optional<int>(0) : in_axes[i];
      if (!axis) continue;
      for (size_t l = a.start[i]; l < a.start[i + 1]; ++l) {
        const Array moved = detail::move_axis(a.leaves[l], *axis, 0, "vmap");
        if (size >= 0 && moved.shape()[0] != size)
          throw Error("vmap: mapped axes of different sizes: " + std::to_string(size) + " and " +
                      std::to_string(moved.shape()[0]) + " (argument " + std::to_string(i) + ", " +
                      type_of(a.leaves[l]) + ", axis " + std::to_string(*axis) + ")");
        size = moved.shape()[0];
        xs.push_back(moved);
        mapped.push_back(l);
      }
    }
    if (size < 0) throw Error("vmap: no argument is mapped; give an axis in in_axes for at least one argument with Arrays");
    auto out_like = std::make_shared<std::shared_ptr<Out>>();
    // By value: a backward pass that runs the body again (an unrolled loop: f runs a while_loop)
    // calls it after this call has returned.
    auto held = std::make_shared<std::tuple<std::decay_t<decltype(args)>...>>(args...);
    const detail::ScanBody body = [f = f, held, leaves = a.leaves, mapped, out_like](const std::vector<Array>& carry,
                                                                                   const std::vector<Array>& x) {
      std::vector<Array> l = leaves;
      for (size_t k = 0; k < mapped.size(); ++k) l[mapped[k]] = x[k];
      Out o = std::apply(
          [&](const auto&... v) { return Args::call(f, std::tuple<const std::decay_t<decltype(v)>&...>(v...), l); }, *held);
      *out_like = std::make_shared<Out>(o);
      return std::make_pair(carry, detail::leaves_of(o));
    };
    const detail::ScanLeaves out = detail::scan_leaves(body, {}, xs, size, false);
    std::vector<Array> ys;
    for (const Array& y : detail::keep_batch_sharding(out.ys, xs.front()))
      ys.push_back(detail::move_axis(y, 0, out_axes, "vmap"));
    return detail::unflatten_like(**out_like, ys);
  };
}

}  // namespace meshvk

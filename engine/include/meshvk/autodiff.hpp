#pragma once
// Reverse-mode automatic differentiation: jax.grad and jax.value_and_grad over functions of
// Arrays and of named parameter collections.
#include <array>
#include <concepts>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/error.hpp"
#include "meshvk/tree.hpp"

namespace meshvk {

// jax.lax.stop_gradient: x's value, through which no gradient flows (grad treats it as a
// constant). Costs nothing: the same buffers, or the same pending elementwise work.
Array stop_gradient(const Array& x);
namespace lax {
inline Array stop_gradient(const Array& x) { return ::meshvk::stop_gradient(x); }
}  // namespace lax


// Evaluates f(args) and the gradient of its scalar float32 result with respect to args[i] for
// each i in argnums (every argument when argnums is empty). Throws Error for a non-scalar result,
// an argnum out of range, or an int32 argument asked for a gradient.
std::pair<Array, std::vector<Array>> value_and_grad_call(const std::function<Array(const std::vector<Array>&)>& f,
                                                          const std::vector<Array>& args, std::vector<int> argnums);

// JAX's has_aux=True: value_and_grad(f, 0, has_aux) for an f that returns (value, aux).
struct HasAux {
  explicit constexpr HasAux() = default;
};
inline constexpr HasAux has_aux{};

namespace detail {

// The gradient of f(leaves) with respect to leaves[k] for each k in wrt (an empty wrt is no
// gradient); names[k] says what leaf k is, for messages.
std::pair<Array, std::vector<Array>> value_and_grad_leaves(const std::function<Array(const std::vector<Array>&)>& f,
                                                            const std::vector<Array>& leaves, const std::vector<int>& wrt,
                                                            const std::vector<std::string>& names);
[[noreturn]] void grad_argnum_error(int argnum, size_t arguments, bool differentiable);

// Every pytree of Arrays can be differentiated (Array, Params, vectors, pairs, tuples,
// registered structs); other arguments (ints, floats, ...) pass through.
template <class T>
inline constexpr bool is_differentiable_v = Tree<T>::leafy;
template <class T>
struct is_pair : std::false_type {};
template <class A, class B>
struct is_pair<std::pair<A, B>> : std::true_type {};
template <class R>
struct aux_of {
  using type = int;
};
template <class A, class B>
struct aux_of<std::pair<A, B>> {
  using type = B;
};

// A gradient has its argument's structure. With the argnum known only at run time: the type
// every differentiable argument shares, or std::variant<Array, Params> for arguments that mix
// those two.
template <class... A>
struct GradType {
  static constexpr bool arrays = (std::is_same_v<A, Array> || ...);
  static constexpr bool params = (std::is_same_v<A, Params> || ...);
  static constexpr size_t kinds = (0 + ... + (is_differentiable_v<A> ? 1 : 0));
  template <class T, class... Rest>
  struct first_leafy {
    using type = std::conditional_t<is_differentiable_v<T>, T, typename first_leafy<Rest...>::type>;
  };
  template <class T>
  struct first_leafy<T> {
    using type = std::conditional_t<is_differentiable_v<T>, T, Array>;
  };
  using first = typename first_leafy<A..., Array>::type;
  static constexpr bool uniform = ((!is_differentiable_v<A> || std::is_same_v<A, first>) && ...);
  using type = std::conditional_t<
      arrays && params, std::variant<Array, Params>,
      std::conditional_t<uniform, first, std::conditional_t<params, Params, Array>>>;
};

template <class T>
void flatten(const T& x, std::vector<Array>& out, std::vector<std::string>& names, size_t i) {
  if constexpr (std::is_same_v<T, Params>) {
    for (const auto& [name, value] : x) {
      out.push_back(value);
      names.push_back("argument " + std::to_string(i) + "['" + name + "']");
    }
  } else if constexpr (is_differentiable_v<T>) {
    const size_t before = out.size();
    Tree<T>::flatten(x, out);
    for (size_t k = before; k < out.size(); ++k)
      names.push_back(std::is_same_v<T, Array> ? "argument " + std::to_string(i)
                                               : "argument " + std::to_string(i) + " leaf " + std::to_string(k - before));
  }
}

template <class T>
size_t leaf_count(const T& x) {
  if constexpr (is_differentiable_v<T>) {
    std::vector<Array> tmp;
    Tree<T>::flatten(x, tmp);
    return tmp.size();
  } else {
    return 0;
  }
}

// The argument as f sees it: rebuilt from the (tracked) leaves, or passed through.
template <class T>
decltype(auto) rebuild(const T& x, const std::vector<Array>& leaves, size_t pos) {
  if constexpr (is_differentiable_v<T>) return T(Tree<T>::unflatten(x, leaves, pos));
  else return (x);
}

template <class G, class T>
G grad_like(const T& like, const std::vector<Array>& grads, size_t pos) {
  if constexpr (is_differentiable_v<T> && std::is_constructible_v<G, T>) {
    return G(Tree<T>::unflatten(like, grads, pos));
  } else {
    return G{};  // not reached: argnums were checked
  }
}

// Runs f on args with the arguments in argnums differentiated; returns the value, the aux (with
// Aux) and one gradient per argnum.
template <class A0 = Array, class...>
struct FirstGradType {
  using type = std::conditional_t<is_differentiable_v<A0>, A0, Array>;
};

// FirstArg: argnums is {0}, known when compiling, so the gradient is typed like argument 0.
template <bool Aux, bool FirstArg, class F, class... A>
auto differentiate(const F& f, const std::vector<int>& argnums, const A&... args) {
  using G = std::conditional_t<FirstArg, typename FirstGradType<A...>::type, typename GradType<A...>::type>;
  using R = std::invoke_result_t<const F&, decltype(rebuild(std::declval<const A&>(), std::declval<const std::vector<Array>&>(), size_t{}))...>;
  if constexpr (Aux) {
    static_assert(is_pair<std::decay_t<R>>::value, "has_aux: the function must return std::pair<Array, Aux> (value, aux)");
  } else {
    static_assert(!is_pair<std::decay_t<R>>::value,
                  "the function returns a pair (value, aux): pass meshvk::has_aux, as jax's has_aux=True");
    static_assert(std::is_convertible_v<R, Array>, "grad: the function must return an Array (a float32 scalar)");
  }
  constexpr size_t n = sizeof...(A);
  const std::array<size_t, n> counts{leaf_count(args)...};
  const std::array<bool, n> differentiable{is_differentiable_v<A>...};
  std::array<size_t, n> start{};
  for (size_t i = 0, total = 0; i < n; ++i) {
    start[i] = total;
    total += counts[i];
  }
  std::vector<Array> leaves;
  std::vector<std::string> names;
  {
    size_t i = 0;
    (flatten(args, leaves, names, i++), ...);
  }
  std::vector<int> wrt;
  for (const int a : argnums) {
    if (a < 0 || static_cast<size_t>(a) >= n || !differentiable[static_cast<size_t>(a)])
      grad_argnum_error(a, n, a >= 0 && static_cast<size_t>(a) < n);
    constexpr std::array<bool, n> typed{std::is_constructible_v<G, A>...};
    if (!typed[static_cast<size_t>(a)])
      throw Error("grad: argnums has " + std::to_string(a) +
                  ", whose pytree type differs from the other differentiated arguments'; with argnums chosen at run time "
                  "every differentiated argument must have one type (or be Array / Params); differentiate it separately");
    for (size_t j = 0; j < counts[static_cast<size_t>(a)]; ++j) wrt.push_back(static_cast<int>(start[static_cast<size_t>(a)] + j));
  }
  const auto targs = std::forward_as_tuple(args...);
  using AuxT = typename aux_of<std::decay_t<R>>::type;
  std::optional<AuxT> aux;
  const auto body = [&](const std::vector<Array>& l) -> Array {
    auto r = [&]<size_t... I>(std::index_sequence<I...>) {
      return f(rebuild(std::get<I>(targs), l, start[I])...);
    }(std::index_sequence_for<A...>{});
    if constexpr (Aux) {
      aux.emplace(std::move(r.second));
      return r.first;
    } else {
      return r;
    }
  };
  // Not a structured binding: clang before 16 cannot capture one in the lambda below.
  auto value_and_grads = value_and_grad_leaves(body, leaves, wrt, names);
  auto& value = value_and_grads.first;
  auto& grads = value_and_grads.second;  // the wrt leaves in argnums order
  std::vector<G> out;
  size_t pos = 0;
  for (const int a : argnums) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      ((I == static_cast<size_t>(a) ? (void)out.push_back(grad_like<G>(std::get<I>(targs), grads, pos)) : void()), ...);
    }(std::index_sequence_for<A...>{});
    pos += counts[static_cast<size_t>(a)];
  }
  if constexpr (Aux) return std::make_tuple(value, std::move(*aux), std::move(out));
  else return std::make_tuple(value, 0, std::move(out));
}

}  // namespace detail

// jax.value_and_grad(f, argnums): (value, gradient). Arguments are Arrays or Params; other
// arguments (ints, floats, ...) pass through and cannot be differentiated. With one argnum the
// gradient is one value shaped like that argument: value_and_grad(f) (argnum 0) gives an Array for
// an Array and Params for Params (grad(loss)(params, x) is Params); value_and_grad(f, i) gives an
// Array when every argument is an Array or none is Params, Params when none is an Array, else
// std::variant<Array, Params>. A vector of argnums gives a vector of them, in that order.
// Each returned function takes exactly the arguments f takes (a requires-clause), so jit and
// other callers that probe how it can be called see f's arity.
template <class F>
auto value_and_grad(F f) {
  return [f = std::move(f)](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<false, true>(f, {0}, args...);
    return std::make_pair(value, std::move(grads.front()));
  };
}
template <class F>
auto value_and_grad(F f, int argnum) {
  return [f = std::move(f), argnum](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<false, false>(f, {argnum}, args...);
    return std::make_pair(value, std::move(grads.front()));
  };
}
template <class F>
auto value_and_grad(F f, std::vector<int> argnums) {
  return [f = std::move(f), argnums](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<false, false>(f, argnums, args...);
    return std::make_pair(value, std::move(grads));
  };
}
// has_aux: f returns std::pair(value, aux); the result is ((value, aux), gradient), as JAX's.
template <class F>
auto value_and_grad(F f, HasAux) {
  return [f = std::move(f)](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<true, true>(f, {0}, args...);
    return std::make_pair(std::make_pair(value, std::move(aux)), std::move(grads.front()));
  };
}
template <class F>
auto value_and_grad(F f, int argnum, HasAux) {
  return [f = std::move(f), argnum](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<true, false>(f, {argnum}, args...);
    return std::make_pair(std::make_pair(value, std::move(aux)), std::move(grads.front()));
  };
}
template <class F>
auto value_and_grad(F f, std::vector<int> argnums, HasAux) {
  return [f = std::move(f), argnums](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<true, false>(f, argnums, args...);
    return std::make_pair(std::make_pair(value, std::move(aux)), std::move(grads));
  };
}

// jax.grad(f, argnums): the gradient alone (typed as value_and_grad's); with has_aux,
// (gradient, aux).
template <class F>
auto grad(F f) {
  return [f = std::move(f)](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  { return std::move(std::get<2>(detail::differentiate<false, true>(f, {0}, args...)).front()); };
}
template <class F>
auto grad(F f, int argnum) {
  return [f = std::move(f), argnum](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  { return std::move(std::get<2>(detail::differentiate<false, false>(f, {argnum}, args...)).front()); };
}
template <class F>
auto grad(F f, std::vector<int> argnums) {
  return [f = std::move(f), argnums](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  { return std::get<2>(detail::differentiate<false, false>(f, argnums, args...)); };
}
template <class F>
auto grad(F f, HasAux) {
  return [f = std::move(f)](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<true, true>(f, {0}, args...);
    return std::make_pair(std::move(grads.front()), std::move(aux));
  };
}
template <class F>
auto grad(F f, int argnum, HasAux) {
  return [f = std::move(f), argnum](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<true, false>(f, {argnum}, args...);
    return std::make_pair(std::move(grads.front()), std::move(aux));
  };
}
template <class F>
auto grad(F f, std::vector<int> argnums, HasAux) {
  return [f = std::move(f), argnums](const auto&... args)
    requires std::invocable<const F&, decltype(args)...>
  {
    auto [value, aux, grads] = detail::differentiate<true, false>(f, argnums, args...);
    return std::make_pair(std::move(grads), std::move(aux));
  };
}

// Gradient with respect to every parameter of a collection: f(params, inputs...) -> scalar.
std::pair<Array, Params> value_and_grad_params(const std::function<Array(const Params&)>& f, const Params& params);

template <class F, size_t... I>
Array apply_args(const F& f, const std::vector<Array>& a, std::index_sequence<I...>) {
  return f(a[I]...);
}

}  // namespace meshvk

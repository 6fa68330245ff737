#pragma once
// Reverse-mode automatic differentiation: jax.grad and jax.value_and_grad over functions of
// Arrays and of named parameter collections.
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"

namespace meshvk {

// A named collection of parameters in a fixed order: meshvk's pytree / state_dict.
using Params = std::map<std::string, Array>;

// Evaluates f(args) and the gradient of its scalar float32 result with respect to args[i] for
// each i in argnums (every argument when argnums is empty). Throws Error for a non-scalar result,
// an argnum out of range, or an int32 argument asked for a gradient.
std::pair<Array, std::vector<Array>> value_and_grad_call(const std::function<Array(const std::vector<Array>&)>& f,
                                                          const std::vector<Array>& args, std::vector<int> argnums);

// jax.value_and_grad(f, argnums): returns (value, gradients in argnums order).
template <class F>
auto value_and_grad(F f, std::vector<int> argnums = {0}) {
  return [f = std::move(f), argnums](const auto&... args) {
    return value_and_grad_call(
        [&f](const std::vector<Array>& a) { return apply_args(f, a, std::make_index_sequence<sizeof...(args)>{}); },
        {args...}, argnums);
  };
}

// jax.grad(f, argnums): the gradient (one Array for one argnum, a vector otherwise).
template <class F>
auto grad(F f, int argnum = 0) {
  return [g = value_and_grad(std::move(f), {argnum})](const auto&... args) { return g(args...).second.front(); };
}
template <class F>
auto grad(F f, std::vector<int> argnums) {
  return [g = value_and_grad(std::move(f), std::move(argnums))](const auto&... args) { return g(args...).second; };
}

// Gradient with respect to every parameter of a collection: f(params, inputs...) -> scalar.
std::pair<Array, Params> value_and_grad_params(const std::function<Array(const Params&)>& f, const Params& params);

template <class F, size_t... I>
Array apply_args(const F& f, const std::vector<Array>& a, std::index_sequence<I...>) {
  return f(a[I]...);
}

}  // namespace meshvk

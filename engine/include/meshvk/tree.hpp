#pragma once
// Pytrees for jit: the argument and result structures jit flattens into Arrays (Array, Params,
// std::vector, std::pair and std::tuple of them; nn.hpp adds nn::AdamState, optax.hpp
// optax::OptState), the static arguments that key its cache instead (ints, bools, floats, enums,
// strings), as jax.jit's static_argnums, and the trees of shardings out_shardings gives for
// structured results.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <map>

#include "meshvk/array.hpp"

namespace meshvk {

// A named collection of parameters in a fixed order: meshvk's pytree / state_dict.
using Params = std::map<std::string, Array>;

// One entry of jit's out_shardings, shaped like a result or any prefix of it (jax.jit's
// out_shardings pytree). A leaf, a Sharding or nullopt (follow the data), lays out every Array
// beneath it; list() lays out a std::pair, std::tuple or std::vector (or nn::AdamState: {m, v,
// count}) element by element; dict() lays out Params by name, one entry for every name.
class ShardingTree {
 public:
  enum class Kind { leaf, list, dict };
  ShardingTree(std::nullopt_t = std::nullopt) {}
  ShardingTree(std::optional<Sharding> sharding) : leaf_(std::move(sharding)) {}
  ShardingTree(Sharding sharding) : leaf_(std::move(sharding)) {}
  ShardingTree(NamedSharding sharding) : leaf_(Sharding(std::move(sharding))) {}
  ShardingTree(SingleDeviceSharding sharding) : leaf_(Sharding(std::move(sharding))) {}
  static ShardingTree list(std::vector<ShardingTree> elements);
  static ShardingTree dict(std::vector<std::pair<std::string, ShardingTree>> by_name);

  Kind kind() const { return kind_; }
  // A leaf's sharding (nullopt: follow the data).
  const std::optional<Sharding>& sharding() const { return leaf_; }
  // A list's elements, or a dict's entries in the order of names().
  const std::vector<ShardingTree>& elements() const { return elements_; }
  const std::vector<std::string>& names() const { return names_; }
  // "a sharding", "a list of 2 entries", "a dict of 'b', 'w'": what it is, for messages.
  std::string describe() const;

 private:
  Kind kind_ = Kind::leaf;
  std::optional<Sharding> leaf_;
  std::vector<ShardingTree> elements_;
  std::vector<std::string> names_;
};

inline ShardingTree ShardingTree::list(std::vector<ShardingTree> elements) {
  ShardingTree t;
  t.kind_ = Kind::list;
  t.elements_ = std::move(elements);
  return t;
}

inline ShardingTree ShardingTree::dict(std::vector<std::pair<std::string, ShardingTree>> by_name) {
  ShardingTree t;
  t.kind_ = Kind::dict;
  for (auto& [name, tree] : by_name) {
    t.names_.push_back(std::move(name));
    t.elements_.push_back(std::move(tree));
  }
  return t;
}

}  // namespace meshvk

namespace meshvk::detail {

// Tree<T>::leafy: T holds Arrays and is flattened; otherwise T is a static value.
// Tree<T>::shardings(x, tree, out, where) appends the sharding out_shardings' `tree` gives each
// of x's Arrays, in flatten's order; `where` names the function and the place in the result.
template <class T>
struct Tree {
  static constexpr bool leafy = false;
};

using LeafShardings = std::vector<std::optional<Sharding>>;

// Where an out_shardings tree is matched against a result: for messages.
struct TreePlace {
  const std::string& function;  // jit's name
  std::string path;             // "the result", "the result[1]['w']", "argument 0['w']"
  const char* option = "out_shardings";  // or "in_shardings"
  TreePlace at(const std::string& step) const { return {function, path + step, option}; }
};

// A tree that does not fit the value there (`what` is the value's kind, `valid` what fits it).
[[noreturn]] void out_sharding_tree_error(const TreePlace& where, const ShardingTree& given,
                                          const std::string& what, const std::string& valid);
// A dict's names against the Params' names (each must have exactly one entry).
void check_out_sharding_names(const TreePlace& where, const ShardingTree& given,
                              const std::vector<std::string>& names);

// A leaf lays out every Array of x alike.
template <class T>
void leaf_shardings(const T& x, const ShardingTree& leaf, LeafShardings& out) {
  std::vector<Array> leaves;
  Tree<T>::flatten(x, leaves);
  out.insert(out.end(), leaves.size(), leaf.sharding());
}

// A list for a sequence of n elements: each element's tree, from element(i, tree, place).
template <class E>
void list_shardings(size_t n, const ShardingTree& t, const TreePlace& where,
                    const std::string& what, E element) {
  if (t.kind() != ShardingTree::Kind::list || t.elements().size() != n)
    out_sharding_tree_error(
        where, t, what,
        "a sharding (or nullopt) for all of it, or ShardingTree::list with one entry per element");
  for (size_t i = 0; i < n; ++i)
    element(i, t.elements()[i], where.at("[" + std::to_string(i) + "]"));
}

// The path of each of x's Arrays below `prefix`, in flatten's order, spelled as JAX's
// jax.tree_util.keystr: "['w']" for a Params entry, "[1]" for an element of a std::vector,
// std::pair or std::tuple, ".w" for a field of a registered struct. A tree without paths (a
// hand-written Tree specialization) numbers its Arrays: "[0]", "[1]", ...
template <class T>
void leaf_paths(const T& x, const std::string& prefix, std::vector<std::string>& out) {
  if constexpr (requires { Tree<T>::paths(x, prefix, out); }) {
    Tree<T>::paths(x, prefix, out);
  } else {
    std::vector<Array> leaves;
    Tree<T>::flatten(x, leaves);
    for (size_t i = 0; i < leaves.size(); ++i) out.push_back(prefix + "[" + std::to_string(i) + "]");
  }
}

// The field names of MESHVK_REGISTER_PYTREE's member pointers as written ("&Mlp::w1, &Mlp::b1"
// gives w1, b1): the last name of each.
inline std::vector<std::string> field_names(std::string_view spelled) {
  std::vector<std::string> names;
  int depth = 0;
  std::string field;
  const auto finish = [&] {
    const size_t colons = field.rfind("::");
    std::string name = colons == std::string::npos ? field : field.substr(colons + 2);
    std::erase_if(name, [](char c) { return c == ' ' || c == '&' || c == '\t' || c == '\n' || c == '(' || c == ')'; });
    names.push_back(name);
    field.clear();
  };
  for (const char c : spelled) {
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c == ',' && depth == 0) finish();
    else field += c;
  }
  finish();
  return names;
}

template <>
struct Tree<Array> {
  static constexpr bool leafy = true;
  static void flatten(const Array& x, std::vector<Array>& out) { out.push_back(x); }
  static void structure(const Array&, std::string& key) { key += "A"; }
  static Array skeleton(const Array&) { return Array(); }
  static Array unflatten(const Array&, const std::vector<Array>& leaves, size_t& pos) {
    return leaves.at(pos++);
  }
  static void shardings(const Array&, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where) {
    if (t.kind() != ShardingTree::Kind::leaf)
      out_sharding_tree_error(where, t, "an Array", "a sharding (or nullopt)");
    out.push_back(t.sharding());
  }
  static void paths(const Array&, const std::string& prefix, std::vector<std::string>& out) {
    out.push_back(prefix);
  }
};

template <>
struct Tree<Params> {
  static constexpr bool leafy = true;
  static void flatten(const Params& p, std::vector<Array>& out) {
    for (const auto& kv : p) out.push_back(kv.second);
  }
  static void structure(const Params& p, std::string& key) {
    key += "{";
    for (const auto& kv : p) key += std::to_string(kv.first.size()) + ":" + kv.first + ",";
    key += "}";
  }
  static Params skeleton(const Params& p) {
    Params s;
    for (const auto& kv : p) s.emplace(kv.first, Array());
    return s;
  }
  static Params unflatten(const Params& like, const std::vector<Array>& leaves, size_t& pos) {
    Params p;
    for (const auto& kv : like) p.emplace(kv.first, leaves.at(pos++));
    return p;
  }
  static void shardings(const Params& p, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where) {
    if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(p, t, out);
    if (t.kind() != ShardingTree::Kind::dict)
      out_sharding_tree_error(
          where, t, "Params",
          "a sharding (or nullopt) for all of it, or ShardingTree::dict by name");
    std::vector<std::string> names;
    for (const auto& kv : p) names.push_back(kv.first);
    check_out_sharding_names(where, t, names);
    for (const auto& [name, x] : p) {
      const size_t i = static_cast<size_t>(std::find(t.names().begin(), t.names().end(), name) -
                                           t.names().begin());
      Tree<Array>::shardings(x, t.elements()[i], out, where.at("['" + name + "']"));
    }
  }
  static void paths(const Params& p, const std::string& prefix, std::vector<std::string>& out) {
    for (const auto& kv : p) out.push_back(prefix + "['" + kv.first + "']");
  }
};

// None: a pytree without leaves (a scan without xs, or a body without ys).
template <>
struct Tree<std::nullopt_t> {
  static constexpr bool leafy = true;
  static void flatten(const std::nullopt_t&, std::vector<Array>&) {}
  static void structure(const std::nullopt_t&, std::string& key) { key += "N"; }
  static std::nullopt_t skeleton(const std::nullopt_t&) { return std::nullopt; }
  static std::nullopt_t unflatten(const std::nullopt_t&, const std::vector<Array>&, size_t&) {
    return std::nullopt;
  }
  static void shardings(const std::nullopt_t&, const ShardingTree&, LeafShardings&, const TreePlace&) {}
  static void paths(const std::nullopt_t&, const std::string&, std::vector<std::string>&) {}
};

template <class T>
requires Tree<T>::leafy struct Tree<std::vector<T>> {
  static constexpr bool leafy = true;
  static void flatten(const std::vector<T>& v, std::vector<Array>& out) {
    for (const T& x : v) Tree<T>::flatten(x, out);
  }
  static void structure(const std::vector<T>& v, std::string& key) {
    key += "[";
    for (const T& x : v) Tree<T>::structure(x, key);
    key += "]";
  }
  static std::vector<T> skeleton(const std::vector<T>& v) {
    std::vector<T> s;
    for (const T& x : v) s.push_back(Tree<T>::skeleton(x));
    return s;
  }
  static std::vector<T> unflatten(const std::vector<T>& like, const std::vector<Array>& leaves,
                                  size_t& pos) {
    std::vector<T> v;
    for (const T& x : like) v.push_back(Tree<T>::unflatten(x, leaves, pos));
    return v;
  }
  static void shardings(const std::vector<T>& v, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where) {
    if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(v, t, out);
    list_shardings(v.size(), t, where, "a std::vector of " + std::to_string(v.size()),
                   [&](size_t i, const ShardingTree& e, const TreePlace& at) {
                     Tree<T>::shardings(v[i], e, out, at);
                   });
  }
  static void paths(const std::vector<T>& v, const std::string& prefix, std::vector<std::string>& out) {
    for (size_t i = 0; i < v.size(); ++i) leaf_paths(v[i], prefix + "[" + std::to_string(i) + "]", out);
  }
};

template <class... T>
requires(Tree<T>::leafy&&...) struct Tree<std::tuple<T...>> {
  static constexpr bool leafy = true;
  static void flatten(const std::tuple<T...>& t, std::vector<Array>& out) {
    std::apply([&](const T&... x) { (Tree<T>::flatten(x, out), ...); }, t);
  }
  static void structure(const std::tuple<T...>& t, std::string& key) {
    key += "(";
    std::apply([&](const T&... x) { (Tree<T>::structure(x, key), ...); }, t);
    key += ")";
  }
  static std::tuple<T...> skeleton(const std::tuple<T...>& t) {
    return std::apply([](const T&... x) { return std::tuple<T...>(Tree<T>::skeleton(x)...); }, t);
  }
  static std::tuple<T...> unflatten(const std::tuple<T...>& like, const std::vector<Array>& leaves,
                                    size_t& pos) {
    // Braced initialisation runs the element initialisers in order, as the leaves were flattened.
    return std::apply(
        [&](const T&... x) { return std::tuple<T...>{Tree<T>::unflatten(x, leaves, pos)...}; },
        like);
  }
  static void shardings(const std::tuple<T...>& x, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where) {
    if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(x, t, out);
    list_shardings(sizeof...(T), t, where, "a std::tuple of " + std::to_string(sizeof...(T)),
                   [&](size_t i, const ShardingTree& e, const TreePlace& at) {
                     [&]<size_t... I>(std::index_sequence<I...>) {
                       ((I == i ? Tree<T>::shardings(std::get<I>(x), e, out, at) : void()), ...);
                     }
                     (std::index_sequence_for<T...>{});
                   });
  }
  static void paths(const std::tuple<T...>& x, const std::string& prefix, std::vector<std::string>& out) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      (leaf_paths(std::get<I>(x), prefix + "[" + std::to_string(I) + "]", out), ...);
    }
    (std::index_sequence_for<T...>{});
  }
};

template <class A, class B>
requires(Tree<A>::leafy&& Tree<B>::leafy) struct Tree<std::pair<A, B>> {
  static constexpr bool leafy = true;
  static void flatten(const std::pair<A, B>& p, std::vector<Array>& out) {
    Tree<A>::flatten(p.first, out);
    Tree<B>::flatten(p.second, out);
  }
  static void structure(const std::pair<A, B>& p, std::string& key) {
    key += "(";
    Tree<A>::structure(p.first, key);
    Tree<B>::structure(p.second, key);
    key += ")";
  }
  static std::pair<A, B> skeleton(const std::pair<A, B>& p) {
    return {Tree<A>::skeleton(p.first), Tree<B>::skeleton(p.second)};
  }
  static std::pair<A, B> unflatten(const std::pair<A, B>& like, const std::vector<Array>& leaves,
                                   size_t& pos) {
    A a = Tree<A>::unflatten(like.first, leaves, pos);
    B b = Tree<B>::unflatten(like.second, leaves, pos);
    return {std::move(a), std::move(b)};
  }
  static void shardings(const std::pair<A, B>& p, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where) {
    if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(p, t, out);
    list_shardings(2, t, where, "a std::pair",
                   [&](size_t i, const ShardingTree& e, const TreePlace& at) {
                     if (i == 0)
                       Tree<A>::shardings(p.first, e, out, at);
                     else
                       Tree<B>::shardings(p.second, e, out, at);
                   });
  }
  static void paths(const std::pair<A, B>& p, const std::string& prefix, std::vector<std::string>& out) {
    leaf_paths(p.first, prefix + "[0]", out);
    leaf_paths(p.second, prefix + "[1]", out);
  }
};

template <class T>
inline constexpr bool is_leafy_v = Tree<std::remove_cvref_t<T>>::leafy;

// A static argument as jit keeps it: strings (and string literals) as std::string.
template <class T>
using StaticStored = std::conditional_t<std::is_convertible_v<const T&, std::string_view> &&
                                            !std::is_same_v<T, std::string>,
                                        std::string, std::decay_t<T>>;

template <class>
inline constexpr bool dependent_false = false;

// The cache-key text of a static argument: its type and value.
template <class T>
std::string static_key(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "bool:true" : "bool:false";
  } else if constexpr (std::is_integral_v<T>) {
    return std::string(typeid(T).name()) + ":" + std::to_string(v);
  } else if constexpr (std::is_same_v<T, float>) {
    return "f32:" + std::to_string(std::bit_cast<uint32_t>(v));  // bits: -0.0 and NaNs differ
  } else if constexpr (std::is_same_v<T, double>) {
    return "f64:" + std::to_string(std::bit_cast<uint64_t>(v));
  } else if constexpr (std::is_enum_v<T>) {
    return std::string(typeid(T).name()) + ":" + std::to_string(static_cast<long long>(v));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    const std::string_view s(v);
    return "str" + std::to_string(s.size()) + ":" + std::string(s);
  } else {
    static_assert(dependent_false<T>,
                  "jit: an argument must be an Array, Params, a std::vector / std::pair / "
                  "std::tuple of them, or a "
                  "static value (bool, integer, float, enum or string) that keys the cache");
    return {};
  }
}

// What the function is called with for a static argument: the stored value (a C string for a
// stored string literal, so both const char* and std::string parameters take it).
template <class T, class S>
decltype(auto) static_arg(const S& stored) {
  if constexpr (std::is_same_v<S, std::string> && !std::is_same_v<std::decay_t<T>, std::string>)
    return stored.c_str();
  else
    return (stored);
}

}  // namespace meshvk::detail

namespace meshvk::detail {

// A struct of pytree fields, registered with MESHVK_REGISTER_PYTREE: flattened field by field in
// the order given; other members (static configuration) are copied from the value it is rebuilt
// like.
template <class T, auto... Fields>
struct StructTree {
  static constexpr bool leafy = true;
  static void flatten(const T& x, std::vector<Array>& out) {
    (Tree<std::remove_cvref_t<decltype(x.*Fields)>>::flatten(x.*Fields, out), ...);
  }
  static void structure(const T& x, std::string& key) {
    key += std::string("S") + typeid(T).name() + "(";
    (Tree<std::remove_cvref_t<decltype(x.*Fields)>>::structure(x.*Fields, key), ...);
    key += ")";
  }
  static T skeleton(const T& x) {
    T s = x;
    ((s.*Fields = Tree<std::remove_cvref_t<decltype(x.*Fields)>>::skeleton(x.*Fields)), ...);
    return s;
  }
  static T unflatten(const T& like, const std::vector<Array>& leaves, size_t& pos) {
    T s = like;
    // A fold over the comma operator runs the fields in order, as they were flattened.
    ((s.*Fields = Tree<std::remove_cvref_t<decltype(like.*Fields)>>::unflatten(like.*Fields, leaves, pos)), ...);
    return s;
  }
  static void shardings(const T& x, const ShardingTree& t, LeafShardings& out, const TreePlace& where) {
    if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(x, t, out);
    size_t i = 0;
    list_shardings(sizeof...(Fields), t, where,
                   std::string("a registered struct of ") + std::to_string(sizeof...(Fields)) + " fields",
                   [&](size_t k, const ShardingTree& e, const TreePlace& at) {
                     i = 0;
                     ((i++ == k ? Tree<std::remove_cvref_t<decltype(x.*Fields)>>::shardings(x.*Fields, e, out, at)
                                : void()),
                      ...);
                   });
  }
  // ".w1": the fields' names as MESHVK_REGISTER_PYTREE spelled them ("[0]" for a struct
  // registered another way).
  static void paths(const T& x, const std::string& prefix, std::vector<std::string>& out) {
    std::vector<std::string> names;
    if constexpr (requires { Tree<T>::field_spelling; }) names = field_names(Tree<T>::field_spelling);
    size_t i = 0;
    const auto step = [&] {
      const std::string s = names.size() == sizeof...(Fields) ? "." + names[i] : "[" + std::to_string(i) + "]";
      ++i;
      return prefix + s;
    };
    (leaf_paths(x.*Fields, step(), out), ...);
  }
};

}  // namespace meshvk::detail

// Registers a struct as a pytree, at namespace scope outside any namespace, once:
//   struct Layer { meshvk::Array w, b; int heads; };
//   MESHVK_REGISTER_PYTREE(Layer, &Layer::w, &Layer::b)
// Its listed fields (Arrays, Params, vectors, pairs, tuples or other registered structs) are its
// leaves; then jit, grad, vjp, vmap, scan, checkpoint, shard_map, optax and out_shardings
// (ShardingTree::list, one entry per field) take it as JAX takes a registered pytree. Unlisted
// members are copied as they are (static). The fields' names as written here name its Arrays'
// paths (".w" for &Layer::w; see leaf_paths).
#define MESHVK_REGISTER_PYTREE(Type, ...)                                          \
  template <>                                                                      \
  struct meshvk::detail::Tree<Type> : meshvk::detail::StructTree<Type, __VA_ARGS__> { \
    static constexpr const char* field_spelling = #__VA_ARGS__;                    \
  }

namespace meshvk {

[[noreturn]] void device_put_tree_error(const std::string& what);

namespace detail {
// device_put of each leaf (nullopt: as it is); the moves that are each exactly an all-gather of
// one split dimension over the same mesh axes, of one dtype, go as one packed all-gather.
std::vector<Array> device_put_leaves(const std::vector<Array>& leaves, const LeafShardings& placed);
}  // namespace detail

// jax.device_put(pytree, shardings): every Array of x laid out as `shardings` says, a sharding
// for all of them or a tree shaped like x or a prefix of it (nullopt leaves an Array as it is).
// Leaves each moved by exactly an all-gather (split along one dimension to whole on the same
// mesh) over the same axes and of one dtype are gathered together, packed into one all-gather
// (XLA's all-gather combiner; FSDP's flat parameter): under jit and grad too, where their
// gradients go back as reduce-scatters that are packed where they are read together.
template <class T>
  requires(detail::Tree<T>::leafy && !std::is_same_v<T, Array>)
T device_put(const T& x, const ShardingTree& shardings) {
  std::vector<Array> leaves;
  detail::Tree<T>::flatten(x, leaves);
  detail::LeafShardings placed;
  const std::string name = "device_put";
  detail::Tree<T>::shardings(x, shardings, placed, detail::TreePlace{name, "the value"});
  if (placed.size() != leaves.size()) device_put_tree_error("the shardings do not cover every Array of the value");
  leaves = detail::device_put_leaves(leaves, placed);
  size_t pos = 0;
  return detail::Tree<T>::unflatten(x, leaves, pos);
}

}  // namespace meshvk

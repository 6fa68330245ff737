#pragma once
// Manual parallelism, as jax.shard_map: a function written for one device's piece, run on every
// device of a mesh, communicating through collectives over named mesh axes.
#include <concepts>
#include <functional>
#include <optional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/error.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/partition_spec.hpp"
#include "meshvk/source_location.hpp"
#include "meshvk/tree.hpp"

namespace meshvk {

// One mesh axis name or several: psum(x, "x") and psum(x, {"x", "y"}).
struct AxisNames {
  std::vector<std::string> names;
  AxisNames(const char* name) : names{name} {}
  AxisNames(std::string name) : names{std::move(name)} {}
  AxisNames(std::initializer_list<std::string> list) : names(list) {}
  AxisNames(std::vector<std::string> list) : names(std::move(list)) {}
};

using ShardMapBody = std::function<std::vector<Array>(const std::vector<Array>&)>;

// Runs `body` once as a program for every device of `mesh`: each argument arrives as the piece
// its in_spec gives the device (a 32-element array split by P('x') over 8 devices arrives as a
// 4-element array), and each result's pieces are assembled by its out_spec. An out_spec that
// leaves out a mesh axis claims the result is the same on every device along it; the claim is
// checked from the program (a psum'd value is, a per-device value is not).
//
// axis_names (JAX's shard_map(..., axis_names={...})): the body is manual over these mesh axes
// only (all of them when empty) and automatic over the rest. Inside, a value is then the piece of
// its device's coordinates along the manual axes, and global along the automatic ones, laid out
// over them as jit lays values out (an argument already split over an automatic axis stays so,
// the manual axes splitting its dimension first; every op propagates shardings as outside; a
// bare PartitionSpec in device_put / with_sharding_constraint / reshard names the body's mesh).
// in_specs and out_specs name only manual axes, and a result keeps its automatic layout.
// Collectives (psum, all_gather, axis_index, ...) run only over manual axes: naming an automatic
// one is an Error. Data moves only among devices at the same manual coordinates.
std::vector<Array> shard_map_call(const ShardMapBody& body, const Mesh& mesh,
                                  const std::vector<PartitionSpec>& in_specs,
                                  const std::vector<PartitionSpec>& out_specs,
                                  const std::vector<Array>& args,
                                  const std::vector<std::string>& axis_names = {});

// shard_map's in_specs and out_specs for one argument or the result: a tree of PartitionSpecs
// shaped like the value or like any prefix of it (JAX's pytree-prefix rule). A PartitionSpec lays
// out every Array beneath it; a list, braced ({P("x"), {P(), P("y")}} is JAX's
// (P('x'), [P(), P('y')])) or SpecTree::list, lays out a std::pair, std::tuple, std::vector or
// registered struct element by element (a struct field by field); SpecTree::dict lays out Params
// by name, one entry for every name. jit's in_shardings / out_shardings trees are matched against
// their values by the same code, so the two accept the same shapes.
class SpecTree {
 public:
  enum class Kind { leaf, list, dict };
  SpecTree() = default;  // P(): replicated
  SpecTree(PartitionSpec spec) : spec_(std::move(spec)) {}
  // A list. Beware SpecTree{t}: a list of one entry (as any braced initialiser), not a copy of t.
  SpecTree(std::initializer_list<SpecTree> elements) : kind_(Kind::list), elements_(elements) {}
  // A list of PartitionSpecs: out_specs as before spec trees (one per element of the result).
  SpecTree(const std::vector<PartitionSpec>& specs) : kind_(Kind::list), elements_(specs.begin(), specs.end()) {}
  static SpecTree list(std::vector<SpecTree> elements);
  static SpecTree dict(std::vector<std::pair<std::string, SpecTree>> by_name);

  Kind kind() const { return kind_; }
  const PartitionSpec& spec() const { return spec_; }  // a leaf's
  // A list's elements, or a dict's entries in the order of names().
  const std::vector<SpecTree>& elements() const { return elements_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  Kind kind_ = Kind::leaf;
  PartitionSpec spec_;
  std::vector<SpecTree> elements_;
  std::vector<std::string> names_;
};

namespace detail {
// shard_map_call with the out_specs asked for once the body has run: for a structured result,
// how many Arrays each out_spec covers is known only then.
using ShardMapOutSpecs = std::function<std::vector<PartitionSpec>(size_t results)>;
std::vector<Array> shard_map_call_deferred(const ShardMapBody& body, const Mesh& mesh,
                                           const std::vector<PartitionSpec>& in_specs,
                                           const ShardMapOutSpecs& out_specs_for,
                                           const std::vector<Array>& args,
                                           const std::vector<std::string>& axis_names);
[[noreturn]] void shard_map_in_specs_error(size_t given, size_t arguments);
[[noreturn]] void shard_map_out_specs_error(size_t given, const std::string& result);
// An Error from the call, told which argument and Array of it flat leaf k is.
[[noreturn]] void shard_map_leaf_error(const std::string& message, const std::vector<size_t>& leaf_argument);

// A spec tree as a ShardingTree whose leaves carry the index of their spec in `table` (as
// SingleDeviceSharding's device), so that Tree<T>::shardings, jit's matching of trees against
// values, matches it; the specs themselves are checked by shard_map_call, with its messages.
ShardingTree spec_index_tree(const SpecTree& specs, std::vector<PartitionSpec>& table);
std::vector<PartitionSpec> specs_of_indices(const LeafShardings& indices,
                                            const std::vector<PartitionSpec>& table);

// The spec of each of x's Arrays, in flatten's order, from a tree shaped like x or a prefix of it;
// `path` ("argument 1", "the result") and `option` ("in_specs", "out_specs") name it in Errors.
template <class T>
std::vector<PartitionSpec> leaf_specs(const T& x, const SpecTree& specs, const std::string& path,
                                      const char* option) {
  if (specs.kind() == SpecTree::Kind::leaf) {
    std::vector<Array> leaves;
    Tree<T>::flatten(x, leaves);
    return std::vector<PartitionSpec>(leaves.size(), specs.spec());
  }
  std::vector<PartitionSpec> table;
  const ShardingTree indices = spec_index_tree(specs, table);
  LeafShardings placed;
  const std::string name = "shard_map";
  Tree<T>::shardings(x, indices, placed, TreePlace{name, path, option});
  return specs_of_indices(placed, table);
}

// The Arrays of each element of a std::pair, std::tuple or std::vector result; nullopt for any
// other result (an Array, Params, a registered struct).
template <class R>
std::optional<std::vector<size_t>> element_leaf_counts(const R& r) {
  std::vector<size_t> counts;
  const auto add = [&counts](const auto& element) {
    std::vector<Array> leaves;
    Tree<std::remove_cvref_t<decltype(element)>>::flatten(element, leaves);
    counts.push_back(leaves.size());
  };
  if constexpr (requires { std::tuple_size<R>::value; }) {
    std::apply([&](const auto&... e) { (add(e), ...); }, r);
    return counts;
  } else if constexpr (requires { typename R::value_type; r.size(); } && !std::is_same_v<R, Params>) {
    for (const auto& e : r) add(e);
    return counts;
  } else {
    return std::nullopt;
  }
}

// The result's specs from out_specs. Besides the prefix rule, two forms kept from before spec
// trees: a list of one PartitionSpec for a result that is not a sequence applies to all of it,
// and a list of another length than a sequence result is an Error counting both.
template <class R>
std::vector<PartitionSpec> result_specs(const R& r, const SpecTree& out_specs) {
  if (out_specs.kind() == SpecTree::Kind::list) {
    const std::optional<std::vector<size_t>> counts = element_leaf_counts(r);
    const auto& e = out_specs.elements();
    if (!counts && e.size() == 1 && e.front().kind() == SpecTree::Kind::leaf)
      return leaf_specs(r, e.front(), "the result", "out_specs");
    if (counts && counts->size() != e.size())
      shard_map_out_specs_error(e.size(), "a sequence of " + std::to_string(counts->size()) + " elements");
  }
  return leaf_specs(r, out_specs, "the result", "out_specs");
}

// shard_map over pytrees: each argument's Arrays take their specs from its spec tree;
// `out_specs_for(result)` gives one spec per Array of the result.
template <class F, class OutSpecs, class... A>
auto shard_map_tree(const F& f, const Mesh& mesh, const std::vector<SpecTree>& in_specs,
                    const OutSpecs& out_specs_for, const std::vector<std::string>& axis_names,
                    const A&... args) {
  using R = std::invoke_result_t<const F&, const A&...>;
  static_assert((is_leafy_v<A> && ...),
                "shard_map: every argument must be an Array or a structure of them (Params, "
                "std::vector, std::pair, std::tuple, a registered struct)");
  static_assert(is_leafy_v<R>, "shard_map: the function must return an Array or a structure of them");
  if (in_specs.size() != sizeof...(A)) shard_map_in_specs_error(in_specs.size(), sizeof...(A));
  std::vector<Array> leaves;
  std::vector<PartitionSpec> leaf_specs_in;
  std::vector<size_t> leaf_argument;
  [[maybe_unused]] size_t argument = 0;  // unused for a function of no arguments
  (
      [&] {
        const size_t before = leaves.size();
        Tree<A>::flatten(args, leaves);
        const std::vector<PartitionSpec> specs =
            leaf_specs(args, in_specs[argument], "argument " + std::to_string(argument), "in_specs");
        leaf_specs_in.insert(leaf_specs_in.end(), specs.begin(), specs.end());
        leaf_argument.insert(leaf_argument.end(), leaves.size() - before, argument);
        ++argument;
      }(),
      ...);
  const std::tuple<A...> skeletons{Tree<A>::skeleton(args)...};
  std::optional<R> result_skeleton;
  std::vector<PartitionSpec> result_specs;
  bool out_specs_failed = false;  // then the Error is about the result, not the arguments' Arrays
  const ShardMapBody body = [&](const std::vector<Array>& locals) {
    size_t pos = 0;
    const R r = [&]<size_t... I>(std::index_sequence<I...>) {
      // Braced initialisation rebuilds the arguments in order, as they were flattened.
      const std::tuple<A...> rebuilt{Tree<A>::unflatten(std::get<I>(skeletons), locals, pos)...};
      return f(std::get<I>(rebuilt)...);
    }(std::index_sequence_for<A...>{});
    std::vector<Array> out;
    Tree<R>::flatten(r, out);
    try {
      result_specs = out_specs_for(r, out.size());
    } catch (const Error&) {
      out_specs_failed = true;
      throw;
    }
    result_skeleton.emplace(Tree<R>::skeleton(r));
    return out;
  };
  std::vector<Array> outputs;
  try {
    outputs = shard_map_call_deferred(body, mesh, leaf_specs_in, [&](size_t) { return result_specs; },
                                      leaves, axis_names);
  } catch (const Error& e) {
    if constexpr ((std::is_same_v<A, Array> && ...)) throw;
    else if (out_specs_failed) throw;
    else shard_map_leaf_error(e.what(), leaf_argument);
  }
  size_t pos = 0;
  return Tree<R>::unflatten(*result_skeleton, outputs, pos);
}
}  // namespace detail

// jax.shard_map. Arguments are Arrays or structures of them (Params, std::vector, std::pair,
// std::tuple, a struct registered with MESHVK_REGISTER_PYTREE). in_specs has one SpecTree per
// argument and out_specs is one SpecTree for the result, each a PartitionSpec for every Array of
// the value or a tree of them shaped like a prefix of it (see SpecTree):
//   shard_map(f, mesh, {P("x"), {P("x"), {P(), P("y")}}}, {P("x"), P()})
// takes an Array split by 'x' and a std::pair<Array, std::vector<Array>> laid out as JAX's
// (P('x'), [P(), P('y')]), and returns a pair of an Array split by 'x' and a replicated
// structure. A mismatched tree is an Error naming where and what the value is there.
// axis_names: the mesh axes the body is manual over (default: all); see shard_map_call.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<SpecTree> in_specs, SpecTree out_specs,
               std::vector<std::string> axis_names = {}) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_specs = std::move(out_specs), axis_names = std::move(axis_names)](const auto&... args)
    // Callable only with arguments f takes, so jit(shard_map(...)) can count them (as grad's).
    requires std::invocable<const F&, decltype(args)...>
  {
    return detail::shard_map_tree(
        f, mesh, in_specs, [&out_specs](const auto& result, size_t) { return detail::result_specs(result, out_specs); },
        axis_names, args...);
  };
}

// in_specs as a std::vector of PartitionSpecs, one per argument. (A template, so that a braced
// list of specs goes to the overload above rather than being ambiguous between the two.)
template <class F, class V>
  requires std::same_as<V, std::vector<PartitionSpec>>
auto shard_map(F f, Mesh mesh, const V& in_specs, SpecTree out_specs, std::vector<std::string> axis_names = {}) {
  return shard_map(std::move(f), std::move(mesh), std::vector<SpecTree>(in_specs.begin(), in_specs.end()),
                   std::move(out_specs), std::move(axis_names));
}

// Collectives over named mesh axes, with JAX's semantics; valid inside shard_map.
Array psum(const Array& x, const AxisNames& axis_name, SourceLocation loc = SourceLocation::current());
Array pmean(const Array& x, const AxisNames& axis_name, SourceLocation loc = SourceLocation::current());
Array pmax(const Array& x, const AxisNames& axis_name, SourceLocation loc = SourceLocation::current());
Array pmin(const Array& x, const AxisNames& axis_name, SourceLocation loc = SourceLocation::current());
Array all_gather(const Array& x, const AxisNames& axis_name, int axis = 0, bool tiled = false,
          SourceLocation loc = SourceLocation::current());
Array psum_scatter(const Array& x, const AxisNames& axis_name, int scatter_dimension = 0, bool tiled = false,
          SourceLocation loc = SourceLocation::current());
// Sends each (source, destination) pair's value; destinations nobody sends to get zeros.
Array ppermute(const Array& x, const AxisNames& axis_name, const std::vector<std::pair<int, int>>& perm,
          SourceLocation loc = SourceLocation::current());
Array all_to_all(const Array& x, const AxisNames& axis_name, int split_axis, int concat_axis, bool tiled = false,
          SourceLocation loc = SourceLocation::current());
// Every device of a group gets the value of the group's member with index `source`.
Array pbroadcast(const Array& x, const AxisNames& axis_name, int source = 0);
// jax.lax.pvary: x, typed as varying over the axes (no data moves): what a loop's carry that
// becomes varying in the body must start as; its cotangent is summed over the axes.
Array pvary(const Array& x, const AxisNames& axis_name);
// This device's index along the axes (mixed radix, first axis major), as an int32 scalar.
Array axis_index(const AxisNames& axis_name);
int axis_size(const AxisNames& axis_name);

// jax.lax.ragged_all_to_all: each device sends the K slices operand[input_offsets[i] :
// input_offsets[i] + send_sizes[i]] (leading axis) to member i / (K / n) of its group over
// `axis_name` (n members; K, the length of the four int32 1-D arrays, a multiple of n), which
// writes them into its `output` at the offsets the sender gave in output_offsets[i]; the result
// is `output` with the rows received written in (slice j of the received ones from member
// j / (K / n), recv_sizes[j] rows long, at all_to_all(output_offsets, axis_name, 0, 0, true)[j]).
// send_sizes must equal all_to_all(recv_sizes, axis_name, 0, 0, true), as in JAX; rows written
// twice keep one of the writes (JAX leaves which unspecified), rows past the output are dropped.
// Valid inside shard_map. Composed of take, one tiled all_to_all of a padded (K, N, ...) block
// (K x the operand's N rows each device sends, whatever the sizes) and at_set (a K*N x M mask), so
// it runs under jit with device-valued sizes and differentiates (operand and output).
Array ragged_all_to_all(const Array& operand, const Array& output, const Array& input_offsets, const Array& send_sizes,
                        const Array& output_offsets, const Array& recv_sizes, const AxisNames& axis_name);
// jax.lax's spellings of the collectives.
namespace lax {
using meshvk::all_gather;
using meshvk::all_to_all;
using meshvk::axis_index;
using meshvk::axis_size;
using meshvk::pbroadcast;
using meshvk::pmax;
using meshvk::pmean;
using meshvk::pmin;
using meshvk::ppermute;
using meshvk::psum;
using meshvk::pvary;
using meshvk::psum_scatter;
using meshvk::ragged_all_to_all;
}  // namespace lax

}  // namespace meshvk

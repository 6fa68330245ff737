#pragma once
// Manual parallelism, as jax.shard_map: a function written for one device's piece, run on every
// device of a mesh, communicating through collectives over named mesh axes.
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

// shard_map over pytrees: each argument's Arrays take its in_spec; `out_specs_for(result)` gives
// one spec per Array of the result.
template <class F, class OutSpecs, class... A>
auto shard_map_tree(const F& f, const Mesh& mesh, const std::vector<PartitionSpec>& in_specs,
                    const OutSpecs& out_specs_for, const std::vector<std::string>& axis_names,
                    const A&... args) {
  using R = std::invoke_result_t<const F&, const A&...>;
  static_assert((is_leafy_v<A> && ...),
                "shard_map: every argument must be an Array or a structure of them (Params, "
                "std::vector, std::pair, std::tuple, a registered struct)");
  static_assert(is_leafy_v<R>, "shard_map: the function must return an Array or a structure of them");
  if (in_specs.size() != sizeof...(A)) shard_map_in_specs_error(in_specs.size(), sizeof...(A));
  std::vector<Array> leaves;
  std::vector<PartitionSpec> leaf_specs;
  std::vector<size_t> leaf_argument;
  size_t argument = 0;
  (
      [&] {
        const size_t before = leaves.size();
        Tree<A>::flatten(args, leaves);
        leaf_specs.insert(leaf_specs.end(), leaves.size() - before, in_specs[argument]);
        leaf_argument.insert(leaf_argument.end(), leaves.size() - before, argument);
        ++argument;
      }(),
      ...);
  const std::tuple<A...> skeletons{Tree<A>::skeleton(args)...};
  std::optional<R> result_skeleton;
  std::vector<PartitionSpec> result_specs;
  const ShardMapBody body = [&](const std::vector<Array>& locals) {
    size_t pos = 0;
    const R r = [&]<size_t... I>(std::index_sequence<I...>) {
      // Braced initialisation rebuilds the arguments in order, as they were flattened.
      const std::tuple<A...> rebuilt{Tree<A>::unflatten(std::get<I>(skeletons), locals, pos)...};
      return f(std::get<I>(rebuilt)...);
    }(std::index_sequence_for<A...>{});
    std::vector<Array> out;
    Tree<R>::flatten(r, out);
    result_specs = out_specs_for(r, out.size());
    result_skeleton.emplace(Tree<R>::skeleton(r));
    return out;
  };
  std::vector<Array> outputs;
  try {
    outputs = shard_map_call_deferred(body, mesh, leaf_specs, [&](size_t) { return result_specs; },
                                      leaves, axis_names);
  } catch (const Error& e) {
    if constexpr ((std::is_same_v<A, Array> && ...)) throw;
    else shard_map_leaf_error(e.what(), leaf_argument);
  }
  size_t pos = 0;
  return Tree<R>::unflatten(*result_skeleton, outputs, pos);
}
}  // namespace detail

// jax.shard_map. Arguments are Arrays or structures of them (Params, std::vector, std::pair,
// std::tuple, a struct registered with MESHVK_REGISTER_PYTREE); in_specs has one PartitionSpec
// per argument, applied to each of its Arrays (JAX's pytree-prefix rule at the argument). With
// one out_spec the result may be an Array or any structure, each of its Arrays laid out by it.
// axis_names: the mesh axes the body is manual over (default: all); see shard_map_call.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, PartitionSpec out_spec,
               std::vector<std::string> axis_names = {}) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_spec = std::move(out_spec), axis_names = std::move(axis_names)](const auto&... args) {
    return detail::shard_map_tree(
        f, mesh, in_specs,
        [&out_spec](const auto&, size_t n) { return std::vector<PartitionSpec>(n, out_spec); },
        axis_names, args...);
  };
}

// jax.shard_map with one out_spec per element of the result: a std::vector of Arrays (one per
// Array), or a std::pair, std::tuple or std::vector of structures (each out_spec applied to every
// Array of its element). A result that is not a sequence takes one out_spec here too.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs,
               std::vector<std::string> axis_names = {}) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_specs = std::move(out_specs), axis_names = std::move(axis_names)](const auto&... args) {
    const auto specs_for = [&out_specs](const auto& result, size_t n) {
      using R = std::remove_cvref_t<decltype(result)>;
      if constexpr (std::is_same_v<R, std::vector<Array>>) {
        return out_specs;  // one per Array; a count that differs is an Error naming both
      } else {
        const std::optional<std::vector<size_t>> counts = detail::element_leaf_counts(result);
        if (!counts) {
          if (out_specs.size() != 1) detail::shard_map_out_specs_error(out_specs.size(), "a single structure");
          return std::vector<PartitionSpec>(n, out_specs.front());
        }
        if (counts->size() != out_specs.size())
          detail::shard_map_out_specs_error(out_specs.size(),
                                            "a sequence of " + std::to_string(counts->size()) + " elements");
        std::vector<PartitionSpec> per_leaf;
        for (size_t i = 0; i < counts->size(); ++i) per_leaf.insert(per_leaf.end(), (*counts)[i], out_specs[i]);
        return per_leaf;
      }
    };
    return detail::shard_map_tree(f, mesh, in_specs, specs_for, axis_names, args...);
  };
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
using meshvk::psum_scatter;
using meshvk::ragged_all_to_all;
}  // namespace lax

}  // namespace meshvk

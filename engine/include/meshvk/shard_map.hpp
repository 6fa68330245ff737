#pragma once
// Manual parallelism, as jax.shard_map: a function written for one device's piece, run on every
// device of a mesh, communicating through collectives over named mesh axes.
#include <functional>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/partition_spec.hpp"
#include "meshvk/source_location.hpp"

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

// The first N arrays of `v` as a tuple of references, to call the user's function with.
template <size_t N>
auto to_tuple(const std::vector<Array>& v) {
  return [&]<size_t... I>(std::index_sequence<I...>) { return std::tie(v[I]...); }(std::make_index_sequence<N>{});
}

// jax.shard_map for a function of Arrays returning one Array.
// axis_names: the mesh axes the body is manual over (default: all); see shard_map_call.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, PartitionSpec out_spec,
               std::vector<std::string> axis_names = {}) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_spec = std::move(out_spec), axis_names = std::move(axis_names)](const auto&... args) -> Array {
    const ShardMapBody body = [&f](const std::vector<Array>& locals) -> std::vector<Array> {
      return {std::apply(f, to_tuple<sizeof...(args)>(locals))};
    };
    return shard_map_call(body, mesh, in_specs, {out_spec}, {args...}, axis_names).front();
  };
}

// jax.shard_map for a function of Arrays returning several Arrays (std::vector<Array>).
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs,
               std::vector<std::string> axis_names = {}) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_specs = std::move(out_specs), axis_names = std::move(axis_names)](const auto&... args) -> std::vector<Array> {
    const ShardMapBody body = [&f](const std::vector<Array>& locals) -> std::vector<Array> {
      return std::apply(f, to_tuple<sizeof...(args)>(locals));
    };
    return shard_map_call(body, mesh, in_specs, out_specs, {args...}, axis_names);
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

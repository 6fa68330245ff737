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
std::vector<Array> shard_map_call(const ShardMapBody& body, const Mesh& mesh,
                                  const std::vector<PartitionSpec>& in_specs,
                                  const std::vector<PartitionSpec>& out_specs,
                                  const std::vector<Array>& args);

// The first N arrays of `v` as a tuple of references, to call the user's function with.
template <size_t N>
auto to_tuple(const std::vector<Array>& v) {
  return [&]<size_t... I>(std::index_sequence<I...>) { return std::tie(v[I]...); }(std::make_index_sequence<N>{});
}

// jax.shard_map for a function of Arrays returning one Array.
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, PartitionSpec out_spec) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_spec = std::move(out_spec)](const auto&... args) -> Array {
    const ShardMapBody body = [&f](const std::vector<Array>& locals) -> std::vector<Array> {
      return {std::apply(f, to_tuple<sizeof...(args)>(locals))};
    };
    return shard_map_call(body, mesh, in_specs, {out_spec}, {args...}).front();
  };
}

// jax.shard_map for a function of Arrays returning several Arrays (std::vector<Array>).
template <class F>
auto shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs) {
  return [f = std::move(f), mesh = std::move(mesh), in_specs = std::move(in_specs),
          out_specs = std::move(out_specs)](const auto&... args) -> std::vector<Array> {
    const ShardMapBody body = [&f](const std::vector<Array>& locals) -> std::vector<Array> {
      return std::apply(f, to_tuple<sizeof...(args)>(locals));
    };
    return shard_map_call(body, mesh, in_specs, out_specs, {args...});
  };
}

// Collectives over named mesh axes, with JAX's semantics; valid inside shard_map.
Array psum(const Array& x, const AxisNames& axis_name);
Array pmean(const Array& x, const AxisNames& axis_name);
Array pmax(const Array& x, const AxisNames& axis_name);
Array pmin(const Array& x, const AxisNames& axis_name);
Array all_gather(const Array& x, const AxisNames& axis_name, int axis = 0, bool tiled = false);
Array psum_scatter(const Array& x, const AxisNames& axis_name, int scatter_dimension = 0, bool tiled = false);
// Sends each (source, destination) pair's value; destinations nobody sends to get zeros.
Array ppermute(const Array& x, const AxisNames& axis_name, const std::vector<std::pair<int, int>>& perm);
Array all_to_all(const Array& x, const AxisNames& axis_name, int split_axis, int concat_axis, bool tiled = false);
// Every device of a group gets the value of the group's member with index `source`.
Array pbroadcast(const Array& x, const AxisNames& axis_name, int source = 0);
// This device's index along the axes (mixed radix, first axis major), as an int32 scalar.
Array axis_index(const AxisNames& axis_name);
int axis_size(const AxisNames& axis_name);

}  // namespace meshvk

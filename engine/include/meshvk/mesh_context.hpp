#pragma once
// jax.sharding.use_mesh: a mesh context, so layouts can be given as bare PartitionSpecs
// (device_put(x, P("x")), with_sharding_constraint(x, P("x", None))), as in JAX:
//
//   {
//     meshvk::use_mesh guard(mesh);              // with jax.sharding.use_mesh(mesh):
//     auto xs = meshvk::device_put(x, P("x"));   //   xs = jax.device_put(x, P('x'))
//   }
//
// The context belongs to the thread that made it (each thread has its own) and nests: the
// innermost guard alive wins, and the outer one is back when it goes.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/partition_spec.hpp"
#include "meshvk/source_location.hpp"

namespace meshvk {

class use_mesh {
 public:
  explicit use_mesh(const Mesh& mesh);
  ~use_mesh();
  use_mesh(const use_mesh&) = delete;
  use_mesh& operator=(const use_mesh&) = delete;

 private:
  size_t depth_;  // the contexts below this one, restored when it goes
};

// JAX 0.7's name for use_mesh as a context (`with jax.set_mesh(mesh):`): `set_mesh guard(mesh);`.
using set_mesh = use_mesh;

// The context's part of a jit cache key: a function traced under one mesh context is traced
// again under another (its bare PartitionSpecs mean other shardings there).
std::string mesh_context_key();

// The mesh of the innermost use_mesh of this thread (jax.sharding.get_abstract_mesh), or
// nullopt outside any.
std::optional<Mesh> get_abstract_mesh();

// NamedSharding(the context mesh, spec); throws Error naming use_mesh when there is no context.
NamedSharding sharding_in_context(const PartitionSpec& spec, const char* op);

// jax.device_put(x, P(...)) and jax.lax.with_sharding_constraint(x, P(...)) under use_mesh.
Array device_put(const Array& x, const PartitionSpec& spec, SourceLocation loc = SourceLocation::current());
Array with_sharding_constraint(const Array& x, const PartitionSpec& spec,
          SourceLocation loc = SourceLocation::current());

// A sharding as auto_axes' out_sharding and explicit_axes' in_sharding take it: a bare
// PartitionSpec (over the context mesh, or the arguments' mesh outside any) or a NamedSharding.
class ShardingArg {
 public:
  ShardingArg(PartitionSpec spec) : v_(std::move(spec)) {}
  ShardingArg(NamedSharding sharding) : v_(std::move(sharding)) {}
  const std::variant<PartitionSpec, NamedSharding>& get() const& { return v_; }
  std::variant<PartitionSpec, NamedSharding> get() const&& { return v_; }

 private:
  std::variant<PartitionSpec, NamedSharding> v_;
};

using AxesBody = std::function<std::vector<Array>(const std::vector<Array>&)>;

// jax.sharding.auto_axes / explicit_axes, the sharding-in-types helpers, on the mesh of the
// context (use_mesh), else of the first argument laid out over a mesh:
//   auto_axes: runs f with `axes` (every mesh axis when empty) typed AxisType::Auto: the
//     arguments' shardings stay where they are but leave the types (type_of shows no @axis for
//     them, and ops inside follow jit's propagation instead of explicit mode's rules and
//     errors); each result is then laid out by out_sharding (one for all, or one per result)
//     over the context mesh with its own types, so it is explicit again.
//   explicit_axes: the converse, inside an automatic context: each argument is laid out by
//     in_sharding (one for all, or one per argument), f runs with `axes` typed
//     AxisType::Explicit (explicit mode's typing and errors), and its results come back typed
//     as the context mesh types them (no data moves).
// A manual axis (inside shard_map) in `axes`, an axis the mesh lacks or no mesh at all is an
// Error. Under jit both run while the function is traced, as every op does.
std::vector<Array> auto_axes_call(const AxesBody& f, const std::vector<Array>& args,
                                  const std::vector<ShardingArg>& out_sharding, const std::vector<std::string>& axes);
std::vector<Array> explicit_axes_call(const AxesBody& f, const std::vector<Array>& args,
                                      const std::vector<ShardingArg>& in_sharding, const std::vector<std::string>& axes);

namespace detail {
template <class R, class F, size_t... I>
std::vector<Array> call_as_vector(const F& f, const std::vector<Array>& xs, std::index_sequence<I...>) {
  if constexpr (std::is_same_v<R, Array>) return {f(xs[I]...)};
  else return f(xs[I]...);
}

template <class F>
auto axes_wrapper(F f, std::vector<ShardingArg> shardings, std::vector<std::string> axes, bool to_auto) {
  return [f = std::move(f), shardings = std::move(shardings), axes = std::move(axes), to_auto](const auto&... args) {
    using R = std::invoke_result_t<const F&, decltype(args)...>;
    static_assert(std::is_same_v<R, Array> || std::is_same_v<R, std::vector<Array>>,
                  "auto_axes / explicit_axes: the function must take Arrays and return an Array or a std::vector<Array>");
    using Seq = std::make_index_sequence<sizeof...(args)>;
    const AxesBody body = [&f](const std::vector<Array>& xs) { return call_as_vector<R>(f, xs, Seq{}); };
    const std::vector<Array> in{args...};
    std::vector<Array> out = to_auto ? auto_axes_call(body, in, shardings, axes) : explicit_axes_call(body, in, shardings, axes);
    if constexpr (std::is_same_v<R, Array>) return out.front();
    else return out;
  };
}
}  // namespace detail

// auto_axes(f, P("X", None)), auto_axes(f, {P("X"), P()}, {"X"}): see auto_axes_call.
template <class F>
auto auto_axes(F f, ShardingArg out_sharding, std::vector<std::string> axes = {}) {
  return detail::axes_wrapper(std::move(f), {std::move(out_sharding)}, std::move(axes), true);
}
template <class F>
auto auto_axes(F f, std::vector<ShardingArg> out_sharding, std::vector<std::string> axes = {}) {
  return detail::axes_wrapper(std::move(f), std::move(out_sharding), std::move(axes), true);
}
// explicit_axes(f, P("X", None)), explicit_axes(f, {P("X"), P()}, {"X"}): see explicit_axes_call.
template <class F>
auto explicit_axes(F f, ShardingArg in_sharding, std::vector<std::string> axes = {}) {
  return detail::axes_wrapper(std::move(f), {std::move(in_sharding)}, std::move(axes), false);
}
template <class F>
auto explicit_axes(F f, std::vector<ShardingArg> in_sharding, std::vector<std::string> axes = {}) {
  return detail::axes_wrapper(std::move(f), std::move(in_sharding), std::move(axes), false);
}

}  // namespace meshvk

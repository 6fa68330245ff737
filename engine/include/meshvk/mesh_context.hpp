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
#include <optional>
#include <string>

#include "meshvk/array.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/partition_spec.hpp"

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
Array device_put(const Array& x, const PartitionSpec& spec);
Array with_sharding_constraint(const Array& x, const PartitionSpec& spec);

}  // namespace meshvk

// The per-thread mesh context of use_mesh: a stack, so guards nest.
#include "meshvk/mesh_context.hpp"

#include <algorithm>
#include <vector>

#include "graph/call_site.hpp"
#include "graph/manual_context.hpp"
#include "meshvk/error.hpp"
#include "meshvk/jit.hpp"

namespace meshvk {

namespace {
thread_local std::vector<Mesh> mesh_stack;
}  // namespace

use_mesh::use_mesh(const Mesh& mesh) : depth_(mesh_stack.size()) {
  mesh_stack.push_back(mesh);
}
use_mesh::~use_mesh() {
  if (mesh_stack.size() > depth_)
    mesh_stack.erase(mesh_stack.begin() + static_cast<std::ptrdiff_t>(depth_), mesh_stack.end());
}

std::string mesh_context_key() {
  if (mesh_stack.empty()) return "";
  std::string key = "mesh " + mesh_stack.back().to_string() + " on";
  for (const int d : mesh_stack.back().device_ids()) key += " " + std::to_string(d);
  return key + ";";
}

std::optional<Mesh> get_abstract_mesh() {
  if (mesh_stack.empty()) return std::nullopt;
  return mesh_stack.back();
}

NamedSharding sharding_in_context(const PartitionSpec& spec, const char* op) {
  // Inside a shard_map body that is manual over some axes only, a bare spec is over the body's
  // mesh (its automatic axes), as JAX's context mesh is there.
  if (const Mesh* manual = detail::current_manual_mesh()) {
    bool partial = false;
    for (const AxisType t : manual->axis_types()) partial = partial || t != AxisType::Manual;
    if (partial) return NamedSharding(*manual, spec);
  }
  if (mesh_stack.empty())
    throw Error(std::string(op) + ": the bare " + spec.to_string() +
                " needs a mesh, and this thread has no mesh context; make one with "
                "`meshvk::use_mesh guard(mesh);` "
                "(jax.sharding.use_mesh) around the call, or pass NamedSharding(mesh, spec)");
  return NamedSharding(mesh_stack.back(), spec);
}

namespace {

// The mesh auto_axes / explicit_axes work on: the context's, else the first argument's.
Mesh axes_mesh(const char* op, const std::vector<Array>& args) {
  if (!mesh_stack.empty()) return mesh_stack.back();
  for (const Array& a : args)
    if (a.valid())
      if (const NamedSharding* n = a.sharding().named()) return n->mesh();
  throw Error(std::string(op) + ": no mesh: make one the context with `meshvk::use_mesh guard(mesh);` "
              "(jax.sharding.use_mesh) or pass an argument laid out over it");
}

Mesh retyped(const char* op, const Mesh& mesh, const std::vector<std::string>& axes, AxisType to) {
  std::vector<AxisType> types = mesh.axis_types();
  types.resize(static_cast<size_t>(mesh.ndim()), AxisType::Auto);
  for (const auto& a : axes) {
    if (!mesh.has_axis(a)) {
      std::string names;
      for (const auto& n : mesh.axis_names()) names += (names.empty() ? "'" : ", '") + n + "'";
      throw Error(std::string(op) + ": axis '" + a + "' is not an axis of the mesh; its axes are " + names);
    }
    if (std::count(axes.begin(), axes.end(), a) > 1) throw Error(std::string(op) + ": axis '" + a + "' is named twice");
  }
  for (int d = 0; d < mesh.ndim(); ++d) {
    const auto& name = mesh.axis_names()[static_cast<size_t>(d)];
    if (!axes.empty() && std::find(axes.begin(), axes.end(), name) == axes.end()) continue;
    if (types[static_cast<size_t>(d)] == AxisType::Manual) {
      if (axes.empty()) continue;  // all axes: the manual ones stay manual
      throw Error(std::string(op) + ": axis '" + name + "' is manual here (inside shard_map); only Auto and Explicit axes change type");
    }
    types[static_cast<size_t>(d)] = to;
  }
  return Mesh(mesh.axis_sizes(), mesh.axis_names(), types, mesh.device_ids(), mesh.platform());
}

// x's layout over `mesh` when it is laid out over the same devices and axes (no data moves: the
// pieces are where they were, only the axis types in its sharding change); else x.
Array retype(const Array& x, const Mesh& mesh) {
  if (!x.valid()) return x;
  const NamedSharding* n = x.sharding().named();
  if (!n || n->mesh() == mesh || n->mesh().device_ids() != mesh.device_ids() || n->mesh().axis_names() != mesh.axis_names())
    return x;
  return device_put(x, NamedSharding(mesh, n->spec()));
}

NamedSharding resolved(const ShardingArg& s, const Mesh& mesh) {
  if (const auto* spec = std::get_if<PartitionSpec>(&s.get())) return NamedSharding(mesh, *spec);
  return std::get<NamedSharding>(s.get());
}

const ShardingArg& pick(const char* op, const char* what, const std::vector<ShardingArg>& s, size_t i, size_t n) {
  if (s.size() != 1 && s.size() != n)
    throw Error(std::string(op) + ": " + std::to_string(s.size()) + " " + what + " for " + std::to_string(n) +
                (std::string(what) == "in_sharding" ? " arguments" : " results") + "; give one for all or one each");
  return s.size() == 1 ? s.front() : s[i];
}

}  // namespace

std::vector<Array> auto_axes_call(const AxesBody& f, const std::vector<Array>& args,
                                  const std::vector<ShardingArg>& out_sharding, const std::vector<std::string>& axes) {
  if (out_sharding.empty())
    throw Error("auto_axes: out_sharding is required: the results leave the automatic region and need a layout in their types");
  const Mesh mesh = axes_mesh("auto_axes", args);
  const Mesh inner = retyped("auto_axes", mesh, axes, AxisType::Auto);
  std::vector<Array> in;
  for (const Array& a : args) in.push_back(retype(a, inner));
  std::vector<Array> out;
  {
    const use_mesh guard(inner);
    out = f(in);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const NamedSharding target = resolved(pick("auto_axes", "out_sharding", out_sharding, i, out.size()), mesh);
    out[i] = device_put(out[i], target);
  }
  return out;
}

std::vector<Array> explicit_axes_call(const AxesBody& f, const std::vector<Array>& args,
                                      const std::vector<ShardingArg>& in_sharding, const std::vector<std::string>& axes) {
  if (in_sharding.empty())
    throw Error("explicit_axes: in_sharding is required: the arguments enter the explicit region and need a layout in their types");
  const Mesh mesh = axes_mesh("explicit_axes", args);
  const Mesh inner = retyped("explicit_axes", mesh, axes, AxisType::Explicit);
  std::vector<Array> in;
  for (size_t i = 0; i < args.size(); ++i) {
    const NamedSharding given = resolved(pick("explicit_axes", "in_sharding", in_sharding, i, args.size()), mesh);
    in.push_back(device_put(args[i], NamedSharding(inner, given.spec())));
  }
  std::vector<Array> out;
  {
    const use_mesh guard(inner);
    out = f(in);
  }
  for (Array& r : out) r = retype(r, mesh);
  return out;
}

Array device_put(const Array& x, const PartitionSpec& spec, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return device_put(x, sharding_in_context(spec, "device_put"));
}

Array with_sharding_constraint(const Array& x, const PartitionSpec& spec, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return with_sharding_constraint(x, sharding_in_context(spec, "with_sharding_constraint"));
}

}  // namespace meshvk

// shard_map: the body runs once, as one program for every device of the mesh. Inside it, a
// per-device value is an Array over the mesh's devices whose pieces are whole local arrays that
// differ from device to device; every op already works piece by piece, and collectives move
// data between the pieces.
#include "meshvk/shard_map.hpp"

#include <algorithm>
#include <functional>
#include <mutex>
#include <optional>

#include "exec/program_log.hpp"
#include "meshvk/shard_map_watch.hpp"

#include "graph/array_impl.hpp"
#include "graph/manual_context.hpp"
#include "graph/tape.hpp"
#include "meshvk/error.hpp"
#include "meshvk/sharding.hpp"

namespace meshvk {

namespace detail {

namespace {
thread_local std::vector<Mesh> manual_meshes;
}

const Mesh* current_manual_mesh() { return manual_meshes.empty() ? nullptr : &manual_meshes.back(); }
ManualScope::ManualScope(const Mesh& mesh) { manual_meshes.push_back(mesh); }
ManualScope::~ManualScope() { manual_meshes.pop_back(); }

}  // namespace detail

// The innermost watch of this thread (a thread's own: shard_map bodies run on their caller's
// thread).
namespace {
thread_local ShardMapWatch* active_watch = nullptr;
}

struct ShardMapWatchAccess {
  static const ShardMapWatch::Callback* callback() { return active_watch ? &active_watch->callback_ : nullptr; }
};

ShardMapWatch::ShardMapWatch(Callback callback) : callback_(std::move(callback)), outer_(active_watch) {
  // Checked here, not at the next shard_map: an empty std::function would throw
  // std::bad_function_call out of every shard_map call of the thread.
  if (!callback_)
    throw Error("ShardMapWatch: the callback is empty; give a function taking the program text "
                "(const std::string&)");
  active_watch = this;
}
ShardMapWatch::~ShardMapWatch() {
  // Watches may end in any order (two unique_ptrs reset outer first): unlink this one wherever
  // it is in the thread's chain, so no watch is left pointing at it.
  if (active_watch == this) {
    active_watch = outer_;
    return;
  }
  for (ShardMapWatch* w = active_watch; w; w = w->outer_)
    if (w->outer_ == this) {
      w->outer_ = outer_;
      return;
    }
}

namespace {

// "float32[32,4]": a value's type as type_of prints it, for a local (per-device) shape.
std::string local_type(DType dtype, const Shape& shape) {
  std::string s = std::string(dtype_name(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// A value as a per-device value over the manual mesh (constants are put on every device).
Array on_manual_mesh(const Array& x, const Mesh& manual) {
  const NamedSharding* n = x.sharding().named();
  if (n && n->mesh().device_ids() == manual.device_ids() && x.sharding().is_fully_replicated()) return x;
  return device_put(x, NamedSharding(manual, PartitionSpec()));
}

// The body's mesh: the manual axes (all of them when axis_names is empty) typed Manual, the
// others keeping their types (automatic inside the body).
Mesh manual_version(const Mesh& mesh, const std::vector<std::string>& axis_names) {
  std::vector<AxisType> types = mesh.axis_types();
  types.resize(static_cast<size_t>(mesh.ndim()), AxisType::Auto);
  for (int a = 0; a < mesh.ndim(); ++a)
    if (axis_names.empty() || std::find(axis_names.begin(), axis_names.end(), mesh.axis_names()[static_cast<size_t>(a)]) != axis_names.end())
      types[static_cast<size_t>(a)] = AxisType::Manual;
  return Mesh(mesh.axis_sizes(), mesh.axis_names(), types, mesh.device_ids(), mesh.platform());
}

std::string quoted(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

// The entries of `spec` (padded to `rank`) keeping only the axes `keep` says yes to.
std::vector<SpecEntry> filtered(const PartitionSpec& spec, size_t rank, const std::function<bool(const std::string&)>& keep) {
  std::vector<SpecEntry> out(rank);
  for (size_t d = 0; d < rank && d < spec.size(); ++d) {
    std::vector<std::string> axes;
    for (const auto& a : spec[d].axes)
      if (keep(a)) axes.push_back(a);
    if (!axes.empty()) out[d] = SpecEntry(axes);
  }
  return out;
}

// Per dimension, the manual axes of `manual_spec` (major) then the automatic axes of `auto_spec`.
PartitionSpec combined(const std::vector<SpecEntry>& manual_spec, const std::vector<SpecEntry>& auto_spec) {
  std::vector<SpecEntry> out(std::max(manual_spec.size(), auto_spec.size()));
  for (size_t d = 0; d < out.size(); ++d) {
    std::vector<std::string> axes;
    if (d < manual_spec.size()) axes = manual_spec[d].axes;
    if (d < auto_spec.size()) axes.insert(axes.end(), auto_spec[d].axes.begin(), auto_spec[d].axes.end());
    if (!axes.empty()) out[d] = SpecEntry(axes);
  }
  return PartitionSpec(out).trimmed();
}

// A cotangent's reinterpretations between the body's per-device pieces and the global array they
// make up, each on the tapes with the other as its transpose, so a gradient of a gradient (or a
// jvp) differentiates through shard_map too: a bare reinterpretation cut the tape there, and
// second derivatives came out zero.
Array pieces_as_local(const Array& global, const NamedSharding& layout, const Array& local_like);

// `local` (pieces on the body's mesh) as the global array `layout` assembles them into.
Array pieces_as_global(const Array& local, const Shape& global, const NamedSharding& layout) {
  const exec::ShardedValue& v = detail::materialized(local);
  const Array g = detail::make_array(local.impl()->runtime, exec::ShardedValue{global, v.dtype, layout, v.shards}, true);
  if (!detail::differentiable(local)) return g;
  return detail::on_tape(g, {local}, [layout, local_like = Array(local)](const Array& ct) {
    return std::vector<Array>{pieces_as_local(ct, layout, local_like)};
  });
}

// `global` laid out as `layout`, its pieces seen on the body's mesh as `local_like` is (shape,
// sharding, varying axes).
Array pieces_as_local(const Array& global, const NamedSharding& layout, const Array& local_like) {
  const Array placed = device_put(global, layout);
  const exec::ShardedValue& pv = detail::materialized(placed);
  const Array l = detail::make_array(placed.impl()->runtime,
                                     exec::ShardedValue{local_like.shape(), pv.dtype, local_like.sharding(), pv.shards},
                                     true, local_like.impl()->varying);
  if (!detail::differentiable(placed)) return l;
  return detail::on_tape(l, {placed}, [layout, global_shape = placed.shape()](const Array& ct) {
    return std::vector<Array>{pieces_as_global(ct, global_shape, layout)};
  });
}

}  // namespace

void detail::shard_map_in_specs_error(size_t given, size_t arguments) {
  throw Error("shard_map: " + std::to_string(given) + " in_specs for " + std::to_string(arguments) +
              " arguments; give one per argument: a PartitionSpec (it applies to every Array of a "
              "structured argument) or a SpecTree shaped like the argument or a prefix of it");
}

SpecTree SpecTree::list(std::vector<SpecTree> elements) {
  SpecTree t;
  t.kind_ = Kind::list;
  t.elements_ = std::move(elements);
  return t;
}

SpecTree SpecTree::dict(std::vector<std::pair<std::string, SpecTree>> by_name) {
  SpecTree t;
  t.kind_ = Kind::dict;
  for (auto& [name, tree] : by_name) {
    t.names_.push_back(std::move(name));
    t.elements_.push_back(std::move(tree));
  }
  return t;
}

ShardingTree detail::spec_index_tree(const SpecTree& specs, std::vector<PartitionSpec>& table) {
  switch (specs.kind()) {
    case SpecTree::Kind::leaf:
      table.push_back(specs.spec());
      return ShardingTree(SingleDeviceSharding(static_cast<int>(table.size() - 1)));
    case SpecTree::Kind::list: {
      std::vector<ShardingTree> elements;
      for (const SpecTree& e : specs.elements()) elements.push_back(spec_index_tree(e, table));
      return ShardingTree::list(std::move(elements));
    }
    case SpecTree::Kind::dict: {
      std::vector<std::pair<std::string, ShardingTree>> by_name;
      for (size_t i = 0; i < specs.names().size(); ++i)
        by_name.emplace_back(specs.names()[i], spec_index_tree(specs.elements()[i], table));
      return ShardingTree::dict(std::move(by_name));
    }
  }
  throw Error("shard_map: a spec tree of an unknown kind");
}

std::vector<PartitionSpec> detail::specs_of_indices(const LeafShardings& indices,
                                                    const std::vector<PartitionSpec>& table) {
  std::vector<PartitionSpec> specs;
  for (const std::optional<Sharding>& s : indices)
    specs.push_back(table.at(static_cast<size_t>(s->single()->device())));
  return specs;
}

void detail::shard_map_out_specs_error(size_t given, const std::string& result) {
  throw Error("shard_map: " + std::to_string(given) + " out_specs for a result that is " + result +
              "; give one PartitionSpec per element of a std::pair, std::tuple or std::vector "
              "result, or one for the whole result");
}

void detail::shard_map_leaf_error(const std::string& message, const std::vector<size_t>& leaf_argument) {
  std::string where;
  for (size_t k = 0; k < leaf_argument.size(); ++k) {
    if (k && leaf_argument[k] == leaf_argument[k - 1]) continue;
    size_t last = k;
    while (last + 1 < leaf_argument.size() && leaf_argument[last + 1] == leaf_argument[k]) ++last;
    where += std::string(where.empty() ? "" : ", ") + "argument " + std::to_string(leaf_argument[k]) + ": " +
             (last == k ? "Array " + std::to_string(k) : "Arrays " + std::to_string(k) + "-" + std::to_string(last));
  }
  throw Error(message + " (the arguments are flattened into Arrays in order, each taking its spec from its "
              "argument's in_spec or spec tree; " + (where.empty() ? std::string("none has Arrays") : where) + ")");
}

std::vector<Array> shard_map_call(const ShardMapBody& body, const Mesh& mesh,
                                  const std::vector<PartitionSpec>& in_specs,
                                  const std::vector<PartitionSpec>& out_specs, const std::vector<Array>& args,
                                  const std::vector<std::string>& axis_names) {
  return detail::shard_map_call_deferred(
      body, mesh, in_specs, [&out_specs](size_t) { return out_specs; }, args, axis_names);
}

std::vector<Array> detail::shard_map_call_deferred(const ShardMapBody& body, const Mesh& mesh,
                                                   const std::vector<PartitionSpec>& in_specs,
                                                   const ShardMapOutSpecs& out_specs_for,
                                                   const std::vector<Array>& args,
                                                   const std::vector<std::string>& axis_names) {
  if (args.size() != in_specs.size())
    throw Error("shard_map: " + std::to_string(in_specs.size()) + " in_specs for " + std::to_string(args.size()) +
                " arguments; give one PartitionSpec per argument");
  for (size_t i = 0; i < axis_names.size(); ++i) {
    if (!mesh.has_axis(axis_names[i]))
      throw Error("shard_map: axis_names names '" + axis_names[i] + "', which the mesh lacks; its axes are " +
                  quoted(mesh.axis_names()));
    if (std::find(axis_names.begin(), axis_names.begin() + static_cast<std::ptrdiff_t>(i), axis_names[i]) !=
        axis_names.begin() + static_cast<std::ptrdiff_t>(i))
      throw Error("shard_map: axis_names names '" + axis_names[i] + "' twice");
  }
  const Mesh manual = manual_version(mesh, axis_names);
  const auto is_manual = [&manual](const std::string& a) { return manual.axis_type(a) == AxisType::Manual; };
  const auto is_auto = [&manual](const std::string& a) { return manual.axis_type(a) != AxisType::Manual; };
  std::vector<std::string> manual_axes, automatic_axes;
  for (const auto& a : mesh.axis_names()) (is_manual(a) ? manual_axes : automatic_axes).push_back(a);
  const bool partial = !automatic_axes.empty();
  const auto check_spec = [&](const PartitionSpec& spec, const char* what, size_t i) {
    for (const auto& a : spec.axes())
      if (!is_manual(a))
        throw Error("shard_map: " + std::string(what) + "[" + std::to_string(i) + "] = " + spec.to_string() +
                    " names mesh axis '" + a + "', which is automatic here (axis_names = (" + quoted(axis_names) +
                    ")); in_specs and out_specs name only the manual axes (" + quoted(manual_axes) +
                    "), and the body keeps its values' layout along the others");
  };
  for (size_t i = 0; i < in_specs.size(); ++i) check_spec(in_specs[i], "in_specs", i);
  // The program text is built only when someone reads it: a watch, or a jit trace around us.
  const ShardMapWatch::Callback* watch = ShardMapWatchAccess::callback();
  const bool listened = watch || exec::logging();
  std::vector<std::string> text, out_text;
  // The header names no op (no "op: " form), as the jit's own header: "shard_map on mesh
  // (4, 2) ('a', 'b')".
  if (listened) {
    std::string sizes = "(", names = "(";
    for (int a = 0; a < mesh.ndim(); ++a) {
      sizes += (a ? ", " : "") + std::to_string(mesh.axis_sizes()[a]);
      names += (a ? ", '" : "'") + mesh.axis_names()[a] + "'";
    }
    text.push_back("shard_map on mesh " + sizes + (mesh.ndim() == 1 ? ",) " : ") ") + names +
                   (mesh.ndim() == 1 ? ",)" : ")"));
  }
  std::vector<Array> locals;
  for (size_t i = 0; i < args.size(); ++i) {
    const NamedSharding sharding(mesh, in_specs[i]);
    // With automatic axes, an argument laid out over them on this mesh keeps that layout inside
    // the body (the manual axes split each dimension first, major); else it is replicated there.
    std::vector<SpecEntry> auto_part;
    if (partial && args[i].valid())
      if (const NamedSharding* an = args[i].sharding().named())
        if (an->mesh().device_ids() == mesh.device_ids() && an->mesh().axis_names() == mesh.axis_names())
          auto_part = filtered(an->spec(), args[i].ndim(), is_auto);
    Array placed;
    const exec::RuleScope rule([&] { return "shard_map in_specs[" + std::to_string(i) + "] " + in_specs[i].to_string(); });
    try {
      placed = device_put(args[i], sharding);
      if (!auto_part.empty()) {
        const PartitionSpec both = combined(filtered(in_specs[i], args[i].ndim(), is_manual), auto_part);
        try {
          placed = device_put(args[i], NamedSharding(mesh, both));
        } catch (const Error&) {
          auto_part.clear();  // does not divide: replicated along the automatic axes
        }
      }
    } catch (const Error& e) {
      throw Error("shard_map: argument " + std::to_string(i) + " of shape " + shape_to_string(args[i].shape()) +
                  " cannot be split by in_specs[" + std::to_string(i) + "] = " + in_specs[i].to_string() + ": " + e.what());
    }
    const exec::ShardedValue& v = detail::materialized(placed);
    exec::ShardedValue local{Sharding(sharding).shard_shape(v.shape), v.dtype,
                             NamedSharding(manual, PartitionSpec(auto_part).trimmed()), v.shards};
    if (listened)
      text.push_back("  in" + std::to_string(i) + ": " + local_type(v.dtype, v.shape) + " " + in_specs[i].to_string() +
                     " -> local " + local_type(v.dtype, local.shape));
    Array view = detail::make_array(placed.impl()->runtime, std::move(local), true, in_specs[i].axes());
    // Cotangent: per-device pieces summed over the axes the input was replicated on and the
    // cotangent varies over, then assembled by the in_spec.
    locals.push_back(detail::on_tape(view, {placed}, [mesh, manual, spec = in_specs[i], global = placed.shape()](const Array& ct) {
      const detail::ManualScope scope(manual);
      Array c = on_manual_mesh(ct, manual);
      std::vector<std::string> replicated;
      const auto named = spec.axes();
      for (int a = 0; a < manual.ndim(); ++a) {
        const auto& axis = manual.axis_names()[static_cast<size_t>(a)];
        if (manual.axis_types()[static_cast<size_t>(a)] == AxisType::Manual &&
            std::find(named.begin(), named.end(), axis) == named.end())
          replicated.push_back(axis);
      }
      // Summed only along the axes the cotangent varies over: along the others it is one value
      // already (every device's copy of a body that did not vary along them), not contributions.
      const auto& varying = c.impl()->varying;
      std::vector<std::string> summed;
      for (const auto& axis : replicated)
        if (std::find(varying.begin(), varying.end(), axis) != varying.end()) summed.push_back(axis);
      if (!summed.empty()) c = psum(c, summed);
      return std::vector<Array>{pieces_as_global(c, global, NamedSharding(mesh, spec))};
    }));
  }

  // The body's own log, from here (the inputs' placement above is not part of the body) until
  // the outputs are materialized (lazy elementwise work runs then).
  std::optional<exec::ProgramLog> log;
  if (listened) log.emplace();
  std::vector<Array> results;
  {
    const detail::ManualScope scope(manual);
    results = body(locals);
  }
  const std::vector<PartitionSpec> out_specs = out_specs_for(results.size());
  for (size_t i = 0; i < out_specs.size(); ++i) check_spec(out_specs[i], "out_specs", i);
  if (results.size() != out_specs.size())
    throw Error("shard_map: the function returned " + std::to_string(results.size()) + " arrays but " +
                std::to_string(out_specs.size()) + " out_specs were given");

  std::vector<Array> outputs;
  for (size_t i = 0; i < results.size(); ++i) {
    Array r = results[i];
    if (!r.valid()) throw Error("shard_map: output " + std::to_string(i) + " is an empty Array");
    const NamedSharding* rn = r.sharding().named();
    // Laid out over the automatic axes only (fully manual: nowhere) on the body's devices.
    bool on_body = rn && rn->mesh().device_ids() == mesh.device_ids() && rn->mesh().axis_names() == mesh.axis_names();
    if (on_body)
      for (const auto& a : rn->spec().axes()) on_body = on_body && is_auto(a);
    if (!on_body) {
      if (r.committed() && rn && rn->mesh().device_ids() != mesh.device_ids())
        throw Error("shard_map: output " + std::to_string(i) + " lives on other devices than the mesh");
      // A value made inside the body without inputs (a constant) is the same on every device.
      r = device_put(r, NamedSharding(manual, PartitionSpec()));
    }
    // As in JAX, out_specs may run past the rank with None entries; only named ones must exist.
    std::vector<SpecEntry> entries = out_specs[i].entries();
    while (entries.size() > r.ndim() && entries.back().is_none()) entries.pop_back();
    const PartitionSpec spec(entries);
    // The body's layout along the automatic axes carries over to the result (each dimension split
    // by the out_spec's manual axes first, then by those).
    const std::vector<SpecEntry> auto_out = filtered(r.sharding().named()->spec(), r.ndim(), is_auto);
    const PartitionSpec global_spec = partial ? combined(entries, auto_out) : spec;
    const NamedSharding out_sharding(mesh, global_spec);
    if (spec.size() > r.ndim())
      throw Error("shard_map: out_specs[" + std::to_string(i) + "] = " + out_specs[i].to_string() + " names mesh axes for more dimensions than output " +
                  std::to_string(i) + " has dimensions (local shape " + shape_to_string(r.shape()) + ")");
    const std::vector<std::string> named = spec.axes();
    for (const auto& axis : manual_axes) {
      if (std::find(named.begin(), named.end(), axis) != named.end()) continue;
      const auto& varying = r.impl()->varying;
      if (std::find(varying.begin(), varying.end(), axis) != varying.end())
        throw Error("shard_map: out_specs[" + std::to_string(i) + "] = " + spec.to_string() + " claims output " +
                    std::to_string(i) + " is replicated over mesh axis '" + axis +
                    "', but its value varies along '" + axis + "'; reduce it over '" + axis +
                    "' (psum, pmean, all_gather) or name '" + axis + "' in the out_spec");
    }
    Shape global = r.shape();
    const NamedSharding manual_split(mesh, spec);
    for (size_t d = 0; d < spec.size(); ++d) global[d] *= manual_split.num_shards(d);
    const exec::ShardedValue& v = detail::materialized(r);
    if (log)
      out_text.push_back("  out" + std::to_string(i) + ": local " + local_type(v.dtype, r.shape()) + " -> " +
                     local_type(v.dtype, global) + " " + global_spec.to_string());
    Array global_out = detail::make_array(r.impl()->runtime, exec::ShardedValue{global, v.dtype, out_sharding, v.shards}, true);
    // Cotangent: the global cotangent laid out by the out_spec, seen per device.
    const PartitionSpec auto_spec = PartitionSpec(auto_out).trimmed();
    const Array local_like = detail::make_array(
        r.impl()->runtime, exec::ShardedValue{r.shape(), v.dtype, NamedSharding(manual, auto_spec), {}}, true, spec.axes());
    outputs.push_back(detail::on_tape(global_out, {r}, [out_sharding, local_like](const Array& ct) {
      return std::vector<Array>{pieces_as_local(ct, out_sharding, local_like)};
    }));
  }
  if (log) {
    for (const auto& line : log->lines()) text.push_back("  " + line);
    text.insert(text.end(), out_text.begin(), out_text.end());
    log->forward(text);  // into the jit trace's text, when one is listening
    log.reset();
    if (watch) {
      std::string program;
      for (const auto& line : text) program += line + "\n";
      (*watch)(program);
    }
  }
  return outputs;
}

}  // namespace meshvk

// Elementwise operations: type promotion, the layout of the result and fusion of chains into one
// pending program (graph/elementwise_core.hpp); running that program when its data is needed is
// pending_programs.cpp's. The public ops themselves are in elementwise_math.cpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/constant_remake.hpp"
#include "graph/dtype_support.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "kernels/wide_types.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

using kernels::EwNode;
using kernels::EwOp;
using kernels::EwProgram;
using detail::PendingElementwise;

namespace {

// A fused program grows until it would exceed these; then its operands are materialized first.
constexpr size_t kMaxFusedNodes = 96;
constexpr size_t kMaxFusedInputs = 8;

std::string typed_shape(const Array& x) {
  std::string s = std::string(dtype_name(x.dtype())) + "[";
  for (size_t d = 0; d < x.ndim(); ++d) s += (d ? "," : "") + std::to_string(x.shape()[d]);
  return s + "]";
}

std::string ids_text(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace

namespace detail::ew {
// Whether a program computes anything beyond a few instructions per element: a function of the
// math library, a division, a power. Inlined into a program over more elements than it has (a
// broadcast operand: LayerNorm's rsqrt of the variance, Adam's bias correction of the step
// count), such work would run once per output element instead of once per own element.
bool has_costly_ops(const kernels::EwProgram& p) {
  for (const kernels::EwNode& n : p.nodes) switch (n.op) {
      case EwOp::input: case EwOp::constant: case EwOp::neg: case EwOp::abs: case EwOp::sign:
      case EwOp::relu: case EwOp::square: case EwOp::floor: case EwOp::ceil: case EwOp::trunc:
      case EwOp::round_even: case EwOp::logical_not: case EwOp::cast: case EwOp::add:
      case EwOp::sub: case EwOp::mul: case EwOp::maximum: case EwOp::minimum: case EwOp::eq:
      case EwOp::ne: case EwOp::lt: case EwOp::le: case EwOp::gt: case EwOp::ge:
      case EwOp::logical_and: case EwOp::logical_or: case EwOp::bitwise_and: case EwOp::bitwise_or:
      case EwOp::bitwise_xor: case EwOp::where:
        continue;
      default:
        return true;
    }
  return false;
}

OperandType type_of_operand(const Operand& o) {
  if (const auto* a = std::get_if<Array>(&o.get())) return {a->dtype(), false};
  if (std::holds_alternative<float>(o.get())) return {DType::float32, true};
  return {DType::int32, true};
}

}  // namespace detail::ew

namespace {

using detail::ew::OperandType;

// The value of a constant node as a float or an integer, and back in another dtype (folded casts).
// (Constants of every dtype hold int32 or float32 bits: weak scalars are those, and folded casts
// keep them so; the kernels widen them exactly for int64 and float64.)
double constant_value(const EwNode& n) {
  if (is_floating(n.dtype)) {
    float f;
    std::memcpy(&f, &n.bits, 4);
    return f;
  }
  if (n.dtype == DType::uint32) return static_cast<double>(n.bits);
  if (n.dtype == DType::bool_) return n.bits != 0 ? 1.0 : 0.0;
  return static_cast<int32_t>(n.bits);
}

// An int32 value as a constant of the integer dtype `want`: wrapped into int8 and uint8 (as the
// kernels wrap every result), int32 bits otherwise (int64 sign-extends them).
uint32_t wrap_bits(DType want, int32_t v) {
  if (want == DType::int8) return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(v)));
  if (want == DType::uint8) return static_cast<uint32_t>(v) & 0xffu;
  return static_cast<uint32_t>(v);
}

// Builds one fused program out of operands (arrays, pending or not, and scalars).
class ProgramBuilder {
 public:
  int add_operand(const Operand& o, DType want) {
    int node;
    if (const auto* f = std::get_if<float>(&o.get())) {
      node = push({EwOp::constant, DType::float32, -1, -1, -1, -1, bits_of(*f)});
    } else if (const auto* i = std::get_if<int32_t>(&o.get())) {
      node = push({EwOp::constant, DType::int32, -1, -1, -1, -1, static_cast<uint32_t>(*i)});
    } else {
      node = add_array(std::get<Array>(o.get()));
    }
    return cast(node, want);
  }

  int cast(int node, DType want) {
    if (program.nodes[node].dtype == want) return node;
    const EwNode& n = program.nodes[node];
    if (n.op == EwOp::constant) {  // fold casts of constants
      EwNode c = n;
      c.dtype = want;
      if (is_floating(n.dtype) && !is_floating(want)) {
        float f;
        std::memcpy(&f, &n.bits, 4);
        // A float outside int32 has no defined conversion: the kernel's (which this must match)
        // is the adapter's; such a constant stays a cast node.
        if (want != DType::bool_ && !(f > -2147483649.0f && f < 2147483648.0f)) return push({EwOp::cast, want, node});
        c.bits = want == DType::bool_ ? (f != 0.0f) : wrap_bits(want, static_cast<int32_t>(f));
      } else if (is_integer(want) && n.dtype != DType::bool_) {
        c.bits = wrap_bits(want, static_cast<int32_t>(n.bits));
        if (n.dtype == DType::uint32 && want == DType::int64 && (n.bits >> 31) != 0)
          return push({EwOp::cast, want, node});  // past int32: the kernel zero-extends it
      } else if (is_floating(want)) {
        // float32 of the value, then the 16-bit format's rounding (as a kernel's convert).
        if (n.dtype == DType::uint32 || n.dtype == DType::int64) return push({EwOp::cast, want, node});
        const float f = is_floating(n.dtype) ? static_cast<float>(constant_value(n))
                                             : static_cast<float>(static_cast<int32_t>(n.bits));
        c.bits = bits_of(round_to(want, f));
      } else {
        c.bits = n.bits != 0;
      }
      return push(c);
    }
    return push({EwOp::cast, want, node});
  }

  // A node the program holds already is used again rather than computed twice: the ops are pure,
  // and a value inlined into several operands of one program (tanh's t in 1 - t * t, a
  // recomputed forward pass inside its gradient) would otherwise be computed once per use.
  int push(EwNode n) {
    if (const auto it = seen_.find(n); it != seen_.end()) return it->second;
    return append(n);
  }
  // The program's result: the last node, whatever the program holds.
  int append(EwNode n) {
    program.nodes.push_back(n);
    const int at = static_cast<int>(program.nodes.size() - 1);
    seen_.emplace(n, at);
    return at;
  }

  EwProgram program;
  std::vector<Array> inputs;

 private:
  int add_array(const Array& a) {
    const auto& impl = *a.impl();
    if (impl.pending) {
      // Inline the pending program, mapping its inputs onto ours.
      const PendingElementwise& p = *impl.pending;
      std::vector<int> map(p.program.nodes.size());
      for (size_t i = 0; i < p.program.nodes.size(); ++i) {
        EwNode n = p.program.nodes[i];
        if (n.op == EwOp::input) {
          map[i] = add_leaf(p.inputs[n.input]);
          continue;
        }
        if (n.a >= 0) n.a = map[n.a];
        if (n.b >= 0) n.b = map[n.b];
        if (n.c >= 0) n.c = map[n.c];
        map[i] = push(n);
      }
      return map.back();
    }
    return add_leaf(a);
  }

  int add_leaf(const Array& a) {
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].impl() == a.impl()) return leaf_nodes[k];
    inputs.push_back(a);
    EwNode n{EwOp::input, a.dtype()};
    n.input = static_cast<int>(inputs.size() - 1);
    leaf_nodes.push_back(push(n));
    return leaf_nodes.back();
  }

  std::vector<int> leaf_nodes;
  struct NodeHash {
    size_t operator()(const EwNode& n) const {
      uint64_t h = static_cast<uint64_t>(n.op) | static_cast<uint64_t>(n.dtype) << 8;
      for (const int v : {n.a, n.b, n.c, n.input}) h = h * 1000003u ^ static_cast<uint32_t>(v);
      return static_cast<size_t>(h * 1000003u ^ n.bits);
    }
  };
  std::unordered_map<EwNode, int, NodeHash> seen_;
};

// Nodes and inputs an operand would add if inlined.
std::pair<size_t, size_t> fused_size(const Array& a) {
  if (const auto& p = a.impl()->pending) return {p->program.nodes.size(), p->inputs.size()};
  return {1, 1};
}

// The layout of an elementwise result and its operands: each result dimension takes the
// sharding of the first operand that is not broadcast along it (no mesh axis twice); operands
// are then laid out to match, moving data only where their layout differs.
struct Layout {
  Sharding result;
  std::vector<Sharding> operands;
};

bool is_explicit(const Mesh& mesh, const std::string& axis) {
  return mesh.has_axis(axis) && mesh.axis_type(axis) == AxisType::Explicit;
}

// Explicit mode: the shardings are part of the types, so operands that split the same result
// dimension differently (or one mesh axis over different dimensions) have no defined result.
void check_explicit_agreement(const char* op, const std::vector<const Array*>& arrays, const Shape& out, const Mesh& mesh) {
  std::vector<const Array*> by_dim(out.size(), nullptr);
  std::map<std::string, std::pair<const Array*, size_t>> axis_dim;
  for (const Array* a : arrays) {
    const NamedSharding* n = a->sharding().named();
    if (!n || !(n->mesh() == mesh)) continue;
    const size_t lead = out.size() - a->ndim();
    for (size_t d = 0; d < a->ndim(); ++d) {
      const SpecEntry& e = n->spec()[d];
      bool explicit_entry = false;
      for (const auto& axis : e.axes) explicit_entry = explicit_entry || is_explicit(mesh, axis);
      if (!explicit_entry || a->shape()[d] != out[lead + d]) continue;
      const Array* other = by_dim[lead + d];
      if (other) {
        const SpecEntry& oe = other->sharding().named()->spec()[lead + d - (out.size() - other->ndim())];
        if (!(oe == e))
          throw Error(std::string(op) + ": operands " + type_of(*other) + " and " + type_of(*a) +
                      " are sharded differently along result dimension " + std::to_string(lead + d) +
                      "; in explicit mode the result's sharding must follow from its operands: reshard one of them so they agree");
      }
      by_dim[lead + d] = a;
      for (const auto& axis : e.axes) {
        auto [it, fresh] = axis_dim.emplace(axis, std::make_pair(a, lead + d));
        if (!fresh && it->second.second != lead + d)
          throw Error(std::string(op) + ": mesh axis '" + axis + "' shards dimension " + std::to_string(it->second.second) +
                      " of " + type_of(*it->second.first) + " but dimension " + std::to_string(lead + d) + " of " + type_of(*a) +
                      "; reshard one of them so each mesh axis shards one result dimension");
      }
    }
  }
}

Layout choose_layout(const char* op, const std::vector<const Array*>& arrays, const Shape& out) {
  static const char* names[] = {"x", "y", "z"};
  const Array* anchor = nullptr;  // the first committed operand decides the devices
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Array& a = *arrays[i];
    if (!a.committed()) continue;
    if (!anchor) {
      anchor = &a;
      continue;
    }
    if (a.sharding().device_ids() != anchor->sharding().device_ids()) {
      size_t ai = std::find(arrays.begin(), arrays.end(), anchor) - arrays.begin();
      throw Error(std::string("Received incompatible devices for jitted computation. Got argument ") +
                  names[ai] + " of " + op + " with shape " + typed_shape(*anchor) + " and device ids " +
                  ids_text(anchor->sharding().device_ids()) + " on platform " + anchor->sharding().platform() +
                  " and argument " + names[i] + " of " + op + " with shape " + typed_shape(a) +
                  " and device ids " + ids_text(a.sharding().device_ids()) + " on platform " +
                  a.sharding().platform() +
                  "; put both on the same devices in the same order (device_put one of them)");
    }
  }
  if (!anchor) anchor = arrays.front();
  const NamedSharding* mesh_sharding = anchor->sharding().named();
  if (!mesh_sharding) {
    Layout l{anchor->sharding(), {}};
    for (size_t i = 0; i < arrays.size(); ++i) l.operands.push_back(anchor->sharding());
    return l;
  }
  const Mesh& mesh = mesh_sharding->mesh();
  check_explicit_agreement(op, arrays, out, mesh);
  std::vector<SpecEntry> spec(out.size());
  std::vector<std::string> used;
  // Where operands disagree, the largest keeps its layout: the others move (or are sliced where
  // they are replicated), which moves the fewest bytes.
  std::vector<const Array*> by_size = arrays;
  std::stable_sort(by_size.begin(), by_size.end(), [](const Array* x, const Array* y) { return x->size() > y->size(); });
  for (const Array* a : by_size) {
    if (!a->sharding().named() || !(a->sharding().named()->mesh() == mesh)) continue;
    const size_t lead = out.size() - a->ndim();
    for (size_t d = 0; d < a->ndim(); ++d) {
      const SpecEntry& e = a->sharding().named()->spec()[d];
      if (e.is_none() || a->shape()[d] != out[lead + d] || !spec[lead + d].is_none()) continue;
      bool clash = false;
      for (const auto& axis : e.axes) clash = clash || std::find(used.begin(), used.end(), axis) != used.end();
      if (clash) continue;
      spec[lead + d] = e;
      used.insert(used.end(), e.axes.begin(), e.axes.end());
    }
  }
  Layout l{NamedSharding(mesh, PartitionSpec(spec).trimmed()), {}};
  for (const Array* a : arrays) {
    const size_t lead = out.size() - a->ndim();
    std::vector<SpecEntry> own(a->ndim());
    for (size_t d = 0; d < a->ndim(); ++d)
      if (a->shape()[d] == out[lead + d]) own[d] = spec[lead + d];
    l.operands.push_back(NamedSharding(mesh, PartitionSpec(own).trimmed()));
  }
  return l;
}

// Whether a value x that is not partial, added to a sum whose summands are laid out as
// `summands`, leaves that layout: x splits no dimension the summands hold whole (x replicated, or
// split alike), so adding it after the sum moves nothing between devices.
bool keeps_layout(const Array& x, const Array& summands) {
  const NamedSharding* n = x.sharding().named();
  if (!n) return !x.committed();  // a constant, made again wherever it is needed
  const NamedSharding* s = summands.sharding().named();
  if (!s || !(n->mesh() == s->mesh())) return false;
  const size_t lead = summands.ndim() - x.ndim();
  for (size_t d = 0; d < x.ndim(); ++d) {
    const SpecEntry have = d < n->spec().size() ? n->spec()[d] : SpecEntry();
    const SpecEntry want = lead + d < s->spec().size() ? s->spec()[lead + d] : SpecEntry();
    if (!have.is_none() && !(have == want)) return false;
  }
  return true;
}

// A linear op of partial values (graph/partial_sum.hpp) stays partial, run on the summands: an
// add or subtract of values partial over the same axes (the input gradients of q, k and v summed
// before one all-reduce), a negation, a product with (or a quotient by) a value that is the same
// on every device along those axes. An add or subtract of a partial value and one that is not
// keeps the other as the sum's addend, added once the sum is taken: x + p1 + p2 (the residual
// gradient beside two partial input gradients) is then one all-reduce, as XLA's reassociation
// gives, and p + bias has the bits of all-reduce(p) + bias. In one dtype (float32, or int32 whose
// sums wrap alike in any order); anything else takes the sums first (nothing here: materialized()
// does).
std::optional<Array> on_partial_summands(const char* op, EwOp ew, const std::vector<Operand>& operands, DType compute,
                                         DType result, const Shape& out) {
  std::optional<std::vector<std::string>> axes;
  const Mesh* mesh = nullptr;
  const Array* partial_operand = nullptr;
  size_t partials = 0;
  for (const Operand& o : operands) {
    const auto* a = std::get_if<Array>(&o.get());
    if (!a || !detail::is_partial(*a)) continue;
    if ((axes && *axes != detail::partial_axes(*a)) || a->dtype() != compute) return std::nullopt;
    axes = detail::partial_axes(*a);
    if (!partial_operand) partial_operand = a;
    mesh = &a->sharding().named()->mesh();  // its summands' mesh
    ++partials;
  }
  if (!axes || compute != result || (compute != DType::float32 && compute != DType::int32)) return std::nullopt;
  for (const Operand& o : operands) {
    const auto* a = std::get_if<Array>(&o.get());
    if (a && !detail::is_partial(*a)) {
      const NamedSharding* n = a->sharding().named();
      if (n ? !(n->mesh() == *mesh) || detail::shards_over_any(a->sharding(), *axes) : a->committed())
        return std::nullopt;
    }
  }
  const auto apply = [&](const char* name, EwOp e, std::vector<Operand> v) {
    return detail::ew::elementwise(name, e, std::move(v), compute, compute);
  };
  const auto as_array = [&](const Operand& o) -> Array {
    if (const auto* a = std::get_if<Array>(&o.get())) return *a;
    if (const auto* f = std::get_if<float>(&o.get())) return scalar(*f);
    const int32_t i = std::get<int32_t>(o.get());
    return compute == DType::int32 ? scalar(i) : scalar(static_cast<float>(i));
  };

  if (ew == EwOp::add || ew == EwOp::sub) {
    if (operands.size() != 2) return std::nullopt;
    const auto* la = std::get_if<Array>(&operands[0].get());
    const auto* ra = std::get_if<Array>(&operands[1].get());
    const bool lp = la && detail::is_partial(*la), rp = ra && detail::is_partial(*ra);
    // A partial operand broadcast up is cheaper to sum before it grows.
    if ((lp && la->shape() != out) || (rp && ra->shape() != out)) return std::nullopt;
    Array summands, addend;
    if (lp && rp) {
      summands = apply(op, ew, {detail::summands_of(*la), detail::summands_of(*ra)});
      const Array &al = detail::addend_of(*la), &ar = detail::addend_of(*ra);
      if (al.valid() && ar.valid()) addend = apply(op, ew, {al, ar});
      else if (al.valid()) addend = al;
      else if (ar.valid()) addend = ew == EwOp::sub ? apply("neg", EwOp::neg, {ar}) : ar;
    } else {
      const Array& p = lp ? *la : *ra;
      const Operand& x = lp ? operands[1] : operands[0];
      const auto* xa = std::get_if<Array>(&x.get());
      if (xa && !keeps_layout(*xa, detail::summands_of(p))) return std::nullopt;
      const Array& ap = detail::addend_of(p);
      if (lp) {  // p + x, p - x: the summands stay, x joins the addend
        summands = detail::summands_of(p);
        addend = ap.valid() ? apply(op, ew, {ap, x}) : ew == EwOp::sub ? apply("neg", EwOp::neg, {x}) : as_array(x);
      } else {  // x + p, x - p
        summands = ew == EwOp::sub ? apply("neg", EwOp::neg, {detail::summands_of(p)}) : detail::summands_of(p);
        addend = ap.valid() ? apply(op, ew, {x, ap}) : as_array(x);
      }
    }
    if (detail::shards_over_any(summands.sharding(), *axes)) return std::nullopt;
    return detail::make_partial(summands, *axes, "", partial_operand, addend);
  }
  if (ew == EwOp::neg) {
    const Array& a = detail::addend_of(*partial_operand);
    return detail::make_partial(apply("neg", EwOp::neg, {detail::summands_of(*partial_operand)}), *axes, "",
                                partial_operand, a.valid() ? apply("neg", EwOp::neg, {a}) : Array());
  }
  const auto* first = std::get_if<Array>(&operands.front().get());
  const bool first_partial = first && detail::is_partial(*first);
  const bool linear = (ew == EwOp::mul && partials == 1) ||
                      (ew == EwOp::div && partials == 1 && first_partial && compute == DType::float32);
  // A product of a sum with an addend: its rounding is that of the sum taken first.
  if (!linear || detail::addend_of(*partial_operand).valid()) return std::nullopt;
  std::vector<Operand> on_summands;
  for (const Operand& o : operands) {
    const auto* a = std::get_if<Array>(&o.get());
    on_summands.push_back(a ? Operand(detail::summands_of(*a)) : o);
  }
  const Array r = detail::ew::elementwise(op, ew, std::move(on_summands), compute, result);
  if (detail::shards_over_any(r.sharding(), *axes)) return std::nullopt;
  return detail::make_partial(r, *axes, "", partial_operand);
}

}  // namespace

namespace detail::ew {

namespace {
Array elementwise_to(const char* op, EwOp ew, std::vector<Operand> operands, DType compute, DType result,
                     const Shape* target);
}  // namespace

Array elementwise(const char* op, EwOp ew, std::vector<Operand> operands, DType compute, DType result) {
  return elementwise_to(op, ew, std::move(operands), compute, result, nullptr);
}

Array broadcast(const Array& x, const Shape& shape) {
  return elementwise_to("broadcast_to", EwOp::cast, {x}, x.dtype(), x.dtype(), &shape);
}

namespace {

Array elementwise_to(const char* op, EwOp ew, std::vector<Operand> operands, DType compute, DType result,
                     const Shape* target) {
  std::vector<const Array*> arrays;
  bool has_uint32 = false;
  for (const Operand& o : operands)
    if (const auto* a = std::get_if<Array>(&o.get())) {
      if (!a->valid()) throw Error(std::string(op) + ": an operand is an empty meshvk::Array");
      has_uint32 = has_uint32 || a->dtype() == DType::uint32;
      arrays.push_back(a);
    }
  if (ew != EwOp::cast && (has_uint32 || compute == DType::uint32)) {
    // uint32 computes in int64, where every uint32 value is exact, and a uint32 result wraps back
    // modulo 2^32 (the kernels' int64 -> uint32 conversion keeps the low bits), as uint32
    // arithmetic does.
    for (Operand& o : operands)
      if (const auto* a = std::get_if<Array>(&o.get()); a && a->dtype() == DType::uint32)
        o = detail::convert_untaped(*a, DType::int64);
    const auto wide = [](DType t) { return t == DType::uint32 ? DType::int64 : t; };
    const Array r = elementwise_to(op, ew, std::move(operands), wide(compute), wide(result), target);
    return result == DType::uint32 ? detail::convert_untaped(r, DType::uint32) : r;
  }
  if (compute == DType::float64 || result == DType::float64) detail::check_float64_op(op, ew);
  if (is_8bit(compute)) detail::check_8bit_scalars(op, operands, compute);
  if (arrays.empty()) {
    // Scalars only: the first becomes a rank-0 array on device 0.
    const auto& first = operands.front().get();
    operands.front() = std::holds_alternative<float>(first) ? Operand(scalar(std::get<float>(first)))
                                                           : Operand(scalar(std::get<int32_t>(first)));
    return elementwise_to(op, ew, std::move(operands), compute, result, target);
  }
  Shape out = target ? *target : arrays.front()->shape();
  for (const Array* a : arrays) out = broadcast_shapes(out, a->shape(), op);
  for (const Array* a : arrays)
    if (detail::is_partial(*a)) {
      if (auto r = on_partial_summands(op, ew, operands, compute, result, out)) return *r;
      break;
    }

  auto rt = arrays.front()->impl()->runtime;
  for (const Array* a : arrays)
    if (a->impl()->runtime != rt)
      throw Error(std::string(op) + ": operands belong to different meshvk::Runtime objects");
  std::lock_guard lock(rt->mutex());
  // A dtype the adapter lacks a feature for is refused here, where the op is called, rather than
  // when the fused program runs.
  for (const DType d : {compute, result})
    if (is_8bit(d) || is_64bit(d)) kernels::require_dtype(*rt, arrays.front()->sharding().device_ids().front(), d);
  const Layout layout = choose_layout(op, arrays, out);

  // Lay operands out as the result needs; inline pending operands while the program stays small.
  std::vector<Operand> placed;
  size_t array_index = 0, nodes = 1, inputs = 0;
  for (const Operand& o : operands) {
    const auto* a = std::get_if<Array>(&o.get());
    if (!a) {
      placed.push_back(o);
      ++nodes;
      continue;
    }
    const Sharding& want = layout.operands[array_index++];
    Array x = *a;
    if (!x.sharding().is_equivalent_to(want, x.ndim())) {
      const exec::RuleScope rule([&] {
        return std::string(op) + ": operands with different shardings; operand " + std::to_string(array_index - 1) +
               " moved to the result's layout";
      });
      x = device_put(x, want);
    } else if (detail::is_pending(x)) {
      const auto [n, k] = fused_size(x);
      if (nodes + n > kMaxFusedNodes || inputs + k > kMaxFusedInputs ||
          (shape_size(x.shape()) < shape_size(out) && has_costly_ops(x.impl()->pending->program)))
        detail::materialized(x);
    }
    const auto [n, k] = fused_size(x);
    nodes += n;
    inputs += k;
    placed.push_back(x);
  }

  ProgramBuilder b;
  std::vector<int> args;
  for (const Operand& o : placed) args.push_back(b.add_operand(o, ew == EwOp::where && args.empty() ? DType::bool_ : compute));
  EwNode n{ew, result};
  n.a = args[0];
  if (args.size() > 1) n.b = args[1];
  if (args.size() > 2) n.c = args[2];
  b.append(n);
  b.program.num_inputs = static_cast<int>(b.inputs.size());
  bool committed = false;
  for (const Array* a : arrays) committed = committed || a->committed();
  std::vector<std::shared_ptr<const Remake>> input_remakes;
  for (const Array& in : b.inputs)
    if (auto r = remake_of(in)) input_remakes.push_back(std::move(r));
  const bool constant = !committed && input_remakes.size() == b.inputs.size();
  kernels::EwProgram program = b.program;
  Array r = detail::make_pending(rt, out, result, layout.result, committed,
                                 PendingElementwise{std::move(b.program), std::move(b.inputs)},
                                 detail::varying_of(arrays));
  if (!constant) return r;
  // Only constants in: the same program over the inputs made again (see constant_remake.hpp).
  return with_remake(r, [rt, out, result, program, input_remakes](const Sharding& everywhere) {
    std::vector<Array> inputs;
    for (const auto& remake : input_remakes) inputs.push_back((*remake)(everywhere));
    return detail::make_pending(rt, out, result, everywhere, false, PendingElementwise{program, std::move(inputs)});
  });
}

}  // namespace

bool is_float_op(EwOp op) {
  switch (op) {
    case EwOp::exp: case EwOp::log: case EwOp::sqrt: case EwOp::rsqrt: case EwOp::sin:
    case EwOp::cos: case EwOp::tanh: case EwOp::sigmoid: case EwOp::reciprocal: case EwOp::tan:
    case EwOp::asin: case EwOp::acos: case EwOp::atan: case EwOp::erf: case EwOp::erfinv:
    case EwOp::expm1: case EwOp::log1p: case EwOp::sinh: case EwOp::cosh: case EwOp::exp2:
    case EwOp::log2: case EwOp::asinh: case EwOp::acosh: case EwOp::atanh:
      return true;
    default:
      return false;
  }
}

Array unary(const char* op, EwOp ew, const Array& x) {
  DType t = x.dtype() == DType::bool_ ? DType::int32 : x.dtype();
  // exp(bfloat16) stays bfloat16; ints go to float32, int64 to float64 (JAX's to_inexact_dtype)
  if (is_float_op(ew) && !is_floating(t)) t = t == DType::int64 ? DType::float64 : DType::float32;
  if (ew == EwOp::logical_not) t = DType::bool_;
  return elementwise(op, ew, {x}, t, t);
}

Array arithmetic(const char* op, EwOp ew, const Operand& a, const Operand& b) {
  const DType t = promote({type_of_operand(a), type_of_operand(b)});
  return elementwise(op, ew, {a, b}, t, t);
}

Array comparison(const char* op, EwOp ew, const Operand& a, const Operand& b) {
  const OperandType ta = type_of_operand(a), tb = type_of_operand(b);
  // Booleans compare as booleans for (in)equality, as integers for order.
  const bool both_bool = ta.dtype == DType::bool_ && tb.dtype == DType::bool_;
  const DType t = both_bool && (ew == EwOp::eq || ew == EwOp::ne) ? DType::bool_ : promote({ta, tb});
  return elementwise(op, ew, {a, b}, t, DType::bool_);
}

}  // namespace detail::ew


namespace detail {

void operand_out_of_range(long long value) {
  throw Error("scalar operand " + std::to_string(value) +
              " does not fit in int32, the type of an integer scalar (JAX raises OverflowError "
              "too); for an int64 array make the scalar an int64 Array (full_like(x, " + std::to_string(value) +
              ") or array(std::span<const int64_t>)), for a float one pass a float (" + std::to_string(value) +
              ".f), or bring it into [-2147483648, 2147483647]");
}
void operand_out_of_range(unsigned long long value) {
  throw Error("scalar operand " + std::to_string(value) +
              " does not fit in int32, the type of an integer scalar (JAX raises OverflowError "
              "too); pass a float or a value up to 2147483647 (a uint32_t is taken as its bits)");
}

}  // namespace detail

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(std::string(op) + ": shapes " + shape_to_string(a) + " and " + shape_to_string(b) +
                  " do not broadcast: dimension " + std::to_string(i) + " (from the right: " +
                  std::to_string(n - i) + ") is " + std::to_string(da) + " vs " + std::to_string(db) +
                  "; sizes must match or one of them be 1");
    out[i] = da == 1 ? db : da;
  }
  checked_size(out, op);  // (2^40, 1) and (1, 2^40) broadcast to more than int64 holds
  return out;
}

}  // namespace meshvk

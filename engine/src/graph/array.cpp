#include "exec/program_log.hpp"
#include "meshvk/array.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>

#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/constant_remake.hpp"
#include "graph/dtype_support.hpp"
#include "graph/manual_context.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "graph/saved_collectives.hpp"
#include "graph/tape.hpp"
#include "io/host_array.hpp"
#include "runtime/process_group.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"
#include "meshvk/visualize.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

namespace detail {

RuntimeState& current_runtime() { return *Runtime::current().state(); }

RuntimeState& runtime_of(const Array& x) {
  if (!x.valid()) throw Error("use of an empty meshvk::Array (default-constructed or moved from)");
  return *x.impl()->runtime;
}

Array make_array(std::shared_ptr<RuntimeState> rt, exec::ShardedValue value, bool committed,
                 std::vector<std::string> varying) {
  checked_size(value.shape, "result");  // the last line of defence; ops check before allocating
  return Array(std::make_shared<const ArrayImpl>(
      ArrayImpl{std::move(rt), std::move(value), committed, nullptr, std::move(varying)}));
}

std::vector<std::string> varying_of(const std::vector<const Array*>& arrays) {
  std::vector<std::string> axes;
  for (const Array* a : arrays)
    for (const auto& axis : a->impl()->varying)
      if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
  return axes;
}

}  // namespace detail

namespace {

using detail::ArrayImpl;

const ArrayImpl& impl_of(const Array& x) {
  if (!x.valid()) throw Error("use of an empty meshvk::Array (default-constructed or moved from)");
  return *x.impl();
}

std::shared_ptr<detail::RuntimeState> current_state() { return Runtime::current().state(); }

// This process's first device: with several processes each holds its own copy of an
// uncommitted array (as jax puts one on each process's first local device).
Sharding default_device(const detail::RuntimeState& rt) {
  return SingleDeviceSharding(rt.first_local_device(), rt.platform());
}

// Inside a shard_map body a constant is the same value on every device of the mesh: made there
// directly rather than on device 0 and copied to each device on every use.
const Mesh* constant_mesh() { return detail::current_manual_mesh(); }

Array made(std::shared_ptr<detail::RuntimeState> rt, exec::ShardedValue value) {
  const bool manual = value.sharding.named() != nullptr;
  return detail::make_array(std::move(rt), std::move(value), manual);
}

// The most elements of a host array that is kept to be uploaded again where it is used.
constexpr int64_t kRemadeHostElements = 1 << 14;

template <class T>
Array from_host(std::span<const T> values, std::optional<Shape> shape, DType dtype = dtype_of<T>()) {
  const Shape s = shape.value_or(Shape{static_cast<int64_t>(values.size())});
  const int64_t size = checked_size(s, "array");
  if (size != static_cast<int64_t>(values.size()))
    throw Error("array: " + std::to_string(values.size()) + " values cannot fill shape " +
                shape_to_string(s) + ", which holds " + std::to_string(size));
  auto rt = current_state();
  std::lock_guard lock(rt->mutex());
  const detail::PartOpScope op_scope("array");  // profile hook
  const Mesh* mesh = constant_mesh();
  auto value = exec::upload(*rt, values.data(), s, dtype,
                            mesh ? Sharding(NamedSharding(*mesh, PartitionSpec())) : default_device(*rt));
  const Array a = made(rt, std::move(value));
  // Small constants (a scan's slice indices, a table of a few values) are uploaded again where
  // they are used; a large host array is data, moved as any other.
  if (a.committed() || size > kRemadeHostElements) return a;
  std::vector<T> kept(values.begin(), values.end());
  return detail::with_remake(a, [rt, kept = std::move(kept), s, dtype](const Sharding& everywhere) {
    return made(rt, exec::upload(*rt, kept.data(), s, dtype, everywhere));
  });
}

Array filled(const char* op, Shape shape, DType dtype, uint32_t word) {
  checked_size(shape, op);
  auto rt = current_state();
  std::lock_guard lock(rt->mutex());
  const detail::PartOpScope op_scope("full");  // profile hook
  const Mesh* mesh = constant_mesh();
  auto value = exec::fill(*rt, shape, dtype, word, mesh ? Sharding(NamedSharding(*mesh, PartitionSpec())) : default_device(*rt));
  const Array a = made(rt, std::move(value));
  if (a.committed()) return a;
  return detail::with_remake(a, [rt, shape, dtype, word](const Sharding& everywhere) {
    return made(rt, exec::fill(*rt, shape, dtype, word, everywhere));
  });
}

template <class T>
uint32_t bits(T v) {
  uint32_t w;
  std::memcpy(&w, &v, 4);
  return w;
}

Array ranged(double start, double stop, double step, DType dtype) {
  if (step == 0) throw Error("arange: step must not be zero");
  const double n = std::ceil((stop - start) / step);
  // Checked as a double first: converting a count past int64 (or NaN) would be undefined.
  if (!(n <= 0x1p62))
    throw Error("arange: [" + std::to_string(start) + ", " + std::to_string(stop) +
                ") in steps of " + std::to_string(step) + " has too many elements for any device");
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  checked_size({count}, "arange");
  auto rt = current_state();
  std::lock_guard lock(rt->mutex());
  const detail::PartOpScope op_scope("arange");  // profile hook
  if (const Mesh* mesh = constant_mesh())
    return made(rt, detail::iota_on(*rt, count, dtype, start, step, NamedSharding(*mesh, PartitionSpec())));
  const Array a = made(rt, detail::iota_on(*rt, count, dtype, start, step, default_device(*rt)));
  return detail::with_remake(a, [rt, count, dtype, start, step](const Sharding& everywhere) {
    return made(rt, detail::iota_on(*rt, count, dtype, start, step, everywhere));
  });
}

}  // namespace

bool detail::on_every_process(const Array& x) {
  const ArrayImpl& a = impl_of(x);
  const SingleDeviceSharding* single = a.value.sharding.single();
  return !a.committed && a.runtime->multi_process() && single &&
         single->device() == a.runtime->first_local_device();
}

const Shape& Array::shape() const& {
  return impl_of(*this).value.shape;
}
Shape Array::shape() const&& {
  return impl_of(*this).value.shape;
}
DType Array::dtype() const { return impl_of(*this).value.dtype; }
const Sharding& Array::sharding() const& {
  return impl_of(*this).value.sharding;
}
Sharding Array::sharding() const&& {
  return impl_of(*this).value.sharding;
}
bool Array::committed() const { return impl_of(*this).committed; }
bool Array::is_deleted() const {
  const detail::ArrayImpl& impl = impl_of(*this);
  std::lock_guard lock(impl.runtime->mutex());
  return !impl.donated_to.empty();
}

static void read_words(const Array& x, void* dst);
static void read_elements(const Array& x, void* dst);

void Array::copy_to_host(void* dst, DType expected) const {
  const ArrayImpl& a = impl_of(*this);
  if (a.value.dtype != expected)
    throw Error("to_host<" + std::string(dtype_name(expected)) + ">: the array is " +
                std::string(dtype_name(a.value.dtype)) + "; ask for to_host<" +
                (a.value.dtype == DType::float32    ? "float"
                 : a.value.dtype == DType::uint32   ? "uint32_t"
                 : a.value.dtype == DType::bfloat16 ? "meshvk::bfloat16"
                 : a.value.dtype == DType::float16  ? "meshvk::float16"
                 : a.value.dtype == DType::int8     ? "int8_t"
                 : a.value.dtype == DType::uint8    ? "uint8_t"
                 : a.value.dtype == DType::int64    ? "int64_t"
                 : a.value.dtype == DType::float64  ? "double"
                                                    : "int32_t") +
                ">()");
  read_elements(*this, dst);
}

// The array's elements as io::HostArray holds them: bfloat16 and float16 as 32-bit words of their
// float32 values, every other dtype as stored.
static void read_words(const Array& x, void* dst) {
  const DType dtype = impl_of(x).value.dtype;
  if (!detail::is_16bit_float(dtype)) return read_elements(x, dst);
  std::vector<uint16_t> halves(static_cast<size_t>(x.size()));
  read_elements(x, halves.data());
  auto* out = static_cast<float*>(dst);
  for (size_t i = 0; i < halves.size(); ++i)
    out[i] = dtype == DType::bfloat16 ? bfloat16_to_float(halves[i]) : float16_to_float(halves[i]);
}

// The array's elements as stored: dtype_size bytes each.
static void read_elements(const Array& x, void* dst) {
  const ArrayImpl& a = impl_of(x);
  if (!dst && shape_size(a.value.shape) > 0)
    throw Error("copy_to_host: the destination is a null pointer; give room for " +
                std::to_string(shape_size(a.value.shape)) + " elements of " +
                std::string(dtype_name(a.value.dtype)) + " (or use to_host<T>())");
  if (const NamedSharding* n = a.value.sharding.named())
    for (const AxisType t : n->mesh().axis_types())
      if (t == AxisType::Manual)
        throw Error("to_host: this is a per-device value inside shard_map; return it through the out_specs and read the result");
  if (a.runtime->capture())
    throw Error("to_host: values cannot be read while jit traces a function; return them from the function instead");
  std::lock_guard lock(a.runtime->mutex());
  const detail::PartOpScope op_scope("to_host");  // profile hook
  // A program written for one process and run unchanged under mpirun reads an array spanning
  // processes collectively (every process runs the same to_host); one that initialized
  // meshvk::distributed itself gets JAX's error and reads it with process_allgather.
  const detail::ProcessGroup* group = detail::ProcessGroup::get();
  exec::download(*a.runtime, detail::materialized(x), dst,
                 !(group && group->initialized_by_user));
}

static Array reshape_untaped(const Array& self, Shape new_shape);

Array Array::reshape(Shape new_shape) const {
  const Array r = reshape_untaped(*this, std::move(new_shape));
  const Shape old = shape();
  return detail::on_tape(r, {*this}, [old](const Array& ct) { return std::vector<Array>{ct.reshape(old)}; });
}

// The sharding of `to` under which every device's piece of `from` (laid out by `spec`), read in
// row-major order, already is its piece of the reshaped array; none when there is no such one.
// Dimensions are matched in groups of equal size products: (16, 6, 10) -> (96, 10) groups
// {16, 6} -> {96} and {10} -> {10}. In a group only the leading old dimension may be split, and
// then the leading new dimension takes its split when both divide evenly over it: the pieces are
// the same runs of elements. Size-1 dimensions come and go freely.
static std::optional<PartitionSpec> local_reshape_spec(const Shape& from, const PartitionSpec& spec,
                                                       const Shape& to, const Mesh& mesh) {
  struct Dim {
    int64_t size;
    SpecEntry entry;
  };
  std::vector<Dim> old_dims;
  for (size_t d = 0; d < from.size(); ++d) {
    const SpecEntry entry = d < spec.size() ? spec[d] : SpecEntry();
    if (from[d] == 0) return std::nullopt;
    if (from[d] == 1) {
      int64_t ways = 1;  // a size-1 dimension can only be "split" over axes of size 1
      for (const std::string& axis : entry.axes) ways *= mesh.axis_size(axis);
      if (ways != 1) return std::nullopt;
      continue;
    }
    old_dims.push_back({from[d], entry});
  }
  std::vector<size_t> new_dims;  // positions in `to` of its dimensions other than 1
  for (size_t d = 0; d < to.size(); ++d)
    if (to[d] != 1) new_dims.push_back(d);
  std::vector<SpecEntry> out(to.size());
  size_t i = 0, j = 0;
  while (i < old_dims.size() && j < new_dims.size()) {
    const size_t i0 = i, j0 = j;
    int64_t po = old_dims[i++].size, pn = to[new_dims[j++]];
    while (po != pn) {
      if (po < pn) {
        if (i == old_dims.size()) return std::nullopt;
        po *= old_dims[i++].size;
      } else {
        if (j == new_dims.size()) return std::nullopt;
        pn *= to[new_dims[j++]];
      }
    }
    const SpecEntry& lead = old_dims[i0].entry;
    for (size_t k = i0 + 1; k < i; ++k)
      if (!old_dims[k].entry.is_none()) return std::nullopt;
    if (lead.is_none()) continue;
    if (i - i0 > 1 || j - j0 > 1) {
      int64_t ways = 1;
      for (const std::string& axis : lead.axes) ways *= mesh.axis_size(axis);
      if (old_dims[i0].size % ways || to[new_dims[j0]] % ways) return std::nullopt;
    }
    out[new_dims[j0]] = lead;
  }
  if (i != old_dims.size() || j != new_dims.size()) return std::nullopt;
  return PartitionSpec(out).trimmed();
}

// A pending program reshaped stays pending where each of its inputs is laid out as its result
// (or is one element) and the reshape moves no data between devices: the program over the
// inputs reshaped alike, so a consumer (one_hot's comparison, a reduction) computes it in place
// instead of reading a copy.
static std::optional<Array> reshape_pending(const Array& self, const Shape& new_shape) {
  const ArrayImpl& a = impl_of(self);
  if (!a.pending || a.partial || detail::remake_of(self)) return std::nullopt;
  Sharding sharding = self.sharding();
  if (const NamedSharding* n = sharding.named()) {
    const auto spec = local_reshape_spec(self.shape(), n->spec(), new_shape, n->mesh());
    if (!spec) return std::nullopt;
    sharding = NamedSharding(n->mesh(), *spec);
  }
  detail::PendingElementwise reshaped{a.pending->program, {}};
  for (const Array& in : a.pending->inputs) {
    // A sum not yet taken would be reshaped into a second array whose sum is taken apart from
    // the first one's: a collective twice.
    if (detail::is_partial(in)) return std::nullopt;
    if (in.size() == 1) {
      reshaped.inputs.push_back(in);
    } else if (in.shape() == self.shape() && in.sharding() == self.sharding()) {
      reshaped.inputs.push_back(reshape_untaped(in, new_shape));
    } else {
      return std::nullopt;  // broadcast or laid out otherwise: no longer a plain elementwise read
    }
  }
  return detail::make_pending(a.runtime, new_shape, self.dtype(), std::move(sharding), a.committed,
                              std::move(reshaped), a.varying);
}

static Array reshape_untaped(const Array& self, Shape new_shape) {
  const ArrayImpl& a = impl_of(self);
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (new_shape[i] == -1 && infer < 0) {
      infer = static_cast<int>(i);
    } else if (new_shape[i] < 0) {
      throw Error("reshape: " + shape_to_string(new_shape) + " has a negative dimension; use -1 once to infer one");
    } else if (new_shape[i] != 0) {
      known = checked_mul(known, new_shape[i], "reshape",
                          "the product of the dimensions of " + shape_to_string(new_shape) + ",");
    } else {
      known = 0;
    }
  }
  if (infer >= 0 && known > 0 && self.size() % known == 0) new_shape[infer] = self.size() / known;
  if ((infer >= 0 && new_shape[infer] < 0) || checked_size(new_shape, "reshape") != self.size())
    throw Error("reshape: cannot reshape an array of shape " + shape_to_string(self.shape()) + " (" +
                std::to_string(self.size()) + " elements) into shape " + shape_to_string(new_shape));
  // A partial value reshaped without moving data is its summands reshaped (linear, per device).
  if (const NamedSharding* n = self.sharding().named(); n && detail::is_partial(self))
    if (local_reshape_spec(self.shape(), n->spec(), new_shape, n->mesh()))
      return detail::on_summands(self, [&](const Array& s) { return reshape_untaped(s, new_shape); }, true);
  std::lock_guard lock(a.runtime->mutex());
  if (auto pending = reshape_pending(self, new_shape)) return *pending;
  exec::ShardedValue v = detail::shareable_value(self);
  if (const NamedSharding* n = v.sharding.named()) {
    if (const auto spec = local_reshape_spec(v.shape, n->spec(), new_shape, n->mesh())) {
      v.sharding = NamedSharding(n->mesh(), *spec);
      v.shape = std::move(new_shape);
      return detail::make_array(a.runtime, std::move(v), a.committed, a.varying);
    }
  }
  if (const auto remake = detail::remake_of(self)) {  // a constant's reshape is one too
    exec::ShardedValue same = v;
    same.shape = new_shape;
    return detail::with_remake(detail::make_array(a.runtime, std::move(same), false, a.varying),
                               [remake, new_shape](const Sharding& everywhere) {
                                 return reshape_untaped((*remake)(everywhere), new_shape);
                               });
  }
  if (!v.sharding.is_fully_replicated()) {
    // Pieces of a sharded array are not pieces of the reshaped one: gather a full copy on each
    // of its devices (device to device) and reshape that. Not in explicit mode, where the type
    // would change without being asked (JAX raises there too).
    const NamedSharding& n = *v.sharding.named();
    for (size_t d = 0; d < n.spec().size(); ++d)
      for (const auto& axis : n.spec()[d].axes)
        if (n.mesh().axis_type(axis) == AxisType::Explicit)
          throw Error("reshape: " + type_of(self) + " cannot become " + shape_to_string(new_shape) +
                      " keeping its sharding (a split dimension must lead the dimensions it is merged with or "
                      "split into, and divide evenly); in explicit mode the sharding is part of the type: reshard "
                      "it first (e.g. to P('" + axis + "') on a leading dimension, or replicated)");
    const detail::OpScope op_scope("reshard");  // profile hook: the line exec::reshard prints
    // Gather only the split dimensions the reshape cannot keep: each one kept alone is checked
    // (the groups of dimensions a reshape matches are independent), and those that fit stay
    // split ((16@x, 8@y) -> (16, 2, 4) gathers 'y' and keeps 'x'), as XLA's partitioner keeps
    // the dimensions a reshape leaves alone.
    std::vector<SpecEntry> keep(v.shape.size());
    bool any = false;
    for (size_t d = 0; d < keep.size() && d < n.spec().size(); ++d) {
      if (n.spec()[d].is_none()) continue;
      std::vector<SpecEntry> alone(v.shape.size());
      alone[d] = n.spec()[d];
      if (!local_reshape_spec(v.shape, PartitionSpec(alone).trimmed(), new_shape, n.mesh())) continue;
      keep[d] = n.spec()[d];
      any = true;
    }
    const PartitionSpec partly = PartitionSpec(keep).trimmed();
    if (any)
      if (const auto spec = local_reshape_spec(v.shape, partly, new_shape, n.mesh())) {
        const exec::RuleScope rule([&] { return "reshape of a split array: laid out as " + partly.to_string() + " first"; });
        const Mesh mesh = n.mesh();
        v = detail::reshard_saving(a.runtime, v, NamedSharding(mesh, partly), detail::on_every_process(self), a.committed,
                                   a.varying);
        v.sharding = NamedSharding(mesh, *spec);
        v.shape = std::move(new_shape);
        return detail::make_array(a.runtime, std::move(v), a.committed, a.varying);
      }
    const exec::RuleScope rule([] { return std::string("reshape of a split array: gathered whole"); });
    v = detail::reshard_saving(a.runtime, v, NamedSharding(n.mesh(), PartitionSpec()), detail::on_every_process(self),
                               a.committed, a.varying);
  }
  if (const NamedSharding* n = v.sharding.named()) v.sharding = NamedSharding(n->mesh(), PartitionSpec());
  v.shape = std::move(new_shape);
  return detail::make_array(a.runtime, std::move(v), a.committed, a.varying);
}

void Array::host_out_of_memory(size_t element_bytes) const {
  throw Error("to_host: " + type_of(*this) + " needs " + std::to_string(static_cast<uint64_t>(size()) * element_bytes) +
              " bytes of host memory, more than the process could allocate; read a slice of it instead");
}

std::string Array::to_string() const {
  std::vector<std::byte> bytes;
  try {
    bytes.resize(static_cast<size_t>(size()) * io::host_element_bytes(dtype()));
  } catch (const std::bad_alloc&) {
    host_out_of_memory(io::host_element_bytes(dtype()));
  }
  io::HostArray h{shape(), dtype(), std::move(bytes)};
  read_words(*this, h.bytes.data());
  return io::format_array(h);
}

std::ostream& operator<<(std::ostream& os, const Array& array) { return os << array.to_string(); }

Array array(std::span<const float> values, std::optional<Shape> shape) { return from_host(values, shape); }
Array array(std::span<const int32_t> values, std::optional<Shape> shape) { return from_host(values, shape); }
Array array(std::initializer_list<float> values, std::optional<Shape> shape) {
  return from_host(std::span<const float>(values.begin(), values.size()), shape);
}
Array array(std::initializer_list<int32_t> values, std::optional<Shape> shape) {
  return from_host(std::span<const int32_t>(values.begin(), values.size()), shape);
}
Array array(std::span<const bfloat16> values, std::optional<Shape> shape) {
  return from_host(values, std::move(shape));
}
Array array(std::span<const float16> values, std::optional<Shape> shape) {
  return from_host(values, std::move(shape));
}
Array scalar(float value) { return array({value}, Shape{}); }
Array scalar(int32_t value) { return array({value}, Shape{}); }

Array arange(int32_t stop) { return ranged(0, stop, 1, DType::int32); }
Array arange(int32_t start, int32_t stop, int32_t step) { return ranged(start, stop, step, DType::int32); }
Array arange(float stop) { return ranged(0, stop, 1, DType::float32); }
Array arange(float start, float stop, float step) { return ranged(start, stop, step, DType::float32); }
Array zeros(Shape shape, DType dtype) {
  detail::check_dtype("zeros", dtype);
  return filled("zeros", std::move(shape), dtype, 0);
}
Array ones(Shape shape, DType dtype) {
  detail::check_dtype("ones", dtype);
  return filled("ones", std::move(shape), dtype,
                is_floating(dtype) ? bits(1.0f) : bits(int32_t{1}));
}
Array full(Shape shape, float value) {
  return filled("full", std::move(shape), DType::float32, bits(value));
}
Array full(Shape shape, int32_t value) {
  return filled("full", std::move(shape), DType::int32, bits(value));
}
Array zeros(Shape shape, DType dtype, const Sharding& sharding) {
  detail::check_dtype("zeros", dtype);
  checked_size(shape, "zeros");
  sharding.check_shape(shape);
  auto rt = current_state();
  std::lock_guard lock(rt->mutex());
  const detail::PartOpScope op_scope("full");  // profile hook
  return detail::make_array(rt, exec::fill(*rt, shape, dtype, 0, sharding), true);
}

Array full(Shape shape, float value, const Sharding& sharding) {
  checked_size(shape, "full");
  sharding.check_shape(shape);
  auto rt = current_state();
  std::lock_guard lock(rt->mutex());
  const detail::PartOpScope op_scope("full");  // profile hook
  return detail::make_array(rt, exec::fill(*rt, shape, DType::float32, bits(value), sharding), true);
}

Array copy(const Array& x) {
  const ArrayImpl& a = impl_of(x);
  std::lock_guard lock(a.runtime->mutex());
  const detail::PartOpScope op_scope("copy");  // profile hook
  const Array r = detail::make_array(a.runtime, exec::copy_value(*a.runtime, detail::materialized(x)), a.committed, a.varying);
  return detail::on_tape(r, {x}, [](const Array& ct) { return std::vector<Array>{ct}; });
}

// jnp.zeros_like / ones_like: a committed x's result is filled in place on each of its devices,
// as JAX's full_like keeps a committed array's sharding (so state made this way, an optimizer's
// moments say, is laid out as the values it meets: no move and no second jit trace later). Inside
// shard_map x is a per-device value, and so is the result. It varies over the axes x varies over
// (JAX's pvary in full_like). An uncommitted x gives an uncommitted result, free to move.
static Array filled_like(const char* op, const Array& x, uint32_t word) {
  const ArrayImpl& a = impl_of(x);
  if (!a.committed) return filled(op, x.shape(), x.dtype(), word);
  std::lock_guard lock(a.runtime->mutex());
  const detail::PartOpScope op_scope("full");  // profile hook
  return detail::make_array(a.runtime, exec::fill(*a.runtime, x.shape(), x.dtype(), word, x.sharding()), true,
                            a.varying);
}

Array zeros_like(const Array& x) { return filled_like("zeros_like", x, 0); }
Array ones_like(const Array& x) {
  const DType dtype = impl_of(x).value.dtype;
  return filled_like("ones_like", x, is_floating(dtype) ? bits(1.0f) : bits(int32_t{1}));
}

Array device_put_untaped(const Array& x, const Sharding& sharding, const detail::ArrayImpl& a, detail::RuntimeState& rt);

// Inside a shard_map body that is manual over some mesh axes only, a sharding over the body's
// mesh names its automatic axes: it is taken on the body's mesh (its manual axes so typed, which
// keeps every move within a device's own manual coordinates), and naming a manual axis is an Error.
static std::optional<Sharding> in_partial_manual_body(const Sharding& sharding) {
  const Mesh* manual = detail::current_manual_mesh();
  const NamedSharding* n = sharding.named();
  if (!manual || !n) return std::nullopt;
  bool partial = false;
  for (const AxisType t : manual->axis_types()) partial = partial || t != AxisType::Manual;
  if (!partial || n->mesh().device_ids() != manual->device_ids() || n->mesh().axis_names() != manual->axis_names() ||
      n->mesh().axis_sizes() != manual->axis_sizes())
    return std::nullopt;
  for (const auto& axis : n->spec().axes())
    if (manual->axis_type(axis) == AxisType::Manual) {
      std::string autos;
      for (int d = 0; d < manual->ndim(); ++d)
        if (manual->axis_types()[static_cast<size_t>(d)] != AxisType::Manual)
          autos += (autos.empty() ? "'" : ", '") + manual->axis_names()[static_cast<size_t>(d)] + "'";
      throw Error("device_put: " + n->spec().to_string() + " names mesh axis '" + axis +
                  "', which is manual in this shard_map body (its values are per-device pieces along it); a "
                  "sharding inside the body may name only the automatic axes: " + autos);
    }
  if (n->mesh() == *manual) return std::nullopt;
  return Sharding(NamedSharding(*manual, n->spec()));
}

Array device_put(const Array& x, const Sharding& requested, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const std::optional<Sharding> on_body_mesh = in_partial_manual_body(requested);
  const Sharding& sharding = on_body_mesh ? *on_body_mesh : requested;
  const ArrayImpl& a = impl_of(x);
  auto& rt = *a.runtime;
  if (a.runtime != current_state())
    throw Error("device_put: the array belongs to a Runtime that is no longer current; arrays cannot move between runtimes");
  sharding.check_shape(a.value.shape);
  std::lock_guard lock(rt.mutex());
  exec::check_devices(rt, sharding);
  const exec::RuleScope rule([] { return std::string("device_put"); });
  return detail::device_put_on_tape(x, device_put_untaped(x, sharding, a, rt));
}

namespace detail {

Array device_put_on_tape(const Array& x, const Array& placed) {
  return on_tape(placed, {x}, [x](const Array& ct) {
    if (ct.sharding().is_equivalent_to(x.sharding(), x.ndim())) return std::vector<Array>{ct};
    // Back where the input was, and as free to move as it was.
    const Array back = device_put(ct, x.sharding());
    if (x.committed()) return std::vector<Array>{back};
    // Uncommitted again: the same values, on the tapes as the identity, so a gradient of this
    // gradient flows through (a bare copy cut it: second derivatives through device_put and
    // shard_map of uncommitted inputs came out zero).
    const auto& impl = *back.impl();
    const Array loose = make_array(impl.runtime, materialized(back), false, impl.varying);
    return std::vector<Array>{on_tape(loose, {back}, [](const Array& c) { return std::vector<Array>{c}; })};
  });
}

}  // namespace detail

// Tagged "reshard", the line exec::reshard prints, inside any other op too
// (with_sharding_constraint, jit's reshard and out_shardings print a line of their own before it,
// naming the same move).
Array device_put_untaped(const Array& x, const Sharding& sharding, const detail::ArrayImpl& a, detail::RuntimeState& rt) {
  const detail::OpScope op_scope("reshard");  // profile hook
  // A partial value wanted split along one of its partial axes: a reduce-scatter, half the bytes
  // of an all-reduce and a slice.
  if (const auto scattered = detail::scatter_partial(x, sharding)) {
    if (scattered->sharding() == sharding && !detail::is_partial(*scattered)) return *scattered;  // deferred
    return device_put_untaped(*scattered, sharding, *scattered->impl(), rt);
  }
  if (std::optional<exec::ShardedValue> made = detail::remade_on(x, sharding)) {
    made->sharding = sharding;
    return detail::make_array(a.runtime, std::move(*made), true, a.varying);
  }
  const exec::ShardedValue& current = detail::materialized(x);
  // An equivalent layout (P('a') and P('a', None), say) keeps the buffers as they are.
  exec::ShardedValue v = current.sharding.is_equivalent_to(sharding, current.shape.size())
                             ? detail::shareable_value(x)
                             : detail::reshard_saving(a.runtime, current, sharding, detail::on_every_process(x), true,
                                                      a.varying);
  v.sharding = sharding;
  return detail::make_array(a.runtime, std::move(v), true, a.varying);
}

template <class T>
Array put_host(std::span<const T> values, Shape shape, const Sharding& sharding, DType dtype = dtype_of<T>()) {
  if (checked_size(shape, "device_put") != static_cast<int64_t>(values.size()))
    throw Error("device_put: " + std::to_string(values.size()) + " values cannot fill shape " +
                shape_to_string(shape));
  sharding.check_shape(shape);
  auto rt = current_state();
  std::lock_guard lock(rt->mutex());
  const detail::PartOpScope op_scope("device_put");  // profile hook: an upload, no line
  auto value = exec::upload(*rt, values.data(), shape, dtype, sharding);
  return detail::make_array(rt, std::move(value), true);
}

Array device_put(std::span<const float> values, Shape shape, const Sharding& sharding) {
  return put_host(values, std::move(shape), sharding);
}
Array device_put(std::span<const int32_t> values, Shape shape, const Sharding& sharding) {
  return put_host(values, std::move(shape), sharding);
}
Array device_put(std::span<const bfloat16> values, Shape shape, const Sharding& sharding) {
  return put_host(values, std::move(shape), sharding);
}
Array device_put(std::span<const float16> values, Shape shape, const Sharding& sharding) {
  return put_host(values, std::move(shape), sharding);
}
// uint32 goes through the same checks (checked_size: overflow-safe shapes) as the other dtypes.
Array array(std::span<const uint32_t> values, std::optional<Shape> shape) {
  return from_host(values, std::move(shape));
}
Array device_put(std::span<const uint32_t> values, Shape shape, const Sharding& sharding) {
  return put_host(values, std::move(shape), sharding);
}
Array array(std::span<const int8_t> v, std::optional<Shape> shape) { return from_host(v, std::move(shape)); }
Array array(std::span<const uint8_t> v, std::optional<Shape> shape) { return from_host(v, std::move(shape)); }
Array array(std::span<const int64_t> v, std::optional<Shape> shape) { return from_host(v, std::move(shape)); }
Array array(std::span<const double> v, std::optional<Shape> shape) { return from_host(v, std::move(shape)); }
Array device_put(std::span<const int8_t> v, Shape s, const Sharding& sh) { return put_host(v, std::move(s), sh); }
Array device_put(std::span<const uint8_t> v, Shape s, const Sharding& sh) { return put_host(v, std::move(s), sh); }
Array device_put(std::span<const int64_t> v, Shape s, const Sharding& sh) { return put_host(v, std::move(s), sh); }
Array device_put(std::span<const double> v, Shape s, const Sharding& sh) { return put_host(v, std::move(s), sh); }

std::string type_of(const Array& x) {
  const Shape& shape = x.shape();
  const NamedSharding* n = x.sharding().named();
  std::string s = std::string(dtype_name(x.dtype())) + "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    s += (d ? "," : "") + std::to_string(shape[d]);
    if (!n) continue;
    std::vector<std::string> axes;
    for (const auto& axis : n->spec()[d].axes)
      if (n->mesh().axis_type(axis) == AxisType::Explicit) axes.push_back(axis);
    if (axes.size() == 1) s += "@" + axes[0];
    if (axes.size() > 1) {
      s += "@(";
      for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + axes[i];
      s += ")";
    }
  }
  return s + "]";
}

Array load_npy(const std::string& path) {
  const io::HostArray h = io::read_npy(path);
  if (h.dtype == DType::float16) {  // '<f2' holds float16 values as float32 words (host_array.hpp)
    std::vector<float16> halves(h.bytes.size() / 4);
    for (size_t i = 0; i < halves.size(); ++i) {
      float word;
      std::memcpy(&word, h.bytes.data() + i * 4, 4);
      halves[i] = float16(word);  // exact: the word is a float16 value
    }
    return from_host(std::span<const float16>(halves), h.shape);
  }
  if (h.dtype == DType::float32)
    return from_host(std::span(reinterpret_cast<const float*>(h.bytes.data()), h.bytes.size() / 4), h.shape, h.dtype);
  if (h.dtype == DType::uint32)
    return array(std::span(reinterpret_cast<const uint32_t*>(h.bytes.data()), h.bytes.size() / 4), h.shape);
  if (h.dtype == DType::int8)
    return array(std::span(reinterpret_cast<const int8_t*>(h.bytes.data()), h.bytes.size()), h.shape);
  if (h.dtype == DType::uint8)
    return array(std::span(reinterpret_cast<const uint8_t*>(h.bytes.data()), h.bytes.size()), h.shape);
  if (h.dtype == DType::int64)
    return array(std::span(reinterpret_cast<const int64_t*>(h.bytes.data()), h.bytes.size() / 8), h.shape);
  if (h.dtype == DType::float64)
    return array(std::span(reinterpret_cast<const double*>(h.bytes.data()), h.bytes.size() / 8), h.shape);
  const Array ints = array(
      std::span(reinterpret_cast<const int32_t*>(h.bytes.data()), h.bytes.size() / 4), h.shape);
  return h.dtype == DType::bool_ ? astype(ints, DType::bool_) : ints;  // '|b1' loads as bool
}

void save_npy(const std::string& path, const Array& x) {
  if (x.valid() && x.dtype() == DType::bfloat16)
    throw Error("save_npy: " + type_of(x) +
                " has no .npy type (numpy has no bfloat16; ml_dtypes writes it as raw '<V2' bytes, which "
                "numpy reads back as void); save astype(x, DType::float32) (exact: every bfloat16 is a "
                "float32) or astype(x, DType::float16)");
  io::HostArray h{x.shape(), x.dtype(),
                  std::vector<std::byte>(static_cast<size_t>(x.size()) * io::host_element_bytes(x.dtype()))};
  read_words(x, h.bytes.data());
  io::write_npy(path, h);
}

std::string visualize_array_sharding(const Array& array, const VisualizeOptions& options) {
  return visualize_sharding(array.shape(), array.sharding(), options);
}

void inspect_array_sharding(const Array& x, const std::function<void(const Sharding&)>& callback) {
  if (!x.valid()) throw Error("inspect_array_sharding: x is an empty meshvk::Array");
  if (!callback)
    throw Error("inspect_array_sharding: the callback is empty; give a function taking the sharding (const meshvk::Sharding&)");
  callback(x.sharding());
}

}  // namespace meshvk

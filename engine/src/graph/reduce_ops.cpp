// Reductions: each device reduces its own piece when the reduced dimensions are not split;
// otherwise the array is first gathered whole onto each of its devices (until collectives do
// this with an all-reduce of partial results).
#include <algorithm>
#include <cstring>
#include <optional>
#include <mutex>
#include <numeric>

#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/dtype_support.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/mesh_groups.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "graph/tape.hpp"
#include "kernels/reduce.hpp"
#include "kernels/reduce_fused.hpp"
#include "kernels/strided_copy.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

using detail::DeviceBuffer;
using detail::Recording;

namespace detail {
namespace {
thread_local bool unshared_inputs = false;
}
ReductionInputsUnshared::ReductionInputsUnshared() : saved_(unshared_inputs) { unshared_inputs = true; }
ReductionInputsUnshared::~ReductionInputsUnshared() { unshared_inputs = saved_; }
bool ReductionInputsUnshared::active() { return unshared_inputs; }
}  // namespace detail

namespace {

std::vector<bool> reduced_axes(const char* op, std::vector<int> axes, size_t rank) {
  std::vector<bool> reduced(rank, axes.empty());
  for (int a : axes) {
    const int r = static_cast<int>(rank);
    if (a < -r || a >= r)
      throw Error(std::string(op) + ": axis " + std::to_string(a) + " is out of range for an array of rank " +
                  std::to_string(rank) +
                (r == 0 ? std::string("; a 0-d array has no axes (reduce it whole, or reshape it to 1-D first)")
                        : "; valid axes are " + std::to_string(-r) + ".." + std::to_string(r - 1)));
    const int given = a;
    if (a < 0) a += r;
    // Checked after normalizing, so {1, -1} on a rank-2 array is a repeat, as numpy says.
    if (reduced[a] && !axes.empty())
      throw Error(std::string(op) + ": axis " + std::to_string(given) + " repeats axis " + std::to_string(a) +
                  "; name each axis once");
    reduced[a] = true;
  }
  return reduced;
}

// With `epilogue` (a float32 sum's last step, a mean's division: kernels/reduce.hpp), applied in
// the reduction's own dispatch where the result is not a partial sum; `*applied` says whether.
Array reduce_untaped(const char* op, kernels::ReduceOp kind, const Array& input, const std::vector<bool>& reduced,
                     bool keepdims, const kernels::EwProgram* epilogue = nullptr, bool* applied = nullptr);

// The cotangent of a reduced array spread back over the input's shape.
Array spread(const Array& ct, const Array& x, const std::vector<bool>& reduced) {
  Shape kept = x.shape();
  for (size_t d = 0; d < kept.size(); ++d)
    if (reduced[d]) kept[d] = 1;
  return broadcast_to(reshape(ct, kept), x.shape());
}

Array reduce(const char* op, kernels::ReduceOp kind, const Array& input, const std::vector<bool>& reduced, bool keepdims) {
  if (input.valid() && detail::is_16bit_float(input.dtype())) {
    // bfloat16 / float16: reduced in float32 (exact for max and min) and the result rounded, as
    // XLA accumulates them; the conversions carry the gradient.
    const Array y = reduce(op, kind, astype(input, DType::float32), reduced, keepdims);
    return is_floating(y.dtype()) ? astype(y, input.dtype()) : y;
  }
  if (input.valid() && input.dtype() == DType::uint32) {
    // uint32: reduced as int64 (exact); sums wrap back modulo 2^32 (JAX's uint32 sum), max and
    // min are uint32 again, argmax / argmin int32 indices.
    const Array y = reduce(op, kind, detail::convert_untaped(input, DType::int64), reduced, keepdims);
    if (kind == kernels::ReduceOp::sum || kind == kernels::ReduceOp::max || kind == kernels::ReduceOp::min)
      return detail::convert_untaped(y, DType::uint32);
    return y;
  }
  if (input.valid() && is_8bit(input.dtype())) {
    // int8 / uint8: reduced as int32 (exact). Their sum is JAX's (promote_integers): int32 for
    // int8, uint32 for uint8 (the same bits); max and min stay in the dtype.
    const Array y = reduce(op, kind, detail::convert_untaped(input, DType::int32), reduced, keepdims);
    if (kind == kernels::ReduceOp::sum)
      return input.dtype() == DType::uint8 ? detail::convert_untaped(y, DType::uint32) : y;
    if (kind == kernels::ReduceOp::max || kind == kernels::ReduceOp::min) return detail::convert_untaped(y, input.dtype());
    return y;  // argmax / argmin: int32 indices
  }
  if (input.valid() && is_64bit(input.dtype())) {
    if (kind != kernels::ReduceOp::sum && kind != kernels::ReduceOp::max && kind != kernels::ReduceOp::min)
      return detail::arg_reduce64(kind, input, reduced, keepdims);
    return detail::reduce64(op, kind, input, reduced, keepdims);  // taped ops: gradients follow
  }
  const Array y = reduce_untaped(op, kind, input, reduced, keepdims);
  if (!detail::taping() || input.dtype() != DType::float32) return y;
  if (kind == kernels::ReduceOp::sum)
    return detail::on_tape(y, {input}, [input, reduced](const Array& ct) { return std::vector<Array>{spread(ct, input, reduced)}; });
  if (kind == kernels::ReduceOp::max || kind == kernels::ReduceOp::min) {
    // Ties share the cotangent equally, as in JAX.
    return detail::on_tape(y, {input}, [input, reduced, y](const Array& ct) {
      const Array hit = astype(equal(input, spread(y, input, reduced)), DType::float32);
      std::vector<int> axes;
      for (size_t d = 0; d < reduced.size(); ++d)
        if (reduced[d]) axes.push_back(static_cast<int>(d));
      return std::vector<Array>{spread(ct, input, reduced) * hit / spread(sum(hit, axes, true), input, reduced)};
    });
  }
  return y;
}

// A pending elementwise input the reduction computes as it reads it (kernels/reduce_fused.hpp):
// its program, its inputs and how each device's piece reads them.
struct FusedInput {
  std::shared_ptr<const detail::PendingElementwise> pending;
  detail::PendingInputs inputs;
  std::vector<std::vector<kernels::EwInput>> pieces;  // per piece of x, in in_map's order
  size_t reduced = 0;                                 // the trailing dimensions reduced
  // Whether the fusion also stores x: a program of costly ops (exp, log, a division) whose value
  // may have other readers (softmax's exp feeds its sum and its division), computed once.
  bool store = false;
};

std::optional<FusedInput> fused_input(detail::RuntimeState& rt, kernels::ReduceOp kind, const Array& x,
                                      const std::vector<bool>& reduced, const std::vector<DeviceIndex>& in_map) {
  const detail::ArrayImpl& impl = *x.impl();
  if (!impl.pending || impl.partial) return std::nullopt;
  // The reduced dimensions last, so each row is contiguous in the program's output order.
  size_t first = reduced.size();
  while (first > 0 && reduced[first - 1]) --first;
  if (std::any_of(reduced.begin(), reduced.begin() + static_cast<std::ptrdiff_t>(first), [](bool r) { return r; }))
    return std::nullopt;
  FusedInput f;
  f.pending = impl.pending;
  f.reduced = reduced.size() - first;
  f.store = detail::ew::has_costly_ops(f.pending->program) &&
            !(detail::ReductionInputsUnshared::active() && !detail::taping());
  f.inputs = detail::materialize_inputs(*f.pending);
  for (const DeviceIndex& piece : in_map) {
    Shape local;
    for (const Slice& s : piece.index) local.push_back(s.size());
    f.pieces.push_back(detail::piece_inputs(f.inputs, x.shape(), piece));
    if (!kernels::can_reduce_fused(rt, kind, f.pending->program, f.pieces.back(), local, f.reduced, f.store))
      return std::nullopt;
  }
  return f;
}

Array reduce_untaped(const char* op, kernels::ReduceOp kind, const Array& input, const std::vector<bool>& reduced,
                     bool keepdims, const kernels::EwProgram* epilogue, bool* applied) {
  if (applied) *applied = false;
  const detail::OpScope op_scope(op);  // profile hook: the line this prints ("sum", ...)
  const size_t rank = input.ndim();
  detail::reject_uint32(op, input);
  // The sum of a partial value is the partial value of its summands' sums.
  if (kind == kernels::ReduceOp::sum && detail::is_partial(input))
    return detail::on_summands(input, [&](const Array& s) { return reduce_untaped(op, kind, s, reduced, keepdims); });
  Array x = input.dtype() == DType::bool_ ? astype(input, DType::int32) : input;
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d)
    if (reduced[d]) count *= x.shape()[d];
  if (count == 0 && kind != kernels::ReduceOp::sum)
    throw Error(std::string("zero-size array to reduction operation ") + op +
                " which has no identity: reduce over non-empty dimensions");
  // A reduced dimension split over mesh axes: each device reduces its own piece and the partial
  // results are all-reduced over those axes (argmax/argmin gather the array instead).
  std::vector<std::string> split_axes;
  if (const NamedSharding* n = x.sharding().named()) {
    for (size_t d = 0; d < rank; ++d)
      if (reduced[d] && n->num_shards(d) > 1)
        split_axes.insert(split_axes.end(), n->spec()[d].axes.begin(), n->spec()[d].axes.end());
    const bool partial_ok = kind == kernels::ReduceOp::sum || kind == kernels::ReduceOp::max || kind == kernels::ReduceOp::min;
    if (!split_axes.empty() && !partial_ok) {
      std::vector<SpecEntry> spec(rank);
      for (size_t d = 0; d < rank; ++d)
        if (!reduced[d]) spec[d] = n->spec()[d];
      const exec::RuleScope rule([&] { return std::string(op) + " over a split axis: the reduced axes gathered whole first"; });
      x = device_put(x, NamedSharding(n->mesh(), PartitionSpec(spec).trimmed()));
      split_axes.clear();
    }
  }
  Shape shape, kept_shape;
  std::vector<SpecEntry> spec, kept_spec;
  for (size_t d = 0; d < rank; ++d) {
    const SpecEntry e = x.sharding().named() ? x.sharding().named()->spec()[d] : SpecEntry();
    if (!reduced[d]) {
      shape.push_back(x.shape()[d]);
      spec.push_back(e);
    } else if (keepdims) {
      shape.push_back(1);
      spec.emplace_back();
    }
  }
  Sharding sharding = x.sharding();
  if (const NamedSharding* n = x.sharding().named()) sharding = NamedSharding(n->mesh(), PartitionSpec(spec).trimmed());
  const DType out_dtype = (kind == kernels::ReduceOp::argmax || kind == kernels::ReduceOp::argmin) ? DType::int32 : x.dtype();

  // A sum still partial over split axes takes its last step after the sum: not here.
  if (epilogue && (!split_axes.empty() || count == 0 || x.dtype() != DType::float32 ||
                   !kernels::can_take_epilogue(kind, x.dtype(), *epilogue)))
    epilogue = nullptr;
  if (applied) *applied = epilogue != nullptr;
  const auto last_step = [&] {
    return epilogue ? ", then " + epilogue->to_string({std::string(op)}) + " in the same kernel" : std::string();
  };
  auto rt = x.impl()->runtime;
  std::lock_guard lock(rt->mutex());
  const auto in_map = x.sharding().devices_indices_map(x.shape());
  const std::optional<FusedInput> fused = fused_input(*rt, kind, x, reduced, in_map);
  const exec::ShardedValue* value = fused ? nullptr : &detail::materialized(x);
  exec::ShardedValue out{shape, out_dtype, sharding, {}};
  const auto out_map = sharding.devices_indices_map(shape);
  std::vector<std::shared_ptr<DeviceBuffer>> side_shards;  // x's values, where the fusion stores them
  for (size_t i = 0; i < out_map.size(); ++i) {
    Shape local;
    for (const Slice& s : in_map[i].index) local.push_back(s.size());
    if (fused) {
      int64_t rows = 1;
      for (size_t d = 0; d < rank; ++d)
        if (!reduced[d]) rows *= local[d];
      auto buffer = rt->allocate(out_map[i].device, static_cast<uint64_t>(rows) * dtype_size(out_dtype));
      std::shared_ptr<DeviceBuffer> side;
      if (fused->store)
        side = rt->allocate(in_map[i].device, static_cast<uint64_t>(shape_size(local)) * dtype_size(x.dtype()));
      Recording rec = rt->begin(out_map[i].device);
      const std::vector<kernels::EwInput>& inputs = fused->pieces[i];
      for (const auto& e : inputs) rec.wait_for(e.buffer->ready());
      kernels::record_reduce_fused(*rt, rec, kind, fused->pending->program, inputs, local, fused->reduced, *buffer,
                                   side.get(), epilogue);
      const detail::Fence f = rt->submit(std::move(rec));
      for (const auto& e : inputs) const_cast<DeviceBuffer*>(e.buffer)->used_by(f);
      buffer->written_by(f);
      out.shards.push_back(std::move(buffer));
      if (side) {
        side->written_by(f);
        side_shards.push_back(std::move(side));
      }
      continue;
    }
    const DeviceBuffer& in = *value->shards[i];
    int64_t rows = 1, n = 1;
    std::vector<int> perm;
    for (size_t d = 0; d < rank; ++d)
      if (!reduced[d]) {
        perm.push_back(static_cast<int>(d));
        rows *= local[d];
      }
    for (size_t d = 0; d < rank; ++d)
      if (reduced[d]) {
        perm.push_back(static_cast<int>(d));
        n *= local[d];
      }
    auto buffer = rt->allocate(out_map[i].device, static_cast<uint64_t>(rows) * dtype_size(out_dtype));
    Recording rec = rt->begin(out_map[i].device);
    rec.wait_for(in.ready());
    const DeviceBuffer* src = &in;
    // Reduced axes all before the kept ones (a sum over the batch, as a bias gradient is): the
    // kernel reads the [n, rows] layout in place, equal bit for bit to transposing first.
    bool columns = false;
    if (!std::is_sorted(perm.begin(), perm.end())) {
      size_t k = 0;
      while (k < rank && reduced[k]) ++k;
      bool leading = k > 0;
      for (size_t d = k; d < rank; ++d) leading = leading && !reduced[d];
      columns = leading && kernels::can_reduce_columns(*rt, in, rows, n);
    }
    if (!columns && !std::is_sorted(perm.begin(), perm.end())) {
      // Kept dimensions first, reduced ones last, so each output reduces one contiguous row.
      std::vector<int64_t> strides(rank, 1);
      for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * local[d];
      Shape box;
      std::vector<int64_t> in_strides;
      for (const int p : perm) {
        box.push_back(local[p]);
        in_strides.push_back(strides[p]);
      }
      std::vector<int64_t> out_strides(rank, 1);
      for (size_t d = rank; d-- > 1;) out_strides[d - 1] = out_strides[d] * box[d];
      auto moved = rt->allocate(out_map[i].device, static_cast<uint64_t>(rows * n) * dtype_size(x.dtype()));
      rec.keep_alive.push_back(moved);
      kernels::record_strided_copy(*rt, rec, {box, in_strides, out_strides, 0, 0}, in, *moved);
      src = moved.get();
    }
    kernels::record_reduce_rows(*rt, rec, kind, x.dtype(), *src, rows, n, *buffer, columns, epilogue);
    const detail::Fence f = rt->submit(std::move(rec));
    const_cast<DeviceBuffer&>(in).used_by(f);
    buffer->written_by(f);
    out.shards.push_back(std::move(buffer));
  }
  if (fused) {
    if (exec::logging()) {
      const std::string text = detail::pending_text(*fused->pending, fused->inputs);
      if (fused->store) exec::log_op("fusion " + text + " (stored by the " + op + " below)");
      exec::log_op(std::string(op) + " of fusion " + text + ": local " + std::string(dtype_name(x.dtype())) +
                   shape_to_string(x.sharding().shard_shape(x.shape())) + " -> " +
                   shape_to_string(sharding.shard_shape(shape)) + " on each device" + last_step());
    }
    if (fused->store) {
      // x is materialized now: its later readers take the stored values.
      x.impl()->value.shards = std::move(side_shards);
      x.impl()->pending.reset();
      if (exec::logging() && !x.impl()->value.shards.empty())
        exec::name_result(x.impl()->value.shards.front().get(), "fusion");
    }
  } else if (exec::logging())  // the text is built only while a trace listens
    exec::log_op(std::string(op) + ": local " + std::string(dtype_name(x.dtype())) +
                 shape_to_string(x.sharding().shard_shape(x.shape())) + " -> " +
                 shape_to_string(sharding.shard_shape(shape)) + " on each device" + last_step());
  // A sum's per-device results are summands: partial over the split axes until a consumer needs
  // the sum (graph/partial_sum.hpp), so a batch sum is all-reduced after the local reductions
  // that follow it, and resolved with the other gradients.
  if (!split_axes.empty() && kind != kernels::ReduceOp::sum) {
    static const collectives::Reduction kinds[] = {collectives::Reduction::sum, collectives::Reduction::max,
                                                   collectives::Reduction::min};
    const exec::RuleScope rule([&] { return std::string(op) + " over a dimension sharded on " + detail::axes_text(split_axes); });
    out.shards = detail::all_reduce_over(*rt, x.sharding().named()->mesh(), split_axes, out.shards,
                                         static_cast<uint64_t>(shape_size(sharding.shard_shape(shape))), out_dtype,
                                         kinds[static_cast<int>(kind)]);
    split_axes.clear();
  }
  if (exec::logging() && !out.shards.empty() && split_axes.empty()) exec::name_result(out.shards.front().get(), op);
  std::optional<exec::RuleScope> partial_rule;  // recorded with the partial value, for its sum
  if (!split_axes.empty())
    partial_rule.emplace([&] { return std::string(op) + " over a dimension sharded on " + detail::axes_text(split_axes); });
  return detail::make_partial(detail::make_array(rt, std::move(out), x.committed(), x.impl()->varying), split_axes, op);
}

}  // namespace

Array sum(const Array& x, std::vector<int> axes, bool keepdims, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return reduce("sum", kernels::ReduceOp::sum, x, reduced_axes("sum", std::move(axes), x.ndim()), keepdims);
}

namespace {

// The mean in float32 (of ints and bools too), as jnp.mean computes bfloat16 and float16; in
// float64 for int64 and float64 (JAX's to_inexact_dtype).
DType mean_dtype(const Array& x) { return x.valid() && is_64bit(x.dtype()) ? DType::float64 : DType::float32; }

// The float32 sum divided by `count` in the sum's own dispatch (kernels/reduce.hpp's epilogue): the
// same ops as `sum / count` after it, one kernel less; nothing where the sum is left partial over
// a split axis (then divided after it is taken, as before).
Array mean_in_one_kernel(const Array& x, const std::vector<bool>& reduced, bool keepdims, int64_t count) {
  kernels::EwProgram divide;
  const float c = static_cast<float>(count);
  uint32_t bits;
  std::memcpy(&bits, &c, 4);
  divide.nodes = {{kernels::EwOp::input, DType::float32, -1, -1, -1, 0, 0},
                  {kernels::EwOp::constant, DType::float32, -1, -1, -1, -1, bits},
                  {kernels::EwOp::div, DType::float32, 0, 1, -1, -1, 0}};
  divide.num_inputs = 1;
  bool applied = false;
  const Array y = reduce_untaped("mean", kernels::ReduceOp::sum, x, reduced, keepdims, &divide, &applied);
  if (!applied) {  // a partial sum: reduce()'s sum, then the division
    const Array total = detail::taping() ? detail::on_tape(y, {x}, [x, reduced](const Array& ct) {
      return std::vector<Array>{spread(ct, x, reduced)};
    }) : y;
    return total / c;
  }
  if (!detail::taping()) return y;
  // The gradient of the sum of the division: the division's (ct / count), spread.
  return detail::on_tape(y, {x}, [x, reduced, c](const Array& ct) { return std::vector<Array>{spread(ct / c, x, reduced)}; });
}

Array mean_f32(const Array& x, std::vector<int> axes, bool keepdims) {
  const auto reduced = reduced_axes("mean", axes, x.ndim());
  int64_t count = 1;
  for (size_t d = 0; d < x.ndim(); ++d)
    if (reduced[d]) count *= x.shape()[d];
  const Array xf = astype(x, mean_dtype(x));
  if (count > 0 && xf.dtype() == DType::float32 && !detail::is_partial(xf))
    return mean_in_one_kernel(xf, reduced, keepdims, count);
  const Array total = reduce("mean", kernels::ReduceOp::sum, xf, reduced, keepdims);
  return total / static_cast<float>(count);  // numpy: mean of nothing is NaN
}

// bfloat16 and float16 results are rounded once, at the end; other dtypes give float32.
Array in_float_dtype_of(const Array& r, const Array& x) {
  return x.valid() && detail::is_16bit_float(x.dtype()) ? astype(r, x.dtype()) : r;
}

}  // namespace

Array mean(const Array& x, std::vector<int> axes, bool keepdims, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return in_float_dtype_of(mean_f32(x, std::move(axes), keepdims), x);
}

Array var(const Array& x, std::vector<int> axes, bool keepdims) {
  const Array m = mean_f32(x, axes, true);
  return in_float_dtype_of(mean_f32(square(astype(x, mean_dtype(x)) - m), axes, keepdims), x);
}

Array std(const Array& x, std::vector<int> axes, bool keepdims) { return sqrt(var(x, std::move(axes), keepdims)); }

// The max / min of bools is a bool (any / all), as in jax.numpy; the kernels reduce them as int32.
Array max(const Array& x, std::vector<int> axes, bool keepdims, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array r = reduce("max", kernels::ReduceOp::max, x,
                         reduced_axes("max", std::move(axes), x.ndim()), keepdims);
  return x.dtype() == DType::bool_ ? astype(r, DType::bool_) : r;
}

Array min(const Array& x, std::vector<int> axes, bool keepdims, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const Array r = reduce("min", kernels::ReduceOp::min, x,
                         reduced_axes("min", std::move(axes), x.ndim()), keepdims);
  return x.dtype() == DType::bool_ ? astype(r, DType::bool_) : r;
}

Array argmax(const Array& x, int axis, bool keepdims) {
  return reduce("argmax", kernels::ReduceOp::argmax, x, reduced_axes("argmax", {axis}, x.ndim()), keepdims);
}

Array argmin(const Array& x, int axis, bool keepdims) {
  return reduce("argmin", kernels::ReduceOp::argmin, x, reduced_axes("argmin", {axis}, x.ndim()), keepdims);
}

}  // namespace meshvk

// Shape and data-movement operations: reshape, transpose, broadcast_to, slice, dynamic_slice and
// dynamic_update_slice (concatenate, stack, pad and roll: join_ops.cpp; take and argsort:
// take_ops.cpp). Each runs per device on the pieces it needs: transpose and broadcast_to keep
// the sharding (every device moves only its own piece), and so does slice when the dimensions it
// cuts are not split over mesh axes, as in JAX. Along a split dimension a slice's pieces are
// assembled from the boxes their devices need (assemble.cpp).
#include <algorithm>
#include <mutex>
#include <optional>

#include "exec/program_log.hpp"
#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "graph/elementwise_core.hpp"
#include "graph/dtype_support.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "graph/shape_op_support.hpp"
#include "graph/tape.hpp"
#include "kernels/strided_copy.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

using detail::assemble;
using detail::copy_into;
using detail::DeviceBuffer;
using detail::keep_dividing;
using detail::Part;
using detail::Recording;
using detail::differentiable;
using detail::gather_whole;
using detail::local_shape;
using detail::normalize_axis;
using detail::on_each_device;
using detail::replicated_like;
using detail::strides_of;
using detail::unsplit;
using detail::whole_along;

namespace detail {

int normalize_axis(int axis, size_t rank, const char* op) {
  const int r = static_cast<int>(rank);
  if (axis < -r || axis >= r)
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for an array of rank " +
                std::to_string(rank) +
                (r == 0 ? std::string("; a 0-d array has no axes (reduce it whole, or reshape it to 1-D first)")
                        : "; valid axes are " + std::to_string(-r) + ".." + std::to_string(r - 1)));
  return axis < 0 ? axis + r : axis;
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

Shape local_shape(const Index& index) {
  Shape s;
  for (const Slice& sl : index) s.push_back(sl.size());
  return s;
}

// Whether none of `dims` of x is split over mesh axes: an op that works only along them runs on
// each device's own piece and keeps x's sharding.
bool unsplit(const Array& x, const std::vector<size_t>& dims) {
  const NamedSharding* n = x.sharding().named();
  if (!n) return true;
  for (const size_t d : dims)
    if (d < n->spec().size() && !n->spec()[d].is_none()) return false;
  return true;
}

// x laid out with dimension `dim` whole on each device and every other dimension as it was:
// the all-gather along one dimension that ops needing it whole (take, argsort) start with.
Array whole_along(const Array& x, size_t dim) {
  const NamedSharding* n = x.sharding().named();
  if (!n || dim >= n->spec().size() || n->spec()[dim].is_none()) return x;
  std::vector<SpecEntry> spec;
  for (size_t d = 0; d < n->spec().size(); ++d)
    spec.push_back(d == dim ? SpecEntry() : n->spec()[d]);
  const exec::RuleScope rule([&] {
    return "the op runs along dim " + std::to_string(dim) + ", split on " + n->spec()[dim].to_string() + ": gathered whole";
  });
  return device_put(x, NamedSharding(n->mesh(), PartitionSpec(spec).trimmed()));
}

Sharding replicated_like(const Sharding& s) {
  if (const NamedSharding* n = s.named()) return NamedSharding(n->mesh(), PartitionSpec());
  return s;
}

// Makes the result piece by piece: on each device of `sharding`, `record` fills the device's
// output piece from the pieces the inputs hold there.
Array on_each_device(const char* op, const std::vector<Array>& inputs, Shape shape, DType dtype,
                     const Sharding& sharding, const PieceFn& record) {
  const detail::PartOpScope op_scope(op);  // profile hook: no line of its own
  auto rt = inputs.front().impl()->runtime;
  std::lock_guard lock(rt->mutex());
  std::vector<const exec::ShardedValue*> values;
  std::vector<std::vector<DeviceIndex>> maps;
  bool committed = false;
  for (const Array& a : inputs) {
    values.push_back(&detail::materialized(a));
    maps.push_back(a.sharding().devices_indices_map(a.shape()));
    committed = committed || a.committed();
  }
  exec::ShardedValue out{shape, dtype, sharding, {}};
  for (const DeviceIndex& piece : sharding.devices_indices_map(shape)) {
    auto buffer = rt->allocate(piece.device, static_cast<uint64_t>(shape_size(local_shape(piece.index))) * dtype_size(dtype));
    Recording rec = rt->begin(piece.device);
    std::vector<const DeviceBuffer*> in;
    std::vector<Index> in_pieces;
    for (size_t k = 0; k < inputs.size(); ++k) {
      size_t at = 0;
      while (at < maps[k].size() && maps[k][at].device != piece.device) ++at;
      if (at == maps[k].size())
        throw Error(std::string("internal: ") + op + " input is not on device " + std::to_string(piece.device));
      in.push_back(values[k]->shards[at].get());
      in_pieces.push_back(maps[k][at].index);
      rec.wait_for(in.back()->ready());
    }
    record(rec, in, in_pieces, *buffer, piece.index);
    const detail::Fence f = rt->submit(std::move(rec));
    for (const DeviceBuffer* b : in) const_cast<DeviceBuffer*>(b)->used_by(f);
    buffer->written_by(f);
    out.shards.push_back(std::move(buffer));
  }
  std::vector<const Array*> sources;
  for (const Array& a : inputs) sources.push_back(&a);
  return detail::make_array(rt, std::move(out), committed, detail::varying_of(sources));
}

// All inputs on the devices of the first committed one (or the first), each held whole.
std::vector<Array> gather_whole(const char* op, const std::vector<Array>& arrays) {
  const Array* anchor = &arrays.front();
  for (const Array& a : arrays)
    if (a.committed()) {
      anchor = &a;
      break;
    }
  const Sharding target = replicated_like(anchor->sharding());
  const exec::RuleScope rule([&] { return std::string(op) + ": operands gathered whole on every device"; });
  std::vector<Array> out;
  for (const Array& a : arrays) {
    if (a.committed() && a.sharding().device_ids() != anchor->sharding().device_ids())
      throw Error(std::string(op) + ": operands are committed to different devices; device_put them onto the same devices");
    out.push_back(a.sharding().is_equivalent_to(target, a.ndim()) ? a : device_put(a, target));
  }
  return out;
}

}  // namespace detail


Array reshape(const Array& x, Shape shape) { return x.reshape(std::move(shape)); }

static Array transpose_untaped(const Array& x, std::vector<int> axes) {
  if (detail::is_partial(x))  // linear, on each device's piece: the summands' transpose
    return detail::on_summands(x, [&](const Array& s) { return transpose_untaped(s, axes); }, true);
  const size_t rank = x.ndim();
  if (axes.empty())
    for (size_t d = rank; d-- > 0;) axes.push_back(static_cast<int>(d));
  if (axes.size() != rank)
    throw Error("transpose: axes has " + std::to_string(axes.size()) + " entries for an array of rank " +
                std::to_string(rank) + "; give a permutation of 0.." + std::to_string(static_cast<int>(rank) - 1));
  std::vector<bool> seen(rank);
  for (int& a : axes) {
    a = normalize_axis(a, rank, "transpose");
    if (seen[a]) throw Error("transpose: axis " + std::to_string(a) + " appears twice; give a permutation");
    seen[a] = true;
  }
  Shape shape;
  for (const int a : axes) shape.push_back(x.shape()[a]);
  Sharding sharding = x.sharding();
  if (const NamedSharding* n = x.sharding().named()) {
    std::vector<SpecEntry> spec;
    for (const int a : axes) spec.push_back(n->spec()[a]);
    sharding = NamedSharding(n->mesh(), PartitionSpec(spec).trimmed());
  }
  auto& rt = *x.impl()->runtime;
  return on_each_device("transpose", {x}, shape, x.dtype(), sharding,
                        [&](Recording& rec, const auto& in, const auto& in_pieces, const DeviceBuffer& out, const Index& piece) {
                          const auto in_strides = strides_of(local_shape(in_pieces[0]));
                          const Shape box = local_shape(piece);
                          std::vector<int64_t> src(rank);
                          for (size_t d = 0; d < rank; ++d) src[d] = in_strides[axes[d]];
                          kernels::record_strided_copy(rt, rec, copy_into(box, src, 0, strides_of(box), 0, x.dtype()), *in[0], out);
                        });
}

static Array broadcast_to_untaped(const Array& x, Shape shape) {
  if (detail::is_partial(x))  // linear, on each device's piece: the summands broadcast
    return detail::on_summands(x, [&](const Array& s) { return broadcast_to_untaped(s, shape); }, true);
  const Shape joined = broadcast_shapes(x.shape(), shape, "broadcast_to");
  if (joined != shape)
    throw Error("broadcast_to: cannot broadcast shape " + shape_to_string(x.shape()) + " to " + shape_to_string(shape));
  if (x.shape() == shape) return x;
  // A pending program reading x (laid out as numpy broadcasting lays it out, split where x is):
  // an elementwise consumer (a reduction's gradient spread over its input, then multiplied) reads
  // x in place through zero strides instead of a copy of it.
  return detail::ew::broadcast(x, shape);
}


// A slice cutting split dimensions: each piece is one strided box of x.
static Array slice_split(const Array& x, const Shape& shape, const std::vector<int64_t>& start,
                         const std::vector<int64_t>& step) {
  const NamedSharding& n = *x.sharding().named();  // single-device arrays are never split
  const Sharding target = NamedSharding(n.mesh(), PartitionSpec(keep_dividing(n, shape)).trimmed());
  const size_t rank = x.ndim();
  return assemble("slice", {x}, shape, x.dtype(), target, std::nullopt, [&](const Index& piece) {
    Part part{0, Index(rank), step, std::vector<int64_t>(rank, 0)};
    for (size_t d = 0; d < rank; ++d)
      part.box[d] = {start[d] + piece[d].start * step[d],
                     start[d] + (piece[d].stop - 1) * step[d] + 1};
    return std::vector<Part>{part};
  });
}

static Array slice_untaped(const Array& x, std::vector<int64_t> start, std::vector<int64_t> stop, std::vector<int64_t> step) {
  const size_t rank = x.ndim();
  if (step.empty()) step.assign(rank, 1);
  if (start.size() != rank || stop.size() != rank || step.size() != rank)
    throw Error("slice: start, stop and step need " + std::to_string(rank) + " entries each, one per dimension of " +
                shape_to_string(x.shape()));
  Shape shape(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (step[d] < 1) throw Error("slice: step " + std::to_string(step[d]) + " in dimension " + std::to_string(d) + " must be positive");
    if (start[d] < 0 || stop[d] > x.shape()[d] || start[d] > stop[d])
      throw Error("slice: [" + std::to_string(start[d]) + ", " + std::to_string(stop[d]) + ") in dimension " +
                  std::to_string(d) + " is not within [0, " + std::to_string(x.shape()[d]) + "] with start <= stop");
    shape[d] = (stop[d] - start[d] + step[d] - 1) / step[d];
  }
  auto& rt = *x.impl()->runtime;
  std::vector<size_t> cut;  // the dimensions the slice changes
  for (size_t d = 0; d < rank; ++d)
    if (start[d] != 0 || stop[d] != x.shape()[d] || step[d] != 1) cut.push_back(d);
  if (unsplit(x, cut) && detail::is_partial(x))  // linear, on each device's piece: the summands' slice
    return detail::on_summands(x, [&](const Array& s) { return slice_untaped(s, start, stop, step); }, true);
  if (unsplit(x, cut))
    return on_each_device(
        "slice", {x}, shape, x.dtype(), x.sharding(),
        [&](Recording& rec, const auto& in, const auto& in_pieces, const DeviceBuffer& out,
            const Index& piece) {
          const auto s = strides_of(local_shape(in_pieces[0]));
          std::vector<int64_t> src(rank);
          int64_t offset = 0;
          for (size_t d = 0; d < rank; ++d) {  // a split dimension is whole: start 0, step 1
            src[d] = s[d] * step[d];
            offset += start[d] * s[d];
          }
          const Shape box = local_shape(piece);
          kernels::record_strided_copy(rt, rec, copy_into(box, src, offset, strides_of(box), 0, x.dtype()),
                                       *in[0], out);
        });
  return slice_split(x, shape, start, step);
}

Array dynamic_slice(const Array& x, std::vector<int64_t> start, Shape sizes) {
  if (start.size() != x.ndim() || sizes.size() != x.ndim())
    throw Error("dynamic_slice: start and sizes need one entry per dimension of " + shape_to_string(x.shape()));
  std::vector<int64_t> stop(x.ndim());
  for (size_t d = 0; d < x.ndim(); ++d) {
    if (sizes[d] < 0 || sizes[d] > x.shape()[d])
      throw Error("dynamic_slice: size " + std::to_string(sizes[d]) + " of dimension " + std::to_string(d) +
                  " must be within [0, " + std::to_string(x.shape()[d]) + "]");
    // JAX: a negative start counts from the end (allow_negative_indices), then it is clamped.
    if (start[d] < 0) start[d] += x.shape()[d];
    start[d] = std::clamp<int64_t>(start[d], 0, x.shape()[d] - sizes[d]);
    stop[d] = start[d] + sizes[d];
  }
  return slice(x, start, stop);
}

Array dynamic_slice(const Array& x, const std::vector<Array>& start, Shape sizes) {
  if (start.size() != x.ndim() || sizes.size() != x.ndim())
    throw Error("dynamic_slice: start and sizes need one entry per dimension of " + shape_to_string(x.shape()));
  // Each dimension is a take of [s, s + size) with s (negative: from the end) clamped so the
  // slice fits, as in JAX.
  Array r = x;
  for (size_t d = 0; d < x.ndim(); ++d) {
    if (start[d].ndim() != 0 || start[d].dtype() != DType::int32)
      throw Error("dynamic_slice: start index " + std::to_string(d) + " must be an int32 scalar, got " + type_of(start[d]));
    if (sizes[d] < 0 || sizes[d] > x.shape()[d])
      throw Error("dynamic_slice: size " + std::to_string(sizes[d]) + " of dimension " + std::to_string(d) +
                  " must be within [0, " + std::to_string(x.shape()[d]) + "]");
    if (sizes[d] == x.shape()[d]) continue;
    const auto n = static_cast<int32_t>(x.shape()[d]);
    const Array from_end = where(start[d] < 0, start[d] + n, start[d]);  // as JAX's
    const Array s = minimum(maximum(from_end, 0), static_cast<int32_t>(x.shape()[d] - sizes[d]));
    r = take(r, s + arange(static_cast<int32_t>(sizes[d])), static_cast<int>(d), TakeMode::clip);
  }
  return r;
}

static Array dynamic_update_slice_untaped(const Array& x, const Array& update, std::vector<int64_t> start) {
  detail::require_one_runtime("dynamic_update_slice", {&x, &update});
  if (update.ndim() != x.ndim() || start.size() != x.ndim())
    throw Error("dynamic_update_slice: update " + shape_to_string(update.shape()) + " and start need the rank of " +
                shape_to_string(x.shape()));
  for (size_t d = 0; d < x.ndim(); ++d) {
    if (update.shape()[d] > x.shape()[d])
      throw Error("dynamic_update_slice: update " + shape_to_string(update.shape()) + " does not fit in " + shape_to_string(x.shape()));
    if (start[d] < 0) start[d] += x.shape()[d];  // from the end, as JAX's
    start[d] = std::clamp<int64_t>(start[d], 0, x.shape()[d] - update.shape()[d]);
  }
  const auto parts = gather_whole("dynamic_update_slice", {x, astype(update, x.dtype())});
  auto& rt = *x.impl()->runtime;
  return on_each_device("dynamic_update_slice", parts, x.shape(), x.dtype(), parts[0].sharding(),
                        [&](Recording& rec, const auto& in, const auto&, const DeviceBuffer& out, const Index&) {
                          const auto s = strides_of(x.shape());
                          kernels::record_strided_copy(rt, rec, copy_into(x.shape(), s, 0, s, 0, x.dtype()), *in[0], out);
                          int64_t offset = 0;
                          for (size_t d = 0; d < x.ndim(); ++d) offset += start[d] * s[d];
                          kernels::record_strided_copy(rt, rec, copy_into(update.shape(), strides_of(update.shape()), 0, s, offset, x.dtype()),
                                                       *in[1], out);
                        });
}

// ---- Taped entry points: each op's rule for carrying cotangents back to its inputs.

namespace {
std::vector<int> inverse(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int>(i);
  return inv;
}
}  // namespace

Array transpose(const Array& x, std::vector<int> axes) {
  const Array y = transpose_untaped(x, axes);
  if (!differentiable(x)) return y;
  if (axes.empty())
    for (size_t d = x.ndim(); d-- > 0;) axes.push_back(static_cast<int>(d));
  for (int& a : axes) a = a < 0 ? a + static_cast<int>(x.ndim()) : a;
  return detail::on_tape(y, {x}, [axes](const Array& ct) { return std::vector<Array>{transpose(ct, inverse(axes))}; });
}

Array broadcast_to(const Array& x, Shape shape) {
  const Array y = broadcast_to_untaped(x, shape);
  if (y.impl() == x.impl()) return y;  // to its own shape: x itself, nothing to record
  if (!differentiable(x)) return y;
  const Shape s = x.shape();
  return detail::on_tape(y, {x}, [s](const Array& ct) { return std::vector<Array>{detail::unbroadcast(ct, s)}; });
}

Array slice(const Array& x, std::vector<int64_t> start, std::vector<int64_t> stop, std::vector<int64_t> step) {
  // A step at least as long as [start, stop) takes one element (at start): spelled as step 1
  // over that element, so neither the length (stop - start + step - 1 overflowed for a step
  // near 2^63, giving 0 elements) nor the strides or the gradient's spread (step - 1 zeros per
  // element) grow with the step. Bad values are left for slice_untaped to name.
  for (size_t d = 0; d < std::min({start.size(), stop.size(), step.size()}); ++d)
    if (step[d] > 1 && 0 <= start[d] && start[d] < stop[d] && stop[d] - start[d] <= step[d]) {
      stop[d] = start[d] + 1;
      step[d] = 1;
    }
  const Array y = slice_untaped(x, start, stop, step);
  if (!differentiable(x)) return y;
  return detail::on_tape(y, {x}, [x, start, step](const Array& ct) {
    // Spread a strided dimension back out: each element followed by step-1 zeros, then padded to
    // the input's extent around the slice.
    Array c = ct;
    for (size_t d = 0; d < x.ndim(); ++d) {
      const int64_t st = step.empty() ? 1 : step[d];
      if (st == 1 || c.shape()[d] == 0) continue;
      Shape one = c.shape();
      one.insert(one.begin() + d + 1, 1);
      Shape gaps = one;
      gaps[d + 1] = st - 1;
      const Array spread = concatenate({reshape(c, one), zeros(gaps)}, static_cast<int>(d) + 1);
      Shape merged = c.shape();
      merged[d] *= st;
      c = reshape(spread, merged);
    }
    std::vector<std::pair<int64_t, int64_t>> widths;
    std::vector<int64_t> lo(x.ndim(), 0), hi;
    for (size_t d = 0; d < x.ndim(); ++d) {
      const int64_t keep = std::min<int64_t>(c.shape()[d], x.shape()[d] - start[d]);
      hi.push_back(keep);
      widths.push_back({start[d], x.shape()[d] - start[d] - keep});
    }
    return std::vector<Array>{pad(slice(c, lo, hi), widths)};
  });
}

Array dynamic_update_slice(const Array& x, const Array& update, std::vector<int64_t> start) {
  const Array y = dynamic_update_slice_untaped(x, update, start);
  if (!detail::taping() || !is_floating(x.dtype())) return y;
  return detail::on_tape(y, {x, update}, [x, update, start](const Array& ct) {
    return std::vector<Array>{dynamic_update_slice(ct, zeros(update.shape(), ct.dtype()), start),
                              dynamic_slice(ct, start, update.shape())};
  });
}

}  // namespace meshvk

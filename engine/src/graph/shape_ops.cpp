// Shape and data-movement operations. Each runs per device on the pieces it needs: transpose
// and broadcast_to keep the sharding (every device moves only its own piece), and so do slice,
// pad, roll and concatenate (take and argsort: take_ops.cpp) when the dimensions they work along are not split
// over mesh axes, as in JAX. Along a split dimension they work on a full copy per device of the
// array's devices (gathered device to device first).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
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
#include "kernels/take.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

using detail::DeviceBuffer;
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
                std::to_string(rank) + "; valid axes are " + std::to_string(-r) + ".." + std::to_string(r - 1));
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

namespace {

kernels::StridedCopy copy_into(const Shape& box, const std::vector<int64_t>& in_strides, int64_t in_offset,
                               const std::vector<int64_t>& out_strides, int64_t out_offset, DType dtype) {
  return {box, in_strides, out_strides, in_offset, out_offset, static_cast<uint32_t>(dtype_size(dtype))};
}

}  // namespace

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

namespace {

// Where a result's dimension can stay split the way an operand's is: when its size still divides
// over the entry's mesh axes; else it is whole on every device.
std::vector<SpecEntry> keep_dividing(const NamedSharding& n, const Shape& shape) {
  std::vector<SpecEntry> spec;
  for (size_t d = 0; d < shape.size(); ++d) {
    SpecEntry entry = d < n.spec().size() ? n.spec()[d] : SpecEntry();
    int64_t ways = 1;
    for (const std::string& axis : entry.axes) ways *= n.mesh().axis_size(axis);
    if (shape[d] % ways != 0) entry = SpecEntry();
    spec.push_back(entry);
  }
  return spec;
}

// One part of a result piece: global box `box` of source `source`, read every `step` elements per
// dimension, lands at `at` within the piece.
struct Part {
  size_t source;
  Index box;
  std::vector<int64_t> step, at;
};

// A result laid out as `target` whose pieces are made of parts of the sources (filled with
// `fill_word` first, when given): each device fetches, device to device, only the boxes its
// piece is made of, then places them with strided copies. What ops that cut or shift split
// dimensions (slice, pad, roll, concatenate) need, without gathering whole operands.
Array assemble(const char* op, const std::vector<Array>& sources, const Shape& shape, DType dtype,
               const Sharding& target, std::optional<uint32_t> fill_word,
               const std::function<std::vector<Part>(const Index&)>& parts_of) {
  const detail::PartOpScope op_scope(op);  // profile hook
  const exec::RuleScope rule([&] { return std::string(op) + " of a split dimension: pieces fetched from their holders"; });
  exec::note_provenance();  // profile hook
  auto rt = sources.front().impl()->runtime;
  std::lock_guard lock(rt->mutex());
  std::vector<const exec::ShardedValue*> values;
  std::vector<bool> per_process;  // each process's own copy: it fills only its own pieces
  bool committed = false;
  for (const Array& a : sources) {
    values.push_back(&detail::materialized(a));
    per_process.push_back(detail::on_every_process(a));
    committed = committed || a.committed();
  }
  exec::ShardedValue out{shape, dtype, target, {}};
  exec::Moved moved;
  for (const DeviceIndex& piece : target.devices_indices_map(shape)) {
    const Shape box = local_shape(piece.index);
    auto buffer = rt->allocate(piece.device, static_cast<uint64_t>(shape_size(box)) * dtype_size(dtype));
    if (shape_size(box) > 0) {
      std::vector<std::shared_ptr<DeviceBuffer>> gathered;
      std::vector<Part> parts;
      for (Part& part : parts_of(piece.index)) {
        if (shape_size(local_shape(part.box)) == 0) continue;
        if (per_process[part.source] && !rt->is_local(piece.device)) continue;
        gathered.push_back(
            exec::gather_box(*rt, *values[part.source], part.box, piece.device, moved));
        parts.push_back(std::move(part));
      }
      Recording rec = rt->begin(piece.device);
      if (fill_word)
        kernels::record_fill_words(*rt, rec, *buffer, static_cast<uint64_t>(shape_size(box)),
                                   *fill_word, dtype);
      const auto out_strides = strides_of(box);
      for (size_t k = 0; k < parts.size(); ++k) {
        const Part& part = parts[k];
        rec.wait_for(gathered[k]->ready());
        auto in_strides = strides_of(local_shape(part.box));
        Shape placed(box.size());
        int64_t at = 0;
        for (size_t d = 0; d < box.size(); ++d) {
          placed[d] = (part.box[d].size() + part.step[d] - 1) / part.step[d];
          in_strides[d] *= part.step[d];
          at += part.at[d] * out_strides[d];
        }
        kernels::record_strided_copy(*rt, rec, copy_into(placed, in_strides, 0, out_strides, at, dtype),
                                     *gathered[k], *buffer);
        rec.keep_alive.push_back(gathered[k]);
      }
      const detail::Fence f = rt->submit(std::move(rec));
      for (const auto& g : gathered) g->used_by(f);
      buffer->written_by(f);
    }
    out.shards.push_back(std::move(buffer));
  }
  if (exec::logging()) {
    std::string from;
    for (const Array& a : sources)
      from += (from.empty() ? "" : ", ") + (a.sharding().named()
                                                ? a.sharding().named()->spec().to_string()
                                                : a.sharding().to_string());
    const std::string line = std::string(op) + " " + from + " -> " +
                             target.named()->spec().to_string() + ": " +
                             std::to_string(moved.between) + " bytes between devices, " +
                             std::to_string(moved.within) + " bytes within devices";
    if (moved.between) {
      std::vector<std::string> axes;
      for (const Array& a : sources)
        for (const auto& axis : exec::moved_axes(a.sharding(), target, shape.size()))
          if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
      exec::log_collective("reshard", moved.most_sent(), line, axes, &target.named()->mesh());
    }
    else
      exec::log_op(line);
  }
  std::vector<const Array*> inputs;
  for (const Array& a : sources) inputs.push_back(&a);
  return detail::make_array(rt, std::move(out), committed, detail::varying_of(inputs));
}

}  // namespace

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
    start[d] = std::clamp<int64_t>(start[d], 0, x.shape()[d] - sizes[d]);  // JAX clamps
    stop[d] = start[d] + sizes[d];
  }
  return slice(x, start, stop);
}

Array dynamic_slice(const Array& x, const std::vector<Array>& start, Shape sizes) {
  if (start.size() != x.ndim() || sizes.size() != x.ndim())
    throw Error("dynamic_slice: start and sizes need one entry per dimension of " + shape_to_string(x.shape()));
  // Each dimension is a take of [s, s + size) with s clamped so the slice fits, as in JAX.
  Array r = x;
  for (size_t d = 0; d < x.ndim(); ++d) {
    if (start[d].ndim() != 0 || start[d].dtype() != DType::int32)
      throw Error("dynamic_slice: start index " + std::to_string(d) + " must be an int32 scalar, got " + type_of(start[d]));
    if (sizes[d] < 0 || sizes[d] > x.shape()[d])
      throw Error("dynamic_slice: size " + std::to_string(sizes[d]) + " of dimension " + std::to_string(d) +
                  " must be within [0, " + std::to_string(x.shape()[d]) + "]");
    if (sizes[d] == x.shape()[d]) continue;
    const Array s = minimum(maximum(start[d], 0), static_cast<int32_t>(x.shape()[d] - sizes[d]));
    r = take(r, s + arange(static_cast<int32_t>(sizes[d])), static_cast<int>(d), TakeMode::clip);
  }
  return r;
}

Array stack(const std::vector<Array>& arrays, int axis) {
  if (arrays.empty()) throw Error("stack: needs at least one array");
  const int rank = static_cast<int>(arrays[0].ndim()) + 1;
  axis = normalize_axis(axis, static_cast<size_t>(rank), "stack");
  std::vector<Array> expanded;
  for (const Array& a : arrays) {
    if (a.shape() != arrays[0].shape())
      throw Error("stack: all arrays need the shape " + shape_to_string(arrays[0].shape()) + ", got " + shape_to_string(a.shape()));
    Shape s = a.shape();
    s.insert(s.begin() + axis, 1);
    expanded.push_back(reshape(a, s));
  }
  return concatenate(expanded, axis);
}

static Array dynamic_update_slice_untaped(const Array& x, const Array& update, std::vector<int64_t> start) {
  if (update.ndim() != x.ndim() || start.size() != x.ndim())
    throw Error("dynamic_update_slice: update " + shape_to_string(update.shape()) + " and start need the rank of " +
                shape_to_string(x.shape()));
  for (size_t d = 0; d < x.ndim(); ++d) {
    if (update.shape()[d] > x.shape()[d])
      throw Error("dynamic_update_slice: update " + shape_to_string(update.shape()) + " does not fit in " + shape_to_string(x.shape()));
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

// Concatenation's copies, box k from in[k] into out: those that are one contiguous run each (a
// join along the leading axis) as few copy commands as their buffers allow, the rest box by box.
static void record_joined(detail::RuntimeState& rt, Recording& rec, const std::vector<kernels::StridedCopy>& boxes,
                          const std::vector<const DeviceBuffer*>& in, const DeviceBuffer& out) {
  std::vector<kernels::CopyRun> runs;
  for (size_t k = 0; k < boxes.size(); ++k) {
    if (const std::optional<kernels::CopyRun> run = kernels::contiguous_run(boxes[k], *in[k], out))
      runs.push_back(*run);
    else
      kernels::record_strided_copy(rt, rec, boxes[k], *in[k], out);
  }
  if (!runs.empty()) kernels::record_copy_runs(rt, rec, runs, boxes.front().element_bytes);
}

static Array concatenate_untaped(const std::vector<Array>& arrays, int axis) {
  if (arrays.empty()) throw Error("concatenate: needs at least one array");
  const size_t rank = arrays[0].ndim();
  if (rank == 0) throw Error("concatenate: zero-dimensional arrays cannot be concatenated");
  axis = normalize_axis(axis, rank, "concatenate");
  DType dtype = arrays[0].dtype();
  Shape shape = arrays[0].shape();
  shape[axis] = 0;
  for (const Array& a : arrays) {
    if (a.ndim() != rank) throw Error("concatenate: all arrays need rank " + std::to_string(rank) + ", got " + shape_to_string(a.shape()));
    for (size_t d = 0; d < rank; ++d)
      if (static_cast<int>(d) != axis && a.shape()[d] != arrays[0].shape()[d])
        throw Error("concatenate: shapes " + shape_to_string(arrays[0].shape()) + " and " + shape_to_string(a.shape()) +
                    " differ outside axis " + std::to_string(axis));
    shape[axis] = checked_add(shape[axis], a.shape()[axis], "concatenate", "the joined length");
    // The promotion of all operands in any order (bool < uint32 < int32 < bfloat16, float16 <
    // float32), as JAX's without x64 (uint32 with int32 is int64 there, canonicalized to int32;
    // bfloat16 with float16 is float32). A rank, so uint32 cannot make the result depend on the
    // operands' order.
    const auto rank_of = [](DType t) {
      return t == DType::bool_ ? 0 : t == DType::uint32 ? 1 : t == DType::int32 ? 2 : t == DType::float32 ? 4 : 3;
    };
    if (rank_of(a.dtype()) == 3 && rank_of(dtype) == 3 && a.dtype() != dtype) dtype = DType::float32;
    if (rank_of(a.dtype()) > rank_of(dtype)) dtype = a.dtype();
  }
  checked_size(shape, "concatenate");
  std::vector<Array> cast;
  for (const Array& a : arrays) cast.push_back(astype(a, dtype));
  auto& rt = *arrays[0].impl()->runtime;
  // Operands laid out alike and not split along the axis: each device joins its own pieces.
  const bool alike = std::all_of(cast.begin(), cast.end(), [&](const Array& a) {
    return unsplit(a, {static_cast<size_t>(axis)}) &&
           a.sharding().is_equivalent_to(cast[0].sharding(), rank);
  });
  if (alike && cast[0].sharding().named())
    return on_each_device("concatenate", cast, shape, dtype, cast[0].sharding(),
                          [&](Recording& rec, const auto& in, const auto& in_pieces,
                              const DeviceBuffer& out, const Index& piece) {
                            const auto os = strides_of(local_shape(piece));
                            std::vector<kernels::StridedCopy> boxes;
                            int64_t at = 0;
                            for (size_t k = 0; k < cast.size(); ++k) {
                              const Shape s = local_shape(in_pieces[k]);
                              boxes.push_back(copy_into(s, strides_of(s), 0, os, at * os[axis], dtype));
                              at += s[axis];
                            }
                            record_joined(rt, rec, boxes, in, out);
                          });
  // Laid out otherwise, or split along the axis: the result takes the first committed operand's
  // layout (the axis whole unless its size divides) and each piece fetches its parts of the
  // operands.
  const Array* anchor = &cast.front();
  for (const Array& a : cast)
    if (a.committed()) {
      anchor = &a;
      break;
    }
  if (const NamedSharding* n = anchor->sharding().named()) {
    for (const Array& a : cast)
      if (a.committed() && a.sharding().device_ids() != anchor->sharding().device_ids())
        throw Error(
            "concatenate: operands are committed to different devices; device_put them onto the "
            "same devices");
    const Sharding target =
        NamedSharding(n->mesh(), PartitionSpec(keep_dividing(*n, shape)).trimmed());
    return assemble(
        "concatenate", cast, shape, dtype, target, std::nullopt, [&](const Index& piece) {
          std::vector<Part> parts;
          int64_t at = 0;
          for (size_t k = 0; k < cast.size(); ++k) {
            const int64_t len = cast[k].shape()[axis];
            const int64_t lo = std::max(piece[axis].start, at),
                          hi = std::min(piece[axis].stop, at + len);
            if (hi > lo) {
              Part part{k, piece, std::vector<int64_t>(rank, 1), std::vector<int64_t>(rank, 0)};
              part.box[axis] = {lo - at, hi - at};
              part.at[axis] = lo - piece[axis].start;
              parts.push_back(std::move(part));
            }
            at += len;
          }
          return parts;
        });
  }
  const auto parts = gather_whole("concatenate", cast);
  return on_each_device("concatenate", parts, shape, dtype, parts[0].sharding(),
                        [&](Recording& rec, const auto& in, const auto&, const DeviceBuffer& out, const Index&) {
                          const auto os = strides_of(shape);
                          std::vector<kernels::StridedCopy> boxes;
                          int64_t at = 0;
                          for (size_t k = 0; k < parts.size(); ++k) {
                            const Shape& s = parts[k].shape();
                            boxes.push_back(copy_into(s, strides_of(s), 0, os, at * os[axis], dtype));
                            at += s[axis];
                          }
                          record_joined(rt, rec, boxes, in, out);
                        });
}

static Array pad_untaped(const Array& x, std::vector<std::pair<int64_t, int64_t>> widths, float value) {
  if (widths.size() != x.ndim())
    throw Error("pad: needs one (before, after) pair per dimension of " + shape_to_string(x.shape()));
  Shape shape = x.shape();
  const Shape& in_shape = x.shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (widths[d].first < 0 || widths[d].second < 0) throw Error("pad: widths must not be negative");
    shape[d] = checked_add(checked_add(shape[d], widths[d].first, "pad", "the padded length"),
                           widths[d].second, "pad", "the padded length");
  }
  checked_size(shape, "pad");
  // The padding value cast to x's dtype as numpy's astype would; a value the integer dtype cannot
  // hold is an Error (converting it would be undefined behaviour, not a value).
  uint32_t word;
  switch (x.dtype()) {
    case DType::float32:
    case DType::float64:  // the float32 value's bits, widened exactly by the fill
    case DType::bfloat16:
    case DType::float16: {
      const float rounded = round_to(x.dtype(), value);
      std::memcpy(&word, &rounded, 4);
      break;
    }
    case DType::bool_:
      word = value != 0.0f ? 1 : 0;  // bools are words of 0 or 1
      break;
    case DType::uint32:
      if (!(value > -1.0f && value < 4294967296.0f))
        throw Error("pad: value " + std::to_string(value) + " does not fit in uint32, the dtype of " +
                    type_of(x) + " (0 to 4294967295)");
      word = static_cast<uint32_t>(value);
      break;
    case DType::int8:
    case DType::uint8: {
      const bool is_signed = x.dtype() == DType::int8;
      const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
      if (!(value >= lo && value <= hi) || value != std::trunc(value))
        throw Error("pad: value " + std::to_string(value) + " is not a value of " +
                    std::string(dtype_name(x.dtype())) + ", the dtype of " + type_of(x) + " (" +
                    (is_signed ? "-128 to 127" : "0 to 255") + ")");
      word = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
    }
    case DType::int64:  // an int32 value, sign-extended by the fill
    case DType::int32:
    default:
      if (!(value >= -2147483648.0f && value < 2147483648.0f))
        throw Error("pad: value " + std::to_string(value) + " does not fit in int32, the dtype of " +
                    type_of(x) + " (-2147483648 to 2147483647)");
      word = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
  }
  auto& rt = *x.impl()->runtime;
  std::vector<size_t> padded;
  for (size_t d = 0; d < shape.size(); ++d)
    if (widths[d].first || widths[d].second) padded.push_back(d);
  if (unsplit(x, padded))
    return on_each_device(
        "pad", {x}, shape, x.dtype(), x.sharding(),
        [&](Recording& rec, const auto& in, const auto& in_pieces, const DeviceBuffer& out,
            const Index& piece) {
          const Shape box = local_shape(piece), in_box = local_shape(in_pieces[0]);
          const auto os = strides_of(box);
          int64_t at = 0;
          for (size_t d = 0; d < box.size(); ++d) at += widths[d].first * os[d];
          kernels::record_fill_words(rt, rec, out, static_cast<uint64_t>(shape_size(box)), word, x.dtype());
          kernels::record_strided_copy(rt, rec, copy_into(in_box, strides_of(in_box), 0, os, at, x.dtype()),
                                       *in[0], out);
        });
  // Padding a split dimension: each piece fetches the part of x it overlaps, around the fill.
  const NamedSharding& n = *x.sharding().named();  // single-device arrays are never split
  const size_t rank = x.ndim();
  const Sharding target = NamedSharding(n.mesh(), PartitionSpec(keep_dividing(n, shape)).trimmed());
  return assemble("pad", {x}, shape, x.dtype(), target, word, [&](const Index& piece) {
    Part part{0, Index(rank), std::vector<int64_t>(rank, 1), std::vector<int64_t>(rank, 0)};
    for (size_t d = 0; d < rank; ++d) {
      const int64_t lo = std::max<int64_t>(piece[d].start - widths[d].first, 0);
      const int64_t hi = std::min<int64_t>(piece[d].stop - widths[d].first, in_shape[d]);
      if (hi <= lo) return std::vector<Part>{};
      part.box[d] = {lo, hi};
      part.at[d] = lo + widths[d].first - piece[d].start;
    }
    return std::vector<Part>{part};
  });
}

static Array roll_untaped(const Array& x, int64_t shift, int axis) {
  axis = normalize_axis(axis, x.ndim(), "roll");
  const int64_t n = x.shape()[axis];
  if (n == 0) return x;
  const int64_t s = ((shift % n) + n) % n;
  if (!unsplit(x, {static_cast<size_t>(axis)})) {
    // Along a split axis: output i takes input (i - s) mod n, so each piece fetches at most two
    // runs of x (before and after the wrap).
    return assemble("roll", {x}, x.shape(), x.dtype(), x.sharding(), std::nullopt,
                    [&](const Index& piece) {
                      std::vector<Part> parts;
                      const int64_t lo = piece[axis].start, hi = piece[axis].stop;
                      auto add = [&](int64_t a, int64_t b, int64_t from) {
                        if (b <= a) return;
                        Part part{0, piece, std::vector<int64_t>(piece.size(), 1),
                                  std::vector<int64_t>(piece.size(), 0)};
                        part.box[axis] = {from, from + b - a};
                        part.at[axis] = a - lo;
                        parts.push_back(std::move(part));
                      };
                      add(lo, std::min(hi, s), lo - s + n);
                      add(std::max(lo, s), hi, std::max(lo, s) - s);
                      return parts;
                    });
  }
  auto& rt = *x.impl()->runtime;
  // Along an unsplit axis each device rolls its own piece, which holds that axis whole.
  return on_each_device("roll", {x}, x.shape(), x.dtype(), x.sharding(),
                        [&](Recording& rec, const auto& in, const auto& in_pieces,
                            const DeviceBuffer& out, const Index&) {
                          const Shape box = local_shape(in_pieces[0]);
                          const auto st = strides_of(box);
                          Shape head = box, tail = box;
                          head[axis] = n - s;  // elements [0, n-s) move to [s, n)
                          tail[axis] = s;      // elements [n-s, n) move to [0, s)
                          kernels::record_strided_copy(rt, rec, copy_into(head, st, 0, st, s * st[axis], x.dtype()), *in[0], out);
                          kernels::record_strided_copy(rt, rec, copy_into(tail, st, (n - s) * st[axis], st, 0, x.dtype()), *in[0], out);
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

Array concatenate(const std::vector<Array>& arrays, int axis) {
  const Array y = concatenate_untaped(arrays, axis);
  if (!detail::taping() || !is_floating(y.dtype())) return y;
  const int ax = axis < 0 ? axis + static_cast<int>(y.ndim()) : axis;
  return detail::on_tape(y, arrays, [arrays, ax](const Array& ct) {
    std::vector<Array> out;
    int64_t at = 0;
    for (const Array& a : arrays) {
      std::vector<int64_t> lo(ct.ndim(), 0), hi(ct.shape().begin(), ct.shape().end());
      lo[ax] = at;
      hi[ax] = at + a.shape()[ax];
      at += a.shape()[ax];
      const Array piece = slice(ct, lo, hi);
      out.push_back(is_floating(a.dtype()) && a.dtype() != piece.dtype() ? astype(piece, a.dtype()) : piece);
    }
    return out;
  });
}

Array pad(const Array& x, std::vector<std::pair<int64_t, int64_t>> widths, float value) {
  // Padding with zeros is linear: a partial value stays partial (the gradient of a stacked
  // parameter, assembled from its slices' gradients, is summed once, with the others).
  const Array y = value == 0.0f && detail::is_partial(x)
                      ? detail::on_summands(x, [&](const Array& s) { return pad_untaped(s, widths, value); }, true)
                      : pad_untaped(x, widths, value);
  if (!differentiable(x)) return y;
  return detail::on_tape(y, {x}, [x, widths](const Array& ct) {
    std::vector<int64_t> lo, hi;
    for (size_t d = 0; d < x.ndim(); ++d) {
      lo.push_back(widths[d].first);
      hi.push_back(widths[d].first + x.shape()[d]);
    }
    return std::vector<Array>{slice(ct, lo, hi)};
  });
}

Array roll(const Array& x, int64_t shift, int axis) {
  const Array y = roll_untaped(x, shift, axis);
  if (!differentiable(x)) return y;
  return detail::on_tape(y, {x}, [shift, axis](const Array& ct) { return std::vector<Array>{roll(ct, -shift, axis)}; });
}

}  // namespace meshvk

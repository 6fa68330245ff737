// Gathers along an axis: take (jnp.take and its out-of-bounds modes), one_hot and argsort. Along
// an unsplit axis they run on each device's own piece and keep the sharding, as in JAX; along a
// split axis that axis is gathered first and the other dimensions stay split.
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>

#include "collectives/transport.hpp"
#include "exec/program_log.hpp"
#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/dtype_support.hpp"
#include "graph/op_scope.hpp"
#include "graph/shape_op_support.hpp"
#include "graph/tape.hpp"
#include "kernels/take.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

using detail::DeviceBuffer;
using detail::differentiable;
using detail::gather_whole;
using detail::local_shape;
using detail::normalize_axis;
using detail::on_each_device;
using detail::Recording;
using detail::replicated_like;
using detail::strides_of;
using detail::unsplit;
using detail::whole_along;

// x and the indices whole on every device and the same there (replicas that may not differ):
// devices of one VkDevice take once, and the others copy the first one's result. A scan's
// per-iteration slices of replicated stacked weights in data parallelism are such takes; the
// virtual devices share one adapter's compute, where a copy moves the bytes several times faster
// than the take kernel and costs lavapipe less per command. The copies' waits are replica waits
// (Lowered::estimate leaves them out), and each copy counts the take it stands for. Nothing
// (nullopt) where no two local devices share a VkDevice or the pieces may differ.
static std::optional<Array> take_once_per_adapter(const std::vector<Array>& parts, const Shape& shape,
                                                  int64_t outer, int64_t n, int64_t inner,
                                                  kernels::TakeBounds bounds, uint32_t fill_bits) {
  const Array& x = parts[0];
  const Array& indices = parts[1];
  if (!x.sharding().is_fully_replicated() || detail::replicas_may_differ(x) || detail::replicas_may_differ(indices))
    return std::nullopt;
  const std::shared_ptr<detail::RuntimeState> rt = x.impl()->runtime;
  const std::vector<DeviceIndex> pieces = x.sharding().devices_indices_map(shape);
  std::map<int, std::vector<size_t>> by_adapter;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (rt->is_local(pieces[i].device)) by_adapter[rt->adapter_of(pieces[i].device)].push_back(i);
  if (std::none_of(by_adapter.begin(), by_adapter.end(), [](const auto& g) { return g.second.size() > 1; }))
    return std::nullopt;
  const detail::PartOpScope op_scope("take");  // profile hook: no line of its own
  std::lock_guard lock(rt->mutex());
  const exec::ShardedValue& xv = detail::materialized(x);
  const exec::ShardedValue& iv = detail::materialized(indices);
  const auto x_map = x.sharding().devices_indices_map(x.shape());
  const auto i_map = indices.sharding().devices_indices_map(indices.shape());
  auto piece_of = [](const exec::ShardedValue& v, const std::vector<DeviceIndex>& map, int device) {
    for (size_t at = 0; at < map.size(); ++at)
      if (map[at].device == device) return v.shards[at].get();
    throw Error("internal: take input is not on device " + std::to_string(device));
  };
  const int64_t count = indices.size();
  const uint64_t bytes = static_cast<uint64_t>(shape_size(shape)) * dtype_size(x.dtype());
  exec::ShardedValue out{shape, x.dtype(), x.sharding(), {}};
  for (const DeviceIndex& p : pieces) out.shards.push_back(rt->allocate(p.device, bytes));
  auto take_on = [&](size_t i) {
    const int device = pieces[i].device;
    Recording rec = rt->begin(device);
    DeviceBuffer* in = piece_of(xv, x_map, device);
    DeviceBuffer* idx = piece_of(iv, i_map, device);
    rec.wait_for(in->ready());
    rec.wait_for(idx->ready());
    kernels::record_take(*rt, rec, *in, *idx, *out.shards[i], outer, n, inner, count, bounds, fill_bits);
    const detail::Fence f = rt->submit(std::move(rec));
    in->used_by(f);
    idx->used_by(f);
    out.shards[i]->written_by(f);
  };
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!rt->is_local(pieces[i].device)) take_on(i);  // another process's: counted as it submits
  for (const auto& [adapter, members] : by_adapter) {
    take_on(members.front());
    const DeviceBuffer& taken = *out.shards[members.front()];
    for (size_t m = 1; m < members.size(); ++m) {
      DeviceBuffer& piece = *out.shards[members[m]];
      Recording copy = rt->begin(pieces[members[m]].device);
      // Its own operands too, as its own take would: the projection's dependencies.
      copy.wait_for(piece_of(xv, x_map, pieces[members[m]].device)->ready());
      copy.wait_for(piece_of(iv, i_map, pieces[members[m]].device)->ready());
      copy.wait_for_replica(taken.ready());
      kernels::count_take(copy, outer, inner, count);
      const VkBufferCopy whole{taken.offset(), piece.offset(), bytes};
      collectives::transport_between(*rt, taken.device(), piece.device())
          .copy_regions(*rt, copy, taken, piece, std::span<const VkBufferCopy>(&whole, bytes ? 1 : 0), "replica take");
      const detail::Fence f = rt->submit(std::move(copy));
      const_cast<DeviceBuffer&>(taken).used_by(f);
      piece.written_by(f);
    }
  }
  return detail::make_array(rt, std::move(out), x.committed() || indices.committed());
}

static Array take_untaped(const Array& x_in, const Array& indices, int axis,
                          kernels::TakeBounds bounds, uint32_t fill_bits) {
  // bfloat16 / float16 (2 bytes each) are taken as float32 and rounded back, exact both ways:
  // the take kernel moves 32-bit words (fill_bits: the float32 bits of a value of the format).
  // int8 / uint8 as int32 (the fill bits an int32 value of theirs); int64 / float64: take()
  // moves their 32-bit words.
  if (is_8bit(x_in.dtype()))
    return detail::convert_untaped(
        take_untaped(detail::convert_untaped(x_in, DType::int32), indices, axis, bounds, fill_bits), x_in.dtype());
  if (detail::is_16bit_float(x_in.dtype()))
    return detail::convert_untaped(
        take_untaped(detail::convert_untaped(x_in, DType::float32), indices, axis, bounds, fill_bits),
        x_in.dtype());
  axis = normalize_axis(axis, x_in.ndim(), "take");
  // Along a split axis the axis is gathered first; the other dimensions stay split.
  const Array x = whole_along(x_in, static_cast<size_t>(axis));
  if (indices.dtype() != DType::int32)
    throw Error("take: indices must be int32, got " + std::string(dtype_name(indices.dtype())));
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  checked_size(shape, "take");
  if (x.shape()[axis] == 0 && indices.size() > 0)
    throw Error("take: cannot take from an empty axis");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (size_t d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
  auto& rt = *x.impl()->runtime;
  // x not split along the axis: every device takes from its own piece, with its indices: the
  // indices keep their split over the mesh axes x does not split (token ids split over 'data'
  // into a table split over 'model': the result is split over both, as JAX's gather), and are
  // whole along the others.
  const NamedSharding* xn = x.sharding().named();
  if (xn && !x.sharding().is_fully_replicated() && unsplit(x, {static_cast<size_t>(axis)}) &&
      (!indices.committed() || indices.sharding().device_ids() == x.sharding().device_ids())) {
    std::vector<SpecEntry> index_spec(indices.ndim(), SpecEntry());
    const NamedSharding* in_named = indices.committed() ? indices.sharding().named() : nullptr;
    const std::vector<std::string> x_axes = xn->spec().axes();
    for (size_t d = 0; in_named && d < indices.ndim() && d < in_named->spec().size(); ++d) {
      bool shared = false;
      for (const auto& a : in_named->spec()[d].axes)
        shared = shared || std::find(x_axes.begin(), x_axes.end(), a) != x_axes.end();
      if (!shared) index_spec[d] = in_named->spec()[d];
    }
    const Sharding index_layout = NamedSharding(xn->mesh(), PartitionSpec(index_spec).trimmed());
    const exec::RuleScope rule([] { return std::string("take: ids laid out on the table's devices (whole along the table's axes)"); });
    const Array idx = indices.sharding().is_equivalent_to(index_layout, indices.ndim())
                          ? indices
                          : device_put(indices, index_layout);
    std::vector<SpecEntry> spec;
    for (int d = 0; d < axis; ++d)
      spec.push_back(d < static_cast<int>(xn->spec().size()) ? xn->spec()[d] : SpecEntry());
    spec.insert(spec.end(), index_spec.begin(), index_spec.end());
    for (size_t d = axis + 1; d < x.ndim(); ++d)
      spec.push_back(d < xn->spec().size() ? xn->spec()[d] : SpecEntry());
    return on_each_device("take", {x, idx}, shape, x.dtype(),
                          NamedSharding(xn->mesh(), PartitionSpec(spec).trimmed()),
                          [&](Recording& rec, const auto& in, const auto& in_pieces,
                              const DeviceBuffer& out, const Index&) {
                            const Shape box = local_shape(in_pieces[0]);
                            int64_t local_outer = 1, local_inner = 1;
                            for (int d = 0; d < axis; ++d) local_outer *= box[d];
                            for (size_t d = axis + 1; d < box.size(); ++d) local_inner *= box[d];
                            kernels::record_take(rt, rec, *in[0], *in[1], out, local_outer,
                                                 x.shape()[axis], local_inner,
                                                 shape_size(local_shape(in_pieces[1])), bounds,
                                                 fill_bits);
                          });
  }
  // x whole on every device and the indices split over those devices (an embedding table and a
  // batch of token ids): each device takes its own indices from its copy, and the result is
  // split as the indices are, as JAX lays out jnp.take there. Gathering the indices instead
  // left the rest of a data-parallel step computing the whole batch on every device.
  const NamedSharding* in_named = indices.sharding().named();
  const bool split_indices = in_named && indices.committed() && !indices.sharding().is_fully_replicated();
  // An uncommitted table (on device 0) follows the committed indices, whole on their devices.
  const exec::RuleScope rule([] { return std::string("take: the table whole on every device of the split ids"); });
  const Array table = split_indices && !x.committed() && x.sharding().single()
                          ? device_put(x, NamedSharding(in_named->mesh(), PartitionSpec()))
                          : x;
  if (split_indices && table.committed() && table.sharding().is_fully_replicated()) {
    std::vector<int> x_devices = table.sharding().device_ids();
    std::vector<int> index_devices = indices.sharding().device_ids();
    std::sort(x_devices.begin(), x_devices.end());
    std::sort(index_devices.begin(), index_devices.end());
    if (x_devices == index_devices) {
      std::vector<SpecEntry> spec(static_cast<size_t>(axis), SpecEntry());
      for (size_t d = 0; d < indices.ndim(); ++d)
        spec.push_back(d < in_named->spec().size() ? in_named->spec()[d] : SpecEntry());
      spec.insert(spec.end(), x.ndim() - static_cast<size_t>(axis) - 1, SpecEntry());
      return on_each_device("take", {table, indices}, shape, x.dtype(),
                            NamedSharding(in_named->mesh(), PartitionSpec(spec).trimmed()),
                            [&](Recording& rec, const auto& in, const auto& in_pieces,
                                const DeviceBuffer& out, const Index&) {
                              kernels::record_take(
                                  rt, rec, *in[0], *in[1], out, outer, x.shape()[axis], inner,
                                  shape_size(local_shape(in_pieces[1])), bounds, fill_bits);
                            });
    }
  }
  const auto parts = gather_whole("take", {x, indices});
  if (std::optional<Array> once = take_once_per_adapter(parts, shape, outer, x.shape()[axis], inner, bounds, fill_bits))
    return *once;
  return on_each_device(
      "take", parts, shape, x.dtype(), parts[0].sharding(),
      [&](Recording& rec, const auto& in, const auto&, const DeviceBuffer& out, const Index&) {
        kernels::record_take(rt, rec, *in[0], *in[1], out, outer, x.shape()[axis], inner,
                             indices.size(), bounds, fill_bits);
      });
}

Array one_hot(const Array& x, int num_classes, DType dtype, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const detail::PartOpScope op_scope("one_hot");  // profile hook
  if (num_classes < 0) throw Error("one_hot: num_classes must not be negative");
  detail::check_dtype("one_hot", dtype);
  detail::reject_uint32("one_hot", x);
  Shape expanded = x.shape();
  expanded.push_back(num_classes);
  checked_size(expanded, "one_hot");
  expanded.back() = 1;
  return astype(equal(reshape(x, expanded), arange(static_cast<int32_t>(num_classes))), dtype);
}

Array argsort(const Array& x, int axis) {
  const detail::PartOpScope op_scope("argsort");  // profile hook: its transposes too
  if (x.ndim() == 0) return reshape(arange(1), {});
  if (x.dtype() == DType::uint32) return argsort(astype(x, DType::int64), axis);  // exact there
  axis = normalize_axis(axis, x.ndim(), "argsort");
  const int last = static_cast<int>(x.ndim()) - 1;
  if (axis != last) {
    std::vector<int> perm(x.ndim());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[axis], perm[last]);
    return transpose(argsort(transpose(x, perm), last), perm);
  }
  const int64_t n = x.shape()[last];
  // bfloat16 / float16 sort as their float32 values, int8 / uint8 as int32 (exact); the kernel
  // compares 32-bit words.
  if (is_64bit(x.dtype())) return detail::argsort64(x);
  const Array keys = astype(x, x.dtype() == DType::bool_ || is_8bit(x.dtype()) ? DType::int32
                               : is_floating(x.dtype())                        ? DType::float32
                                                                               : x.dtype());
  // Rows whole on each device (the sorted axis gathered first where it is split): each device
  // sorts its own rows.
  const Array whole = whole_along(keys, static_cast<size_t>(last));
  auto& rt = *x.impl()->runtime;
  return on_each_device("argsort", {whole}, x.shape(), DType::int32, whole.sharding(),
                        [&](Recording& rec, const auto& in, const auto& in_pieces,
                            const DeviceBuffer& out, const Index&) {
                          const int64_t count = shape_size(local_shape(in_pieces[0]));
                          kernels::record_argsort(rt, rec, *in[0], out, n == 0 ? 0 : count / n, n,
                                                  whole.dtype() == DType::float32);
                        });
}

namespace {
// The bits a filled element of `dtype` holds: the fill value cast to the dtype as JAX does, or
// jnp.take's default (NaN, the most negative int32, the largest uint32, true).
uint32_t take_fill_bits(DType dtype, const std::optional<Operand>& fill_value) {
  const auto bits_of = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  if (!fill_value) {
    if (is_floating(dtype)) return bits_of(std::numeric_limits<float>::quiet_NaN());
    if (dtype == DType::bool_) return 1;
    // jnp.take: "the largest positive value for unsigned types" (keys and bits are uint32).
    if (dtype == DType::uint32) return std::numeric_limits<uint32_t>::max();
    if (dtype == DType::uint8) return 255;
    if (dtype == DType::int8) return static_cast<uint32_t>(-128);
    return static_cast<uint32_t>(std::numeric_limits<int32_t>::min());
  }
  const auto& v = fill_value->get();
  if (std::holds_alternative<Array>(v))
    throw Error(
        "take: fill_value must be a number (a static scalar, as in jnp.take), not an Array");
  const bool is_float = std::holds_alternative<float>(v);
  const float f = is_float ? std::get<float>(v) : static_cast<float>(std::get<int32_t>(v));
  if (is_floating(dtype)) return bits_of(round_to(dtype, f));  // bfloat16 / float16: rounded
  if (dtype == DType::bool_) return f != 0.0f ? 1 : 0;
  if (!is_float) return static_cast<uint32_t>(std::get<int32_t>(v));  // -1 wraps, as astype
  if (dtype == DType::uint32) {
    // A float fill for a uint32 array is cast to uint32: its range, not int32's, bounds it.
    if (!(f > -1.0f && f < 4294967296.0f))
      throw Error("take: fill_value " + std::to_string(f) +
                  " does not fit in uint32, the dtype of the array taken from (0 to 4294967295)");
    return static_cast<uint32_t>(f);
  }
  if (!(f >= -2147483648.0f && f < 2147483648.0f))
    throw Error("take: fill_value " + std::to_string(f) +
                " does not fit in int32, the dtype of the array taken from");
  return static_cast<uint32_t>(static_cast<int32_t>(f));
}
}  // namespace

namespace {
// int64 / float64: their 32-bit words taken (fill mode: wrapped, which counts a negative index
// from the end as fill does), then the filled positions set: a fill word per element would be
// one word of two.
Array take64(const Array& x, const Array& indices, int axis, kernels::TakeBounds bounds,
             const std::optional<Operand>& fill_value) {
  const int ax = normalize_axis(axis, x.ndim(), "take");
  const kernels::TakeBounds word_bounds = bounds == kernels::TakeBounds::fill ? kernels::TakeBounds::wrap : bounds;
  const Array y = detail::from_words(take_untaped(detail::as_words(x), indices, ax, word_bounds, 0), x.dtype());
  if (bounds != kernels::TakeBounds::fill || x.shape()[ax] == 0) return y;
  const auto n = static_cast<int32_t>(x.shape()[ax]);
  Shape mask_shape(static_cast<size_t>(ax), 1);
  mask_shape.insert(mask_shape.end(), indices.shape().begin(), indices.shape().end());
  mask_shape.resize(mask_shape.size() + x.ndim() - ax - 1, 1);
  const Array inside = reshape(logical_and(indices >= -n, indices < n), mask_shape);
  if (fill_value) {
    if (std::holds_alternative<Array>(fill_value->get()))
      throw Error("take: fill_value must be a number (a static scalar, as in jnp.take), not an Array");
    return where(inside, y, *fill_value);
  }
  if (x.dtype() == DType::float64) return where(inside, y, std::numeric_limits<float>::quiet_NaN());
  // jnp.take's default for int64: its most negative value, -2^63.
  const Array lowest = astype(full(Shape{}, std::numeric_limits<int32_t>::min()), DType::int64) * 65536 * 65536;
  return where(inside, y, lowest);
}
}  // namespace

Array take(const Array& x, const Array& indices, int axis, TakeMode mode,
           std::optional<Operand> fill_value, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  detail::require_one_runtime("take", {&x, &indices});
  // Any other value, cast from an integer, was taken as fill.
  if (mode != TakeMode::fill && mode != TakeMode::clip && mode != TakeMode::wrap)
    throw Error("take: mode TakeMode(" + std::to_string(static_cast<int>(mode)) +
                ") is not a mode; use TakeMode::fill, TakeMode::clip or TakeMode::wrap");
  const kernels::TakeBounds bounds = mode == TakeMode::clip   ? kernels::TakeBounds::clip
                                     : mode == TakeMode::wrap ? kernels::TakeBounds::wrap
                                                              : kernels::TakeBounds::fill;
  if (!x.valid() || !indices.valid()) throw Error("take: an operand is an empty meshvk::Array");
  const Array y = is_64bit(x.dtype()) ? take64(x, indices, axis, bounds, fill_value)
                                      : take_untaped(x, indices, axis, bounds, take_fill_bits(x.dtype(), fill_value));
  if (!differentiable(x)) return y;
  const int ax = axis < 0 ? axis + static_cast<int>(x.ndim()) : axis;
  return detail::on_tape(y, {x, indices}, [x, indices, ax, mode](const Array& ct) {
    // Scatter-add: each gathered row's cotangent goes back to the row it came from (mapped into
    // range as the gather mapped it), through a one-hot product; a filled element's index stays
    // out of range, so its one-hot row is zero and it sends nothing back.
    const int64_t n = x.shape()[ax];
    const auto n32 = static_cast<int32_t>(n);
    const size_t rank = x.ndim() - 1 + indices.ndim();
    if (rank + 1 <= 52) {
      // One einsum over the indices' own dimensions, so the cotangent keeps its layout (token
      // ids split by position stay split: a flattening reshape would gather them whole). The
      // contraction runs over the same elements in the same order as the flattened product.
      const Array idx = mode == TakeMode::clip   ? minimum(maximum(indices, 0), n32 - 1)
                        : mode == TakeMode::wrap ? remainder(indices, n32)
                                                 : where(indices < 0, indices + n32, indices);
      const auto letter = [](size_t i) {
        return static_cast<char>(i < 26 ? 'a' + i : 'A' + (i - 26));
      };
      std::string ct_labels, id_labels, out_labels;
      for (size_t d = 0; d < rank; ++d) ct_labels += letter(d);
      const char row = letter(rank);
      id_labels = ct_labels.substr(static_cast<size_t>(ax), indices.ndim()) + row;
      out_labels = ct_labels.substr(0, static_cast<size_t>(ax)) + row +
                   ct_labels.substr(static_cast<size_t>(ax) + indices.ndim());
      const Array scattered = einsum(ct_labels + "," + id_labels + "->" + out_labels, ct,
                                     one_hot(idx, static_cast<int>(n)));
      return std::vector<Array>{scattered, Array()};
    }
    const Array flat = reshape(indices, {indices.size()});
    const Array idx = mode == TakeMode::clip   ? minimum(maximum(flat, 0), n32 - 1)
                      : mode == TakeMode::wrap ? remainder(flat, n32)
                                               : where(flat < 0, flat + n32, flat);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= x.shape()[d];
    for (size_t d = ax + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
    const Array c = reshape(ct, {outer, indices.size(), inner});
    const Array scattered = einsum("ojp,jk->okp", c, one_hot(idx, static_cast<int>(n)));
    return std::vector<Array>{reshape(scattered, x.shape()), Array()};
  });
}

}  // namespace meshvk

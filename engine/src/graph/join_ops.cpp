// Ops that join or shift arrays: concatenate, stack, pad and roll. Each runs per device on its
// own pieces where the dimension it works along is not split over mesh axes, as in JAX; along a
// split one, its pieces are assembled from the boxes their devices need (assemble.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "graph/dtype_support.hpp"
#include "graph/elementwise_core.hpp"
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
using detail::differentiable;
using detail::gather_whole;
using detail::keep_dividing;
using detail::local_shape;
using detail::normalize_axis;
using detail::on_each_device;
using detail::Part;
using detail::Recording;
using detail::strides_of;
using detail::unsplit;

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
  for (const Array& a : arrays) detail::require_one_runtime("concatenate", {&arrays[0], &a});
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
  }
  // All operands promoted as an elementwise op promotes them (JAX's lattice: float64 with
  // float32 is float64, bfloat16 with float16 float32, uint32 with int32 int64); bools are
  // joined by any other dtype and stay bool alone.
  for (const Array& a : arrays)
    if (a.dtype() != DType::bool_)
      dtype = dtype == DType::bool_ ? a.dtype() : detail::ew::promote({{dtype, false}, {a.dtype(), false}});
  checked_size(shape, "concatenate");
  std::vector<Array> cast;
  for (const Array& a : arrays) cast.push_back(astype(a, dtype));
  // Explicit mode: the operands' types carry their shardings, and JAX's rule wants them equal
  // (uncommitted operands, such as a fresh zeros, take whatever layout is needed).
  const Array* first = nullptr;
  bool explicit_axes = false;
  for (const Array& a : cast) {
    const NamedSharding* n = a.committed() ? a.sharding().named() : nullptr;
    if (!n) continue;
    for (size_t d = 0; d < rank; ++d)
      for (const auto& ax : n->spec()[d].axes) explicit_axes = explicit_axes || n->mesh().axis_type(ax) == AxisType::Explicit;
    if (!first) first = &a;
    else if (explicit_axes && !a.sharding().is_equivalent_to(first->sharding(), rank))
      throw Error("concatenate: operands " + type_of(*first) + " and " + type_of(a) +
                  " are sharded differently; in explicit mode all operands need the same sharding (as JAX's): "
                  "reshard one of them");
  }
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
  // An int64 value past int32, which the fill's sign-extended word cannot hold: x padded with 0,
  // the padding then set to the value (full_like holds any int64 a float names).
  if (x.dtype() == DType::int64 && !(value >= -2147483648.0f && value < 2147483648.0f) &&
      value >= -9223372036854775808.0f && value < 9223372036854775808.0f) {
    const Array inside = pad_untaped(astype(ones_like(x), DType::bool_), widths, 0.0f);
    const Array padded = pad_untaped(x, widths, 0.0f);
    return where(inside, padded, full_like(padded, static_cast<double>(value)));
  }
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
    case DType::int64:  // an int32 value, sign-extended by the fill (larger ones: above)
    case DType::int32:
    default:
      if (!(value >= -2147483648.0f && value < 2147483648.0f))
        throw Error("pad: value " + std::to_string(value) + " does not fit in " +
                    std::string(dtype_name(x.dtype())) + ", the dtype of " + type_of(x) +
                    (x.dtype() == DType::int64 ? " (-2^63 to 2^63 - 1)" : " (-2147483648 to 2147483647)"));
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

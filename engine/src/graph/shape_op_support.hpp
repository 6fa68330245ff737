#pragma once
// What the shape and data-movement ops (shape_ops.cpp, join_ops.cpp, take_ops.cpp) share: axis
// checks, piece shapes, and the three ways they lay out a result (piece by piece on each device,
// whole on every device, or assembled from boxes of the sources: assemble.cpp).
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "exec/sharded_value.hpp"
#include "kernels/strided_copy.hpp"
#include "meshvk/array.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

// axis in [-rank, rank) as a dimension index; an Error naming op otherwise.
int normalize_axis(int axis, size_t rank, const char* op);
// Row-major strides, in elements, of a dense array of `shape`.
std::vector<int64_t> strides_of(const Shape& shape);
// The shape of the piece an index selects.
Shape local_shape(const Index& index);
// Whether none of `dims` of x is split over mesh axes: an op that works only along them runs on
// each device's own piece and keeps x's sharding.
bool unsplit(const Array& x, const std::vector<size_t>& dims);
// x laid out with dimension `dim` whole on each device and every other dimension as it was:
// the all-gather along one dimension that ops needing it whole (take, argsort) start with.
Array whole_along(const Array& x, size_t dim);
// The fully replicated layout over the same devices as s.
Sharding replicated_like(const Sharding& s);

using PieceFn = std::function<void(Recording&, const std::vector<const DeviceBuffer*>& inputs,
                                   const std::vector<Index>& input_pieces, const DeviceBuffer& out,
                                   const Index& out_piece)>;

// Makes the result piece by piece: on each device of `sharding`, `record` fills the device's
// output piece from the pieces the inputs hold there.
Array on_each_device(const char* op, const std::vector<Array>& inputs, Shape shape, DType dtype,
                     const Sharding& sharding, const PieceFn& record);

// All inputs on the devices of the first committed one (or the first), each held whole.
std::vector<Array> gather_whole(const char* op, const std::vector<Array>& arrays);

// A strided copy of `box` of `dtype` elements (strides and offsets in elements).
inline kernels::StridedCopy copy_into(const Shape& box, const std::vector<int64_t>& in_strides,
                                      int64_t in_offset, const std::vector<int64_t>& out_strides,
                                      int64_t out_offset, DType dtype) {
  return {box, in_strides, out_strides, in_offset, out_offset, static_cast<uint32_t>(dtype_size(dtype))};
}

// Where a result's dimension can stay split the way an operand's is: when its size still divides
// over the entry's mesh axes; else it is whole on every device.
std::vector<SpecEntry> keep_dividing(const NamedSharding& n, const Shape& shape);

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
               const std::function<std::vector<Part>(const Index&)>& parts_of);

}  // namespace meshvk::detail

#pragma once
// One kernel behind every data-movement op (transpose, broadcast_to, slice, pad, concatenate,
// roll, gather): for each coordinate c of an iteration box,
//   out[out_offset + sum(c[d] * out_stride[d])] = in[in_offset + sum(c[d] * in_stride[d])]
// with strides in elements (0 broadcasts, negative reverses).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

struct StridedCopy {
  std::vector<int64_t> box;  // extent of each iteration dimension
  std::vector<int64_t> in_strides, out_strides;
  int64_t in_offset = 0, out_offset = 0;
  // Bytes per element: 4, or 2 for bfloat16 and float16 (moved as 16-bit texels and stores, so
  // that no two invocations write the halves of one word).
  uint32_t element_bytes = 4;
};

// One contiguous run of elements from one buffer into another (offsets and count in elements).
struct CopyRun {
  const detail::DeviceBuffer* from = nullptr;
  const detail::DeviceBuffer* to = nullptr;
  uint64_t from_offset = 0, to_offset = 0, count = 0;
};

// The runs in as few vkCmdCopyBuffer as their buffers allow: one per pair of VkBuffers, in order
// of first use (a device's small arrays share its pool's blocks, so packing a dozen gradients
// into one buffer is one command, where lavapipe charges each command microseconds). Each run is
// counted as the copy it is; a barrier follows. The runs' destinations must not overlap.
void record_copy_runs(detail::RuntimeState& rt, detail::Recording& rec, std::span<const CopyRun> runs,
                      uint32_t element_bytes);

// `copy` as one contiguous run when it is one (a box whose rows join into one stretch in both
// buffers: a concatenation along the leading axis), to be recorded with others by
// record_copy_runs; nothing otherwise, or for 8-byte elements.
std::optional<CopyRun> contiguous_run(const StridedCopy& copy, const detail::DeviceBuffer& in,
                                      const detail::DeviceBuffer& out);

void record_strided_copy(detail::RuntimeState& rt, detail::Recording& rec, const StridedCopy& copy,
                         const detail::DeviceBuffer& in, const detail::DeviceBuffer& out);

// The first `count` elements of `out` (a `dtype` array) set to the value whose 32 bits are `word`
// (bfloat16, float16 and float64: the float32 bits of one of the format's values; int8, uint8
// and int64: an int32 value, wrapped or sign-extended); an 8- or 16-bit array's last word is
// filled whole.
void record_fill_words(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& out, uint64_t count,
                       uint32_t word, DType dtype);

}  // namespace meshvk::kernels

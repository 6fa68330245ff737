#pragma once
// One kernel behind every data-movement op (transpose, broadcast_to, slice, pad, concatenate,
// roll, gather): for each coordinate c of an iteration box,
//   out[out_offset + sum(c[d] * out_stride[d])] = in[in_offset + sum(c[d] * in_stride[d])]
// with strides in elements (0 broadcasts, negative reverses).
#include <cstdint>
#include <vector>

#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

struct StridedCopy {
  std::vector<int64_t> box;  // extent of each iteration dimension
  std::vector<int64_t> in_strides, out_strides;
  int64_t in_offset = 0, out_offset = 0;
};

void record_strided_copy(detail::RuntimeState& rt, detail::Recording& rec, const StridedCopy& copy,
                         const detail::DeviceBuffer& in, const detail::DeviceBuffer& out);

// Every element of `out` (its first `count` words) set to `word`.
void record_fill_words(detail::Recording& rec, const detail::DeviceBuffer& out, uint64_t count, uint32_t word);

}  // namespace meshvk::kernels

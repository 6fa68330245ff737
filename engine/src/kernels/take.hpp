#pragma once
#include <cstdint>

#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

// numpy.take along one axis of a contiguous [outer, n, inner] array with `count` int32 indices
// (clamped into [0, n)): out is [outer, count, inner].
void record_take(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                 const detail::DeviceBuffer& indices, const detail::DeviceBuffer& out, int64_t outer,
                 int64_t n, int64_t inner, int64_t count);

// Stable bitonic argsort of each row of a contiguous [rows, n] array of float32 (is_float) or
// int32 words into int32 indices.
void record_argsort(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                    const detail::DeviceBuffer& out, int64_t rows, int64_t n, bool is_float);

}  // namespace meshvk::kernels

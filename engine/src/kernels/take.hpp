#pragma once
#include <cstdint>

#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

// What an index outside [0, n) takes: clip clamps it into [0, n); wrap takes it modulo n; fill
// (jnp.take's default) counts a negative index from the end once and gives `fill_bits` for an
// index still outside.
enum class TakeBounds { clip, wrap, fill };

// numpy.take along one axis of a contiguous [outer, n, inner] array with `count` int32 indices:
// out is [outer, count, inner].
void record_take(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                 const detail::DeviceBuffer& indices, const detail::DeviceBuffer& out,
                 int64_t outer, int64_t n, int64_t inner, int64_t count,
                 TakeBounds bounds = TakeBounds::clip, uint32_t fill_bits = 0);

// Counts a take into `rec` without running it: a device whose piece another device of its
// VkDevice took (graph/take_ops.cpp) counts the take it would run on hardware of its own.
void count_take(detail::Recording& rec, int64_t outer, int64_t inner, int64_t count);

// Stable bitonic argsort of each row of a contiguous [rows, n] array of float32 (is_float) or
// int32 words into int32 indices.
void record_argsort(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                    const detail::DeviceBuffer& out, int64_t rows, int64_t n, bool is_float);

}  // namespace meshvk::kernels

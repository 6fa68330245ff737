#pragma once
// bfloat16 and float16 arrays are stored in 2 bytes per element. The generated elementwise
// kernels load and store them directly (16-bit texels in, 16-bit storage out); the kernels written
// for 32-bit words (matmul, reductions, take, strided copies, the random bits) take a 16-bit input
// through a float32 temporary (record_widen) and leave a 16-bit result through one (record_narrow).
#include <cstdint>
#include <memory>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

// GLSL: mv_from_bf16 / mv_from_f16 (16 bits in the low half of a uint -> the float32 value, exact)
// and mv_bf16_bits / mv_f16_bits (a float32 -> the 16 bits of it rounded to nearest even; needs
// the rounding helpers mv_bf16 / mv_f16 declared before it).
extern const char* const kStorage16Glsl;
// GLSL: mv_bf16 / mv_f16, a float32 rounded to the nearest bfloat16 / float16 value as a float32
// (scalar and vec4), integer arithmetic on the bits as meshvk/dtype.hpp's host conversions
// (defined with the elementwise kernels, which round every 16-bit result with them).
extern const char* const kRound16Glsl;

// Throws Error naming storageBuffer16BitAccess where the device's adapter lacks it: kernels that
// store bfloat16 or float16 elements need it.
void require_storage16(detail::RuntimeState& rt, int device);

// A fresh float32 buffer (kept alive by `rec`) holding elements [start, start + count) of `in`, a
// `dtype` (bfloat16 or float16) array, as float32 words, followed by a barrier.
std::shared_ptr<detail::DeviceBuffer> record_widen(detail::RuntimeState& rt, detail::Recording& rec,
                                                   const detail::DeviceBuffer& in, DType dtype,
                                                   uint64_t start, uint64_t count);

// Elements [out_start, out_start + count) of `out`, a `dtype` array: `wide`'s float32 words from
// `wide_start`, rounded to nearest even. Barriers before (so `wide`'s writer finished) and after.
// Elements are written one 16-bit store each, so neighbours in the same word are left alone.
void record_narrow(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& wide,
                   uint64_t wide_start, DType dtype, uint64_t count, const detail::DeviceBuffer& out,
                   uint64_t out_start);

// Bytes of `count` elements of `dtype` (dtype_size(dtype) * count).
constexpr uint64_t element_bytes(DType dtype, uint64_t count) { return dtype_size(dtype) * count; }

}  // namespace meshvk::kernels

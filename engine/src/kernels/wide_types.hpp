#pragma once
// int8 and uint8 (1 byte per element) and int64 and float64 (8 bytes) in the kernels: the Vulkan
// features they need, and how the generated elementwise kernels read, compute and store them.
// int8 and uint8 are computed as int (wrapped back to their range after every op, as XLA's 8-bit
// arithmetic wraps) and stored as 8-bit values; int64 and float64 are computed as int64_t and
// double and read as two 32-bit words (uvec2 texels).
#include <cstdint>
#include <string>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

enum class EwOp : uint8_t;  // kernels/elementwise.hpp

// Throws Error naming the dtype and the Vulkan feature the device's adapter lacks for it: int8 and
// uint8 need storageBuffer8BitAccess and shaderInt8, int64 shaderInt64, float64 shaderFloat64.
// Other dtypes: nothing (bfloat16 and float16 check storage16's own way).
void require_dtype(detail::RuntimeState& rt, int device, DType dtype);

// The GLSL type of one element (width 1) or four (width 4) of `dtype` while computing: float /
// vec4, int / ivec4 (int32, int8, uint8), uint, bool, int64_t, double (64-bit: width 1 only).
std::string ew_type_name(DType dtype, int width);
// The component of a texel fetch holding one element: ".xy" for 64-bit dtypes, else ".x".
const char* ew_fetch_component(DType dtype);
// The expression reading one element (or four) from `raw`, a texel's uint / uvec4 (uvec2 for
// 64-bit dtypes), as `dtype`.
std::string ew_decode(const std::string& raw, DType dtype, int width);
// The value stored for `v` (a value of `dtype` already).
std::string ew_encode(const std::string& v, DType dtype, int width);
// The output's element type in the storage block.
const char* ew_out_element(DType dtype, int width);
// `e` (an op's result) brought back into `dtype`'s range: int8 sign-extended from its low byte,
// uint8 masked to it; other dtypes unchanged (bfloat16 and float16 round in elementwise.cpp).
std::string ew_wrap(const std::string& e, DType dtype, int width);
// A constant node's value: `bits` holds int32 or float32 bits (weak scalars are those).
std::string ew_constant(uint32_t bits, DType dtype, const std::string& type);
// The texel format of one element.
VkFormat ew_texel_format(DType dtype, bool vector);
// #extension lines for a kernel that computes with (or stores) these dtypes.
std::string ew_extensions(bool int8_storage, bool int64);
// Helpers (mv_max, mv_min, mv_sign, mv_floordiv, mv_mod, mv_pow) for int64_t and double.
std::string ew_helpers64(bool int64, bool float64);

// The math library's function for an op on float64 elements (mathlib/f64/: "mvk_exp_f64", ...), or
// nullptr where GLSL's double arithmetic or ew_helpers64 computes it (graph/wide_dtypes.cpp
// refuses the ops neither has).
const char* ew_library_function_f64(EwOp op);

// The first `count` elements of `out` (an int64 or float64 array) set to the value `word` gives
// (int64: an int32 value; float64: a float32's bits), whatever its words' pattern.
void record_fill64(detail::RuntimeState& rt, detail::Recording& rec,
                   const detail::DeviceBuffer& out, uint64_t count, uint32_t word, DType dtype);

}  // namespace meshvk::kernels

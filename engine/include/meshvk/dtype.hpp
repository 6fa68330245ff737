#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshvk {

// float32, int32, uint32 and bool (0 or 1) are stored as one 32-bit word per element;
// bfloat16 and float16 as their 16 bits, two bytes per element (dtype_size).
// uint32 (random keys and bits, as JAX's) supports data movement (device_put, reshape, slice,
// indexing, transpose, concatenate, take, copies, collectives that move data), printing, .npy
// '<u4', to_host<uint32_t>, the random ops and astype to and from the other dtypes; elementwise
// ops, reductions, sort, argsort and top_k compute on it in int64 (exact) and wrap back modulo
// 2^32; matmul, scatters, one_hot and collectives that compute throw Error naming astype.
//
// bfloat16 and float16 have JAX's semantics: every value is one of the 16-bit format's (each
// conversion and each op's result is rounded to nearest even, overflows to inf as the format
// does, keeps NaN; float16 has its subnormals), arithmetic is done in float32 and rounded after
// every op (as XLA on CPU does, also inside a fused chain), sums, means and matmuls accumulate in
// float32 and round their result. Their host types are meshvk::bfloat16 and meshvk::float16
// below (2 bytes each, as on the device).
//
// int8 and uint8 are stored in 1 byte per element, int64 and float64 in 8 (dtype_size), with
// numpy's and JAX's semantics: integer arithmetic wraps modulo 2^bits after every op (also inside
// a fused chain), astype from a float truncates toward zero and between integers wraps, int64 <->
// float64 is exact where representable (a float outside the target's range is undefined in numpy
// too: meshvk gives the adapter's conversion to int32, wrapped to 8 bits, or to int64), float64
// is computed in float64. Promotion is JAX's table (int8 + int32 is int32, uint32 + int32 int64,
// anything + float64 float64; uint8 + int8, int16 in JAX, is int32: there is no int16). The
// device needs Vulkan features for them: int8 / uint8 storageBuffer8BitAccess and shaderInt8,
// int64 shaderInt64, float64 shaderFloat64 (an Error names the missing one). float64 is a dtype
// asked for explicitly (there is no jax_enable_x64 switch): C++ double literals stay weak
// float32 scalars, as they always were, so they never turn float32 programs into float64 ones.
// float64 has no transcendental functions yet (the math library is float32): exp(x) of a float64
// x is an Error; +, -, *, /, comparisons, abs, sqrt, maximum, minimum, where and astype work.
enum class DType { float32, int32, bool_, uint32, bfloat16, float16, int8, uint8, int64, float64 };

// Every dtype, in the enum's order (for tests and errors that list them).
inline constexpr DType kAllDTypes[] = {DType::float32, DType::int32,   DType::bool_, DType::uint32,
                                       DType::bfloat16, DType::float16, DType::int8,  DType::uint8,
                                       DType::int64,    DType::float64};

// "float32", "int32", "bool", "uint32", "bfloat16", "float16", "int8", "uint8", "int64",
// "float64" (numpy's names)
std::string_view dtype_name(DType dtype);
// bfloat16 and float16: stored in 2 bytes per element.
constexpr bool is_16bit(DType dtype) { return dtype == DType::bfloat16 || dtype == DType::float16; }
// int8 and uint8: stored in 1 byte per element.
constexpr bool is_8bit(DType dtype) { return dtype == DType::int8 || dtype == DType::uint8; }
// int64 and float64: stored in 8 bytes per element.
constexpr bool is_64bit(DType dtype) { return dtype == DType::int64 || dtype == DType::float64; }
// Bytes per element, on the device and on the host: 1 for int8 and uint8, 2 for bfloat16 and
// float16, 8 for int64 and float64, else 4.
constexpr size_t dtype_size(DType dtype) {
  return is_8bit(dtype) ? 1 : is_16bit(dtype) ? 2 : is_64bit(dtype) ? 8 : 4;
}
// float32, float64, bfloat16 and float16 (jnp.issubdtype(dtype, jnp.floating)).
constexpr bool is_floating(DType dtype) {
  return dtype == DType::float32 || dtype == DType::bfloat16 || dtype == DType::float16 ||
         dtype == DType::float64;
}
// int8, int32, int64, uint8 and uint32 (jnp.issubdtype(dtype, jnp.integer)); not bool.
constexpr bool is_integer(DType dtype) {
  return dtype == DType::int8 || dtype == DType::int32 || dtype == DType::int64 ||
         dtype == DType::uint8 || dtype == DType::uint32;
}

// Conversions between float32 and the 16-bit formats' bits, rounding to nearest even (ties to
// the even significand), as numpy's astype(np.float16) and ml_dtypes' bfloat16 do: values past
// the largest finite one round to inf (float16: |x| >= 65520; bfloat16: >= 3.3961776e38), NaN
// stays NaN (bfloat16: quiet, sign kept, as ml_dtypes; float16: sign and the payload's top ten
// bits kept, a signaling NaN stays signaling, as numpy), float16's subnormals (down to 2^-24)
// are exact.
constexpr uint16_t bfloat16_bits(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
constexpr float bfloat16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
constexpr uint16_t float16_bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN: a payload that lies in the dropped bits becomes 1, still NaN
    const uint32_t payload = (a >> 13) & 0x3ffu;
    return static_cast<uint16_t>(sign | 0x7c00u | (payload == 0 ? 1u : payload));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // 65520 and up: inf
  if (a >= 0x38800000u) {                                               // 2^-14 and up: normal
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24: m * 2^-shift units of 2^-24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);  // q == 0x400 is 2^-14, the smallest normal
}
constexpr float float16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
  if (e == 0) {
    const float f = static_cast<float>(m) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | sign);
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// Host values of the 16-bit dtypes (ml_dtypes.bfloat16, numpy.float16): the 16 bits, made from
// a float by rounding to nearest even. to_host<bfloat16>(), array(span<const float16>), ...
struct bfloat16 {
  uint16_t bits = 0;
  constexpr bfloat16() = default;
  constexpr bfloat16(float value) : bits(bfloat16_bits(value)) {}  // NOLINT: as ml_dtypes
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  constexpr explicit operator float() const { return bfloat16_to_float(bits); }
  constexpr float to_float() const { return bfloat16_to_float(bits); }
};
struct float16 {
  uint16_t bits = 0;
  constexpr float16() = default;
  constexpr float16(float value) : bits(float16_bits(value)) {}  // NOLINT: as numpy.float16
  static constexpr float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
  constexpr explicit operator float() const { return float16_to_float(bits); }
  constexpr float to_float() const { return float16_to_float(bits); }
};
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

// float32 rounded to the dtype's values (a float32 unchanged; ints and bool: not floating).
constexpr float round_to(DType dtype, float value) {
  if (dtype == DType::bfloat16) return bfloat16_to_float(bfloat16_bits(value));
  if (dtype == DType::float16) return float16_to_float(float16_bits(value));
  return value;
}

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::float32; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::int32; }
template <>
constexpr DType dtype_of<uint32_t>() { return DType::uint32; }
template <>
constexpr DType dtype_of<bfloat16>() { return DType::bfloat16; }
template <>
constexpr DType dtype_of<float16>() { return DType::float16; }
template <>
constexpr DType dtype_of<int8_t>() { return DType::int8; }
template <>
constexpr DType dtype_of<uint8_t>() { return DType::uint8; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::int64; }
template <>
constexpr DType dtype_of<double>() { return DType::float64; }

// A global or per-shard array shape, row-major.
using Shape = std::vector<int64_t>;

int64_t shape_size(const Shape& shape);          // product of the dimensions (1 for rank 0)
std::string shape_to_string(const Shape& shape);  // "(4, 8)", "(32,)", "()" as numpy prints

}  // namespace meshvk

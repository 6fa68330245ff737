// The GLSL the generated elementwise kernels call: numpy's semantics where GLSL's differ, and the
// rounding to bfloat16 and float16 (kernels/elementwise.cpp writes the kernels around them).
#include "kernels/elementwise_glsl.hpp"

#include "kernels/storage16.hpp"

namespace meshvk::kernels {

// Helpers the generated code calls: numpy's semantics where GLSL's differ (NaN-propagating
// max/min, sign of NaN, floor division and remainder, pow of negative bases and signed zeros, an
// accurate tanh). Zero tests look at the bits, so they hold whatever the compiler assumes.
const char* const kEwHelpersGlsl = R"(
float mv_max(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : max(a, b); }
float mv_min(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : min(a, b); }
vec4 mv_max(vec4 a, vec4 b) { return mix(max(a, b), a + b, bvec4(uvec4(isnan(a)) | uvec4(isnan(b)))); }
vec4 mv_min(vec4 a, vec4 b) { return mix(min(a, b), a + b, bvec4(uvec4(isnan(a)) | uvec4(isnan(b)))); }
float mv_sign(float x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : (x == 0.0 ? 0.0 : x)); }
vec4 mv_sign(vec4 x) { return vec4(mv_sign(x.x), mv_sign(x.y), mv_sign(x.z), mv_sign(x.w)); }
bool mv_is_zero(float x) { return (floatBitsToUint(x) & 0x7fffffffu) == 0u; }
float mv_copysign_zero(float s) { return uintBitsToFloat(floatBitsToUint(s) & 0x80000000u); }
// Integers: floor division and the remainder with the divisor's sign; by zero both give 0 (as
// numpy). The truncating division never sees a divisor of 0 or -1 (INT_MIN / -1 traps on x86):
// x // -1 is -x, wrapping INT_MIN to itself as numpy does.
int mv_floordiv(int a, int b) {
  const int d = (b == 0 || b == -1) ? 1 : b;
  int q = a / d;
  if (q * d != a && ((a < 0) != (d < 0))) q -= 1;
  return b == 0 ? 0 : (b == -1 ? int(0u - uint(a)) : q);
}
ivec4 mv_floordiv(ivec4 a, ivec4 b) { return ivec4(mv_floordiv(a.x, b.x), mv_floordiv(a.y, b.y), mv_floordiv(a.z, b.z), mv_floordiv(a.w, b.w)); }
int mv_mod(int a, int b) {
  const int d = (b == 0 || b == -1) ? 1 : b;
  int r = a - (a / d) * d;
  if (r != 0 && ((r < 0) != (d < 0))) r += d;
  return (b == 0 || b == -1) ? 0 : r;
}
ivec4 mv_mod(ivec4 a, ivec4 b) { return ivec4(mv_mod(a.x, b.x), mv_mod(a.y, b.y), mv_mod(a.z, b.z), mv_mod(a.w, b.w)); }
// C's fmod, exact (GLSL has none; its mod() is x - y * floor(x / y), which rounds): the
// significands' remainder is reduced up to 8 exponent steps at a time in integer arithmetic (binary
// long division), so every result is exact, subnormals included, whatever the float modes.
float mv_fmod(float x, float y) {
  const uint ux = floatBitsToUint(x), uy = floatBitsToUint(y);
  const uint sx = ux & 0x80000000u, ax = ux & 0x7fffffffu, ay = uy & 0x7fffffffu;
  if (ay == 0u || ay > 0x7f800000u || ax >= 0x7f800000u) return uintBitsToFloat(0x7fc00000u);
  if (ax < ay) return x;
  if (ax == ay) return uintBitsToFloat(sx);
  // |x| = mx * 2^(ex - 150), |y| = my * 2^(ey - 150), ex >= ey as |x| > |y|.
  int ex = int(ax >> 23u), ey = int(ay >> 23u);
  const uint mx = (ax & 0x7fffffu) | (ex != 0 ? 0x800000u : 0u);
  const uint my = (ay & 0x7fffffu) | (ey != 0 ? 0x800000u : 0u);
  ex = max(ex, 1);
  ey = max(ey, 1);
  uint r = mx % my;
  for (int k = ex - ey; k > 0; k -= 8) r = (r << uint(min(k, 8))) % my;
  if (r == 0u) return uintBitsToFloat(sx);
  // |result| = r * 2^(ey - 150) with r < 2^24: normalized, or a subnormal.
  const int p = findMSB(r);
  const int e = ey + p - 23;
  if (e >= 1) return uintBitsToFloat(sx | (uint(e) << 23u) | ((r << uint(23 - p)) & 0x7fffffu));
  return uintBitsToFloat(sx | (r << uint(ey - 1)));
}
// numpy's npy_remainder and npy_floor_divide (npy_divmod): the remainder has the divisor's sign;
// the quotient is (x - fmod(x, y)) / y fixed up and snapped to the nearest integer.
float mv_mod(float a, float b) {
  const float m = mv_fmod(a, b);
  if (mv_is_zero(b)) return m;
  if (mv_is_zero(m)) return mv_copysign_zero(b);
  return (b < 0.0) != (m < 0.0) ? m + b : m;
}
vec4 mv_mod(vec4 a, vec4 b) { return vec4(mv_mod(a.x, b.x), mv_mod(a.y, b.y), mv_mod(a.z, b.z), mv_mod(a.w, b.w)); }
float mv_floordiv(float a, float b) {
  if (mv_is_zero(b)) return a / b;
  const float m = mv_fmod(a, b);
  float div = MV_FDIV(a - m, b);
  if (!mv_is_zero(m) && (b < 0.0) != (m < 0.0)) div -= 1.0;
  if (mv_is_zero(div)) return mv_copysign_zero(MV_FDIV(a, b));
  float f = floor(div);
  if (div - f > 0.5) f += 1.0;
  return f;
}
vec4 mv_floordiv(vec4 a, vec4 b) { return vec4(mv_floordiv(a.x, b.x), mv_floordiv(a.y, b.y), mv_floordiv(a.z, b.z), mv_floordiv(a.w, b.w)); }
float mv_pow(float a, float b) {
  if (b == 0.0 || a == 1.0) return 1.0;
  if (isnan(a) || isnan(b)) return a + b;
  if (a == 0.0) {
    // C's pow: a zero base keeps its sign under an odd integer exponent (-0 ** -3 is -inf).
    const uint sign = floatBitsToUint(a) & (floor(b) == b && mod(b, 2.0) == 1.0 ? 0x80000000u : 0u);
    return uintBitsToFloat(sign | (b > 0.0 ? 0u : 0x7f800000u));
  }
  float m = pow(abs(a), b);
  if (a < 0.0) {
    if (floor(b) != b) return uintBitsToFloat(0x7fc00000u);
    if (mod(b, 2.0) == 1.0) m = -m;
  }
  return m;
}
vec4 mv_pow(vec4 a, vec4 b) { return vec4(mv_pow(a.x, b.x), mv_pow(a.y, b.y), mv_pow(a.z, b.z), mv_pow(a.w, b.w)); }
int mv_pow(int a, int b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) != 0 ? -1 : 1) : 0);
  int r = 1;
  for (int i = 0; i < 32 && b > 0; ++i) { if ((b & 1) != 0) r *= a; a *= a; b >>= 1; }
  return r;
}
ivec4 mv_pow(ivec4 a, ivec4 b) { return ivec4(mv_pow(a.x, b.x), mv_pow(a.y, b.y), mv_pow(a.z, b.z), mv_pow(a.w, b.w)); }
float mv_tanh(float x) {
  float ax = abs(x);
  if (ax < 0.3) { float x2 = x * x; return x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0))))); }
  float t = exp(-2.0 * ax);
  return sign(x) * (1.0 - t) / (1.0 + t);
}
vec4 mv_tanh(vec4 x) { return vec4(mv_tanh(x.x), mv_tanh(x.y), mv_tanh(x.z), mv_tanh(x.w)); }
)";

// Rounding a float32 to the nearest bfloat16 / float16 value (ties to even, overflow to inf, NaN
// kept: bfloat16 quiet, float16 with its payload's top bits as numpy), as a float32: integer
// arithmetic on the bits, the same as meshvk/dtype.hpp's host conversions, so the result does
// not depend on how the adapter converts or flushes.
const char* const kRound16Glsl = R"(
float mv_bf16(float x) {
  uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uintBitsToFloat((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16u) & 1u);
  return uintBitsToFloat(u & 0xffff0000u);
}
vec4 mv_bf16(vec4 x) { return vec4(mv_bf16(x.x), mv_bf16(x.y), mv_bf16(x.z), mv_bf16(x.w)); }
float mv_f16(float x) {
  const uint u = floatBitsToUint(x);
  const uint s = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    const uint payload = a & 0x007fe000u;
    return uintBitsToFloat(s | 0x7f800000u | (payload == 0u ? 0x2000u : payload));
  }
  if (a >= 0x477ff000u) return uintBitsToFloat(s | 0x7f800000u);
  if (a >= 0x38800000u) return uintBitsToFloat(s | ((a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u));
  const uint e = a >> 23u;
  if (e < 102u) return uintBitsToFloat(s);
  const uint m = (a & 0x7fffffu) | 0x800000u;
  const uint sh = 126u - e;
  uint q = m >> sh;
  const uint rem = m & ((1u << sh) - 1u), mid = 1u << (sh - 1u);  // `half` is reserved in GLSL
  if (rem > mid || (rem == mid && (q & 1u) != 0u)) q += 1u;
  if (q == 0u) return uintBitsToFloat(s);
  return uintBitsToFloat(s | (floatBitsToUint(float(q)) - (24u << 23u)));
}
vec4 mv_f16(vec4 x) { return vec4(mv_f16(x.x), mv_f16(x.y), mv_f16(x.z), mv_f16(x.w)); }
)";

}  // namespace meshvk::kernels

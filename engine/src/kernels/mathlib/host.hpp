#pragma once
// meshvk's float32 math library, host copy: the same source text the GPU kernels compile (the
// *.inc files next to this header), compiled as C++ so tests can compare the device's bits with
// the host's and sweep all 2^32 inputs quickly. The prelude below defines the few GLSL built-ins
// the library uses; `precise` (GLSL's NoContraction) is empty here, and translation units that
// include this header must be compiled with -ffp-contract=off so the host contracts nothing
// either (tests/CMakeLists.txt sets it for test_mathlib and the exhaustive sweep).
#include <bit>
#include <cmath>
#include <cstdint>

namespace meshvk::mathlib::host {

using uint = uint32_t;

inline uint floatBitsToUint(float x) {
  return std::bit_cast<uint32_t>(x);
}
inline int floatBitsToInt(float x) {
  return std::bit_cast<int32_t>(x);
}
inline float uintBitsToFloat(uint u) {
  return std::bit_cast<float>(u);
}
inline float intBitsToFloat(int i) {
  return std::bit_cast<float>(i);
}
// Vulkan lets fma round twice (lavapipe does), so the library never calls it: this hides libm's.
float fma(float, float, float) = delete;
inline float abs(float x) {
  return std::fabs(x);
}
inline int abs(int x) {
  return x < 0 ? -x : x;
}
inline float floor(float x) {
  return std::floor(x);
}
// GLSL's min/max: the results for NaN operands are undefined there, so the library never
// passes one.
inline float min(float a, float b) {
  return b < a ? b : a;
}
inline float max(float a, float b) {
  return a < b ? b : a;
}
inline int min(int a, int b) {
  return b < a ? b : a;
}
inline int max(int a, int b) {
  return a < b ? b : a;
}
inline bool isnan(float x) {
  return std::isnan(x);
}
inline bool isinf(float x) {
  return std::isinf(x);
}

// GLSL's vec2 as far as the library uses it: a float-float (double-float) value x + y.
struct vec2 {
  float x, y;
  vec2(float a, float b) : x(a), y(b) {}
};

// The float64 variants' built-ins (trig64.inc): a double's two words (x low, y high), the full
// 64-bit product of two uints, and the double overloads.
struct uvec2 {
  uint x, y;
  uvec2(uint a, uint b) : x(a), y(b) {}
};
inline double packDouble2x32(uvec2 v) {
  return std::bit_cast<double>(static_cast<uint64_t>(v.y) << 32 | v.x);
}
inline uvec2 unpackDouble2x32(double d) {
  const uint64_t u = std::bit_cast<uint64_t>(d);
  return uvec2(static_cast<uint>(u), static_cast<uint>(u >> 32));
}
inline void umulExtended(uint a, uint b, uint& msb, uint& lsb) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  msb = static_cast<uint>(p >> 32);
  lsb = static_cast<uint>(p);
}
double fma(double, double, double) = delete;
inline double abs(double x) {
  return std::fabs(x);
}

// The float64-dtype functions' built-ins (f64/*.inc): the double overloads, mixed ones for a
// float literal beside a double (GLSL converts it), and the carry of a 32-bit addition.
inline double floor(double x) {
  return std::floor(x);
}
inline bool isnan(double x) {
  return std::isnan(x);
}
inline bool isinf(double x) {
  return std::isinf(x);
}
inline double min(double a, double b) {
  return b < a ? b : a;
}
inline double max(double a, double b) {
  return a < b ? b : a;
}
inline double min(double a, float b) {
  return min(a, static_cast<double>(b));
}
inline double max(double a, float b) {
  return max(a, static_cast<double>(b));
}
inline double sqrt(double x) {
  return std::sqrt(x);
}
// A float64 variant's one rounding to float. The host's conversion follows MXCSR: with FTZ set
// (as the tests set it to mimic an adapter that flushes) it flushes, as that adapter's does.
inline float mvk_narrow64(double y) {
  return static_cast<float>(y);
}
inline uint uaddCarry(uint a, uint b, uint& carry) {
  const uint s = a + b;
  carry = s < a ? 1u : 0u;
  return s;
}

#define precise
#define MVK_MATH_SOURCE(...) __VA_ARGS__
#include "kernels/mathlib/functions.inc"
#undef MVK_MATH_SOURCE
#undef precise

}  // namespace meshvk::mathlib::host

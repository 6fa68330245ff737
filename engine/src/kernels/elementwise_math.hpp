#pragma once
// Which of the math library's functions a fused elementwise kernel calls, and how it divides
// (elementwise_math.cpp); elementwise.cpp writes the kernels.
#include <string>

#include "kernels/elementwise.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

// How a kernel computes library functions: MESHVK_FAST_MATH=1's built-ins, and whether its
// adapter takes the float64 variants.
struct MathMode {
  bool fast_math = false;
  bool float64 = false;
  bool flushes_subnormals = false;  // the adapter's float32 arithmetic (no DenormPreserve)
  bool div64 = false;               // float32 division through mvk_div64 (mathlib/div64.inc)
};

// The adapter's mode (MESHVK_FAST_MATH, MESHVK_MATHLIB_FLOAT64, MESHVK_DIV64 and its features).
MathMode math_mode(detail::RuntimeState& rt, const vk::Adapter& adapter);

// The math library's function for a float32 op (mathlib.hpp), or nullptr where the op is exact
// in GLSL or has no library function.
const char* library_function(EwOp op, bool float64);
// Whether the math library's float32 functions compute this dtype (float32 and the 16-bit
// formats through it).
bool is_library_float(DType dtype);
// Ops GLSL has no built-in for: the library's function even under MESHVK_FAST_MATH=1.
bool library_only(EwOp op);
// What the helpers' floor division divides with: declared here, defined with the library.
std::string division_prelude(MathMode math);
// The library functions a program calls, as GLSL (with mvk_narrow64 where float64 is on).
std::string library_functions(const EwProgram& p, MathMode math);
// Whether the program calls the float64 variant of sin, cos or tan.
bool calls_float64_trig(const EwProgram& p, MathMode math);

}  // namespace meshvk::kernels

#pragma once
// meshvk's own math library for the generated kernels (exp, log, tanh, ...): float32 functions,
// each within 1 ulp of the correctly rounded result over all float32 inputs, and the same bits on
// every adapter, because it uses only operations Vulkan requires to be correctly rounded (+, -, *,
// conversions, bit casts, compares, floor) under `precise` (SPIR-V NoContraction), never the
// driver's approximate built-ins. Not fma: Vulkan lets it round twice (lavapipe does, a GPU fuses),
// so exact products are Dekker's (mvk_two_prod); not /: Vulkan allows 2.5 ulp (mvk_div instead).
// And the float64 dtype's functions (mathlib/f64/, see the rule below), within 1 ulp of long
// double libm.
//
// How a function is written (rules for every file in mathlib/):
// - One file per public function, mathlib/<name>.inc, holding `MVK_MATH_SOURCE( ... )` around the
//   source text: GLSL and C++ at once. mathlib.cpp stringizes the text into the kernels' GLSL;
//   mathlib/host.hpp compiles the same text as C++ (tests compare both copies bit for bit and
//   sweep the host copy over all 2^32 inputs). Comments inside are fine (the preprocessor drops
//   them); preprocessor directives, hex float literals, arrays, `out` parameters and
//   unbalanced quotes are not.
// - Only: float, int, uint, bool, vec2 (as a float-float hi + lo, built with vec2(a, b) and read
//   with .x / .y), literals like 1.5f, 3, 0x7f800000u, and + - * (no /, no fma), floatBitsToUint,
//   uintBitsToFloat, floatBitsToInt, intBitsToFloat, abs, floor, min, max (never with a NaN
//   operand), isnan, isinf, ternaries, if/for. No sqrt, exp, ldexp ... built-ins (inexact or
//   undefined at the edges). common.inc has the float-float helpers (mvk_two_sum, mvk_two_prod,
//   mvk_div, mvk_scale2).
// - Float64 variants (mvk_<name>64, mvk_atan2_64 for atan2, for adapters with shaderFloat64; elementwise_math.cpp picks them
//   per adapter, runtime_state.hpp's mathlib_float64) may also use double with + - * , abs,
//   comparisons and conversions (double(float), double(int), float(double): Vulkan rounds
//   conversions correctly, as it does + - *), packDouble2x32 / unpackDouble2x32 with a uvec2
//   (x the low word, y the high one), and umulExtended(a, b, msb, lsb) into uint locals
//   declared before. Double constants: a float literal where the value is a float exactly (it
//   converts exactly in both languages), else mvk_f64(high word, low word) of its bits (GLSL's
//   1.5lf suffix is not C++). No 64-bit integers (shaderInt64 is not required), no double
//   built-ins beyond abs, and no subnormal doubles in the results that are used (drivers may
//   flush them). Same bits on every adapter that runs the variant, and the host copy's.
// - Float64-dtype functions (mathlib/f64/*.inc, mvk_<name>_f64(double), for float64 elements;
//   elementwise.cpp's library_function_f64) follow the float64 variants' rules with these
//   additions, since their results are doubles that numpy users compare in the last bit:
//   double-double (mvk_dd) helpers in f64/dd.inc; local uint arrays indexed by loop counters
//   that unroll (never by a run-time value: lavapipe turns that into a ladder per access);
//   floor, sqrt (only where a Newton step from the exact remainder corrects it) and min / max
//   on doubles; uaddCarry(a, b, carry) like umulExtended; `/` only where its rounding cannot
//   reach the result's ulp (each use says why); subnormal double results (float64 arrays hold
//   them). One file per family (exp, log, trig, ...), registered as a helper entry in
//   mathlib.cpp with kF64Functions naming the public functions it defines; tests in
//   tests/test_mathlib_f64dtype.cpp (host copy against long double libm, kernels bit for bit).
// - Every float (and double) local is declared `precise` so no driver contracts a * b + c into
//   an fma or re-associates; int overflow and out-of-range float-to-int conversions are avoided
//   (undefined in C++).
// - Public functions are named mvk_<name>(float) (or (float, float)) and handle NaN, +-inf, +-0
//   and subnormal inputs like C's libm; helpers shared by several files live in common.inc.
// - Register a new file in mathlib/functions.inc (host, dependency order) and in the table in
//   mathlib.cpp (its GLSL dependencies); map its EwOp in elementwise_math.cpp (library_function);
//   add it with its libm reference to unary_functions() in tests/support/mathlib_check.hpp and
//   its public op to the tables in tests/test_mathlib.cpp and tests/exhaustive/. A float64
//   variant goes into its function's unary_functions() entry (host_float64) and
//   tests/test_mathlib_float64.cpp (or test_mathlib_exp64.cpp, test_mathlib_log64.cpp beside
//   their kin; arctan2's: kAtan2Variants in tests/test_mathlib_trig.cpp and --float64 arctan2 in
//   tests/exhaustive/).
#include <string>
#include <vector>

namespace meshvk::kernels::mathlib {

// The GLSL definitions of the named library functions ("mvk_exp", ...) and of everything they
// call, each once and in dependency order, plus vec4 overloads of the named ones.
std::string glsl_functions(const std::vector<std::string>& names);

}  // namespace meshvk::kernels::mathlib

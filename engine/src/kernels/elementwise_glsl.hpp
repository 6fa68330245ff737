#pragma once
// GLSL text the generated elementwise kernels (and the reductions computing their programs) call.

namespace meshvk::kernels {

// Helpers with numpy's semantics where GLSL's differ: NaN-propagating max and min, the sign of
// NaN, floor division and remainder of integers and floats, exact fmod, pow of negative bases and
// signed zeros, an accurate tanh; scalar and vec4 forms.
extern const char* const kEwHelpersGlsl;

}  // namespace meshvk::kernels

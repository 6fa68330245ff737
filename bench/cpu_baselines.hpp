#pragma once
// The CPU loops meshvk-bench compares against, in their own translation unit built with
// -O3 -march=native -ffast-math (see CMakeLists.txt) so the compiler vectorizes them (sinf through
// glibc's libmvec). Each splits its range over `threads` threads.
#include <cstddef>

namespace meshvk::bench {

// y[i] = 2 * sin(x[i]) + 1
void cpu_sin_affine(const float* x, float* y, size_t n, int threads);
// The sum of x[0..n), accumulated in float32 lanes.
float cpu_sum(const float* x, size_t n, int threads);
// memcpy of `bytes`, split over threads.
void cpu_copy(const void* from, void* to, size_t bytes, int threads);

}  // namespace meshvk::bench

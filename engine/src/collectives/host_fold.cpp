#include "collectives/host_fold.hpp"

#include <cstring>

#include "meshvk/error.hpp"

namespace meshvk::collectives {

namespace {

// Element by element through memcpy (the pieces lie in shared memory and device memory at any
// 4-byte offset), in bits, so that NaN payloads are chosen explicitly; compiled for AVX-512 and
// AVX2 too, as the copies beside it are (glibc's memcpy picks them at run time).
// Not under ThreadSanitizer: the clones' resolvers run while the program is relocated, before
// its runtime is up, and the instrumented resolver crashes every test binary at start.
#if defined(__SANITIZE_THREAD__)
#define MESHVK_FOLD_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MESHVK_FOLD_CLONES
#endif
#endif
#ifndef MESHVK_FOLD_CLONES
#define MESHVK_FOLD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

uint32_t load(const uint8_t* p, uint64_t i) {
  uint32_t u;
  std::memcpy(&u, p + i * 4, 4);
  return u;
}
void store(uint8_t* p, uint64_t i, uint32_t u) { std::memcpy(p + i * 4, &u, 4); }
float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t as_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
bool nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
constexpr uint32_t kQuiet = 0x00400000u;

MESHVK_FOLD_CLONES
void sum_f32(const uint8_t* a, const uint8_t* b, uint8_t* o, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t x = load(a, i), y = load(b, i);
    const uint32_t s = as_bits(as_float(x) + as_float(y));
    store(o, i, nan_bits(x) && nan_bits(y) ? (y | kQuiet) : s);
  }
}

// max (greater) or min: the first where it wins strictly, else the second; NaN first. Inlined
// into each compiled variant below (clang compiles no template for several targets).
template <bool kMax>
inline __attribute__((always_inline)) void extreme_f32(const uint8_t* a, const uint8_t* b,
                                                       uint8_t* o, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t x = load(a, i), y = load(b, i);
    const float fx = as_float(x), fy = as_float(y);
    const bool first = kMax ? fx > fy : fx < fy;
    const uint32_t r = nan_bits(x) ? (x | kQuiet) : nan_bits(y) ? (y | kQuiet) : first ? x : y;
    store(o, i, r);
  }
}
MESHVK_FOLD_CLONES
void max_f32(const uint8_t* a, const uint8_t* b, uint8_t* o, uint64_t n) {
  extreme_f32<true>(a, b, o, n);
}
MESHVK_FOLD_CLONES
void min_f32(const uint8_t* a, const uint8_t* b, uint8_t* o, uint64_t n) {
  extreme_f32<false>(a, b, o, n);
}

// Integer folds (the int32 / uint32 collectives): the plain loop.
template <typename T, typename Op>
void fold_int(const uint8_t* a, const uint8_t* b, uint8_t* o, uint64_t n, Op op) {
  for (uint64_t i = 0; i < n; ++i) {
    T x, y;
    std::memcpy(&x, a + i * 4, 4);
    std::memcpy(&y, b + i * 4, 4);
    const T r = op(x, y);
    std::memcpy(o + i * 4, &r, 4);
  }
}

}  // namespace

void host_fold(const void* first, const void* second, void* out, uint64_t count, DType dtype,
               Reduction op) {
  const auto* a = static_cast<const uint8_t*>(first);
  const auto* b = static_cast<const uint8_t*>(second);
  auto* o = static_cast<uint8_t*>(out);
  if (dtype == DType::float32) {
    if (op == Reduction::sum) return sum_f32(a, b, o, count);
    return op == Reduction::max ? max_f32(a, b, o, count) : min_f32(a, b, o, count);
  }
  if (dtype == DType::int32 || dtype == DType::uint32) {
    // Sums wrap alike in both; max and min compare as the dtype's values.
    if (op == Reduction::sum)
      return fold_int<uint32_t>(a, b, o, count, [](uint32_t x, uint32_t y) { return x + y; });
    if (dtype == DType::int32)
      return op == Reduction::max
                 ? fold_int<int32_t>(a, b, o, count, [](int32_t x, int32_t y) { return x > y ? x : y; })
                 : fold_int<int32_t>(a, b, o, count, [](int32_t x, int32_t y) { return x < y ? x : y; });
    return op == Reduction::max
               ? fold_int<uint32_t>(a, b, o, count, [](uint32_t x, uint32_t y) { return x > y ? x : y; })
               : fold_int<uint32_t>(a, b, o, count, [](uint32_t x, uint32_t y) { return x < y ? x : y; });
  }
  throw Error("internal: a host fold of a dtype the fold kernel does not take");
}

}  // namespace meshvk::collectives

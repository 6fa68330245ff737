#pragma once
// The SIMD width a CPU adapter runs shaders at, for kernels laid out as one SIMD row per
// workgroup (the blocked matmul and its packs).
#include <cstdint>

#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

struct Simd {
  // Invocations per SIMD row: lavapipe's subgroup size, 8 with 256-bit vectors and 16 with
  // LP_NATIVE_VECTOR_WIDTH=512 (docs/LAVAPIPE.md); 8 where the adapter reports nothing usable.
  uint32_t lanes = 8;
  // Whether subgroupShuffle works in compute shaders and a workgroup of `lanes` invocations is
  // exactly one subgroup.
  bool shuffle = false;
};

Simd simd_of(detail::RuntimeState& rt);

}  // namespace meshvk::kernels

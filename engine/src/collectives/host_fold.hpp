#pragma once
// The fold of two pieces on the host, with the bits the fold kernel gives on lavapipe
// (peer_reduce.cpp), for transfers between processes that the host runs
// (RuntimeState::host_transfers).
#include <cstdint>

#include "collectives/collectives.hpp"

namespace meshvk::collectives {

// out[i] = op(first[i], second[i]) for `count` elements of float32, int32 or uint32 (the fold
// kernel's dtypes). float32 follows the kernel as lavapipe compiles it: sum is IEEE addition
// with denormals kept; max and min return the second operand when neither is greater (so
// max(-0, +0) is +0 and max(+0, -0) is -0) and a quiet NaN when either is NaN; where both are
// NaN, sum keeps the second's payload, max and min the first's. int32 sums wrap.
void host_fold(const void* first, const void* second, void* out, uint64_t count, DType dtype,
               Reduction op);

}  // namespace meshvk::collectives

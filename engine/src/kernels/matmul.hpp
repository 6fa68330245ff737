#pragma once
// Matrix multiplication kernels, chosen per adapter: register-blocked kernels reading through
// texel buffers on lavapipe (docs/LAVAPIPE.md), shared-memory tiles (and cooperative
// matrices where the adapter has them) on GPUs.
#include <cstdint>
#include <memory>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

// C[i] = op(A[i]) @ op(B[i]) for i < batch, all row-major and contiguous:
//   A[i] is m x k (k x m when trans_a), B[i] is k x n (n x k when trans_b), C[i] is m x n.
// A batch stride of 0 reuses one matrix for every batch entry (broadcast).
struct MatmulShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t a_batch_stride = 0, b_batch_stride = 0;  // in elements; C's is m * n
  DType dtype = DType::float32;                    // float32 or int32; C has the same dtype
};

// Records C = A @ B on the recording's device; A, B and C are device buffers of that device
// (offsets in elements). float32 accumulates in float32, int32 in int32 (wrapping). `packed_b`,
// where given, is B as record_pack_b packed it for this shape, read instead of packing B again.
void record_matmul(detail::RuntimeState& rt, detail::Recording& rec, const MatmulShape& shape,
                   const detail::DeviceBuffer& a, const detail::DeviceBuffer& b,
                   const detail::DeviceBuffer& c,
                   const std::shared_ptr<detail::DeviceBuffer>& packed_b = nullptr);

// B packed as the adapter's matmul kernel reads it for `shape`, in a new buffer of the
// recording's device; null where that kernel reads B as stored (nothing to pack), or the
// product is empty. Devices of one VkDevice multiplying by the same B (a replicated weight) pack
// it once and copy the pack (graph/linalg_ops.cpp).
std::shared_ptr<detail::DeviceBuffer> record_pack_b(detail::RuntimeState& rt, detail::Recording& rec,
                                                    const MatmulShape& shape, const detail::DeviceBuffer& b);

}  // namespace meshvk::kernels

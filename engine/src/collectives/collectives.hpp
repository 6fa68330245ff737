#pragma once
// Collectives within one group of virtual devices, on device memory: data moves between the
// members' buffers with copy commands and is combined by reduction kernels; each member waits,
// through timeline semaphores, only for the peers it reads from. Buffers are given in rank order,
// one per member, each on the member's device; sizes are in elements of the dtype given
// (dtype_size bytes: 2 for bfloat16 and float16, whose byte offsets may be only 2-aligned: they
// move with copy commands, which allow that).
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::collectives {

using Buffers = std::vector<std::shared_ptr<detail::DeviceBuffer>>;

enum class Algorithm { one_shot, ring };
enum class Reduction { sum, max, min };

// One-shot below 256 KiB per member (latency), ring above (bandwidth); MESHVK_COLLECTIVE_ALGO
// = one_shot | ring forces one (with a _staged suffix, or `staged` alone, it also forces the
// staged path where the peer-read tier would apply: see peer_reduce.hpp).
Algorithm choose_algorithm(uint64_t bytes);
const char* algorithm_name(Algorithm a);

// Every member ends with the elementwise reduction of all members' `count` elements. The
// reduction runs in rank order on every member, so all members hold identical bits. bfloat16 and
// float16 are reduced as float32 words (each step rounded to the format) between a widening and a
// narrowing pass: the reduction kernels and the tiers' fold paths take 32-bit words.
Buffers all_reduce(detail::RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype, Reduction op,
                   Algorithm algorithm);
// Inputs hold n chunks of `chunk` elements; member r ends with the reduction of chunk r.
Buffers reduce_scatter(detail::RuntimeState& rt, const Buffers& in, uint64_t chunk, DType dtype, Reduction op,
                       Algorithm algorithm);
// Member r's `chunk` elements land at r * chunk in every member's output.
Buffers all_gather(detail::RuntimeState& rt, const Buffers& in, uint64_t chunk, DType dtype,
                   Algorithm algorithm);
// Of 32-bit elements (any 4-byte dtype moves alike).
inline Buffers all_gather(detail::RuntimeState& rt, const Buffers& in, uint64_t chunk, Algorithm algorithm) {
  return all_gather(rt, in, chunk, DType::float32, algorithm);
}
// Inputs hold n chunks; member r's output holds chunk r of every member, in rank order.
Buffers all_to_all(detail::RuntimeState& rt, const Buffers& in, uint64_t chunk, DType dtype);
// out[dst] = in[src] for each (src, dst) pair; members nobody sends to get zeros.
Buffers permute(detail::RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype,
                const std::vector<std::pair<int, int>>& pairs);
// Every member gets member `source`'s elements.
Buffers broadcast(detail::RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype, int source);

}  // namespace meshvk::collectives

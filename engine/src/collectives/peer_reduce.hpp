#pragma once
// The peer-read tier of the collectives' transport: when every member of a group is a virtual
// device of one VkDevice, their buffers are one device's memory, so a reduction kernel on member r
// binds its peers' buffers directly and folds them (as NCCL's P2P read does over NVLink): no
// staging copies, no scratch buffers, one kernel per member. Each kernel folds in exactly the
// order of the algorithm it stands in for (one-shot: rank order; ring: the order the ring's steps
// would have added), so the bits are those of the staged path.
//
// Every function returns nullopt where the tier does not apply (members on different VkDevices,
// MESHVK_COLLECTIVE_ALGO=..._staged, or a piece the kernels cannot bind); the caller then takes
// the staged path.
#include <cstdint>
#include <optional>
#include <vector>

#include "collectives/collectives.hpp"

namespace meshvk::collectives {

// What MESHVK_COLLECTIVE_ALGO asks for: one_shot | ring | staged | one_shot_staged | ring_staged.
// An algorithm (none: by size), and whether the staged path (copies into scratch buffers, then a
// kernel over them) is forced where the peer-read tier would apply. Anything else is an Error.
struct CollectiveChoice {
  std::optional<Algorithm> algorithm;
  bool staged = false;
};
CollectiveChoice collective_choice_from_env();

// Whether a kernel recorded for virtual device `reader` may bind `owner`'s memory: both are slices
// of one VkDevice (today every device of a runtime is).
bool peer_readable(const detail::RuntimeState& rt, int reader, int owner);

// Whether the fold kernel below folds `dtype` (float32, int32, uint32).
bool fold_kernel_supports(DType dtype);

// out[out_start..] = the fold of `count` elements of inputs[i] from starts[i], in rank order
// (op(op(x0, x1), x2) ...), recorded into `rec` (on out's device, which must be able to bind every
// input) with this tier's fold kernel: the elementwise kernels' bits, read 3.5x faster on
// lavapipe, so the staged algorithms fold with it too. At most 16 inputs. False, with nothing
// recorded, for a dtype the kernel does not fold (the caller uses the elementwise kernels).
bool record_rank_fold(detail::RuntimeState& rt, detail::Recording& rec,
                      const std::vector<const detail::DeviceBuffer*>& inputs,
                      const std::vector<uint64_t>& starts, uint64_t count, DType dtype,
                      Reduction op, const detail::DeviceBuffer& out, uint64_t out_start);

// Memory a fold reads that belongs to no DeviceBuffer: `bytes` at `offset` of `buffer` (a ring of
// host memory the recording's VkDevice imports).
struct FoldInput {
  VkBuffer buffer;
  uint64_t offset;
  uint64_t bytes;
};
// out[out_start..] = op(a[a_start..], b[0..]) over `count` elements (op(b, a) where b_first)
// with the same kernel and bits as record_rank_fold; false, with nothing recorded, for a dtype
// it does not fold.
bool record_pair_fold(detail::RuntimeState& rt, detail::Recording& rec,
                      const detail::DeviceBuffer& a, uint64_t a_start, const FoldInput& b,
                      uint64_t count, DType dtype, Reduction op, const detail::DeviceBuffer& out,
                      uint64_t out_start, bool b_first = false);

// One-shot: every member folds all members' `count` elements in rank order.
std::optional<Buffers> peer_one_shot_all_reduce(detail::RuntimeState& rt, const Buffers& in,
                                                uint64_t count, DType dtype, Reduction op);
// Ring over chunks [bounds[c], bounds[c+1]): chunk c is folded on member c in the ring's order,
// then every member copies the chunks it does not own from their owners.
std::optional<Buffers> peer_ring_all_reduce(detail::RuntimeState& rt, const Buffers& in,
                                            const std::vector<uint64_t>& bounds, DType dtype,
                                            Reduction op);
// Member r folds chunk r (`chunk` elements at r * chunk) of every member, in rank order.
std::optional<Buffers> peer_one_shot_reduce_scatter(detail::RuntimeState& rt, const Buffers& in,
                                                    uint64_t chunk, DType dtype, Reduction op);
// Member r folds chunk r of every member in the ring's order.
std::optional<Buffers> peer_ring_reduce_scatter(detail::RuntimeState& rt, const Buffers& in,
                                                uint64_t chunk, DType dtype, Reduction op);

}  // namespace meshvk::collectives

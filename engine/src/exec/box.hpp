#pragma once
// Index arithmetic for moving boxes of row-major arrays between pieces that each hold a box of
// the same global array.
#include <cstdint>
#include <functional>
#include <optional>

#include "meshvk/sharding.hpp"

namespace meshvk::exec {

// The common part of two boxes, if any (a box of an empty array is still a box).
std::optional<Index> intersect(const Index& a, const Index& b);

// Calls `run(src_offset, dst_offset, length)` (in elements) for each contiguous run of `box`,
// where the source buffer holds global box `src` and the destination holds `dst`, both
// row-major. Runs are as long as both layouts allow.
void for_each_run(const Index& box, const Index& src, const Index& dst,
                  const std::function<void(uint64_t, uint64_t, uint64_t)>& run);

// The whole of an array of `shape`.
Index whole(const Shape& shape);

}  // namespace meshvk::exec

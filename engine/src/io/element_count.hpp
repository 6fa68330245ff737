#pragma once
// Overflow-checked element counts for shapes that come from outside (files, callers), shared by
// the .npy reader/writer and the array printer.
#include <cstdint>
#include <optional>

#include "meshvk/dtype.hpp"

namespace meshvk::io {

// numpy's limit on the number of dimensions (NPY_MAXDIMS in numpy 2).
constexpr size_t kMaxRank = 64;

// The number of elements of `shape`, or nullopt when a dimension is negative or the running
// product overflows int64. The product is taken in the same order as shape_size(), so a shape
// accepted here is safe to pass to shape_size().
inline std::optional<int64_t> checked_element_count(const Shape& shape) {
  int64_t count = 1;
  for (const int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) return std::nullopt;
  }
  return count;
}

}  // namespace meshvk::io

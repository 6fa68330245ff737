#pragma once
// Arrays of any host element type for the dtype tests (test_dtypes_wide*.cpp).
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "meshvk/meshvk.hpp"

namespace typed_arrays {

constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// v as an Array of T's dtype, of `shape` (default: one dimension of v's length).
template <class T>
meshvk::Array arr(const std::vector<T>& v, meshvk::Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return meshvk::array(std::span<const T>(v), shape);
}

}  // namespace typed_arrays

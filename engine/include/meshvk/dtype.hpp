#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshvk {

// bool is stored as one 32-bit word per element (0 or 1), like the other two.
enum class DType { float32, int32, bool_ };

std::string_view dtype_name(DType dtype);  // "float32", "int32", "bool"
constexpr size_t dtype_size(DType) { return 4; }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::float32; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::int32; }

// A global or per-shard array shape, row-major.
using Shape = std::vector<int64_t>;

int64_t shape_size(const Shape& shape);          // product of the dimensions (1 for rank 0)
std::string shape_to_string(const Shape& shape);  // "(4, 8)", "(32,)", "()" as numpy prints

}  // namespace meshvk

#include "meshvk/dtype.hpp"

#include "meshvk/error.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::int32:
      return "int32";
    case DType::bool_:
      return "bool";
    case DType::uint32:
      return "uint32";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float16:
      return "float16";
    case DType::int8:
      return "int8";
    case DType::uint8:
      return "uint8";
    case DType::int64:
      return "int64";
    case DType::float64:
      return "float64";
  }
  return "unknown";
}

int64_t shape_size(const Shape& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

int64_t checked_size(const Shape& shape, std::string_view op) {
  int64_t count = 1, bytes = static_cast<int64_t>(dtype_size(DType::float32));
  for (const int64_t d : shape) {
    if (d < 0)
      throw Error(std::string(op) + ": shape " + shape_to_string(shape) +
                  " has a negative dimension; sizes must be >= 0");
    if (d == 0) {
      count = 0;
      continue;
    }
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw Error(
          std::string(op) + ": shape " + shape_to_string(shape) +
          " is too large: its size in bytes (at 4 bytes per element, the least meshvk sizes for) exceeds 2^63 - 1, more than any "
          "device can hold");
    count *= d;  // no overflow: |count| <= bytes / 4
  }
  return count;
}

int64_t checked_add(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw Error(std::string(op) + ": " + std::string(what) + " " + std::to_string(a) + " + " +
                std::to_string(b) + " overflows int64");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw Error(std::string(op) + ": " + std::string(what) + " " + std::to_string(a) + " * " +
                std::to_string(b) + " overflows int64");
  return r;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace meshvk

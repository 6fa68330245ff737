// The elements of a .npy file converted to the dtypes meshvk holds. The rule, also in array.hpp
// and the README:
//   '<f4' float32, '<f8' float64, '<i4' int32, '<i8' int64, '|i1' int8, '<u4' uint32, '|u1'
//   uint8, '|b1' bool: loaded as they are;
//   '<f2' -> float16 (held as the float32 words of its values, as graph/array.cpp expects);
//   '<i2' and '<u2' -> int32 (meshvk has no int16 or uint16; every value fits);
//   '<u8' -> uint32 (meshvk has no uint64; an unsigned type stays unsigned): a value past uint32
//   is an Error naming the first such value and its flat index in the loaded (C-order) array.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/host_array.hpp"
#include "io/npy_format.hpp"
#include "meshvk/error.hpp"

namespace meshvk::io::npy {
namespace {

// A half (IEEE binary16) to float: exact.
float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f)  // inf and nan, payload kept
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
  // Subnormal: normalize. The value is mantissa * 2^-24.
  int e = 113;  // the float exponent field of 2^-14
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(e) << 23) |
                              ((mantissa & 0x3ffu) << 13));
}

[[noreturn]] void integer_out_of_range(const std::string& value, const Descr& descr, int64_t index,
                                       const std::string& target, const std::string& range,
                                       const std::string& what) {
  fail_load(what, "value " + value + " at flat index " + std::to_string(index) + " of the '" +
                      descr.text + "' data does not fit in " + target + " (" + range +
                      "), the dtype meshvk loads '" + descr.text +
                      "' as; convert the array in numpy first (e.g. to float32)");
}

// One element as loaded_dtype(descr) holds it on the host (host_element_bytes: float16 as a
// float32 word); `index` is its C-order flat index.
std::array<std::byte, 8> convert(const std::byte* p, const Descr& descr, int64_t index,
                                 const std::string& what) {
  std::array<std::byte, 8> out{};
  const auto put = [&out](auto value) {
    std::memcpy(out.data(), &value, sizeof value);
    return out;
  };
  const uint64_t bits = read_uint(p, descr.size, descr.big_endian);
  switch (descr.kind) {
    case ElementKind::floating:
      if (descr.size == 2) return put(half_to_float(static_cast<uint16_t>(bits)));
      if (descr.size == 4) return put(std::bit_cast<float>(static_cast<uint32_t>(bits)));
      return put(std::bit_cast<double>(bits));
    case ElementKind::boolean:
      return put(int32_t{bits != 0});
    case ElementKind::unsigned_int: {
      if (descr.size == 1) return put(static_cast<uint8_t>(bits));
      if (descr.size >= 4) {  // uint32
        constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
        if (bits > kMax) {
          integer_out_of_range(std::to_string(bits), descr, index, "uint32",
                               "0 to " + std::to_string(kMax), what);
        }
        return put(static_cast<uint32_t>(bits));
      }
      return put(static_cast<int32_t>(bits));  // '<u2': every value fits int32
    }
    case ElementKind::signed_int: {
      // Sign-extend from the element's width.
      const unsigned shift = 64 - 8 * static_cast<unsigned>(descr.size);
      const int64_t value = static_cast<int64_t>(bits << shift) >> shift;
      if (descr.size == 1) return put(static_cast<int8_t>(value));
      if (descr.size == 8) return put(value);
      return put(static_cast<int32_t>(value));  // '<i2' and '<i4'
    }
  }
  fail_load(what, "unsupported dtype descr '" + descr.text + "'");
}

}  // namespace

DType loaded_dtype(const Descr& descr) {
  switch (descr.kind) {
    case ElementKind::floating:
      return descr.size == 2 ? DType::float16 : descr.size == 8 ? DType::float64 : DType::float32;
    case ElementKind::boolean:
      return DType::bool_;
    case ElementKind::unsigned_int:
      return descr.size == 1 ? DType::uint8 : descr.size >= 4 ? DType::uint32 : DType::int32;
    case ElementKind::signed_int:
      return descr.size == 1 ? DType::int8 : descr.size == 8 ? DType::int64 : DType::int32;
  }
  return DType::int32;
}

std::vector<std::byte> convert_elements(std::span<const std::byte> data, const Header& header,
                                        int64_t count, const std::string& what) {
  const size_t es = host_element_bytes(loaded_dtype(header.descr));
  std::vector<std::byte> out(static_cast<size_t>(count) * es);
  const Shape& shape = header.shape;
  const size_t rank = shape.size();
  // Row-major strides of the destination, and the source element's index in Fortran order
  // (axis 0 fastest) when the file is column-major.
  std::vector<int64_t> c_strides(rank, 1);
  for (size_t axis = rank; axis-- > 1;) c_strides[axis - 1] = c_strides[axis] * shape[axis];
  std::vector<int64_t> fortran_index(rank, 0);
  int64_t dest = 0;

  for (int64_t i = 0; i < count; ++i) {
    const std::byte* src = data.data() + static_cast<size_t>(i) * header.descr.size;
    const int64_t target = header.fortran_order ? dest : i;
    const std::array<std::byte, 8> value = convert(src, header.descr, target, what);
    std::memcpy(out.data() + static_cast<size_t>(target) * es, value.data(), es);

    if (header.fortran_order) {
      for (size_t axis = 0; axis < rank; ++axis) {
        dest += c_strides[axis];
        if (++fortran_index[axis] < shape[axis]) break;
        dest -= shape[axis] * c_strides[axis];
        fortran_index[axis] = 0;
      }
    }
  }
  return out;
}

}  // namespace meshvk::io::npy

// The elements of a .npy file converted to the 32-bit dtypes meshvk holds. The rule, also in
// array.hpp and the README:
//   '<f4' float32, '<i4' int32, '<u4' uint32, '|b1' bool: loaded as they are;
//   '<f2' -> float16 (held as the float32 words of its values, as the device stores it);
//   '<f8' -> float32: rounded to nearest as numpy's astype(float32); a finite value beyond
//          float32's range (which astype would turn into inf) is an Error; inf and nan stay;
//   '|i1', '<i2', '<i8' -> int32, and '|u1', '<u2' -> int32 (every value of those fits);
//   '<u8' -> uint32 (an unsigned type stays unsigned);
//   an 8-byte integer outside the target's range is an Error.
// Errors name the first value that does not fit and its flat index in the loaded (C-order) array.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/npy_format.hpp"
#include "meshvk/error.hpp"

namespace meshvk::io::npy {
namespace {

std::string double_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

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

// A double to float as numpy's astype(float32) rounds (to nearest), without the undefined
// behaviour C++ gives out-of-range conversions. A finite value that would round to infinity
// is an Error: it has no float32.
float narrow_to_float(double value, const Descr& descr, int64_t index, const std::string& what) {
  // Doubles at or beyond FLT_MAX + half an ulp round to infinity.
  constexpr double kOverflow = 0x1.ffffffp127;
  constexpr float kMax = std::numeric_limits<float>::max();
  if (std::isfinite(value) && std::fabs(value) >= kOverflow) {
    fail_load(what, "value " + double_text(value) + " at flat index " + std::to_string(index) +
                        " of the '" + descr.text +
                        "' data is beyond float32's range (largest finite magnitude " +
                        double_text(kMax) +
                        "; numpy's astype(float32) would make it inf); scale the data, or save "
                        "it as float32 if inf is meant");
  }
  // Between FLT_MAX and the overflow point the nearest float is FLT_MAX itself.
  if (std::isfinite(value) && std::fabs(value) > kMax) return value > 0 ? kMax : -kMax;
  return static_cast<float>(value);
}

[[noreturn]] void integer_out_of_range(const std::string& value, const Descr& descr, int64_t index,
                                       const std::string& target, const std::string& range,
                                       const std::string& what) {
  fail_load(what, "value " + value + " at flat index " + std::to_string(index) + " of the '" +
                      descr.text + "' data does not fit in " + target + " (" + range +
                      "), the dtype meshvk loads '" + descr.text +
                      "' as; convert the array in numpy first (e.g. to float32)");
}

// One element as the 4-byte word of loaded_dtype(descr); `index` is its C-order flat index.
std::array<std::byte, 4> convert(const std::byte* p, const Descr& descr, int64_t index,
                                 const std::string& what) {
  const uint64_t bits = read_uint(p, descr.size, descr.big_endian);
  switch (descr.kind) {
    case ElementKind::floating: {
      float value = 0;
      if (descr.size == 2) {
        value = half_to_float(static_cast<uint16_t>(bits));
      } else if (descr.size == 4) {
        value = std::bit_cast<float>(static_cast<uint32_t>(bits));
      } else {
        value = narrow_to_float(std::bit_cast<double>(bits), descr, index, what);
      }
      return std::bit_cast<std::array<std::byte, 4>>(value);
    }
    case ElementKind::boolean:
      return std::bit_cast<std::array<std::byte, 4>>(int32_t{bits != 0});
    case ElementKind::unsigned_int: {
      if (descr.size >= 4) {  // uint32
        constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
        if (bits > kMax) {
          integer_out_of_range(std::to_string(bits), descr, index, "uint32",
                               "0 to " + std::to_string(kMax), what);
        }
        return std::bit_cast<std::array<std::byte, 4>>(static_cast<uint32_t>(bits));
      }
      // One and two bytes always fit int32.
      return std::bit_cast<std::array<std::byte, 4>>(static_cast<int32_t>(bits));
    }
    case ElementKind::signed_int: {
      // Sign-extend from the element's width.
      const unsigned shift = 64 - 8 * static_cast<unsigned>(descr.size);
      const int64_t value = static_cast<int64_t>(bits << shift) >> shift;
      constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
      constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
      if (value < kMin || value > kMax) {
        integer_out_of_range(std::to_string(value), descr, index, "int32",
                             std::to_string(kMin) + " to " + std::to_string(kMax), what);
      }
      return std::bit_cast<std::array<std::byte, 4>>(static_cast<int32_t>(value));
    }
  }
  fail_load(what, "unsupported dtype descr '" + descr.text + "'");
}

}  // namespace

DType loaded_dtype(const Descr& descr) {
  switch (descr.kind) {
    case ElementKind::floating:
      return descr.size == 2 ? DType::float16 : DType::float32;
    case ElementKind::boolean:
      return DType::bool_;
    case ElementKind::unsigned_int:
      return descr.size >= 4 ? DType::uint32 : DType::int32;
    case ElementKind::signed_int:
      return DType::int32;
  }
  return DType::int32;
}

std::vector<std::byte> convert_elements(std::span<const std::byte> data, const Header& header,
                                        int64_t count, const std::string& what) {
  std::vector<std::byte> out(static_cast<size_t>(count) * kLoadedElementBytes);
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
    const std::array<std::byte, 4> value = convert(src, header.descr, target, what);
    std::memcpy(out.data() + static_cast<size_t>(target) * kLoadedElementBytes, value.data(), 4);

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

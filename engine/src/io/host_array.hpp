#pragma once
// Host-side array formats: numpy's .npy files and numpy-style printing. A leaf layer: it knows
// shapes and dtypes, nothing about devices.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "meshvk/dtype.hpp"

namespace meshvk::io {

// Row-major values of one array on the host.
struct HostArray {
  Shape shape;
  DType dtype = DType::float32;
  // shape_size(shape) * host_element_bytes(dtype) bytes: bfloat16 and float16 as the float32
  // bits of their values (the device stores those in 2 bytes; graph/array.cpp converts), every
  // other dtype as stored (1 byte for int8 and uint8, 8 for int64 and float64, else 4).
  std::vector<std::byte> bytes;
};

constexpr size_t host_element_bytes(DType dtype) { return is_16bit(dtype) ? 4 : dtype_size(dtype); }

// Parses the bytes of a .npy file; `what` names the source in error messages. Throws Error for
// anything malformed or unsupported, saying what would be valid.
HostArray parse_npy(std::span<const std::byte> file, const std::string& what);
HostArray read_npy(const std::string& path);
// The bytes of a version 1.0 .npy file for `array`.
std::vector<std::byte> encode_npy(const HostArray& array);
// Writes atomically (temporary file, then rename), so an interrupted run leaves no partial file.
void write_npy(const std::string& path, const HostArray& array);

// numpy's str() of the array with default print options: "[[ 0.  1.]\n [ 2.  3.]]".
std::string format_array(const HostArray& array);

}  // namespace meshvk::io

// numpy's .npy format: the public entry points (parse_npy, read_npy, encode_npy, write_npy).
// Reading is split by concept (npy_format.hpp): npy_header.cpp validates the preamble and the
// header, npy_convert.cpp converts the elements to meshvk's dtypes; this file checks the data's
// size against the header, reads files, and writes what numpy.save writes.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/element_count.hpp"
#include "io/host_array.hpp"
#include "io/npy_format.hpp"
#include "meshvk/error.hpp"

namespace meshvk::io {
namespace {

using npy::fail_load;
using npy::kMagic;
using npy::kMagicLen;

// numpy aligns the data to this many bytes (ARRAY_ALIGN) so files can be memory-mapped.
constexpr size_t kArrayAlign = 64;
// numpy leaves room after the dict for the growing axis to reach this many digits, so appending
// can rewrite the header in place (GROWTH_AXIS_MAX_DIGITS).
constexpr size_t kGrowthAxisMaxDigits = 21;

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string errno_text(int error) {
  return std::strerror(error);
}

// The header numpy.save writes: sorted keys, repr() values, spare room for the first axis to grow.
std::string header_dict(const HostArray& array) {
  // bool is numpy's one-byte '|b1', as np.save writes a bool array (meshvk holds 32-bit words).
  const std::string_view descr = array.dtype == DType::float32  ? "<f4"
                                 : array.dtype == DType::float16 ? "<f2"
                                 : array.dtype == DType::bool_  ? "|b1"
                                 : array.dtype == DType::uint32 ? "<u4"
                                 : array.dtype == DType::float64 ? "<f8"
                                 : array.dtype == DType::int64  ? "<i8"
                                 : array.dtype == DType::int8   ? "|i1"
                                 : array.dtype == DType::uint8  ? "|u1"
                                                                : "<i4";
  std::string dict = "{'descr': '" + std::string(descr) +
                     "', 'fortran_order': False, 'shape': " + shape_to_string(array.shape) + ", }";
  if (!array.shape.empty()) {
    const size_t digits = std::to_string(array.shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  return dict;
}

}  // namespace

HostArray parse_npy(std::span<const std::byte> file, const std::string& what) {
  const npy::Layout layout = npy::read_layout(file, what);
  const npy::Header& header = layout.header;

  const int64_t count = *checked_element_count(header.shape);
  const size_t data_offset = layout.data_offset;
  const uint64_t present = file.size() - data_offset;
  int64_t expected = 0;
  const bool overflow =
      __builtin_mul_overflow(count, static_cast<int64_t>(header.descr.size), &expected);
  if (overflow || present != static_cast<uint64_t>(expected)) {
    const bool truncated = overflow || present < static_cast<uint64_t>(expected);
    const std::string expected_text = overflow ? std::to_string(count) + " elements of " +
                                                     std::to_string(header.descr.size) + " bytes"
                                               : std::to_string(expected) + " bytes";
    fail_load(what, std::string(truncated ? "truncated data" : "trailing data") + ": shape " +
                        shape_to_string(header.shape) + " of '" + header.descr.text + "' needs " +
                        expected_text + " after the " + std::to_string(data_offset) +
                        "-byte header, but " + std::to_string(present) + " bytes are present");
  }

  HostArray array;
  array.shape = header.shape;
  array.dtype = npy::loaded_dtype(header.descr);
  array.bytes = npy::convert_elements(file.subspan(data_offset), header, count, what);
  return array;
}

HostArray read_npy(const std::string& path) {
  errno = 0;
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) fail_load(path, "cannot open the file: " + errno_text(errno));
  // Read as far as the header says, and a byte more to tell trailing data, never the whole of a
  // file that does not end (/dev/zero) or that is far longer than its header declares.
  std::vector<std::byte> bytes;
  std::array<std::byte, 1 << 16> chunk;
  auto fill = [&](uint64_t want) {
    while (bytes.size() < want) {
      const size_t n = std::fread(chunk.data(), 1, static_cast<size_t>(std::min<uint64_t>(chunk.size(), want - bytes.size())), file.get());
      try {
        bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
      } catch (const std::bad_alloc&) {
        fail_load(path, "the header declares " + std::to_string(want) + " bytes, more than the host can hold");
      }
      if (n == 0) break;
    }
    if (std::ferror(file.get())) fail_load(path, "cannot read the file: " + errno_text(errno));
  };
  fill(12);  // magic, version and the header length (2 bytes in version 1.0, 4 in 2.0 and 3.0)
  if (bytes.size() >= 10) {
    const bool v1 = std::to_integer<int>(bytes[6]) == 1;
    uint64_t header_len = std::to_integer<uint64_t>(bytes[8]) | std::to_integer<uint64_t>(bytes[9]) << 8;
    if (!v1 && bytes.size() >= 12)
      header_len |= std::to_integer<uint64_t>(bytes[10]) << 16 | std::to_integer<uint64_t>(bytes[11]) << 24;
    fill((v1 ? 10 : 12) + std::min<uint64_t>(header_len, uint64_t{1} << 20));  // read_layout refuses longer ones
  }
  const npy::Layout layout = npy::read_layout(bytes, path);
  const std::optional<int64_t> count = checked_element_count(layout.header.shape);
  int64_t data = 0;
  if (count && !__builtin_mul_overflow(*count, static_cast<int64_t>(layout.header.descr.size), &data))
    fill(layout.data_offset + static_cast<uint64_t>(data) + 1);
  return parse_npy(bytes, path);
}

std::vector<std::byte> encode_npy(const HostArray& array) {
  const std::optional<int64_t> count = checked_element_count(array.shape);
  if (!count) {
    throw Error("encode_npy: shape " + shape_to_string(array.shape) +
                " has a negative dimension or more elements than a 64-bit count can hold");
  }
  if (array.shape.size() > kMaxRank) {
    throw Error("encode_npy: shape " + shape_to_string(array.shape) + " has " +
                std::to_string(array.shape.size()) + " dimensions; numpy supports at most " +
                std::to_string(kMaxRank));
  }
  const size_t item = host_element_bytes(array.dtype);  // float16 and bfloat16: 32-bit words
  if (array.bytes.size() % item != 0 ||
      array.bytes.size() / item != static_cast<uint64_t>(*count)) {
    throw Error("encode_npy: a " + std::string(dtype_name(array.dtype)) + " array of shape " +
                shape_to_string(array.shape) + " needs " + std::to_string(*count) + " x " +
                std::to_string(item) + " bytes, but the HostArray holds " +
                std::to_string(array.bytes.size()));
  }

  // numpy's _wrap_header: pad with spaces and end with '\n' so the data starts on a 64-byte
  // boundary; an already aligned header still gets a full 64 bytes of padding, as numpy does.
  std::string header = header_dict(array);
  const size_t newline_len = header.size() + 1;
  const size_t padding = kArrayAlign - (kMagicLen + 2 + newline_len) % kArrayAlign;
  header.append(padding, ' ');
  header += '\n';
  // Rank <= 64 keeps the header far below version 1.0's 65535-byte limit.
  const auto header_len = static_cast<uint16_t>(header.size());

  std::vector<std::byte> out;
  out.reserve(kMagicLen + 2 + header.size() + array.bytes.size());
  for (const unsigned char c : kMagic) out.push_back(std::byte{c});
  out.push_back(std::byte{1});  // version 1.0
  out.push_back(std::byte{0});
  out.push_back(static_cast<std::byte>(header_len & 0xff));
  out.push_back(static_cast<std::byte>(header_len >> 8));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  const size_t data_start = out.size();
  if (array.dtype == DType::bool_) {
    for (size_t i = 0; i < array.bytes.size(); i += 4) {
      uint32_t word;
      std::memcpy(&word, array.bytes.data() + i, 4);
      out.push_back(std::byte{word != 0});
    }
    return out;
  }
  if (array.dtype == DType::float16) {  // float32 words of float16 values -> '<f2'
    for (size_t i = 0; i < array.bytes.size(); i += 4) {
      float value;
      std::memcpy(&value, array.bytes.data() + i, 4);
      const uint16_t bits = float16_bits(value);
      out.push_back(static_cast<std::byte>(bits & 0xff));
      out.push_back(static_cast<std::byte>(bits >> 8));
    }
    return out;
  }
  if (array.dtype == DType::bfloat16)
    throw Error("encode_npy: numpy has no bfloat16 type; convert to float32 or float16 first");
  out.insert(out.end(), array.bytes.begin(), array.bytes.end());
  // The file is little-endian ('<f4', '<i8'); HostArray bytes are native.
  if constexpr (std::endian::native == std::endian::big) {
    const size_t es = host_element_bytes(array.dtype);
    for (size_t i = data_start; i < out.size(); i += es) std::reverse(&out[i], &out[i] + es);
  }
  return out;
}

void write_npy(const std::string& path, const HostArray& array) {
  std::vector<std::byte> bytes;
  try {
    bytes = encode_npy(array);
  } catch (const Error& error) {
    throw Error("save_npy(" + path + "): " + error.what());
  }
  write_file_atomically(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
      "save_npy");
}

}  // namespace meshvk::io

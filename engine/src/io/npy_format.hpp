#pragma once
// numpy's .npy format (numpy/lib/format.py), split by concept:
//   npy_header.cpp   the preamble (magic, version, header length) and the header: a Python dict
//                    literal parsed as ast.literal_eval would, validated as numpy validates it;
//   npy_convert.cpp  the file's elements converted to meshvk's 32-bit dtypes (which dtype each
//                    descr loads as, range checks, byte order, Fortran order);
//   npy.cpp          the public entry points: parse, read and write files, encode.
// Everything here is internal to engine/src/io.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshvk/dtype.hpp"

namespace meshvk::io::npy {

constexpr std::array<unsigned char, 6> kMagic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kMagicLen = 8;  // the magic string plus the two version bytes
// The bytes meshvk holds per element once loaded (every dtype is a 32-bit word).
constexpr int64_t kLoadedElementBytes = 4;

// The descrs load_npy reads and what each becomes: the text of "supported: ..." in errors.
constexpr std::string_view kSupportedDescrs =
    "'<f4', '<f8', '<f2', '<i4', '<i8', '|i1', '<u4', '|u1' and '|b1' (loaded as float32, float64, "
    "float16, int32, int64, int8, uint32, uint8 and bool); '<i2' and '<u2' (converted to int32), "
    "'<u8' (converted to uint32); multi-byte ones may also be big-endian ('>f4') or native ('=f4')";

// "load_npy(what): message" as a meshvk::Error.
[[noreturn]] void fail_load(const std::string& what, const std::string& message);

// Text from the file, quoted for an error message: non-printable bytes escaped, long text cut.
std::string excerpt(std::string_view text, size_t max_len = 80);

// An unsigned integer of `size` bytes (1 to 8) stored in the given byte order.
uint64_t read_uint(const std::byte* p, size_t size, bool big_endian);

// The dtype descriptor ('<f4', '>i8', '|b1', ...).
enum class ElementKind { floating, signed_int, unsigned_int, boolean };

struct Descr {
  std::string text;
  ElementKind kind = ElementKind::floating;
  size_t size = 4;  // bytes per element
  bool big_endian = false;
};

struct Header {
  Descr descr;
  bool fortran_order = false;
  Shape shape;
};

// Where a file's parts are: its validated header and the offset of its element data.
struct Layout {
  Header header;
  size_t data_offset = 0;
};

// Reads and validates the preamble and the header (npy_header.cpp). The data's size is not
// checked here.
Layout read_layout(std::span<const std::byte> file, const std::string& what);

// The dtype the elements of `descr` load as (npy_convert.cpp).
DType loaded_dtype(const Descr& descr);

// The `count` elements of `data` (which holds exactly count * descr.size bytes) as meshvk's
// host elements of loaded_dtype() (io::host_element_bytes each), in C order (npy_convert.cpp). Throws Error for the first
// value that does not fit the loaded dtype.
std::vector<std::byte> convert_elements(std::span<const std::byte> data, const Header& header,
                                        int64_t count, const std::string& what);

}  // namespace meshvk::io::npy

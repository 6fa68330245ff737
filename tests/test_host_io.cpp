// Host I/O: numpy .npy reading/writing and numpy-style printing (engine/src/io).
//
// numpy is not available where these tests run, so the expected bytes and strings below were
// derived by hand from numpy's format.py and arrayprint.py; the golden files written by
// numpy.save (MESHVK_GOLDEN_DIR) check the encoder byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "io/host_array.hpp"
#include "meshvk/dtype.hpp"
#include "meshvk/error.hpp"
#include "test_support.hpp"

namespace {

using meshvk::DType;
using meshvk::Shape;
using meshvk::io::HostArray;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// Helpers

std::vector<std::byte> to_bytes(std::string_view text) {
  std::vector<std::byte> out;
  for (const char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::string to_string(const std::vector<std::byte>& bytes, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < bytes.size(); ++i) out += static_cast<char>(bytes[i]);
  return out;
}

template <class T>
HostArray make_array(Shape shape, const std::vector<T>& values) {
  HostArray array;
  array.shape = std::move(shape);
  array.dtype = meshvk::dtype_of<T>();
  array.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

HostArray floats(Shape shape, const std::vector<float>& values) {
  return make_array(std::move(shape), values);
}
HostArray ints(Shape shape, const std::vector<int32_t>& values) {
  return make_array(std::move(shape), values);
}

template <class T>
std::vector<T> values_of(const HostArray& array) {
  std::vector<T> out(array.bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), array.bytes.data(), array.bytes.size());
  return out;
}

template <class T>
std::vector<T> iota_values(size_t count) {
  std::vector<T> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(i);
  return out;
}

// Element bytes in the given byte order.
template <class T>
std::vector<std::byte> raw(const std::vector<T>& values, bool big_endian = false) {
  std::vector<std::byte> out;
  for (const T& value : values) {
    auto bytes = std::bit_cast<std::array<std::byte, sizeof(T)>>(value);
    if (big_endian != (std::endian::native == std::endian::big)) {
      std::reverse(bytes.begin(), bytes.end());
    }
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

// A .npy file with an arbitrary header text, padded the way numpy pads it.
std::vector<std::byte> npy_file(std::string_view dict, const std::vector<std::byte>& data,
                                int major = 1) {
  const size_t length_size = major == 1 ? 2 : 4;
  std::string header(dict);
  const size_t unpadded = 8 + length_size + header.size() + 1;
  header.append(63 - (unpadded + 63) % 64, ' ');
  header += '\n';
  std::vector<std::byte> out = to_bytes("\x93NUMPY");
  out.push_back(static_cast<std::byte>(major));
  out.push_back(std::byte{0});
  for (size_t i = 0; i < length_size; ++i) {
    out.push_back(static_cast<std::byte>((header.size() >> (8 * i)) & 0xff));
  }
  const auto text = to_bytes(header);
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<std::byte> f4_file(std::string_view shape, const std::vector<float>& values) {
  return npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(shape) + ", }",
                  raw(values));
}

// The message of the meshvk::Error parse_npy raises; a failure if it raises nothing.
std::string load_error(const std::vector<std::byte>& file) {
  try {
    meshvk::io::parse_npy(file, "case.npy");
  } catch (const meshvk::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "parse_npy accepted the file";
  return "";
}

void expect_contains(const std::string& message, std::initializer_list<std::string_view> parts) {
  for (const std::string_view part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "message lacks \"" << part << "\":\n  " << message;
  }
}

// Parsing either succeeds or raises meshvk::Error; anything else (or a crash, under the
// sanitizers) fails.
void expect_parses_or_errors(const std::vector<std::byte>& file, const std::string& label) {
  try {
    const HostArray array = meshvk::io::parse_npy(file, "fuzz.npy");
    EXPECT_EQ(array.bytes.size(),
              static_cast<size_t>(meshvk::shape_size(array.shape)) * meshvk::io::host_element_bytes(array.dtype))
        << label;
  } catch (const meshvk::Error& error) {
    EXPECT_EQ(std::string_view(error.what()).substr(0, 18), "load_npy(fuzz.npy)") << label;
  } catch (const std::exception& error) {
    ADD_FAILURE() << label << ": unexpected exception " << error.what();
  }
}

std::vector<std::byte> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

std::string golden_layer_dir() { return golden_dir() + "/layer"; }

std::string fmt(const HostArray& array) {
  return meshvk::io::format_array(array);
}

// ---------------------------------------------------------------------------------------------
// Encoding and round trips

TEST(NpyEncode, HeaderBytesMatchNumpySave) {
  const auto file = meshvk::io::encode_npy(floats({4, 8}, std::vector<float>(32, 0.0f)));
  ASSERT_EQ(file.size(), 128u + 32 * 4);
  EXPECT_EQ(to_string(file, 0, 6), "\x93NUMPY");
  EXPECT_EQ(std::to_integer<int>(file[6]), 1);  // version 1.0
  EXPECT_EQ(std::to_integer<int>(file[7]), 0);
  EXPECT_EQ(std::to_integer<int>(file[8]) | std::to_integer<int>(file[9]) << 8, 118);
  // The dict, then numpy's room for the first axis to grow to 21 digits (21 - len("4")), then
  // alignment padding, then '\n' as the 128th byte.
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }";
  EXPECT_EQ(to_string(file, 10, 10 + dict.size()), dict);
  EXPECT_EQ(to_string(file, 10 + dict.size(), 127), std::string(127 - 10 - dict.size(), ' '));
  EXPECT_EQ(std::to_integer<char>(file[127]), '\n');
}

TEST(NpyEncode, Int32AndRankZeroHeaders) {
  const auto vector = meshvk::io::encode_npy(ints({3}, {1, 2, 3}));
  expect_contains(to_string(vector, 10, 128),
                  {"{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"});
  EXPECT_EQ(vector.size(), 128u + 12);

  const auto scalar = meshvk::io::encode_npy(floats({}, {2.5f}));
  expect_contains(to_string(scalar, 10, 128),
                  {"{'descr': '<f4', 'fortran_order': False, 'shape': (), }"});
  EXPECT_EQ(scalar.size(), 128u + 4);
}

TEST(NpyEncode, DataOffsetIsAlwaysAMultipleOf64) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{1}, Shape{123456789, 0}, Shape{2, 3, 4, 5},
                             Shape{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}) {
    HostArray array = floats(shape, std::vector<float>(meshvk::shape_size(shape), 1.0f));
    const auto file = meshvk::io::encode_npy(array);
    const size_t header_len = std::to_integer<size_t>(file[8]) | std::to_integer<size_t>(file[9])
                                                                     << 8;
    EXPECT_EQ((10 + header_len) % 64, 0u) << meshvk::shape_to_string(shape);
    EXPECT_EQ(std::to_integer<char>(file[10 + header_len - 1]), '\n');
    EXPECT_EQ(file.size(), 10 + header_len + array.bytes.size());
  }
}

TEST(NpyEncode, AlreadyAlignedHeaderGetsAFull64BytesOfPaddingLikeNumpy) {
  // This dict plus growth room plus '\n' ends exactly on byte 128; numpy's _wrap_header then pads
  // by 64 (ARRAY_ALIGN - 0), not 0.
  const Shape shape = {0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 12, 12};
  const auto file = meshvk::io::encode_npy(floats(shape, {}));
  EXPECT_EQ(std::to_integer<int>(file[8]) | std::to_integer<int>(file[9]) << 8, 182);
  EXPECT_EQ(file.size(), 192u);
}

TEST(NpyEncode, RejectsInconsistentArrays) {
  HostArray short_bytes = floats({2, 2}, {1, 2, 3});
  EXPECT_THROW(meshvk::io::encode_npy(short_bytes), meshvk::Error);
  HostArray negative = floats({-1}, {});
  EXPECT_THROW(meshvk::io::encode_npy(negative), meshvk::Error);
}

TEST(NpyRoundTrip, Float32AndInt32RanksZeroToFour) {
  const std::vector<Shape> shapes = {{}, {5}, {2, 3}, {2, 3, 4}, {2, 1, 3, 2}, {0}, {3, 0, 2}};
  for (const Shape& shape : shapes) {
    const auto count = static_cast<size_t>(meshvk::shape_size(shape));
    std::vector<float> float_values(count);
    std::vector<int32_t> int_values(count);
    for (size_t i = 0; i < count; ++i) {
      float_values[i] = static_cast<float>(i) * 0.37f - 3.0f;
      int_values[i] = static_cast<int32_t>(i * 1000003) - 7;
    }
    if (count >= 4) {
      float_values[0] = kNan;
      float_values[1] = -kInf;
      float_values[2] = -0.0f;
      int_values[0] = std::numeric_limits<int32_t>::min();
      int_values[1] = std::numeric_limits<int32_t>::max();
    }
    for (const HostArray& array : {floats(shape, float_values), ints(shape, int_values)}) {
      const HostArray back = meshvk::io::parse_npy(meshvk::io::encode_npy(array), "round_trip.npy");
      EXPECT_EQ(back.shape, array.shape);
      EXPECT_EQ(back.dtype, array.dtype);
      EXPECT_EQ(back.bytes, array.bytes) << meshvk::shape_to_string(shape);
    }
  }
}

TEST(NpyFiles, WriteIsAtomicAndReadsBack) {
  const std::string dir = testing::TempDir() + "meshvk_host_io_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/a.npy";
  const HostArray array = ints({2, 2}, {1, -2, 3, -4});
  meshvk::io::write_npy(path, array);
  EXPECT_EQ(read_file_bytes(path), meshvk::io::encode_npy(array));
  const HostArray back = meshvk::io::read_npy(path);
  EXPECT_EQ(back.bytes, array.bytes);
  // Only the destination is left: the temporary was renamed onto it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            1);

  // Overwrite in place.
  meshvk::io::write_npy(path, floats({1}, {7.5f}));
  EXPECT_EQ(values_of<float>(meshvk::io::read_npy(path)), std::vector<float>{7.5f});
  std::filesystem::remove_all(dir);
}

TEST(NpyFiles, WriteFailureNamesThePathAndLeavesNoTemporary) {
  const std::string dir = testing::TempDir() + "meshvk_missing_dir_" + std::to_string(::getpid());
  const std::string path = dir + "/out.npy";
  try {
    meshvk::io::write_npy(path, floats({1}, {1.0f}));
    ADD_FAILURE() << "write_npy into a missing directory succeeded";
  } catch (const meshvk::Error& error) {
    expect_contains(error.what(), {"save_npy(" + path + ")", "No such file or directory"});
  }
  EXPECT_FALSE(std::filesystem::exists(dir));

  // A destination that is a directory is refused before a temporary is made.
  const std::string parent = testing::TempDir() + "meshvk_rename_" + std::to_string(::getpid());
  std::filesystem::create_directories(parent + "/taken.npy");
  try {
    meshvk::io::write_npy(parent + "/taken.npy", floats({1}, {1.0f}));
    ADD_FAILURE() << "write_npy onto a directory succeeded";
  } catch (const meshvk::Error& error) {
    expect_contains(error.what(), {"save_npy(" + parent + "/taken.npy)", "is a folder"});
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(parent),
                          std::filesystem::directory_iterator()),
            1);

  // An inconsistent array is refused before any file is created.
  try {
    meshvk::io::write_npy(parent + "/bad.npy", floats({2}, {1.0f}));
    ADD_FAILURE() << "write_npy of an inconsistent array succeeded";
  } catch (const meshvk::Error& error) {
    expect_contains(error.what(), {"save_npy(" + parent + "/bad.npy)", "needs 2 x 4 bytes"});
  }
  EXPECT_FALSE(std::filesystem::exists(parent + "/bad.npy"));
  std::filesystem::remove_all(parent);
}

TEST(NpyFiles, ReadFailureNamesThePath) {
  const std::string path = "/nonexistent/meshvk/missing.npy";
  try {
    meshvk::io::read_npy(path);
    ADD_FAILURE() << "read_npy of a missing file succeeded";
  } catch (const meshvk::Error& error) {
    expect_contains(error.what(), {"load_npy(" + path + ")", "cannot open", "No such file"});
  }
  try {
    meshvk::io::read_npy(testing::TempDir());  // a directory opens but cannot be read
    ADD_FAILURE() << "read_npy of a directory succeeded";
  } catch (const meshvk::Error& error) {
    expect_contains(error.what(), {"load_npy("});
  }
}

TEST(NpyFiles, GoldenFilesFromNumpy) {
  const std::string dir = golden_layer_dir();
  const HostArray x = meshvk::io::read_npy(dir + "/x.npy");
  EXPECT_EQ(x.shape, (Shape{32}));
  EXPECT_EQ(x.dtype, DType::float32);
  EXPECT_EQ(x.bytes.size(), 32u * 4);
  // numpy.save's bytes, reproduced exactly.
  EXPECT_EQ(meshvk::io::encode_npy(x), read_file_bytes(dir + "/x.npy"));

  const HostArray weights = meshvk::io::read_npy(dir + "/weights.npy");
  EXPECT_EQ(weights.shape, (Shape{32, 4}));
  EXPECT_EQ(meshvk::io::encode_npy(weights), read_file_bytes(dir + "/weights.npy"));

  // The tutorial prints these values; str() pads the fractions to a common width.
  const HostArray expected = meshvk::io::read_npy(dir + "/expected.npy");
  EXPECT_EQ(fmt(expected), "[0.02138916 0.8931118  0.5989196  0.9774251 ]");
}

// ---------------------------------------------------------------------------------------------
// Header variants numpy (or other writers) produce

TEST(NpyParse, AcceptsAnyKeyOrderQuotesSpacingAndTrailingComma) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  for (const std::string_view dict : {
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
           "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
           "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,3)}",
           "{ 'descr' : '<f4' ,\t'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",  // Python 2 longs
       }) {
    const HostArray array = meshvk::io::parse_npy(npy_file(dict, raw(values)), "variant.npy");
    EXPECT_EQ(array.shape, (Shape{2, 3})) << dict;
    EXPECT_EQ(values_of<float>(array), values) << dict;
  }
}

TEST(NpyParse, ShapesOfEveryRank) {
  EXPECT_EQ(meshvk::io::parse_npy(f4_file("()", {4.5f}), "r0").shape, Shape{});
  EXPECT_EQ(meshvk::io::parse_npy(f4_file("(3,)", {1, 2, 3}), "r1").shape, Shape{3});
  EXPECT_EQ(meshvk::io::parse_npy(f4_file("(0,)", {}), "empty").shape, Shape{0});
  // Empty, with the other dimensions as large as numpy allows (their product times 8 bytes fits).
  EXPECT_EQ(meshvk::io::parse_npy(f4_file("(2, 0, 576460752303423487)", {}), "zero").shape,
            (Shape{2, 0, 576460752303423487}));
}

TEST(NpyParse, Versions2And3HaveFourByteHeaderLengths) {
  const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
  for (const int major : {2, 3}) {
    const HostArray array = meshvk::io::parse_npy(npy_file(dict, raw<int32_t>({7, -8}), major),
                                                  "v" + std::to_string(major));
    EXPECT_EQ(values_of<int32_t>(array), (std::vector<int32_t>{7, -8}));
  }
}

TEST(NpyParse, ConvertsOtherNumericDtypes) {
  const auto load = [](std::string_view descr, const std::vector<std::byte>& data,
                       std::string_view shape) {
    return meshvk::io::parse_npy(
        npy_file("{'descr': '" + std::string(descr) +
                     "', 'fortran_order': False, 'shape': " + std::string(shape) + ", }",
                 data),
        std::string(descr));
  };
  // '<f8' is float64 and '<i8' int64, every value kept (they used to be converted to float32 and
  // int32).
  const HostArray f8 = load("<f8", raw<double>({1.5, -2.25, 0.1, -INFINITY, 3.4028235e38}), "(5,)");
  EXPECT_EQ(f8.dtype, DType::float64);
  EXPECT_EQ(values_of<double>(f8), (std::vector<double>{1.5, -2.25, 0.1, -INFINITY, 3.4028235e38}));
  EXPECT_TRUE(std::isnan(values_of<double>(load("<f8", raw<double>({NAN}), "(1,)"))[0]));

  const HostArray i8 = load("<i8", raw<int64_t>({-5, 2147483648LL, INT64_MIN}), "(3,)");
  EXPECT_EQ(i8.dtype, DType::int64);
  EXPECT_EQ(values_of<int64_t>(i8), (std::vector<int64_t>{-5, 2147483648LL, INT64_MIN}));

  EXPECT_EQ(values_of<int32_t>(load("<i2", raw<int16_t>({-32768, 32767}), "(2,)")),
            (std::vector<int32_t>{-32768, 32767}));
  EXPECT_EQ(values_of<int8_t>(load("|i1", raw<int8_t>({-128, 127}), "(2,)")),
            (std::vector<int8_t>{-128, 127}));
  EXPECT_EQ(values_of<int32_t>(load("<u2", raw<uint16_t>({0, 65535}), "(2,)")),
            (std::vector<int32_t>{0, 65535}));
  EXPECT_EQ(load("|u1", raw<uint8_t>({0, 255}), "(2,)").dtype, DType::uint8);
  EXPECT_EQ(values_of<uint8_t>(load("|u1", raw<uint8_t>({0, 255}), "(2,)")),
            (std::vector<uint8_t>{0, 255}));
  // '<u4' is meshvk's uint32 (JAX's keys and random bits), every value kept.
  const HostArray u4 = load("<u4", raw<uint32_t>({2147483647u, 4294967295u}), "(2,)");
  EXPECT_EQ(u4.dtype, DType::uint32);
  EXPECT_EQ(values_of<uint32_t>(u4), (std::vector<uint32_t>{2147483647u, 4294967295u}));
  EXPECT_EQ(values_of<int32_t>(load("|b1", raw<uint8_t>({0, 1, 1}), "(3,)")),
            (std::vector<int32_t>{0, 1, 1}));
  // Native-order markers.
  EXPECT_EQ(values_of<int32_t>(load("=i4", raw<int32_t>({-9}), "(1,)")),
            (std::vector<int32_t>{-9}));
  EXPECT_EQ(values_of<int8_t>(load("<i1", raw<int8_t>({-3}), "(1,)")), (std::vector<int8_t>{-3}));
}

// Issue 31.7.2: '<u8' and '<f2' were refused although their values fit.
TEST(NpyParse, ConvertsUint64AndFloat16) {
  const auto load = [](std::string_view descr, const std::vector<std::byte>& data,
                       std::string_view shape) {
    return meshvk::io::parse_npy(
        npy_file("{'descr': '" + std::string(descr) +
                     "', 'fortran_order': False, 'shape': " + std::string(shape) + ", }",
                 data),
        std::string(descr));
  };
  // Unsigned stays unsigned: '<u8' is uint32, every value up to 2**32 - 1 kept.
  const std::vector<uint64_t> u8 = {0, 1, 2147483648u, 4294967295u};
  for (const bool big : {false, true}) {
    const HostArray array = load(big ? ">u8" : "<u8", raw<uint64_t>(u8, big), "(2, 2)");
    EXPECT_EQ(array.dtype, DType::uint32);
    EXPECT_EQ(array.shape, (Shape{2, 2}));
    EXPECT_EQ(values_of<uint32_t>(array), (std::vector<uint32_t>{0, 1, 2147483648u, 4294967295u}));
  }
  // '<f2' is float16 (held as float32 words), exactly: normal, largest, smallest subnormal,
  // signed zero, inf.
  const std::vector<uint16_t> halves = {0x3c00, 0xc000, 0x7bff, 0x0001,
                                        0x03ff, 0x8000, 0x7c00, 0x3555};
  const std::vector<float> floats = {1.0f,         -2.0f, 65504.0f, 0x1p-24f,
                                     0x1.ff8p-15f, -0.0f, kInf,     0x1.554p-2f};
  for (const bool big : {false, true}) {
    const HostArray array = load(big ? ">f2" : "<f2", raw<uint16_t>(halves, big), "(8,)");
    EXPECT_EQ(array.dtype, DType::float16);
    const std::vector<float> got = values_of<float>(array);
    ASSERT_EQ(got.size(), floats.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(floats[i])) << i;
  }
  EXPECT_TRUE(std::isnan(values_of<float>(load("<f2", raw<uint16_t>({0x7e00}), "(1,)"))[0]));
  // Every half converts to the float numpy's astype(float32) gives: checked through the
  // exponent formula for every finite half.
  std::vector<uint16_t> all;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00) != 0x7c00) all.push_back(static_cast<uint16_t>(h));
  const std::vector<float> converted =
      values_of<float>(load("<f2", raw(all), "(" + std::to_string(all.size()) + ",)"));
  for (size_t i = 0; i < all.size(); ++i) {
    const int exponent = (all[i] >> 10) & 0x1f;
    const int mantissa = all[i] & 0x3ff;
    const double magnitude =
        exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
    const float expected = static_cast<float>((all[i] & 0x8000) ? -magnitude : magnitude);
    ASSERT_EQ(std::bit_cast<uint32_t>(converted[i]), std::bit_cast<uint32_t>(expected))
        << std::hex << all[i];
  }
}

// Every half, NaNs with any payload (signaling ones included) too, loads and re-encodes to the
// same 16 bits, as numpy's float16 -> float32 -> float16 keeps them (found by fuzz_npy: a
// signaling NaN came back quiet).
TEST(NpyParse, EveryFloat16RoundTripsBitForBit) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<uint16_t>(h);
  const HostArray array = meshvk::io::parse_npy(
      npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (65536,), }", raw(all)),
      "all.npy");
  const std::vector<std::byte> encoded = meshvk::io::encode_npy(array);
  const HostArray back = meshvk::io::parse_npy(encoded, "re-encoded.npy");
  ASSERT_EQ(back.dtype, DType::float16);
  ASSERT_EQ(back.bytes.size(), array.bytes.size());
  const std::vector<float> first = values_of<float>(array), second = values_of<float>(back);
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(first[i]), std::bit_cast<uint32_t>(second[i]))
        << std::hex << i;
    ASSERT_EQ(meshvk::float16_bits(first[i]), all[i]) << std::hex << i;
  }
  // A float32 NaN whose payload lies only in the bits float16 drops stays NaN.
  EXPECT_EQ(meshvk::float16_bits(std::bit_cast<float>(0x7f800001u)), 0x7c01);
  EXPECT_EQ(meshvk::float16_bits(std::bit_cast<float>(0xffc00000u)), 0xfe00);
}

// Values that do not fit the loaded dtype are an Error naming the first one and its index in
// the loaded (C-order) array, as numpy's astype(..., casting='safe') would refuse the cast.
TEST(NpyParse, ValuesOutsideTheLoadedDtypeNameTheValue) {
  expect_contains(load_error(npy_file("{'descr': '<u8', 'fortran_order': False, 'shape': (3,), }",
                                      raw<uint64_t>({7, 4294967296u, 18446744073709551615u}))),
                  {"load_npy(case.npy)", "value 4294967296 at flat index 1", "'<u8'", "uint32",
                   "0 to 4294967295"});
  // '<f8' and '<i8' load as float64 and int64: every value fits (1e300 and -3e9 included).
  // What is not supported says what is, conversions included.
  expect_contains(load_error(npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
                                      raw<float>({1, 2}))),
                  {"unsupported dtype descr '<c8'", "'<u8' (converted to uint32)",
                   "'<f8'", "float64", "'|i1'", "int8", "'<f2'", "float16"});
}

// load_npy itself (a file on disk) gives the converted dtype.
TEST(NpyParse, LoadNpyConvertsWiderDtypes) {
  const std::string path = testing::TempDir() + "/u8_" + std::to_string(::getpid()) + ".npy";
  {
    std::ofstream out(path, std::ios::binary);
    const auto file = npy_file("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }",
                               raw<uint64_t>({5, 4000000000u}));
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size()));
  }
  const HostArray array = meshvk::io::read_npy(path);
  EXPECT_EQ(array.dtype, DType::uint32);
  EXPECT_EQ(values_of<uint32_t>(array), (std::vector<uint32_t>{5, 4000000000u}));
  std::filesystem::remove(path);
}

// '<i8' is int64 now: values past int32 load as they are.
TEST(NpyParse, Int64KeepsValuesPastInt32) {
  const auto file = npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                             raw<int64_t>({1, -2147483649LL, 3000000000LL}));
  const HostArray array = meshvk::io::parse_npy(file, "case.npy");
  EXPECT_EQ(array.dtype, DType::int64);
  EXPECT_EQ(values_of<int64_t>(array), (std::vector<int64_t>{1, -2147483649LL, 3000000000LL}));
}

TEST(NpyParse, BigEndianIsByteSwapped) {
  const auto load = [](std::string_view descr, const std::vector<std::byte>& data) {
    return meshvk::io::parse_npy(
        npy_file("{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (3,), }",
                 data),
        std::string(descr));
  };
  EXPECT_EQ(values_of<float>(load(">f4", raw<float>({1.0f, -2.5f, 1e-3f}, true))),
            (std::vector<float>{1.0f, -2.5f, 1e-3f}));
  EXPECT_EQ(values_of<int32_t>(load(">i4", raw<int32_t>({1, -2, 0x01020304}, true))),
            (std::vector<int32_t>{1, -2, 0x01020304}));
  EXPECT_EQ(values_of<double>(load(">f8", raw<double>({0.5, -8.0, 3.0}, true))),
            (std::vector<double>{0.5, -8.0, 3.0}));
  EXPECT_EQ(values_of<int64_t>(load(">i8", raw<int64_t>({-1, 65536, 7}, true))),
            (std::vector<int64_t>{-1, 65536, 7}));
  EXPECT_EQ(values_of<int32_t>(load(">i2", raw<int16_t>({-300, 300, 1}, true))),
            (std::vector<int32_t>{-300, 300, 1}));
  EXPECT_EQ(values_of<int32_t>(load(">u2", raw<uint16_t>({65535, 256, 1}, true))),
            (std::vector<int32_t>{65535, 256, 1}));
}

TEST(NpyParse, FortranOrderIsTransposedToCOrder) {
  // C-order [[1, 2, 3], [4, 5, 6]] stored column by column.
  const auto file = npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                             raw<int32_t>({1, 4, 2, 5, 3, 6}));
  const HostArray array = meshvk::io::parse_npy(file, "fortran.npy");
  EXPECT_EQ(array.shape, (Shape{2, 3}));
  EXPECT_EQ(values_of<int32_t>(array), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));

  // Rank 3: element (i, j, k) of shape (2, 3, 4) is at i + 2 j + 6 k in Fortran order.
  std::vector<float> fortran(24);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k)
        fortran[i + 2 * j + 6 * k] = static_cast<float>(i * 12 + j * 4 + k);
    }
  }
  const HostArray cube = meshvk::io::parse_npy(
      npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", raw(fortran)),
      "cube.npy");
  EXPECT_EQ(values_of<float>(cube), iota_values<float>(24));
  // Rank 0 and 1 are the same in both orders.
  EXPECT_EQ(values_of<float>(meshvk::io::parse_npy(
                npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }",
                         raw<float>({1, 2, 3})),
                "f1")),
            (std::vector<float>{1, 2, 3}));
}

// ---------------------------------------------------------------------------------------------
// Malformed input

TEST(NpyMalformed, BadMagicAndVersion) {
  std::vector<std::byte> file = f4_file("(1,)", {1});
  file[1] = std::byte{'X'};
  expect_contains(load_error(file), {"load_npy(case.npy)", "not a .npy file", "\\x93NUMPY"});
  expect_contains(load_error(to_bytes("PK\x03\x04 zip archive")), {"not a .npy file"});
  expect_contains(load_error({}), {"truncated", "0 bytes"});
  expect_contains(load_error(to_bytes("\x93NUMPY\x01")), {"truncated", "7 bytes"});

  file = f4_file("(1,)", {1});
  file[6] = std::byte{4};
  expect_contains(load_error(file), {"version 4.0", "1.0, 2.0 and 3.0"});
  file[6] = std::byte{1};
  file[7] = std::byte{1};
  expect_contains(load_error(file), {"version 1.1"});
}

TEST(NpyMalformed, TruncatedHeader) {
  std::vector<std::byte> file = f4_file("(1,)", {1});
  file.resize(60);
  expect_contains(load_error(file), {"truncated header", "118 bytes", "50"});
  // Version 2.0 needs 4 length bytes.
  expect_contains(load_error(to_bytes(std::string("\x93NUMPY\x02\x00\x10\x00", 10))),
                  {"truncated", "4-byte header length"});
}

TEST(NpyMalformed, HeaderThatIsNotADict) {
  expect_contains(load_error(npy_file("[('descr', '<f4')]", {})),
                  {"not a dict", "'descr', 'fortran_order' and 'shape'"});
  expect_contains(load_error(npy_file("'just a string'", {})), {"a string", "not a dict"});
  expect_contains(load_error(npy_file("{'descr': '<f4', 'fortran_order': False", {})),
                  {"not a valid Python literal", "expected"});
  expect_contains(load_error(npy_file("{'descr': '<f4'} trailing", {})),
                  {"not a valid Python literal", "the end of the header"});
  expect_contains(load_error(npy_file("{'descr': np.float32}", {})),
                  {"not a valid Python literal"});
  expect_contains(load_error(npy_file("{'descr: '<f4'}", {})), {"not a valid Python literal"});
  expect_contains(load_error(npy_file("", {})), {"not a valid Python literal"});
  expect_contains(load_error(npy_file(std::string(200, '(') + "1" + std::string(200, ')'), {})),
                  {"nests deeper"});
}

TEST(NpyMalformed, MissingExtraAndRepeatedKeys) {
  expect_contains(load_error(npy_file("{'descr': '<f4', 'fortran_order': False}", {})),
                  {"lacks the key 'shape'", "exactly the keys"});
  expect_contains(load_error(npy_file("{'shape': (1,), 'fortran_order': False}", raw<float>({1}))),
                  {"lacks the key 'descr'"});
  expect_contains(load_error(npy_file("{'descr': '<f4', 'shape': (1,)}", raw<float>({1}))),
                  {"lacks the key 'fortran_order'"});
  expect_contains(
      load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
                          raw<float>({1}))),
      {"unexpected key 'extra'"});
  expect_contains(load_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                      "'shape': (1,)}",
                                      raw<float>({1}))),
                  {"repeats the key 'shape'"});
  expect_contains(load_error(npy_file("{1: '<f4'}", {})), {"key 1 is not a string"});
}

TEST(NpyMalformed, InvalidShapes) {
  const auto shape_error = [](std::string_view shape) { return load_error(f4_file(shape, {})); };
  expect_contains(shape_error("(-1,)"), {"'shape' entry -1", "negative", "non-negative integers"});
  expect_contains(shape_error("(2, -3)"), {"entry -3 in (2, -3)", "negative"});
  expect_contains(shape_error("(4.5,)"), {"entry 4.5", "not an integer"});
  expect_contains(shape_error("(4.0, 2)"), {"entry 4.0", "not an integer"});
  expect_contains(shape_error("('4',)"), {"not an integer"});
  expect_contains(shape_error("(None,)"), {"not an integer"});
  expect_contains(shape_error("[4]"), {"'shape' is a list", "not a tuple"});
  expect_contains(shape_error("(4)"), {"'shape' is an integer", "not a tuple"});
  expect_contains(shape_error("4"), {"not a tuple"});
  expect_contains(shape_error("(99999999999999999999,)"), {"does not fit in a 64-bit integer"});
  expect_contains(shape_error("(9223372036854775807, 2)"), {"is too big"});
  expect_contains(shape_error("(4294967296, 4294967296, 0)"), {"is too big"});
  std::string rank65 = "(";
  for (int i = 0; i < 65; ++i) rank65 += "1, ";
  expect_contains(shape_error(rank65 + ")"), {"65 dimensions", "at most 64"});
}

TEST(NpyMalformed, DataSizeMismatch) {
  std::vector<std::byte> file = f4_file("(2, 2)", {1, 2, 3, 4});
  file.resize(file.size() - 4);
  expect_contains(load_error(file),
                  {"truncated data", "(2, 2)", "'<f4'", "needs 16 bytes", "12 bytes are present"});
  file = f4_file("(2, 2)", {1, 2, 3, 4, 5});
  expect_contains(load_error(file), {"trailing data", "needs 16 bytes", "20 bytes are present"});
  file = f4_file("(2, 2)", {1, 2, 3, 4});
  file.push_back(std::byte{0});
  expect_contains(load_error(file), {"trailing data"});
  // A shape whose byte count overflows is refused before its data is looked at.
  file = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
                  raw<double>({1}));
  expect_contains(load_error(file), {"(2305843009213693952,)", "is too big"});
}

TEST(NpyMalformed, UnsupportedDtypesListTheSupportedOnes) {
  for (const std::string_view descr : {"<c8", "|O", "<U5", "|S3", "<M8[ns]", "<c16", "|V8", "|u8",
                                       "<f16", "|f4", "f", "", "<i4x"}) {
    const std::string message = load_error(
        npy_file("{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (1,), }",
                 raw<float>({0})));
    expect_contains(message, {"unsupported dtype descr '" + std::string(descr) + "'", "'<f4'",
                              "'<i4'", "'<f8'", "'|b1'"});
  }
  expect_contains(load_error(npy_file("{'descr': [('x', '<f4'), ('y', '<i4')], 'fortran_order': "
                                      "False, 'shape': (1,), }",
                                      raw<float>({0, 0}))),
                  {"'descr' is a list", "structured dtypes are not supported", "'<f4'"});
}

TEST(NpyMalformed, FortranOrderMustBeABool) {
  expect_contains(load_error(npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }",
                                      raw<float>({0}))),
                  {"'fortran_order' is 0", "True or False"});
  expect_contains(load_error(npy_file("{'descr': '<f4', 'fortran_order': 'False', 'shape': (1,), }",
                                      raw<float>({0}))),
                  {"True or False"});
}

TEST(NpyMalformed, EveryTruncationAndCorruptionIsAnErrorNeverACrash) {
  const std::vector<std::vector<std::byte>> valid_files = {
      meshvk::io::encode_npy(floats({3, 4}, iota_values<float>(12))),
      npy_file("{'descr': '>i8', 'fortran_order': True, 'shape': (2, 3), }",
               raw<int64_t>({1, -2, 3, -4, 5, 6}, true)),
      npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", raw<double>({2.0}), 2),
  };
  const std::vector<uint8_t> replacements = {0x00, 0xff, 0x80, ' ', '\n', '(',  ')', '[',
                                             '{',  '}',  '\'', '"', ',',  ':',  '-', '9',
                                             '0',  'L',  'e',  '.', 'T',  '\\', '|', '>'};
  for (const auto& valid : valid_files) {
    ASSERT_NO_THROW(meshvk::io::parse_npy(valid, "valid.npy"));
    for (size_t length = 0; length < valid.size(); ++length) {
      const std::vector<std::byte> prefix(valid.begin(), valid.begin() + length);
      EXPECT_THROW(meshvk::io::parse_npy(prefix, "fuzz.npy"), meshvk::Error) << length;
    }
    for (size_t position = 0; position < valid.size(); ++position) {
      for (const uint8_t replacement : replacements) {
        std::vector<std::byte> corrupt = valid;
        corrupt[position] = std::byte{replacement};
        expect_parses_or_errors(
            corrupt, "byte " + std::to_string(position) + " = " + std::to_string(replacement));
      }
    }
  }
}

TEST(NpyMalformed, RandomHeadersNeverCrash) {
  std::mt19937 rng(1234);
  const std::string alphabet = "{}()[]'\",: -0123456789LTFNaeirsdcpfohntu<>|=\t\n\\x";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string header;
    const int length = static_cast<int>(rng() % 80);
    if (trial % 2 == 0) header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (int i = 0; i < length; ++i) header += alphabet[rng() % alphabet.size()];
    std::vector<std::byte> data(rng() % 40, std::byte{0x3f});
    expect_parses_or_errors(npy_file(header, data, 1 + static_cast<int>(rng() % 3)),
                            "header " + header);
  }
}

// ---------------------------------------------------------------------------------------------
// format_array: numpy's str(arr)

TEST(FormatArray, Int32) {
  EXPECT_EQ(fmt(ints({4}, {0, 1, 2, 3})), "[0 1 2 3]");
  EXPECT_EQ(fmt(ints({2, 2}, {0, 1, 10, 11})), "[[ 0  1]\n [10 11]]");
  EXPECT_EQ(fmt(ints({3}, {-1, 5, 100})), "[ -1   5 100]");
  EXPECT_EQ(fmt(ints({2}, {-100, 5})), "[-100    5]");
  EXPECT_EQ(fmt(ints({2}, {std::numeric_limits<int32_t>::min(), 0})), "[-2147483648           0]");
  EXPECT_EQ(fmt(ints({2, 2, 2}, iota_values<int32_t>(8))),
            "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]");
  EXPECT_EQ(fmt(ints({1, 1, 1, 1}, {5})), "[[[[5]]]]");
}

TEST(FormatArray, BoolsAsNumpyPadsThem) {
  // numpy writes " True" in every array but a 0-d one, whether or not a False is there.
  auto bools = [](Shape shape, std::vector<int32_t> v) {
    HostArray a = ints(std::move(shape), v);
    a.dtype = meshvk::DType::bool_;
    return a;
  };
  EXPECT_EQ(fmt(bools({2}, {1, 1})), "[ True  True]");
  EXPECT_EQ(fmt(bools({3}, {1, 0, 1})), "[ True False  True]");
  EXPECT_EQ(fmt(bools({}, {1})), "True");
}

TEST(FormatArray, RankZeroPrintsTheScalar) {
  // str() of a 0-d array is str() of its scalar: full unique digits, "3.0" (not "3.").
  EXPECT_EQ(fmt(ints({}, {496})), "496");
  EXPECT_EQ(fmt(ints({}, {-7})), "-7");
  EXPECT_EQ(fmt(floats({}, {3.0f})), "3.0");
  EXPECT_EQ(fmt(floats({}, {-0.0f})), "-0.0");
  EXPECT_EQ(fmt(floats({}, {0.1f})), "0.1");
  EXPECT_EQ(fmt(floats({}, {0.123456789f})), "0.12345679");
  EXPECT_EQ(fmt(floats({}, {1e-5f})), "1e-05");
  EXPECT_EQ(fmt(floats({}, {1.5e-5f})), "1.5e-05");
  EXPECT_EQ(fmt(floats({}, {1e-4f})), "1e-04");  // float32(1e-4) is just below 1e-4
  EXPECT_EQ(fmt(floats({}, {2e-4f})), "0.0002");
  EXPECT_EQ(fmt(floats({}, {16777217.0f})), "16777216.0");
  EXPECT_EQ(fmt(floats({}, {1e16f})), "1e+16");
  EXPECT_EQ(fmt(floats({}, {-3.4028235e38f})), "-3.4028235e+38");
  EXPECT_EQ(fmt(floats({}, {kNan})), "nan");
  EXPECT_EQ(fmt(floats({}, {-kInf})), "-inf");
}

TEST(FormatArray, EmptyArrays) {
  EXPECT_EQ(fmt(floats({0}, {})), "[]");
  EXPECT_EQ(fmt(ints({2, 0}, {})), "[]");
  EXPECT_EQ(fmt(floats({3, 0, 4}, {})), "[]");
}

TEST(FormatArray, Float32Positional) {
  EXPECT_EQ(fmt(floats({3}, {48, 52, 56})), "[48. 52. 56.]");
  EXPECT_EQ(fmt(floats({2, 3}, {0, 1, 2, 8, 9, 10})), "[[ 0.  1.  2.]\n [ 8.  9. 10.]]");
  EXPECT_EQ(fmt(floats({4}, {0.02138916f, 0.8931118f, 0.5989196f, 0.9774251f})),
            "[0.02138916 0.8931118  0.5989196  0.9774251 ]");
  EXPECT_EQ(fmt(floats({3}, {1.0f, 2.5f, 0.125f})), "[1.    2.5   0.125]");
  EXPECT_EQ(fmt(floats({2}, {-0.5f, 1.0f})), "[-0.5  1. ]");
  EXPECT_EQ(fmt(floats({2, 2}, {-1.5f, 2, 3, -4.25f})), "[[-1.5   2.  ]\n [ 3.   -4.25]]");
  EXPECT_EQ(fmt(floats({2}, {0.0f, 0.0f})), "[0. 0.]");
  EXPECT_EQ(fmt(floats({2}, {-0.0f, 1.0f})), "[-0.  1.]");
  EXPECT_EQ(fmt(floats({2}, {0.1f, 0.25f})), "[0.1  0.25]");
  EXPECT_EQ(fmt(floats({2}, {1.0f / 3.0f, 2.0f})), "[0.33333334 2.        ]");
  // At most 8 fraction digits: cut values are rounded half to even on the exact binary value
  // (2^-9 = 0.001953125 exactly).
  EXPECT_EQ(fmt(floats({2}, {0.001953125f, 0.5f})), "[0.00195312 0.5       ]");
  EXPECT_EQ(fmt(floats({2}, {0.0123456789f, 1.0f})), "[0.01234568 1.        ]");
  // A ratio of exactly 1000 stays positional.
  EXPECT_EQ(fmt(floats({2}, {1, 1000})), "[   1. 1000.]");
  // Integers above 2^24: the widths come from the unique digits ("99999990."), but the printed
  // digits run exactly to the units place (Dragon4 with min_digits=0).
  EXPECT_EQ(fmt(floats({2}, {99999992.0f, 50000000.0f})), "[99999992. 50000000.]");
}

TEST(FormatArray, Float32NanAndInf) {
  EXPECT_EQ(fmt(floats({3}, {kNan, 1, -kInf})), "[ nan   1. -inf]");
  EXPECT_EQ(fmt(floats({2}, {kNan, 1})), "[nan  1.]");
  EXPECT_EQ(fmt(floats({2}, {kNan, kInf})), "[nan inf]");
  EXPECT_EQ(fmt(floats({3}, {kInf, 0.5f, -kInf})), "[ inf  0.5 -inf]");
  EXPECT_EQ(fmt(floats({2}, {kNan, 1e-5f})), "[   nan 1.e-05]");
}

TEST(FormatArray, Float32Scientific) {
  EXPECT_EQ(fmt(floats({2}, {1e-5f, 1.0f})), "[1.e-05 1.e+00]");
  EXPECT_EQ(fmt(floats({2}, {1.5e-5f, 1.0f})), "[1.5e-05 1.0e+00]");
  EXPECT_EQ(fmt(floats({1}, {1e8f})), "[1.e+08]");
  EXPECT_EQ(fmt(floats({2}, {-1e8f, 1.0f})), "[-1.e+08  1.e+00]");
  EXPECT_EQ(fmt(floats({2}, {0.0f, 1e-5f})), "[0.e+00 1.e-05]");
  EXPECT_EQ(fmt(floats({2}, {1.0f, 1001.0f})), "[1.000e+00 1.001e+03]");
  EXPECT_EQ(fmt(floats({2}, {3.4028235e38f, -1e-45f})), "[ 3.4028235e+38 -1.4012985e-45]");
  // Extra digits are the exact value's, not zeros: float32(1e-5) is 9.99999974737875e-06.
  EXPECT_EQ(fmt(floats({2}, {1e-5f, 1.0000001f})), "[9.9999997e-06 1.0000001e+00]");
}

TEST(FormatArray, LineWrapping) {
  EXPECT_EQ(fmt(ints({30}, iota_values<int32_t>(30))),
            "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
            " 24 25 26 27 28 29]");
  EXPECT_EQ(fmt(ints({2, 30}, iota_values<int32_t>(60))),
            "[[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
            "  24 25 26 27 28 29]\n"
            " [30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53\n"
            "  54 55 56 57 58 59]]");
  std::vector<float> halves(20);
  for (int i = 0; i < 20; ++i) halves[i] = static_cast<float>(i) + 0.5f;
  EXPECT_EQ(fmt(floats({20}, halves)),
            "[ 0.5  1.5  2.5  3.5  4.5  5.5  6.5  7.5  8.5  9.5 10.5 11.5 12.5 13.5\n"
            " 14.5 15.5 16.5 17.5 18.5 19.5]");
}

TEST(FormatArray, SummarisesAboveAThousandElements) {
  EXPECT_EQ(fmt(ints({1000}, iota_values<int32_t>(1000))).find("..."), std::string::npos);
  EXPECT_EQ(fmt(ints({2000}, iota_values<int32_t>(2000))), "[   0    1    2 ... 1997 1998 1999]");
  EXPECT_EQ(fmt(ints({100, 100}, iota_values<int32_t>(10000))),
            "[[   0    1    2 ...   97   98   99]\n"
            " [ 100  101  102 ...  197  198  199]\n"
            " [ 200  201  202 ...  297  298  299]\n"
            " ...\n"
            " [9700 9701 9702 ... 9797 9798 9799]\n"
            " [9800 9801 9802 ... 9897 9898 9899]\n"
            " [9900 9901 9902 ... 9997 9998 9999]]");
  EXPECT_EQ(fmt(ints({2, 1000}, iota_values<int32_t>(2000))),
            "[[   0    1    2 ...  997  998  999]\n"
            " [1000 1001 1002 ... 1997 1998 1999]]");
  EXPECT_EQ(fmt(ints({7, 2, 100}, iota_values<int32_t>(1400))),
            "[[[   0    1    2 ...   97   98   99]\n"
            "  [ 100  101  102 ...  197  198  199]]\n"
            "\n"
            " [[ 200  201  202 ...  297  298  299]\n"
            "  [ 300  301  302 ...  397  398  399]]\n"
            "\n"
            " [[ 400  401  402 ...  497  498  499]\n"
            "  [ 500  501  502 ...  597  598  599]]\n"
            "\n"
            " ...\n"
            "\n"
            " [[ 800  801  802 ...  897  898  899]\n"
            "  [ 900  901  902 ...  997  998  999]]\n"
            "\n"
            " [[1000 1001 1002 ... 1097 1098 1099]\n"
            "  [1100 1101 1102 ... 1197 1198 1199]]\n"
            "\n"
            " [[1200 1201 1202 ... 1297 1298 1299]\n"
            "  [1300 1301 1302 ... 1397 1398 1399]]]");
  // Widths come from the printed elements only: the hidden middle value 123456 does not widen
  // the columns.
  std::vector<int32_t> values(2000, 1);
  values[1000] = 123456;
  EXPECT_EQ(fmt(ints({2000}, values)), "[1 1 1 ... 1 1 1]");
  std::vector<float> float_values(1001, 0.5f);
  float_values[500] = 1e-9f;  // hidden: would force scientific notation
  EXPECT_EQ(fmt(floats({1001}, float_values)), "[0.5 0.5 0.5 ... 0.5 0.5 0.5]");
}

// Expectations from numpy's own tests (numpy/_core/tests/test_arrayprint.py), as str().
TEST(FormatArray, CasesFromNumpysTestSuite) {
  EXPECT_EQ(fmt(ints({1001}, iota_values<int32_t>(1001))), "[   0    1    2 ...  998  999 1000]");
  EXPECT_EQ(fmt(ints({10000}, iota_values<int32_t>(10000))), "[   0    1    2 ... 9997 9998 9999]");
  EXPECT_EQ(fmt(ints({2, 501}, iota_values<int32_t>(1002))),
            "[[   0    1    2 ...  498  499  500]\n"
            " [ 501  502  503 ...  999 1000 1001]]");
  EXPECT_EQ(fmt(ints({3}, {-2, 0, 3})), "[-2  0  3]");
  EXPECT_EQ(fmt(ints({2, 4}, {10, -1, 1, 1, 10, 10, 10, 10})), "[[10 -1  1  1]\n [10 10 10 10]]");
  EXPECT_EQ(fmt(floats({3}, {1, 2, -10})), "[  1.   2. -10.]");
  EXPECT_EQ(fmt(floats({3}, {100, 2, -1})), "[100.   2.  -1.]");
  EXPECT_EQ(fmt(floats({3}, {-100, 2, 1})), "[-100.    2.    1.]");
  EXPECT_EQ(fmt(floats({2}, {kNan, -kInf})), "[ nan -inf]");
  EXPECT_EQ(fmt(floats({2}, {0.0f, -0.0f})), "[ 0. -0.]");
  EXPECT_EQ(fmt(floats({1}, {1.234e9f})), "[1.234e+09]");
  // numpy's float64 case prints "1.23456789"; float32's unique digits stop at 1.2345679.
  EXPECT_EQ(fmt(floats({3}, {1.5f, 0, 1.23456789f})), "[1.5       0.        1.2345679]");
  EXPECT_EQ(fmt(floats({2}, {999999, 999999})), "[999999. 999999.]");
  // numpy <= 2.2 (and legacy='2.2'): float32 switches to scientific notation at 1e8.
  EXPECT_EQ(fmt(floats({2}, {1e6f, 1e7f})), "[ 1000000. 10000000.]");
  EXPECT_EQ(fmt(floats({2}, {1e7f, 1e8f})), "[1.e+07 1.e+08]");
  // Four dimensions: two blank lines between 3-D blocks.
  EXPECT_EQ(fmt(ints({2, 1, 1, 2}, {0, 1, 2, 3})), "[[[[0 1]]]\n\n\n [[[2 3]]]]");
}

TEST(FormatArray, RejectsInconsistentArrays) {
  EXPECT_THROW(fmt(floats({2, 2}, {1, 2, 3})), meshvk::Error);
  EXPECT_THROW(fmt(floats({-1}, {})), meshvk::Error);
}

}  // namespace

// The .npy reader on arbitrary bytes: it either returns an array consistent with its shape or
// throws meshvk::Error; an accepted array re-encodes to a file that reads back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/element_count.hpp"
#include "io/host_array.hpp"
#include "meshvk/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  meshvk::io::HostArray array;
  try {
    array = meshvk::io::parse_npy(file, "fuzz.npy");
  } catch (const meshvk::Error&) {
    return 0;
  }
  const auto count = meshvk::io::checked_element_count(array.shape);
  if (!count || array.bytes.size() != static_cast<size_t>(*count) * meshvk::io::host_element_bytes(array.dtype))
    std::abort();
  const std::vector<std::byte> encoded = meshvk::io::encode_npy(array);
  const meshvk::io::HostArray back = meshvk::io::parse_npy(encoded, "re-encoded.npy");
  if (back.shape != array.shape || back.dtype != array.dtype || back.bytes != array.bytes)
    std::abort();
  return 0;
}

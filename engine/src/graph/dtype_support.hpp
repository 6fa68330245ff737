#pragma once
// What uint32 supports (see meshvk/dtype.hpp): ops that compute on values call this first.
#include <string>

#include "meshvk/array.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

// A DType given by the caller is one of the four: DType(7), cast from an integer, made arrays
// printed as "unknown" and kernels that did not compile.
inline void check_dtype(const char* op, DType dtype) {
  if (dtype == DType::float32 || dtype == DType::int32 || dtype == DType::bool_ ||
      dtype == DType::uint32 || dtype == DType::bfloat16 || dtype == DType::float16)
    return;
  throw Error(std::string(op) + ": DType(" + std::to_string(static_cast<int>(dtype)) +
              ") is not a dtype; use DType::float32, DType::bfloat16, DType::float16, DType::int32, "
              "DType::bool_ or DType::uint32");
}

inline void reject_uint32(const char* op, const Array& x) {
  if (!x.valid() || x.dtype() != DType::uint32) return;
  throw Error(std::string(op) + ": " + type_of(x) +
              " cannot be computed with; uint32 (random keys and bits) supports data movement "
              "(device_put, reshape, "
              "indexing, slice, transpose, concatenate, take, copies), printing, .npy, the random "
              "ops and astype. "
              "astype(x, DType::int32) (the same bits) or astype(x, DType::float32) first");
}

// bfloat16 and float16 (computed in float32 and rounded to them).
constexpr bool is_16bit_float(DType dtype) { return dtype == DType::bfloat16 || dtype == DType::float16; }

// astype without a tape entry (for ops whose own rule covers the conversion, such as psum
// computing a bfloat16 sum in float32).
Array convert_untaped(const Array& x, DType dtype);

}  // namespace meshvk::detail

// JAX's type promotion for meshvk's dtypes (graph/elementwise_core.hpp).
#include <algorithm>
#include <optional>

#include "graph/elementwise_core.hpp"

namespace meshvk::detail::ew {

// JAX's promotion (jnp.promote_types, the lattice of "Type promotion semantics") restricted to
// meshvk's dtypes. Floating: the array operands' floating dtype when they have one (bfloat16 +
// bfloat16 is bfloat16, bfloat16 + any integer or bool is bfloat16); two different ones join on
// the lattice (bfloat16 + float16 is float32, anything + float64 is float64); float32 when only a
// weak float scalar is floating (2.5 * int32 is float32, 2.5 * int8 too; 2.5 * bfloat16 stays
// bfloat16). Integers: the widest signed and unsigned array dtypes join as JAX's table says
// (int8 + int32 is int32, uint8 + uint32 is uint32, uint8 + int32 is int32, uint32 + int32 and
// uint32 + int8 are int64); uint8 + int8 is int16 in JAX, which meshvk lacks: int32 here, the
// next signed type it has. A weak int scalar takes the array's integer dtype (int8 + 1 is int8);
// bools count as int32 when no other integer array is there (floor_divide of two bools is int32, as
// meshvk always did) and give way to one that is (bool + uint8 is uint8, as JAX).
DType promote(std::initializer_list<OperandType> types) {
  std::optional<DType> strong_float;
  bool weak_float = false;
  int signed_bits = 0, unsigned_bits = 0;
  const auto rank = [](DType d) { return d == DType::float64 ? 3 : d == DType::float32 ? 2 : 1; };
  for (const auto& t : types) {
    if (!is_floating(t.dtype)) {
      if (t.weak) continue;
      if (t.dtype == DType::int8) signed_bits = std::max(signed_bits, 8);
      if (t.dtype == DType::int32) signed_bits = std::max(signed_bits, 32);
      if (t.dtype == DType::int64) signed_bits = std::max(signed_bits, 64);
      if (t.dtype == DType::uint8) unsigned_bits = std::max(unsigned_bits, 8);
      if (t.dtype == DType::uint32) unsigned_bits = std::max(unsigned_bits, 32);
      continue;
    }
    if (t.weak) {
      weak_float = true;
    } else if (!strong_float || *strong_float == t.dtype) {
      strong_float = t.dtype;
    } else if (rank(*strong_float) == 1 && rank(t.dtype) == 1) {
      strong_float = DType::float32;  // bfloat16 + float16
    } else if (rank(t.dtype) > rank(*strong_float)) {
      strong_float = t.dtype;
    }
  }
  if (strong_float) return *strong_float;
  if (weak_float) return DType::float32;
  if (unsigned_bits && !signed_bits) return unsigned_bits == 8 ? DType::uint8 : DType::uint32;
  if (signed_bits > unsigned_bits)
    return signed_bits == 8 ? DType::int8 : signed_bits == 32 ? DType::int32 : DType::int64;
  if (unsigned_bits == 32) return DType::int64;  // uint32 + a narrower or equal signed type
  return DType::int32;  // uint8 + int8 (JAX: int16), or no integer arrays at all
}

}  // namespace meshvk::detail::ew

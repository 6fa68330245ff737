#pragma once
// The two-operand contraction einsum reduces every case to (linalg_ops.cpp); the parser, the
// ellipsis, implicit outputs, diagonals and the pairwise order of many operands are in einsum.cpp.
#include <optional>
#include <string>
#include <vector>

#include "meshvk/array.hpp"

namespace meshvk::detail {

// `la`, `lb` and `output` name one dimension per char, none repeated within one of them, every
// output label in an operand and equal sizes for equal labels. `subscripts` is the user's text,
// for messages.
Array einsum_pair(const std::string& subscripts, std::string la, std::string lb,
                  const std::string& output, const Array& a, const Array& b,
                  const std::optional<Sharding>& out_sharding);

// The dtype of a product of a and b: their promoted floating dtype (bfloat16 @ bfloat16 is
// bfloat16, bfloat16 @ float32 is float32), else int32.
DType matmul_result_dtype(const Array& a, const Array& b);
// The operands of a product with JAX's preferred_element_type: converted to float32 for a
// floating result (the products then sum in float32); Error for a type the operands cannot give.
std::vector<Array> for_preferred_type(const char* op, const std::vector<Array>& operands, DType preferred);

}  // namespace meshvk::detail

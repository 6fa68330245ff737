#pragma once
// Fused elementwise kernels: a DAG of elementwise ops over a few inputs becomes one generated
// GLSL compute shader, one dispatch per output piece.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshvk/dtype.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

enum class EwOp : uint8_t {
  input, constant,
  // unary
  neg, abs, sign, exp, log, sqrt, rsqrt, sin, cos, tanh, sigmoid, relu, square, reciprocal,
  tan, asin, acos, atan, erf, erfinv,
  expm1, log1p, sinh, cosh, exp2, log2, asinh, acosh, atanh,
  floor, ceil, trunc, round_even,
  logical_not, cast,
  // binary
  add, sub, mul, div, floordiv, mod, pow, maximum, minimum, atan2, eq, ne, lt, le, gt, ge,
  logical_and, logical_or, bitwise_and, bitwise_or, bitwise_xor,
  // ternary
  where,
};
const char* ew_op_name(EwOp op);
int ew_arity(EwOp op);

// One node: the operation, its result dtype, operand nodes (earlier in the program), and for
// inputs the input number, for constants the value's 32 bits.
struct EwNode {
  EwOp op = EwOp::input;
  DType dtype = DType::float32;
  int a = -1, b = -1, c = -1;
  int input = -1;
  uint32_t bits = 0;
  bool operator==(const EwNode&) const = default;
};

// The inputs one fused kernel reads at most (one texel binding and one push-constant offset each):
// the elementwise kernels', the fused reductions' and the multi-output fusions' limit.
constexpr size_t kMaxKernelInputs = 16;

// Nodes in dependency order; the last one is the result.
struct EwProgram {
  std::vector<EwNode> nodes;
  int num_inputs = 0;
  // "add(mul(2, sin(in0)), 1)", for program text and errors; `input_names` (where given) names
  // the inputs instead of in0, in1, ...
  std::string to_string(const std::vector<std::string>& input_names = {}) const;
};

// How one output piece reads an input: the same layout as the output, one element for all, or
// through strides over the output's coordinates (0 where broadcast) plus an offset.
struct EwInput {
  const detail::DeviceBuffer* buffer = nullptr;
  DType dtype = DType::float32;
  enum class Mode { same, scalar, strided } mode = Mode::same;
  std::vector<int64_t> strides;  // per output dimension (strided)
  int64_t offset = 0;            // element offset (scalar and strided)
  // Element where the input begins in its buffer (same); a multiple of 4 whose byte offset is a
  // texel view's (16 bytes on lavapipe and NVIDIA): 0 for bfloat16 and float16 inputs, which are
  // read as 16-bit texels.
  uint64_t start = 0;
};

// Records the program over one output piece of `shape` into `out`.
// The output begins `out_start` elements into `out` (a multiple of 4). Elements are stored as
// the dtype stores them (dtype_size bytes): bfloat16 and float16 with 16-bit stores, one element
// each, so no two invocations write one 32-bit word.
void record_elementwise(detail::RuntimeState& rt, detail::Recording& rec, const EwProgram& program,
                        std::span<const EwInput> inputs, const Shape& shape,
                        const detail::DeviceBuffer& out, uint64_t out_start = 0);

// The same with several results, nodes `results` of the program, stored into `outs` (one buffer
// each, 32-bit dtypes): one pass over the inputs for values that read the same data (an
// optimizer's new parameter and its moments).
// `counted`, where not 0, is the elements whose cost the op counts (kernels/cost.hpp) instead of
// the shape's: a share of a piece that separate hardware would compute whole.
void record_elementwise_outputs(detail::RuntimeState& rt, detail::Recording& rec, const EwProgram& program,
                                std::span<const int> results, std::span<const EwInput> inputs, const Shape& shape,
                                std::span<const detail::DeviceBuffer* const> outs, uint64_t out_start = 0,
                                uint64_t counted = 0);

// Counts into `rec` what record_elementwise_outputs over `shape` costs (kernels/cost.hpp),
// running nothing: a device whose piece another device of its VkDevice computed
// (graph/pending_pieces.cpp) counts the work it would do on hardware of its own.
void count_elementwise_outputs(detail::Recording& rec, const EwProgram& p, std::span<const int> results,
                               std::span<const EwInput> inputs, const Shape& shape);

// The float controls every kernel computing float32 values declares where the adapter has them
// (after #version): infinities, NaN and signed zeros kept (SignedZeroInfNanPreserve), subnormals
// kept (DenormPreserve), so a value has the same bits in every kernel that computes it.
std::string float_controls(bool preserve_inf_nan, bool preserve_denorm);

// A program computed inside another kernel (reduce_fused.cpp), as the kernels here compute it, so
// each value has the same bits: `head` begins the shader (version, float controls, 64 invocations
// per workgroup); `helpers` follows the bindings and the push constants, which must have a uint
// member `zero` holding 0 (float zeros are read from it); `nodes` computes v0..vN at width 1 from
// load0..loadK, each of its input's dtype, and `nodes4` four adjacent elements at once (vec4s, as
// the vector kernel does: the same bits).
struct EwInlineText {
  std::string head, helpers, nodes, nodes4;
  int result = -1;  // the node holding the program's value (v<result>)
};
EwInlineText ew_inline_text(detail::RuntimeState& rt, const detail::Recording& rec, const EwProgram& p,
                            std::span<const EwInput> inputs);

}  // namespace meshvk::kernels

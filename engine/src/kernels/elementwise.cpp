#include "kernels/elementwise.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>

#include "kernels/cost.hpp"
#include "kernels/elementwise_glsl.hpp"
#include "kernels/elementwise_math.hpp"
#include "kernels/launch.hpp"
#include "kernels/storage16.hpp"
#include "kernels/wide_types.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

const char* ew_op_name(EwOp op) {
  static const char* names[] = {
      "input", "constant", "neg", "abs", "sign", "exp", "log", "sqrt", "rsqrt", "sin", "cos",
      "tanh", "sigmoid", "relu", "square", "reciprocal", "tan", "arcsin", "arccos", "arctan", "erf",
      "erfinv", "expm1", "log1p", "sinh", "cosh", "exp2", "log2", "asinh", "acosh", "atanh",
      "floor", "ceil", "trunc", "round", "logical_not", "convert", "add", "sub", "mul", "div", "floor_divide", "remainder", "pow",
      "maximum", "minimum", "arctan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
      "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "where"};
  return names[static_cast<int>(op)];
}

int ew_arity(EwOp op) {
  if (op == EwOp::input || op == EwOp::constant) return 0;
  if (op <= EwOp::cast) return 1;
  if (op == EwOp::where) return 3;
  return 2;
}

std::string EwProgram::to_string(const std::vector<std::string>& input_names) const {
  std::vector<std::string> text(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const EwNode& n = nodes[i];
    if (n.op == EwOp::input) {
      const size_t k = static_cast<size_t>(n.input);
      text[i] = k < input_names.size() && !input_names[k].empty() ? input_names[k]
                                                                  : "in" + std::to_string(n.input);
    } else if (n.op == EwOp::constant) {
      if (is_floating(n.dtype)) {
        float f;
        std::memcpy(&f, &n.bits, 4);
        std::ostringstream s;
        s << f;
        text[i] = s.str();
      } else {
        text[i] = std::to_string(static_cast<int32_t>(n.bits));
      }
    } else {
      text[i] = std::string(ew_op_name(n.op)) + "(" + text[n.a];
      if (n.b >= 0) text[i] += ", " + text[n.b];
      if (n.c >= 0) text[i] += ", " + text[n.c];
      text[i] += ")";
    }
  }
  return text.empty() ? "" : text.back();
}

namespace {

std::string type_name(DType dtype, int width) { return ew_type_name(dtype, width); }

std::string compare(EwOp op, const std::string& a, const std::string& b, int width) {
  if (width == 4) {
    const char* f = op == EwOp::eq   ? "equal"
                    : op == EwOp::ne ? "notEqual"
                    : op == EwOp::lt ? "lessThan"
                    : op == EwOp::le ? "lessThanEqual"
                    : op == EwOp::gt ? "greaterThan"
                                     : "greaterThanEqual";
    return std::string(f) + "(" + a + ", " + b + ")";
  }
  const char* o = op == EwOp::eq   ? "=="
                  : op == EwOp::ne ? "!="
                  : op == EwOp::lt ? "<"
                  : op == EwOp::le ? "<="
                  : op == EwOp::gt ? ">"
                                   : ">=";
  return "(" + a + " " + o + " " + b + ")";
}

std::string node_expr(const EwProgram& p, size_t i, int width, MathMode math) {
  const EwNode& n = p.nodes[i];
  const std::string T = type_name(n.dtype, width);
  const std::string a = n.a >= 0 ? "v" + std::to_string(n.a) : "";
  const std::string b = n.b >= 0 ? "v" + std::to_string(n.b) : "";
  const std::string c = n.c >= 0 ? "v" + std::to_string(n.c) : "";
  const DType in = n.a >= 0 ? p.nodes[n.a].dtype : n.dtype;
  if ((!math.fast_math || library_only(n.op)) && is_library_float(n.dtype) && n.op != EwOp::input && n.op != EwOp::constant)
    if (const char* f = library_function(n.op, math.float64)) {
      std::string call = std::string(f) + "(" + a;
      if (n.b >= 0) call += ", " + b;
      return call + ")";
    }
  if (n.dtype == DType::float64)
    if (const char* f = ew_library_function_f64(n.op)) return std::string(f) + "(" + a + (n.b >= 0 ? ", " + b : "") + ")";
  switch (n.op) {
    case EwOp::input:
      return "load" + std::to_string(n.input);
    case EwOp::constant:
      // A float +0.0 is read from the push constants (always 0): llvmpipe folds a literal zero
      // operand away (x * 0 -> 0 for inf and NaN too, x / 0 -> undefined), which numpy does not.
      return ew_constant(n.bits, n.dtype, T);
    case EwOp::neg: return "(-" + a + ")";
    case EwOp::abs: return "abs(" + a + ")";
    case EwOp::sign: return is_floating(n.dtype) ? "mv_sign(" + a + ")" : "sign(" + a + ")";
    case EwOp::exp: return "exp(" + a + ")";
    case EwOp::log: return "log(" + a + ")";
    case EwOp::sqrt: return "sqrt(" + a + ")";
    case EwOp::rsqrt: return "inversesqrt(" + a + ")";
    case EwOp::sin: return "sin(" + a + ")";
    case EwOp::cos: return "cos(" + a + ")";
    case EwOp::tan: return "tan(" + a + ")";
    case EwOp::asin: return "asin(" + a + ")";
    case EwOp::acos: return "acos(" + a + ")";
    case EwOp::atan: return "atan(" + a + ")";
    case EwOp::atan2: return "atan(" + a + ", " + b + ")";
    case EwOp::erf: case EwOp::erfinv: return "";  // always the library's (library_only)
    case EwOp::tanh: return "mv_tanh(" + a + ")";
    case EwOp::sigmoid: return "(" + T + "(1.0) / (" + T + "(1.0) + exp(-" + a + ")))";
    case EwOp::relu: return is_floating(n.dtype) ? "mv_max(" + a + ", " + T + "(0.0))" : "max(" + a + ", " + T + "(0))";
    case EwOp::square: return "(" + a + " * " + a + ")";
    case EwOp::reciprocal: return "(" + T + "(1.0) / " + a + ")";
    case EwOp::expm1: return "(exp(" + a + ") - " + T + "(1.0))";
    case EwOp::log1p: return "log(" + T + "(1.0) + " + a + ")";
    case EwOp::sinh: return "sinh(" + a + ")";
    case EwOp::cosh: return "cosh(" + a + ")";
    case EwOp::exp2: return "exp2(" + a + ")";
    case EwOp::log2: return "log2(" + a + ")";
    case EwOp::asinh: return "asinh(" + a + ")";
    case EwOp::acosh: return "acosh(" + a + ")";
    case EwOp::atanh: return "atanh(" + a + ")";
    // Exact in Vulkan (the SPIR-V precision table); float64's from the bits (wide_types.cpp).
    case EwOp::floor: return (n.dtype == DType::float64 ? "mv_floor64(" : "floor(") + a + ")";
    case EwOp::ceil: return (n.dtype == DType::float64 ? "mv_ceil64(" : "ceil(") + a + ")";
    case EwOp::trunc: return (n.dtype == DType::float64 ? "mv_trunc64(" : "trunc(") + a + ")";
    case EwOp::round_even: return (n.dtype == DType::float64 ? "mv_round_even64(" : "roundEven(") + a + ")";
    case EwOp::logical_not: return width == 4 ? "not(" + a + ")" : "(!" + a + ")";
    case EwOp::cast:
      if (n.dtype == DType::bool_)
        return width == 4 ? "notEqual(" + a + ", " + type_name(in, 4) + "(0))" : "(" + a + " != " + type_name(in, 1) + "(0))";
      // An integer or bool the compiler knows to be 0 (d * 0, d ^ d, d != d) would reach the float
      // arithmetic as a literal 0.0, which llvmpipe folds as if there were no inf or NaN (x / 0.0
      // left the result unwritten; 0.0 / x gave 0): plus the push constants' zero, it is opaque
      // (exact: a converted integer is never -0; llvmpipe turned 0.0 - zero into -zero).
      if (is_floating(n.dtype) && !is_floating(in))
        return "(" + T + "(" + a + ") + " + T + "(uintBitsToFloat(pc.zero)))";
      return T + "(" + a + ")";
    case EwOp::add: return "(" + a + " + " + b + ")";
    case EwOp::sub: return "(" + a + " - " + b + ")";
    case EwOp::mul: return "(" + a + " * " + b + ")";
    case EwOp::div:
      return math.div64 && !math.fast_math && is_library_float(in) ? "mvk_div64(" + a + ", " + b + ")"
                                                : "(" + a + " / " + b + ")";
    case EwOp::floordiv: return "mv_floordiv(" + a + ", " + b + ")";
    case EwOp::mod: return "mv_mod(" + a + ", " + b + ")";
    case EwOp::pow: return "mv_pow(" + a + ", " + b + ")";
    case EwOp::maximum: return is_floating(in) ? "mv_max(" + a + ", " + b + ")" : "max(" + a + ", " + b + ")";
    case EwOp::minimum: return is_floating(in) ? "mv_min(" + a + ", " + b + ")" : "min(" + a + ", " + b + ")";
    case EwOp::eq: case EwOp::ne: case EwOp::lt: case EwOp::le: case EwOp::gt: case EwOp::ge:
      return compare(n.op, a, b, width);
    case EwOp::logical_and:
      return width == 4 ? "bvec4(uvec4(" + a + ") & uvec4(" + b + "))" : "(" + a + " && " + b + ")";
    case EwOp::logical_or:
      return width == 4 ? "bvec4(uvec4(" + a + ") | uvec4(" + b + "))" : "(" + a + " || " + b + ")";
    // int32 operands only (bools take the logical ops): GLSL's & | ^ work on int and ivec4.
    case EwOp::bitwise_and: return "(" + a + " & " + b + ")";
    case EwOp::bitwise_or: return "(" + a + " | " + b + ")";
    case EwOp::bitwise_xor: return "(" + a + " ^ " + b + ")";
    case EwOp::where:
      return width == 4 ? "mix(" + c + ", " + b + ", " + a + ")" : "(" + a + " ? " + b + " : " + c + ")";
  }
  return "";
}

// A node's value: a bfloat16 or float16 result is computed in float32 and rounded to its format
// right away, so a fused chain rounds after every op as XLA does (inputs and constants already are
// values of the format).
std::string rounded_expr(const EwProgram& p, size_t i, int width, MathMode math) {
  const EwNode& n = p.nodes[i];
  std::string e = node_expr(p, i, width, math);
  if (n.op == EwOp::input || n.op == EwOp::constant) return e;
  if (n.dtype == DType::bfloat16) return "mv_bf16(" + e + ")";
  if (n.dtype == DType::float16) return "mv_f16(" + e + ")";
  return ew_wrap(e, n.dtype, width);
}

// Whether the kernel rounds to, reads or writes a 16-bit format (kRound16Glsl and kStorage16Glsl).
bool uses_16bit(const EwProgram& p, std::span<const EwInput> inputs) {
  return std::any_of(p.nodes.begin(), p.nodes.end(), [](const EwNode& n) { return is_16bit(n.dtype); }) ||
         std::any_of(inputs.begin(), inputs.end(), [](const EwInput& in) { return is_16bit(in.dtype); });
}

// Whether the program or its inputs have a value of `dtype`.
bool uses(const EwProgram& p, std::span<const EwInput> inputs, DType dtype) {
  return std::any_of(p.nodes.begin(), p.nodes.end(), [&](const EwNode& n) { return n.dtype == dtype; }) ||
         std::any_of(inputs.begin(), inputs.end(), [&](const EwInput& in) { return in.dtype == dtype; });
}

std::string helpers_16bit(const EwProgram& p, std::span<const EwInput> inputs) {
  return (uses_16bit(p, inputs) ? std::string(kRound16Glsl) + kStorage16Glsl : std::string()) +
         ew_helpers64(uses(p, inputs, DType::int64), uses(p, inputs, DType::float64));
}

const char* out_element(DType dtype, int width) { return ew_out_element(dtype, width); }

constexpr int kWorkgroup = 64;

// The start of every elementwise kernel. Where the adapter allows it, float32 arithmetic keeps
// infinities, NaN and signed zeros (SPIR-V SignedZeroInfNanPreserve): otherwise compilers may
// rewrite x - x to 0 or x * 1 + x * 0 to x, which numpy does not (inf - inf is NaN). Where it
// allows that too, subnormal results are kept (DenormPreserve), as the math library's results
// near underflow (exp(-100)) need.
std::string kernel_prologue(bool preserve_inf_nan, bool preserve_denorm, DType out_dtype, bool int64) {
  std::string s = "#version 450\n";
  if (is_16bit(out_dtype)) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  s += ew_extensions(is_8bit(out_dtype), int64);
  return s + float_controls(preserve_inf_nan, preserve_denorm) + "layout(local_size_x = " +
         std::to_string(kWorkgroup) + ") in;\n";
}

// The kernel's outputs: `o` for the first, o1, o2, ... for more (record_elementwise_outputs),
// each of its node's dtype, bound after the inputs.
std::string output_declarations(const EwProgram& p, std::span<const int> results, size_t first_binding, int width) {
  std::string s;
  for (size_t j = 0; j < results.size(); ++j)
    s += "layout(std430, binding = " + std::to_string(first_binding + j) + ") writeonly buffer Out" +
         (j ? std::to_string(j) : std::string()) + " { " + out_element(p.nodes[results[j]].dtype, width) + " o" +
         (j ? std::to_string(j) : std::string()) + "[]; };\n";
  return s;
}

std::string output_stores(const EwProgram& p, std::span<const int> results, int width, const std::string& indent) {
  std::string s;
  for (size_t j = 0; j < results.size(); ++j)
    s += indent + "o" + (j ? std::to_string(j) : std::string()) + "[i] = " +
         ew_encode("v" + std::to_string(results[j]), p.nodes[results[j]].dtype, width) + ";\n";
  return s;
}

// How a vector kernel reads an input, one vec4 (four adjacent output elements) at a time.
enum class VectorRead {
  same,   // in the output's own layout: the texel at the output's index
  one,    // one element for all (pc.off)
  row,    // broadcast or strided rows read whole: the output's last dimension is the input's
          // contiguous one (stride 1), the offset and every other stride multiples of 4
  splat,  // stride 0 along the last dimension: one element per row, the same for its four
};

// Which VectorRead each input takes where the output's last dimension is a multiple of 4, or
// nothing where some input needs the scalar kernel (a transpose, an unaligned row).
std::optional<std::vector<VectorRead>> vector_reads(std::span<const EwInput> inputs, const Shape& shape) {
  std::vector<VectorRead> reads;
  const bool rows = !shape.empty() && shape.back() % 4 == 0;
  for (const EwInput& in : inputs) {
    if (in.mode == EwInput::Mode::same) {
      reads.push_back(VectorRead::same);
    } else if (in.mode == EwInput::Mode::scalar) {
      reads.push_back(VectorRead::one);
    } else if (!rows) {
      return std::nullopt;
    } else if (in.strides.back() == 0) {
      reads.push_back(VectorRead::splat);
    } else if (in.strides.back() == 1 && in.offset % 4 == 0 &&
               std::all_of(in.strides.begin(), in.strides.end() - 1, [](int64_t s) { return s % 4 == 0; })) {
      reads.push_back(VectorRead::row);
    } else {
      return std::nullopt;
    }
  }
  return reads;
}

// Vector kernels: each invocation loads whole vec4 texels, which lavapipe reads fastest; inputs
// broadcast along rows (a bias, a mean over the last axis) find their texel from the coordinates
// of the vec4's first element, one division chain per four elements (the scalar kernel pays one
// per element, and a scalar fetch per element and input). In both kinds of kernel every value is
// `precise` (NoContraction): x * y + z rounds twice, as numpy does, on every adapter (GPU
// compilers fuse it into an fma otherwise).
std::string vector_kernel(const EwProgram& p, std::span<const int> results, std::span<const EwInput> inputs,
                          std::span<const VectorRead> reads, const Shape& shape, DType out_dtype,
                          int per_invocation, bool preserve_inf_nan, bool preserve_denorm, MathMode math) {
  std::ostringstream g;
  g << kernel_prologue(preserve_inf_nan, preserve_denorm, out_dtype, uses(p, inputs, DType::int64));
  for (size_t k = 0; k < inputs.size(); ++k)
    g << "layout(binding = " << k << ") uniform usamplerBuffer in" << k << ";\n";
  g << output_declarations(p, results, inputs.size(), 4);
  g << "layout(push_constant) uniform Params { uint n; uint base; uint zero; int off[" << std::max<size_t>(inputs.size(), 1) << "]; } pc;\n";
  g << division_prelude(math) << kEwHelpersGlsl << helpers_16bit(p, inputs) << library_functions(p, math);
  g << "void main() {\n  const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;\n";
  g << "  for (uint u = 0u; u < " << per_invocation << "u; ++u) {\n";
  g << "    const uint i = (wg * " << per_invocation << "u + u) * " << kWorkgroup << "u + gl_LocalInvocationID.x;\n";
  g << "    if (i >= pc.n) return;\n";
  const bool coordinates = std::any_of(reads.begin(), reads.end(), [](VectorRead r) {
    return r == VectorRead::row || r == VectorRead::splat;
  });
  if (coordinates) {
    // pc.base is the piece's first element (a multiple of 4: chunks are whole kilo-elements).
    g << "    uint rest = pc.base + i * 4u;\n";
    for (size_t d = shape.size(); d-- > 0;)
      g << "    const uint c" << d << " = rest % " << std::max<int64_t>(shape[d], 1) << "u; rest /= "
        << std::max<int64_t>(shape[d], 1) << "u;\n";
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string T = type_name(inputs[k].dtype, 4);
    const std::string in = "in" + std::to_string(k), off = "pc.off[" + std::to_string(k) + "]";
    std::string index = off;
    if (reads[k] == VectorRead::row || reads[k] == VectorRead::splat)
      for (size_t d = 0; d < shape.size(); ++d) {
        const int64_t s = inputs[k].strides[d];
        if (s == 0) continue;
        if (reads[k] == VectorRead::row)  // texels of 4 elements: every stride divides by 4
          index += d + 1 == shape.size() ? " + int(c" + std::to_string(d) + " >> 2u)"
                                         : " + int(c" + std::to_string(d) + ") * " + std::to_string(s / 4);
        else
          index += " + int(c" + std::to_string(d) + ") * " + std::to_string(s);
      }
    g << "    const " << T << " load" << k << " = ";
    switch (reads[k]) {
      case VectorRead::same: g << ew_decode("texelFetch(" + in + ", int(i))", inputs[k].dtype, 4); break;
      case VectorRead::row: g << ew_decode("texelFetch(" + in + ", " + index + ")", inputs[k].dtype, 4); break;
      case VectorRead::one:
      case VectorRead::splat:
        g << T << "(" << ew_decode("texelFetch(" + in + ", " + index + ").x", inputs[k].dtype, 1) << ")";
        break;
    }
    g << ";\n";
  }
  for (size_t i = 0; i < p.nodes.size(); ++i)
    g << "    precise const " << type_name(p.nodes[i].dtype, 4) << " v" << i << " = " << rounded_expr(p, i, 4, math) << ";\n";
  g << output_stores(p, results, 4, "    ") << "  }\n}\n";
  return g.str();
}

// Scalar kernels: some input is broadcast or strided, so each element finds its inputs through
// its coordinates in the output piece (shapes and strides are compiled in).
std::string strided_kernel(const EwProgram& p, std::span<const int> results, std::span<const EwInput> inputs, DType out_dtype,
                           const Shape& shape, bool preserve_inf_nan, bool preserve_denorm, MathMode math) {
  std::ostringstream g;
  g << kernel_prologue(preserve_inf_nan, preserve_denorm, out_dtype, uses(p, inputs, DType::int64));
  for (size_t k = 0; k < inputs.size(); ++k)
    g << "layout(binding = " << k << ") uniform usamplerBuffer in" << k << ";\n";
  g << output_declarations(p, results, inputs.size(), 1);
  g << "layout(push_constant) uniform Params { uint n; uint base; uint zero; int off[" << std::max<size_t>(inputs.size(), 1) << "]; } pc;\n";
  g << division_prelude(math) << kEwHelpersGlsl << helpers_16bit(p, inputs) << library_functions(p, math);
  g << "void main() {\n  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * " << kWorkgroup
    << "u + gl_LocalInvocationID.x;\n  if (i >= pc.n) return;\n  uint rest = pc.base + i;\n";
  for (size_t d = shape.size(); d-- > 0;) {
    g << "  const uint c" << d << " = rest % " << std::max<int64_t>(shape[d], 1) << "u; rest /= "
      << std::max<int64_t>(shape[d], 1) << "u;\n";
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string index;
    if (inputs[k].mode == EwInput::Mode::same) {
      index = "int(i)";
    } else {
      index = "pc.off[" + std::to_string(k) + "]";
      if (inputs[k].mode == EwInput::Mode::strided)
        for (size_t d = 0; d < shape.size(); ++d)
          if (inputs[k].strides[d] != 0) index += " + int(c" + std::to_string(d) + ") * " + std::to_string(inputs[k].strides[d]);
    }
    g << "  const " << type_name(inputs[k].dtype, 1) << " load" << k << " = "
      << ew_decode("texelFetch(in" + std::to_string(k) + ", " + index + ")" + ew_fetch_component(inputs[k].dtype), inputs[k].dtype, 1) << ";\n";
  }
  for (size_t i = 0; i < p.nodes.size(); ++i)
    g << "  precise const " << type_name(p.nodes[i].dtype, 1) << " v" << i << " = " << rounded_expr(p, i, 1, math) << ";\n";
  g << output_stores(p, results, 1, "  ") << "}\n";
  return g.str();
}

}  // namespace

void record_elementwise(detail::RuntimeState& rt, detail::Recording& rec, const EwProgram& p,
                        std::span<const EwInput> inputs, const Shape& shape,
                        const detail::DeviceBuffer& out, uint64_t out_start) {
  const int last = static_cast<int>(p.nodes.size()) - 1;
  const detail::DeviceBuffer* outs[] = {&out};
  record_elementwise_outputs(rt, rec, p, std::span<const int>(&last, 1), inputs, shape, outs, out_start);
}

// What an elementwise kernel with these results over `shape` costs.
static OpCost elementwise_outputs_cost(const EwProgram& p, std::span<const int> results,
                                       std::span<const EwInput> inputs, const Shape& shape) {
  const uint64_t n = static_cast<uint64_t>(shape_size(shape));
  OpCost c = elementwise_cost(p, inputs, shape, n);
  c.bytes += (results.size() - 1) * n * 4;  // the other results' stores
  return c;
}

void count_elementwise_outputs(detail::Recording& rec, const EwProgram& p, std::span<const int> results,
                               std::span<const EwInput> inputs, const Shape& shape) {
  if (shape_size(shape) == 0) return;
  const CountedOp counted_op(rec, [&] { return elementwise_outputs_cost(p, results, inputs, shape); },
                             OpKind::elementwise, p.nodes[results.front()].dtype);
}

void record_elementwise_outputs(detail::RuntimeState& rt, detail::Recording& rec, const EwProgram& p,
                                std::span<const int> results, std::span<const EwInput> inputs, const Shape& shape,
                                std::span<const detail::DeviceBuffer* const> outs, uint64_t out_start,
                                uint64_t counted) {
  const uint64_t count = static_cast<uint64_t>(shape_size(shape));
  if (count == 0) return;
  if (results.empty() || results.size() != outs.size())
    throw Error("internal: an elementwise kernel needs one buffer per result");
  for (const int r : results)
    if (results.size() > 1 && dtype_size(p.nodes[r].dtype) != 4)
      throw Error("internal: an elementwise kernel with several results takes 32-bit ones only");
  const DType out_dtype = p.nodes[results.front()].dtype;
  const CountedOp counted_op(rec, [&] {
    const uint64_t n = counted ? counted : count;
    return elementwise_outputs_cost(p, results, inputs, counted ? Shape{static_cast<int64_t>(n)} : shape);
  }, OpKind::elementwise, out_dtype);
  // 64-bit values are read as uvec2 texels, one element each: scalar kernels only.
  const bool wide = uses(p, inputs, DType::int64) || uses(p, inputs, DType::float64);
  const std::optional<std::vector<VectorRead>> reads = wide ? std::nullopt : vector_reads(inputs, shape);
  const bool vector = reads.has_value();
  // lavapipe amortizes its per-invocation cost over several vec4s; GPUs want one per thread.
  // The float64 sin, cos and tan amortize their constants (2/pi's words, the coefficients) over
  // 8 (2*sin(x)+1: 44 -> 40 x86 instructions per element, measured with callgrind; plain
  // arithmetic is slower at 8).
  const vk::Adapter& adapter = rt.device_for(rec.device).adapter();
  const MathMode math = math_mode(rt, adapter);
  const int per_invocation = !adapter.is_cpu() ? 1 : calls_float64_trig(p, math) ? 8 : 4;
  const bool preserve_inf_nan = adapter.preserves_inf_nan32;
  const bool preserve_denorm = adapter.preserves_denorm32;
  const std::string glsl =
      vector ? vector_kernel(p, results, inputs, *reads, shape, out_dtype, per_invocation, preserve_inf_nan,
                             preserve_denorm, math)
             : strided_kernel(p, results, inputs, out_dtype, shape, preserve_inf_nan, preserve_denorm, math);
  struct Params {
    uint32_t n, base, zero;
    int32_t off[kMaxKernelInputs];
  } params{};
  if (inputs.size() > kMaxKernelInputs) throw Error("internal: a fused elementwise kernel takes at most 16 inputs");
  const uint32_t push_bytes = 12 + 4 * static_cast<uint32_t>(std::max<size_t>(inputs.size(), 1));

  if (is_16bit(out_dtype)) require_storage16(rt, rec.device);
  for (const DType d : {DType::int8, DType::uint8, DType::int64, DType::float64})
    if (uses(p, inputs, d)) require_dtype(rt, rec.device, d);
  // Chunks keep every binding inside maxStorageBufferRange.
  const uint64_t max_bytes = rt.device_limits().maxStorageBufferRange;
  const uint64_t chunk = std::max<uint64_t>(max_bytes / 4 / 1024 * 1024, 1024);
  for (uint64_t base = 0; base < count; base += chunk) {
    const uint64_t n = std::min(chunk, count - base);
    std::vector<Binding> bindings;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const EwInput& in = inputs[k];
      // 8- and 16-bit elements are read as 8- and 16-bit texels (uvec4 / uint of their bits),
      // 64-bit ones as two-word texels.
      const uint64_t size = dtype_size(in.dtype);
      const VkFormat one = ew_texel_format(in.dtype, false);
      if (in.mode == EwInput::Mode::same) {
        const uint64_t at = (in.start + base) * size;
        const uint64_t range = std::min<uint64_t>((n + 3) / 4 * 4 * size, in.buffer->capacity() - at);
        const VkFormat four = ew_texel_format(in.dtype, true);
        bindings.push_back(Binding::texels(*in.buffer, vector ? four : one, at,
                                           vector ? range / (4 * size) * (4 * size) : range / size * size));
        params.off[k] = 0;
      } else if (vector && (*reads)[k] == VectorRead::row) {
        const uint64_t texel = 4 * size;
        bindings.push_back(Binding::texels(*in.buffer, ew_texel_format(in.dtype, true), 0,
                                           in.buffer->capacity() / texel * texel));
        params.off[k] = static_cast<int32_t>(in.offset / 4);
      } else {
        bindings.push_back(Binding::texels(*in.buffer, one, 0, in.buffer->capacity() / size * size));
        params.off[k] = static_cast<int32_t>(in.offset);
      }
    }
    for (size_t j = 0; j < results.size(); ++j) {
      const detail::DeviceBuffer& out = *outs[j];
      const uint64_t out_size = dtype_size(p.nodes[results[j]].dtype);
      const uint64_t out_at = (out_start + base) * out_size;
      const uint64_t out_range =
          std::min<uint64_t>(vector ? (n + 3) / 4 * 4 * out_size : n * out_size, out.capacity() - out_at);
      bindings.push_back(Binding::storage(out, out_at, out_range));
    }
    params.base = static_cast<uint32_t>(base);
    const uint64_t items = vector ? (n + 3) / 4 : n;
    params.n = static_cast<uint32_t>(items);
    const uint64_t per_group = static_cast<uint64_t>(kWorkgroup) * (vector ? per_invocation : 1);
    dispatch(rt, rec, {"elementwise", glsl}, bindings, &params, push_bytes,
             groups_for(rt, (items + per_group - 1) / per_group));
  }
}

std::string float_controls(bool preserve_inf_nan, bool preserve_denorm) {
  std::string s;
  if (preserve_inf_nan || preserve_denorm) s += "#extension GL_EXT_spirv_intrinsics : require\n";
  if (preserve_inf_nan)
    s += "spirv_execution_mode(capabilities = [4466], 4461, 32);\n";  // SignedZeroInfNanPreserve, 32-bit
  if (preserve_denorm)
    s += "spirv_execution_mode(capabilities = [4464], 4459, 32);\n";  // DenormPreserve, 32-bit
  return s;
}

EwInlineText ew_inline_text(detail::RuntimeState& rt, const detail::Recording& rec, const EwProgram& p,
                            std::span<const EwInput> inputs) {
  const vk::Adapter& adapter = rt.device_for(rec.device).adapter();
  const MathMode math = math_mode(rt, adapter);
  EwInlineText t;
  t.result = static_cast<int>(p.nodes.size()) - 1;
  t.head = kernel_prologue(adapter.preserves_inf_nan32, adapter.preserves_denorm32, p.nodes.back().dtype,
                           uses(p, inputs, DType::int64));
  t.helpers = division_prelude(math) + kEwHelpersGlsl + helpers_16bit(p, inputs) + library_functions(p, math);
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    t.nodes += "  precise const " + type_name(p.nodes[i].dtype, 1) + " v" + std::to_string(i) + " = " +
               rounded_expr(p, i, 1, math) + ";\n";
    t.nodes4 += "  precise const " + type_name(p.nodes[i].dtype, 4) + " v" + std::to_string(i) + " = " +
                rounded_expr(p, i, 4, math) + ";\n";
  }
  return t;
}

}  // namespace meshvk::kernels

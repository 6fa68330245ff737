// Which of the math library's functions a fused elementwise kernel calls, and how it divides:
// the float64 variants where the adapter takes them, the correctly rounded division on GPUs.
#include "kernels/elementwise_math.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/mathlib.hpp"
#include "kernels/wide_types.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

namespace {

// Whether float32 division goes through the math library's correctly rounded mvk_div64: on
// adapters with the float64 variants whose own division may be inexact (every GPU: Vulkan
// allows 2.5 ulp); lavapipe's (LLVM's fdiv) is IEEE's already. MESHVK_DIV64=1 or 0 forces it
// either way (=1 needs the float64 variants), for tests on lavapipe.
bool takes_div64(const vk::Adapter& adapter, bool float64) {
  const char* forced = std::getenv("MESHVK_DIV64");
  if (forced && *forced) {
    const std::string f = forced;
    if (f != "0" && f != "1") throw Error("MESHVK_DIV64=" + f + " is not 0 or 1");
    return f == "1" && float64;
  }
  return float64 && !adapter.is_cpu();
}

}  // namespace

MathMode math_mode(detail::RuntimeState& rt, const vk::Adapter& adapter) {
  const bool float64 = rt.mathlib_float64(adapter);
  // Without DenormPreserve, whether float32 arithmetic flushes is the driver's choice: lavapipe
  // keeps subnormals (LLVM's default) without claiming it; NVIDIA's flushes them.
  return {rt.fast_math(), float64, !adapter.preserves_denorm32 && !adapter.is_cpu(),
          takes_div64(adapter, float64)};
}

// The math library's function for a float32 op (mathlib.hpp), or nullptr where the op is exact
// in GLSL or has no library function.
// float64: the adapter runs the float64 variants of sin, cos, tan, arctan2, exp, tanh, the
// logistic function, log, log2, log1p and erf (runtime_state.hpp).
const char* library_function(EwOp op, bool float64) {
  switch (op) {
    case EwOp::exp:
      return float64 ? "mvk_exp64" : "mvk_exp";
    case EwOp::sin:
      return float64 ? "mvk_sin64" : "mvk_sin";
    case EwOp::cos:
      return float64 ? "mvk_cos64" : "mvk_cos";
    case EwOp::tan:
      return float64 ? "mvk_tan64" : "mvk_tan";
    case EwOp::asin:
      return "mvk_asin";
    case EwOp::acos:
      return "mvk_acos";
    case EwOp::atan:
      return "mvk_atan";
    case EwOp::atan2:
      return float64 ? "mvk_atan2_64" : "mvk_atan2";
    case EwOp::erf:
      return float64 ? "mvk_erf64" : "mvk_erf";
    case EwOp::erfinv:
      return "mvk_erfinv";
    case EwOp::expm1:
      return "mvk_expm1";
    case EwOp::log:
      return float64 ? "mvk_log64" : "mvk_log";
    case EwOp::log1p:
      return float64 ? "mvk_log1p64" : "mvk_log1p";
    case EwOp::tanh:
      return float64 ? "mvk_tanh64" : "mvk_tanh";
    case EwOp::sigmoid:
      return float64 ? "mvk_logistic64" : "mvk_logistic";
    case EwOp::sinh:
      return "mvk_sinh";
    case EwOp::cosh:
      return "mvk_cosh";
    case EwOp::exp2:
      return "mvk_exp2";
    case EwOp::log2:
      return float64 ? "mvk_log2_64" : "mvk_log2";
    case EwOp::asinh:
      return "mvk_asinh";
    case EwOp::acosh:
      return "mvk_acosh";
    case EwOp::atanh:
      return "mvk_atanh";
    case EwOp::sqrt:
      return "mvk_sqrt";
    case EwOp::rsqrt:
      return "mvk_rsqrt";
    case EwOp::pow:
      return "mvk_pow";
    default:
      return nullptr;
  }
}

// The math library's float32 functions compute float32 (and the 16-bit formats through it);
// float64 elements take GLSL's double arithmetic or the library's float64-dtype functions
// (library_function_f64), and the graph layer refuses the ops neither has.
bool is_library_float(DType dtype) {
  return is_floating(dtype) && dtype != DType::float64;
}

// Ops GLSL has no built-in for: the library's function even under MESHVK_FAST_MATH=1.
bool library_only(EwOp op) {
  return op == EwOp::erf || op == EwOp::erfinv;
}

// What the helpers' floor division divides with: declared here, defined with the library.
std::string division_prelude(MathMode math) {
  if (!math.div64) return "#define MV_FDIV(a, b) ((a) / (b))\n";
  return "float mvk_div64(float a, float b);\n#define MV_FDIV(a, b) mvk_div64(a, b)\n";
}

// The library functions a program calls: under MESHVK_FAST_MATH=1 only those GLSL lacks.
std::string library_functions(const EwProgram& p, MathMode math) {
  std::vector<std::string> names;
  for (const EwNode& n : p.nodes)
    if (n.op != EwOp::input && n.op != EwOp::constant && is_library_float(n.dtype)) {
      if (const char* f = library_function(n.op, math.float64);
          f && (!math.fast_math || library_only(n.op)))
        names.push_back(f);
    } else if (n.dtype == DType::float64 && n.op != EwOp::input && n.op != EwOp::constant) {
      // GLSL has no double exp, log, sin ...: the library's, also under MESHVK_FAST_MATH=1.
      if (const char* f = ew_library_function_f64(n.op)) names.push_back(f);
    }
  if (math.div64) names.push_back("mvk_div64");  // the helpers' floor division calls it
  std::string narrow;
  // The float64 variants' one rounding to float (mathlib/*64.inc). An adapter that flushes
  // float32 subnormals in arithmetic may keep them in a conversion from double (NVIDIA's does):
  // flushed here as well, every float32 result is flushed alike, as x86's are with FTZ set.
  if (math.float64 && !names.empty())
    narrow = math.flushes_subnormals
                 ? "float mvk_narrow64(double y) {\n"
                   "  const uint b = floatBitsToUint(float(y));\n"
                   "  return uintBitsToFloat((b & 0x7f800000u) == 0u ? b & 0x80000000u : b);\n}\n"
                 : "float mvk_narrow64(double y) { return float(y); }\n";
  return narrow + mathlib::glsl_functions(names);
}

// Whether the program calls the float64 variant of sin, cos or tan.
bool calls_float64_trig(const EwProgram& p, MathMode math) {
  return math.float64 && !math.fast_math &&
         std::any_of(p.nodes.begin(), p.nodes.end(), [](const EwNode& n) {
           return is_library_float(n.dtype) &&
                  (n.op == EwOp::sin || n.op == EwOp::cos || n.op == EwOp::tan);
         });
}

}  // namespace meshvk::kernels

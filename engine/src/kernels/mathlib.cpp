#include "kernels/mathlib.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include "meshvk/error.hpp"

namespace meshvk::kernels::mathlib {

namespace {

#define MVK_MATH_SOURCE(...) #__VA_ARGS__

struct Entry {
  const char* name;  // the public function ("mvk_exp"), or the helper file's name ("mvk_common")
  int arity;         // of the public function; 0 for helper files (no vec4 overload)
  const char* source;
  std::array<const char*, 4> deps;  // entries called, nullptr-terminated
};

// One entry per file, its #include inside the initializer.
// clang-format off
const Entry kEntries[] = {
    {"mvk_common", 0,
#include "kernels/mathlib/common.inc"
     , {}},
    {"mvk_exp", 1,
#include "kernels/mathlib/exp.inc"
     , {"mvk_common"}},
    {"mvk_trig", 0,
#include "kernels/mathlib/trig.inc"
     , {"mvk_common"}},
    {"mvk_sin", 1,
#include "kernels/mathlib/sin.inc"
     , {"mvk_trig"}},
    {"mvk_cos", 1,
#include "kernels/mathlib/cos.inc"
     , {"mvk_trig"}},
    {"mvk_tan", 1,
#include "kernels/mathlib/tan.inc"
     , {"mvk_trig"}},
    {"mvk_trig64", 0,
#include "kernels/mathlib/trig64.inc"
     , {}},
    {"mvk_sin64", 1,
#include "kernels/mathlib/sin64.inc"
     , {"mvk_trig64"}},
    {"mvk_cos64", 1,
#include "kernels/mathlib/cos64.inc"
     , {"mvk_trig64"}},
    {"mvk_tan64", 1,
#include "kernels/mathlib/tan64.inc"
     , {"mvk_trig64"}},
    {"mvk_div64", 2,
#include "kernels/mathlib/div64.inc"
     , {"mvk_trig64"}},
    {"mvk_exp64", 1,
#include "kernels/mathlib/exp64.inc"
     , {"mvk_trig64"}},
    {"mvk_tanh64", 1,
#include "kernels/mathlib/tanh64.inc"
     , {"mvk_exp64"}},
    {"mvk_logistic64", 1,
#include "kernels/mathlib/logistic64.inc"
     , {"mvk_exp64"}},
    {"mvk_log64", 1,
#include "kernels/mathlib/log64.inc"
     , {"mvk_trig64"}},
    {"mvk_log2_64", 1,
#include "kernels/mathlib/log2_64.inc"
     , {"mvk_log64"}},
    {"mvk_log1p64", 1,
#include "kernels/mathlib/log1p64.inc"
     , {"mvk_log64"}},
    {"mvk_erf64", 1,
#include "kernels/mathlib/erf64.inc"
     , {"mvk_trig64"}},
    {"mvk_atan", 1,
#include "kernels/mathlib/atan.inc"
     , {"mvk_common"}},
    {"mvk_atan2", 2,
#include "kernels/mathlib/atan2.inc"
     , {"mvk_atan"}},
    {"mvk_atan2_64", 2,
#include "kernels/mathlib/atan2_64.inc"
     , {"mvk_trig64"}},
    {"mvk_asin", 1,
#include "kernels/mathlib/asin.inc"
     , {"mvk_common"}},
    {"mvk_acos", 1,
#include "kernels/mathlib/acos.inc"
     , {"mvk_asin"}},
    {"mvk_erf", 1,
#include "kernels/mathlib/erf.inc"
     , {"mvk_common"}},
    {"mvk_erfinv", 1,
#include "kernels/mathlib/erfinv.inc"
     , {"mvk_erf", "mvk_asin"}},
    {"mvk_expm1", 1,
#include "kernels/mathlib/expm1.inc"
     , {"mvk_exp"}},
    {"mvk_log", 1,
#include "kernels/mathlib/log.inc"
     , {"mvk_common"}},
    {"mvk_log1p", 1,
#include "kernels/mathlib/log1p.inc"
     , {"mvk_log_ff"}},
    {"mvk_tanh", 1,
#include "kernels/mathlib/tanh.inc"
     , {"mvk_expm1"}},
    {"mvk_logistic", 1,
#include "kernels/mathlib/logistic.inc"
     , {"mvk_exp"}},
    {"mvk_sinh", 1,
#include "kernels/mathlib/sinh.inc"
     , {"mvk_expm1"}},
    {"mvk_cosh", 1,
#include "kernels/mathlib/cosh.inc"
     , {"mvk_exp"}},
    {"mvk_exp2", 1,
#include "kernels/mathlib/exp2.inc"
     , {"mvk_exp"}},
    {"mvk_log2", 1,
#include "kernels/mathlib/log2.inc"
     , {"mvk_common"}},
    {"mvk_log_ff", 0,
#include "kernels/mathlib/log_ff.inc"
     , {"mvk_common"}},
    {"mvk_pow", 2,
#include "kernels/mathlib/pow.inc"
     , {"mvk_log_ff", "mvk_exp"}},
    {"mvk_sqrt", 1,
#include "kernels/mathlib/sqrt.inc"
     , {"mvk_common"}},
    {"mvk_rsqrt", 1,
#include "kernels/mathlib/rsqrt.inc"
     , {"mvk_sqrt"}},
    {"mvk_asinh", 1,
#include "kernels/mathlib/asinh.inc"
     , {"mvk_log_ff", "mvk_sqrt"}},
    {"mvk_acosh", 1,
#include "kernels/mathlib/acosh.inc"
     , {"mvk_log_ff", "mvk_sqrt"}},
    {"mvk_atanh", 1,
#include "kernels/mathlib/atanh.inc"
     , {"mvk_log_ff"}},
    // The float64-dtype functions (f64/): files named as their helpers are (no vec4 overloads:
    // 64-bit elements are computed one per invocation); kF64Functions names what each defines.
    {"mvk_f64_dd", 0,
#include "kernels/mathlib/f64/dd.inc"
     , {"mvk_trig64"}},
    {"mvk_f64_exp", 0,
#include "kernels/mathlib/f64/exp.inc"
     , {"mvk_f64_dd"}},
    {"mvk_f64_log", 0,
#include "kernels/mathlib/f64/log.inc"
     , {"mvk_f64_dd"}},
    {"mvk_f64_hyperbolic", 0,
#include "kernels/mathlib/f64/hyperbolic.inc"
     , {"mvk_f64_exp"}},
    {"mvk_f64_pow", 0,
#include "kernels/mathlib/f64/pow.inc"
     , {"mvk_f64_exp", "mvk_f64_log"}},
    {"mvk_f64_trig", 0,
#include "kernels/mathlib/f64/trig.inc"
     , {"mvk_f64_dd"}},
    {"mvk_f64_erf", 0,
#include "kernels/mathlib/f64/erf.inc"
     , {"mvk_f64_exp"}},
    {"mvk_f64_erfinv", 0,
#include "kernels/mathlib/f64/erfinv.inc"
     , {"mvk_f64_erf", "mvk_f64_log"}},
    {"mvk_f64_atan", 0,
#include "kernels/mathlib/f64/atan.inc"
     , {"mvk_f64_dd"}},
    {"mvk_f64_ahyperbolic", 0,
#include "kernels/mathlib/f64/ahyperbolic.inc"
     , {"mvk_f64_log"}},
};

// The float64-dtype functions and the file (entry) defining each.
struct F64Function {
  const char* name;
  const char* file;
};
const F64Function kF64Functions[] = {
    {"mvk_exp_f64", "mvk_f64_exp"},         {"mvk_exp2_f64", "mvk_f64_exp"},
    {"mvk_expm1_f64", "mvk_f64_exp"},       {"mvk_log_f64", "mvk_f64_log"},
    {"mvk_log1p_f64", "mvk_f64_log"},       {"mvk_log2_f64", "mvk_f64_log"},
    {"mvk_log10_f64", "mvk_f64_log"},       {"mvk_tanh_f64", "mvk_f64_hyperbolic"},
    {"mvk_logistic_f64", "mvk_f64_hyperbolic"}, {"mvk_sinh_f64", "mvk_f64_hyperbolic"},
    {"mvk_cosh_f64", "mvk_f64_hyperbolic"}, {"mvk_pow_f64", "mvk_f64_pow"},
    {"mvk_sin_f64", "mvk_f64_trig"},        {"mvk_cos_f64", "mvk_f64_trig"},
    {"mvk_tan_f64", "mvk_f64_trig"},        {"mvk_erf_f64", "mvk_f64_erf"},
    {"mvk_atan_f64", "mvk_f64_atan"},       {"mvk_atan2_f64", "mvk_f64_atan"},
    {"mvk_asin_f64", "mvk_f64_atan"},       {"mvk_acos_f64", "mvk_f64_atan"},
    {"mvk_asinh_f64", "mvk_f64_ahyperbolic"}, {"mvk_acosh_f64", "mvk_f64_ahyperbolic"},
    {"mvk_atanh_f64", "mvk_f64_ahyperbolic"}, {"mvk_erfinv_f64", "mvk_f64_erfinv"},
};
// clang-format on

#undef MVK_MATH_SOURCE

const Entry& entry(std::string_view name) {
  for (const Entry& e : kEntries)
    if (name == e.name) return e;
  throw Error("internal: no math library function " + std::string(name));
}

void append(std::string& out, std::vector<std::string_view>& done, const Entry& e) {
  if (std::find(done.begin(), done.end(), e.name) != done.end()) return;
  for (const char* d : e.deps)
    if (d) append(out, done, entry(d));
  done.push_back(e.name);
  out += e.source;
  out += '\n';
}

}  // namespace

std::string glsl_functions(const std::vector<std::string>& requested) {
  std::vector<std::string> names;
  for (std::string n : requested) {
    for (const F64Function& f : kF64Functions)
      if (n == f.name) n = f.file;
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::string out;
  std::vector<std::string_view> done;
  for (const std::string& n : names) append(out, done, entry(n));
  for (const std::string& n : names) {
    const Entry& e = entry(n);
    if (e.arity == 1)
      out += "vec4 " + n + "(vec4 x) { return vec4(" + n + "(x.x), " + n + "(x.y), " + n +
             "(x.z), " + n + "(x.w)); }\n";
    else if (e.arity == 2)
      out += "vec4 " + n + "(vec4 a, vec4 b) { return vec4(" + n + "(a.x, b.x), " + n +
             "(a.y, b.y), " + n + "(a.z, b.z), " + n + "(a.w, b.w)); }\n";
  }
  return out;
}

}  // namespace meshvk::kernels::mathlib

#include "kernels/wide_types.hpp"

#include "kernels/elementwise.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

void require_dtype(detail::RuntimeState& rt, int device, DType dtype) {
  const vk::Adapter& adapter = rt.device_for(device).adapter();
  const char* missing = nullptr;
  if (is_8bit(dtype) && !adapter.storage8)
    missing = "storageBuffer8BitAccess";
  else if (is_8bit(dtype) && !adapter.int8)
    missing = "shaderInt8";
  else if (dtype == DType::int64 && !adapter.int64)
    missing = "shaderInt64";
  else if (dtype == DType::float64 && !adapter.float64)
    missing = "shaderFloat64";
  if (!missing) return;
  throw Error(std::string(dtype_name(dtype)) + " arrays need the Vulkan feature " + missing +
              ", which adapter " + adapter.name + " lacks; use " +
              (is_floating(dtype) ? "DType::float32" : "DType::int32") + " on this adapter");
}

std::string ew_type_name(DType dtype, int width) {
  switch (dtype) {
    case DType::float32:
    case DType::bfloat16:
    case DType::float16:
      return width == 4 ? "vec4" : "float";
    case DType::int32:
    case DType::int8:
    case DType::uint8:
      return width == 4 ? "ivec4" : "int";
    case DType::bool_:
      return width == 4 ? "bvec4" : "bool";
    case DType::uint32:
      return width == 4 ? "uvec4" : "uint";
    case DType::int64:
      return width == 4 ? "i64vec4" : "int64_t";
    case DType::float64:
      return width == 4 ? "dvec4" : "double";
  }
  return "";
}

const char* ew_fetch_component(DType dtype) {
  return is_64bit(dtype) ? ".xy" : ".x";
}

std::string ew_decode(const std::string& raw, DType dtype, int width) {
  switch (dtype) {
    case DType::float32:
      return "uintBitsToFloat(" + raw + ")";
    case DType::bfloat16:
      return "mv_from_bf16(" + raw + ")";
    case DType::float16:
      return "mv_from_f16(" + raw + ")";
    case DType::int32:
    case DType::uint8:
      return ew_type_name(dtype, width) + "(" + raw + ")";
    case DType::int8:
      return "bitfieldExtract(" + ew_type_name(dtype, width) + "(" + raw + "), 0, 8)";
    case DType::bool_:
      return width == 4 ? "notEqual(" + raw + ", uvec4(0u))" : "(" + raw + " != 0u)";
    case DType::uint32:
      return "(" + raw + ")";
    case DType::int64:
      return "int64_t(packUint2x32(" + raw + "))";
    case DType::float64:
      return "packDouble2x32(" + raw + ")";
  }
  return "";
}

std::string ew_encode(const std::string& v, DType dtype, int width) {
  const std::string u = width == 4 ? "uvec4" : "uint";
  if (dtype == DType::bfloat16)
    return (width == 4 ? "u16vec4(mv_bf16_bits(" : "uint16_t(mv_bf16_bits(") + v + "))";
  if (dtype == DType::float16)
    return (width == 4 ? "u16vec4(mv_f16_bits(" : "uint16_t(mv_f16_bits(") + v + "))";
  if (is_8bit(dtype)) return (width == 4 ? "u8vec4(" : "uint8_t(") + v + ")";
  if (is_64bit(dtype)) return v;
  if (is_floating(dtype)) return "floatBitsToUint(" + v + ")";
  return u + "(" + v + ")";
}

const char* ew_out_element(DType dtype, int width) {
  if (is_16bit(dtype)) return width == 4 ? "u16vec4" : "uint16_t";
  if (is_8bit(dtype)) return width == 4 ? "u8vec4" : "uint8_t";
  if (dtype == DType::int64) return "int64_t";
  if (dtype == DType::float64) return "double";
  return width == 4 ? "uvec4" : "uint";
}

std::string ew_wrap(const std::string& e, DType dtype, int width) {
  if (dtype == DType::int8) return "bitfieldExtract(" + e + ", 0, 8)";
  if (dtype == DType::uint8) return "(" + e + " & " + ew_type_name(dtype, width) + "(255))";
  return e;
}

std::string ew_constant(uint32_t bits, DType dtype, const std::string& type) {
  const std::string word = std::to_string(bits) + "u";
  if (dtype == DType::float64)
    return "double(uintBitsToFloat(" + (bits == 0 ? std::string("pc.zero") : word) + "))";
  if (dtype == DType::int64) return "int64_t(int(" + word + "))";
  if (is_floating(dtype))
    return type + "(" +
           (bits == 0 ? std::string("uintBitsToFloat(pc.zero)") : "uintBitsToFloat(" + word + ")") +
           ")";
  if (dtype == DType::int32 || is_8bit(dtype)) return type + "(int(" + word + "))";
  if (dtype == DType::uint32) return type + "(" + word + ")";
  return type + "(" + (bits ? "true" : "false") + ")";
}

VkFormat ew_texel_format(DType dtype, bool vector) {
  if (is_8bit(dtype)) return vector ? VK_FORMAT_R8G8B8A8_UINT : VK_FORMAT_R8_UINT;
  if (is_16bit(dtype)) return vector ? VK_FORMAT_R16G16B16A16_UINT : VK_FORMAT_R16_UINT;
  if (is_64bit(dtype)) return VK_FORMAT_R32G32_UINT;  // scalar kernels only
  return vector ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT;
}

std::string ew_extensions(bool int8_storage, bool int64) {
  std::string s;
  if (int8_storage)
    s += "#extension GL_EXT_shader_8bit_storage : require\n"
         "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n";
  if (int64) s += "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n";
  return s;
}

// numpy's semantics as the 32-bit helpers in elementwise.cpp have them: integer floor division
// and remainder by 0 give 0, by -1 never divide (INT64_MIN / -1 traps); NaN wins max and min.
std::string ew_helpers64(bool int64, bool float64) {
  std::string s;
  if (int64)
    s += R"(
int64_t mv_floordiv(int64_t a, int64_t b) {
  const int64_t zero = int64_t(0), one = int64_t(1);
  const int64_t d = (b == zero || b == -one) ? one : b;
  int64_t q = a / d;
  if (q * d != a && ((a < zero) != (d < zero))) q -= one;
  return b == zero ? zero : (b == -one ? int64_t(uint64_t(0) - uint64_t(a)) : q);
}
int64_t mv_mod(int64_t a, int64_t b) {
  const int64_t zero = int64_t(0), one = int64_t(1);
  const int64_t d = (b == zero || b == -one) ? one : b;
  int64_t r = a - (a / d) * d;
  if (r != zero && ((r < zero) != (d < zero))) r += d;
  return (b == zero || b == -one) ? zero : r;
}
int64_t mv_pow(int64_t a, int64_t b) {
  const int64_t zero = int64_t(0), one = int64_t(1);
  if (b < zero) return a == one ? one : (a == -one ? ((b & one) != zero ? -one : one) : zero);
  int64_t r = one;
  for (int i = 0; i < 64 && b > zero; ++i) { if ((b & one) != zero) r *= a; a *= a; b >>= 1; }
  return r;
}
)";
  if (float64)
    s += R"(
double mv_max(double a, double b) { return (isnan(a) || isnan(b)) ? a + b : max(a, b); }
double mv_min(double a, double b) { return (isnan(a) || isnan(b)) ? a + b : min(a, b); }
double mv_sign(double x) { return x > double(0) ? double(1) : (x < double(0) ? double(-1) : (x == double(0) ? double(0) : x)); }
// floor, ceil, trunc and roundEven of a double from its bits (lavapipe's roundEven(double) gave 0
// for -0.5000000000000001): the fraction bits below the binary point cleared, then one exact
// step (x - t is exact for |x| < 2^52).
double mv_trunc64(double x) {
  const uvec2 b = unpackDouble2x32(x);
  const int e = int((b.y >> 20u) & 0x7ffu) - 1023;
  if (e >= 52) return x;  // integral, inf or NaN
  if (e < 0) return packDouble2x32(uvec2(0u, b.y & 0x80000000u));
  const int n = 52 - e;  // fraction bits to clear, 1 to 52
  const uvec2 keep = n >= 32 ? uvec2(0u, ~((1u << uint(n - 32)) - 1u)) : uvec2(~((1u << uint(n)) - 1u), 0xffffffffu);
  return packDouble2x32(b & keep);
}
double mv_floor64(double x) { const double t = mv_trunc64(x); return x < t ? t - double(1) : t; }
double mv_ceil64(double x) { const double t = mv_trunc64(x); return x > t ? t + double(1) : t; }
double mv_round_even64(double x) {
  const double t = mv_trunc64(x), d = abs(x - t), h = t * double(0.5);
  const bool away = d > double(0.5) || (d == double(0.5) && mv_trunc64(h) != h);
  return away ? t + (x < double(0) ? double(-1) : double(1)) : t;
}
// C's fmod, exact: |x| reduced by |y| 2^k for falling k, each subtraction exact (Sterbenz: the
// two are within a factor 2), at most one per exponent step (up to 2098).
double mv_pow2d(int e) { return packDouble2x32(uvec2(0u, uint(e + 1023) << 20u)); }
int mv_exponent(double v) {  // floor(log2(v)) for finite v > 0, subnormals too
  const uint hi = unpackDouble2x32(v).y >> 20u;
  const double scaled = v * mv_pow2d(54);
  return hi != 0u ? int(hi) - 1023 : int(unpackDouble2x32(scaled).y >> 20u) - 1023 - 54;
}
double mv_fmod(double x, double y) {
  const double ax = abs(x), ay = abs(y);
  if (ay == double(0) || isnan(ay) || isnan(ax) || isinf(ax)) return packDouble2x32(uvec2(0u, 0x7ff80000u));
  if (ax < ay) return x;
  precise double r = ax;
  const int ey = mv_exponent(ay);
  for (int i = 0; i < 2100 && r >= ay; ++i) {
    const int k = mv_exponent(r) - ey;
    // 2^k in three factors (k reaches 2098; one factor's exponent stops at 1023).
    const int k1 = min(k, 1000), k2 = min(k - k1, 1000);
    precise double t = ((ay * mv_pow2d(k1)) * mv_pow2d(k2)) * mv_pow2d(k - k1 - k2);
    if (t > r) t = t * 0.5;
    r = r - t;
  }
  // The sign of x, a zero remainder included.
  return (unpackDouble2x32(x).y & 0x80000000u) != 0u ? -r : r;
}
bool mv_is_zero(double x) { return x == double(0); }
double mv_copysign_zero(double s) { return packDouble2x32(uvec2(0u, unpackDouble2x32(s).y & 0x80000000u)); }
// numpy's npy_remainder and npy_floor_divide (npy_divmod), as the float32 ones.
double mv_mod(double a, double b) {
  const double m = mv_fmod(a, b);
  if (mv_is_zero(b)) return m;
  if (mv_is_zero(m)) return mv_copysign_zero(b);
  return (b < double(0)) != (m < double(0)) ? m + b : m;
}
double mv_floordiv(double a, double b) {
  if (mv_is_zero(b)) return a / b;
  const double m = mv_fmod(a, b);
  precise double div = (a - m) / b;
  if (!mv_is_zero(m) && (b < double(0)) != (m < double(0))) div -= double(1);
  if (mv_is_zero(div)) return mv_copysign_zero(a / b);
  double f = floor(div);
  if (div - f > 0.5) f += double(1);
  return f;
}
)";
  return s;
}

const char* ew_library_function_f64(EwOp op) {
  switch (op) {
    case EwOp::exp: return "mvk_exp_f64";
    case EwOp::exp2: return "mvk_exp2_f64";
    case EwOp::expm1: return "mvk_expm1_f64";
    case EwOp::log: return "mvk_log_f64";
    case EwOp::log1p: return "mvk_log1p_f64";
    case EwOp::log2: return "mvk_log2_f64";
    case EwOp::tanh: return "mvk_tanh_f64";
    case EwOp::sigmoid: return "mvk_logistic_f64";
    case EwOp::sinh: return "mvk_sinh_f64";
    case EwOp::cosh: return "mvk_cosh_f64";
    case EwOp::pow: return "mvk_pow_f64";
    case EwOp::sin: return "mvk_sin_f64";
    case EwOp::cos: return "mvk_cos_f64";
    case EwOp::tan: return "mvk_tan_f64";
    case EwOp::erf: return "mvk_erf_f64";
    case EwOp::erfinv: return "mvk_erfinv_f64";
    case EwOp::atan: return "mvk_atan_f64";
    case EwOp::atan2: return "mvk_atan2_f64";
    case EwOp::asin: return "mvk_asin_f64";
    case EwOp::acos: return "mvk_acos_f64";
    case EwOp::asinh: return "mvk_asinh_f64";
    case EwOp::acosh: return "mvk_acosh_f64";
    case EwOp::atanh: return "mvk_atanh_f64";
    default: return nullptr;
  }
}

void record_fill64(detail::RuntimeState& rt, detail::Recording& rec,
                   const detail::DeviceBuffer& out, uint64_t count, uint32_t word, DType dtype) {
  if (count == 0 || rec.remote) return;
  EwProgram p;
  EwNode n;
  n.op = EwOp::constant;
  n.dtype = dtype;
  n.bits = word;
  p.nodes.push_back(n);
  barrier(rec.cb);
  record_elementwise(rt, rec, p, {}, Shape{static_cast<int64_t>(count)}, out, 0);
  barrier(rec.cb);
}

}  // namespace meshvk::kernels

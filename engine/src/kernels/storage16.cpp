#include "kernels/storage16.hpp"

#include <algorithm>
#include <string>

#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

// Integer arithmetic on the bits, as meshvk/dtype.hpp's host conversions, so the results do not
// depend on how the adapter converts halves or flushes subnormals (float16's subnormals are
// normal float32 values; the products below are exact).
const char* const kStorage16Glsl = R"(
float mv_from_bf16(uint h) { return uintBitsToFloat(h << 16u); }
float mv_from_f16(uint h) {
  const uint s = (h & 0x8000u) << 16u, e = (h >> 10u) & 0x1fu, m = h & 0x3ffu;
  if (e == 0u) return uintBitsToFloat(floatBitsToUint(float(m) * 5.9604644775390625e-8) | s);
  if (e == 31u) return uintBitsToFloat(s | 0x7f800000u | (m << 13u));
  return uintBitsToFloat(s | ((e + 112u) << 23u) | (m << 13u));
}
vec4 mv_from_bf16(uvec4 h) { return uintBitsToFloat(h << 16u); }
vec4 mv_from_f16(uvec4 h) { return vec4(mv_from_f16(h.x), mv_from_f16(h.y), mv_from_f16(h.z), mv_from_f16(h.w)); }
uint mv_bf16_bits(float x) { return floatBitsToUint(mv_bf16(x)) >> 16u; }
uint mv_f16_bits(float x) {
  const uint u = floatBitsToUint(mv_f16(x));
  const uint s = (u >> 16u) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return s | 0x7c00u | ((a >> 13u) & 0x3ffu);
  if (a >= 0x38800000u) return s | ((a - 0x38000000u) >> 13u);
  return s | uint(uintBitsToFloat(a) * 16777216.0);
}
uvec4 mv_bf16_bits(vec4 x) { return uvec4(mv_bf16_bits(x.x), mv_bf16_bits(x.y), mv_bf16_bits(x.z), mv_bf16_bits(x.w)); }
uvec4 mv_f16_bits(vec4 x) { return uvec4(mv_f16_bits(x.x), mv_f16_bits(x.y), mv_f16_bits(x.z), mv_f16_bits(x.w)); }
)";

namespace {

constexpr uint32_t kGroup = 64;

std::string convert_kernel(bool widen, DType dtype) {
  const std::string f = dtype == DType::bfloat16 ? "bf16" : "f16";
  std::string s =
      "#version 450\n#extension GL_EXT_shader_16bit_storage : require\n"
      "layout(local_size_x = 64) in;\n";
  s += widen ? "layout(std430, binding = 0) readonly buffer In { uint16_t x[]; };\n"
               "layout(std430, binding = 1) writeonly buffer Out { uint y[]; };\n"
             : "layout(std430, binding = 0) readonly buffer In { uint x[]; };\n"
               "layout(std430, binding = 1) writeonly buffer Out { uint16_t y[]; };\n";
  s += "layout(push_constant) uniform Params { uint n; uint in_first; uint out_first; } pc;\n";
  s += kRound16Glsl;
  s += kStorage16Glsl;
  s += "void main() {\n  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + "
       "gl_LocalInvocationID.x;\n  if (i >= pc.n) return;\n";
  s += widen ? "  y[pc.out_first + i] = floatBitsToUint(mv_from_" + f + "(uint(x[pc.in_first + i])));\n"
             : "  y[pc.out_first + i] = uint16_t(mv_" + f + "_bits(uintBitsToFloat(x[pc.in_first + i])));\n";
  return s + "}\n";
}

// A storage binding of `buffer` that starts at element `first` (of `size` bytes) or before it,
// at an offset the adapter allows; `skip` is set to the elements between the two.
Binding window(const detail::RuntimeState& rt, const detail::DeviceBuffer& buffer, uint64_t first,
               uint64_t count, uint64_t size, uint32_t& skip) {
  const uint64_t align = std::max<uint64_t>(16, rt.device_limits().minStorageBufferOffsetAlignment);
  const uint64_t at = first * size / align * align;
  skip = static_cast<uint32_t>((first * size - at) / size);
  const uint64_t range = std::min<uint64_t>((first * size - at + count * size + 3) / 4 * 4,
                                            buffer.capacity() - at);
  return Binding::storage(buffer, at, range);
}

void convert(detail::RuntimeState& rt, detail::Recording& rec, bool widen, DType dtype,
             const detail::DeviceBuffer& in, uint64_t in_start, const detail::DeviceBuffer& out,
             uint64_t out_start, uint64_t count) {
  if (rec.remote) return;  // another process's device runs it
  if (!is_16bit(dtype)) throw Error("internal: 16-bit conversion of " + std::string(dtype_name(dtype)));
  require_storage16(rt, rec.device);
  const std::string glsl = convert_kernel(widen, dtype);
  const uint64_t align = std::max<uint64_t>(16, rt.device_limits().minStorageBufferOffsetAlignment);
  // Chunks keep both bindings (each possibly starting up to `align` bytes early) in range.
  const uint64_t chunk =
      std::max<uint64_t>((rt.device_limits().maxStorageBufferRange - align - 4) / 4 / kGroup * kGroup, kGroup);
  barrier(rec.cb);
  for (uint64_t base = 0; base < count; base += chunk) {
    const uint64_t n = std::min(chunk, count - base);
    struct Params {
      uint32_t n, in_first, out_first;
    } p{static_cast<uint32_t>(n), 0, 0};
    const Binding bindings[] = {window(rt, in, in_start + base, n, widen ? 2 : 4, p.in_first),
                                window(rt, out, out_start + base, n, widen ? 4 : 2, p.out_first)};
    dispatch(rt, rec, {widen ? "widen16" : "narrow16", glsl}, bindings, &p, sizeof p,
             groups_for(rt, (n + kGroup - 1) / kGroup), {n * 6, 0});
  }
  barrier(rec.cb);
}

}  // namespace

void require_storage16(detail::RuntimeState& rt, int device) {
  const vk::Adapter& adapter = rt.device_for(device).adapter();
  if (!adapter.storage16)
    throw Error("Vulkan adapter " + adapter.name +
                " lacks the storageBuffer16BitAccess feature, which kernels storing bfloat16 and "
                "float16 arrays (2 bytes per element) need; use DType::float32 on this adapter");
}

std::shared_ptr<detail::DeviceBuffer> record_widen(detail::RuntimeState& rt, detail::Recording& rec,
                                                   const detail::DeviceBuffer& in, DType dtype,
                                                   uint64_t start, uint64_t count) {
  auto wide = rt.allocate(rec.device, count * 4);
  rec.keep_alive.push_back(wide);
  if (count) convert(rt, rec, true, dtype, in, start, *wide, 0, count);
  return wide;
}

void record_narrow(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& wide,
                   uint64_t wide_start, DType dtype, uint64_t count, const detail::DeviceBuffer& out,
                   uint64_t out_start) {
  if (count) convert(rt, rec, false, dtype, wide, wide_start, out, out_start, count);
}

}  // namespace meshvk::kernels

#include "kernels/take.hpp"

#include <sstream>

#include "kernels/launch.hpp"

namespace meshvk::kernels {

void record_take(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                 const detail::DeviceBuffer& indices, const detail::DeviceBuffer& out, int64_t outer,
                 int64_t n, int64_t inner, int64_t count) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  std::ostringstream g;
  g << "#version 450\nlayout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(binding = 1) uniform isamplerBuffer index;\n"
       "layout(std430, binding = 2) writeonly buffer Out { uint o[]; };\n"
       "layout(push_constant) uniform Params { uint total; } pc;\n"
       "void main() {\n"
       "  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;\n"
       "  if (t >= pc.total) return;\n"
    << "  const uint post = t % " << inner << "u;\n"
    << "  const uint j = (t / " << inner << "u) % " << count << "u;\n"
    << "  const uint pre = t / " << inner * count << "u;\n"
    << "  const int k = clamp(texelFetch(index, int(j)).x, 0, " << n - 1 << ");\n"
    << "  o[t] = texelFetch(src, int(pre * " << n * inner << "u + uint(k) * " << inner << "u + post)).x;\n}\n";
  const uint32_t p = static_cast<uint32_t>(total);
  const Binding bindings[] = {Binding::texels(in, VK_FORMAT_R32_UINT, 0, in.capacity() / 4 * 4),
                              Binding::texels(indices, VK_FORMAT_R32_SINT, 0, indices.capacity() / 4 * 4),
                              Binding::storage(out)};
  dispatch(rt, rec, {"take", g.str()}, bindings, &p, sizeof p, groups_for(rt, (total + 63) / 64));
  barrier(rec.cb);
}

void record_argsort(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                    const detail::DeviceBuffer& out, int64_t rows, int64_t n, bool is_float) {
  if (rows * n == 0) return;
  uint32_t p = 1;
  while (p < n) p <<= 1;
  const uint64_t slots = static_cast<uint64_t>(rows) * p;
  auto keys = rt.allocate(rec.device, slots * 4);
  auto idx = rt.allocate(rec.device, slots * 4);
  rec.keep_alive.push_back(keys);
  rec.keep_alive.push_back(idx);
  const Groups groups = groups_for(rt, (slots + 63) / 64);
  {
    const uint32_t params[4] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(n), p, is_float ? 1u : 0u};
    const Binding b[] = {Binding::storage(in), Binding::storage(*keys), Binding::storage(*idx)};
    dispatch(rt, rec, {"argsort_init", ""}, b, params, sizeof params, groups);
    barrier(rec.cb);
  }
  for (uint32_t k = 2; k <= p; k <<= 1) {
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      const uint32_t params[4] = {static_cast<uint32_t>(rows), p, k, j};
      const Binding b[] = {Binding::storage(*keys), Binding::storage(*idx)};
      dispatch(rt, rec, {"argsort_step", ""}, b, params, sizeof params, groups);
      barrier(rec.cb);
    }
  }
  const uint32_t params[4] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(n), p, 0};
  const Binding b[] = {Binding::storage(*idx), Binding::storage(out)};
  dispatch(rt, rec, {"argsort_final", ""}, b, params, sizeof params, groups_for(rt, (rows * n + 63) / 64));
  barrier(rec.cb);
}

}  // namespace meshvk::kernels

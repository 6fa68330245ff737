#include "kernels/strided_copy.hpp"

#include <algorithm>
#include <sstream>

#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

namespace {

// Drops unit dimensions and merges neighbours that are contiguous in both layouts, so most
// copies become one- or two-dimensional.
StridedCopy simplify(const StridedCopy& c) {
  StridedCopy s;
  s.in_offset = c.in_offset;
  s.out_offset = c.out_offset;
  for (size_t d = 0; d < c.box.size(); ++d) {
    if (c.box[d] == 1) continue;
    if (!s.box.empty() && s.in_strides.back() == c.in_strides[d] * c.box[d] &&
        s.out_strides.back() == c.out_strides[d] * c.box[d]) {
      s.box.back() *= c.box[d];
      s.in_strides.back() = c.in_strides[d];
      s.out_strides.back() = c.out_strides[d];
      continue;
    }
    s.box.push_back(c.box[d]);
    s.in_strides.push_back(c.in_strides[d]);
    s.out_strides.push_back(c.out_strides[d]);
  }
  return s;
}

std::string copy_kernel(const StridedCopy& c) {
  std::ostringstream g;
  g << "#version 450\nlayout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(std430, binding = 1) writeonly buffer Out { uint o[]; };\n"
       "layout(push_constant) uniform Params { uint n; uint base; int in_offset; int out_offset; } pc;\n"
       "void main() {\n"
       "  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;\n"
       "  if (i >= pc.n) return;\n"
       "  uint rest = pc.base + i;\n  int si = pc.in_offset;\n  int so = pc.out_offset;\n";
  for (size_t d = c.box.size(); d-- > 0;) {
    g << "  { const int k = int(rest % " << c.box[d] << "u); rest /= " << c.box[d] << "u; si += k * ("
      << c.in_strides[d] << "); so += k * (" << c.out_strides[d] << "); }\n";
  }
  g << "  o[so] = texelFetch(src, si).x;\n}\n";
  return g.str();
}

}  // namespace

void record_strided_copy(detail::RuntimeState& rt, detail::Recording& rec, const StridedCopy& copy,
                         const detail::DeviceBuffer& in, const detail::DeviceBuffer& out) {
  int64_t count = 1;
  for (const int64_t b : copy.box) count *= b;
  if (count == 0) return;
  const StridedCopy c = simplify(copy);
  const uint64_t max_texels = rt.device_limits().maxTexelBufferElements;
  if (in.capacity() / 4 > max_texels || out.capacity() > rt.device_limits().maxStorageBufferRange)
    throw Error("this layout change moves a piece of " + std::to_string(std::max(in.capacity(), out.capacity()) >> 20) +
                " MiB on one device, over the adapter's limit for one binding (" +
                std::to_string(rt.device_limits().maxStorageBufferRange >> 20) +
                " MiB); shard the array over more devices so each piece is smaller");
  // A contiguous copy is a plain transfer.
  if (c.box.size() == 1 && c.in_strides[0] == 1 && c.out_strides[0] == 1) {
    const VkBufferCopy region{in.offset() + c.in_offset * 4, out.offset() + c.out_offset * 4,
                              static_cast<uint64_t>(count) * 4};
    vkCmdCopyBuffer(rec.cb, in.vk_buffer(), out.vk_buffer(), 1, &region);
    barrier(rec.cb);
    return;
  }
  struct Params {
    uint32_t n, base;
    int32_t in_offset, out_offset;
  } p{static_cast<uint32_t>(count), 0, static_cast<int32_t>(c.in_offset), static_cast<int32_t>(c.out_offset)};
  const Binding bindings[] = {Binding::texels(in, VK_FORMAT_R32_UINT, 0, in.capacity() / 4 * 4),
                              Binding::storage(out)};
  dispatch(rt, rec, {"strided_copy", copy_kernel(c)}, bindings, &p, sizeof p,
           groups_for(rt, (static_cast<uint64_t>(count) + 63) / 64));
  barrier(rec.cb);
}

void record_fill_words(detail::Recording& rec, const detail::DeviceBuffer& out, uint64_t count, uint32_t word) {
  if (count == 0) return;
  vkCmdFillBuffer(rec.cb, out.vk_buffer(), out.offset(), count * 4, word);
  barrier(rec.cb);
}

}  // namespace meshvk::kernels

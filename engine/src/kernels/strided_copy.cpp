#include "kernels/strided_copy.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "kernels/cost.hpp"
#include "kernels/launch.hpp"
#include "kernels/storage16.hpp"
#include "kernels/wide_types.hpp"
#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "vk/copy.hpp"

namespace meshvk::kernels {

namespace {

// Drops unit dimensions and merges neighbours that are contiguous in both layouts, so most
// copies become one- or two-dimensional.
StridedCopy simplify(const StridedCopy& c) {
  StridedCopy s;
  s.element_bytes = c.element_bytes;
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

// The kernels' start: 16-bit elements are stored through 16-bit storage.
std::string copy_prologue(const StridedCopy& c) {
  if (c.element_bytes == 1)
    return "#version 450\n#extension GL_EXT_shader_8bit_storage : require\n"
           "#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require\n"
           "layout(local_size_x = 64) in;\nlayout(binding = 0) uniform usamplerBuffer src;\n"
           "layout(std430, binding = 1) writeonly buffer Out { uint8_t o[]; };\n";
  return c.element_bytes == 2
             ? "#version 450\n#extension GL_EXT_shader_16bit_storage : require\n"
               "layout(local_size_x = 64) in;\nlayout(binding = 0) uniform usamplerBuffer src;\n"
               "layout(std430, binding = 1) writeonly buffer Out { uint16_t o[]; };\n"
             : "#version 450\nlayout(local_size_x = 64) in;\n"
               "layout(binding = 0) uniform usamplerBuffer src;\n"
               "layout(std430, binding = 1) writeonly buffer Out { uint o[]; };\n";
}

std::string copy_store(const StridedCopy& c) {
  if (c.element_bytes == 1) return "  o[so] = uint8_t(texelFetch(src, si).x);\n}\n";
  return c.element_bytes == 2 ? "  o[so] = uint16_t(texelFetch(src, si).x);\n}\n"
                              : "  o[so] = texelFetch(src, si).x;\n}\n";
}

VkFormat texel_format(const StridedCopy& c) {
  if (c.element_bytes == 1) return VK_FORMAT_R8_UINT;
  return c.element_bytes == 2 ? VK_FORMAT_R16_UINT : VK_FORMAT_R32_UINT;
}

// Every copy kernel's start: invocation i walks the box from `first` (its element or vec4
// index), its input and output positions from the push constants' offsets.
std::string copy_main(const char* first) {
  return std::string(
             "void main() {\n"
             "  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + "
             "gl_LocalInvocationID.x;\n"
             "  if (i >= pc.n) return;\n"
             "  uint rest = ") +
         first + ";\n  int si = pc.in_offset;\n  int so = pc.out_offset;\n";
}

std::string copy_kernel(const StridedCopy& c) {
  std::ostringstream g;
  g << copy_prologue(c)
    << "layout(push_constant) uniform Params { uint n; uint base; int in_offset; int out_offset; } "
       "pc;\n"
    << copy_main("pc.base + i");
  for (size_t d = c.box.size(); d-- > 0;) {
    g << "  { const int k = int(rest % " << c.box[d] << "u); rest /= " << c.box[d]
      << "u; si += k * (" << c.in_strides[d] << "); so += k * (" << c.out_strides[d] << "); }\n";
  }
  g << copy_store(c);
  return g.str();
}

// Whether a 4-byte copy moves whole rows of vec4s: the last dimension contiguous on both sides
// and a multiple of 4, every other stride and both offsets multiples of 4 (a transpose that keeps
// the minor axis, as attention's heads split and merged). Then one invocation moves a vec4: a
// quarter of the index arithmetic and a quarter of the texel fetches.
bool moves_vec4s(const StridedCopy& c) {
  if (c.element_bytes != 4 || c.box.empty() || c.box.back() % 4 != 0 || c.in_strides.back() != 1 ||
      c.out_strides.back() != 1 || c.in_offset % 4 != 0 || c.out_offset % 4 != 0)
    return false;
  for (size_t d = 0; d + 1 < c.box.size(); ++d)
    if (c.in_strides[d] % 4 != 0 || c.out_strides[d] % 4 != 0) return false;
  return true;
}

// The vec4 form of copy_kernel, over c's box counted in vec4s (offsets come in vec4s too).
std::string vec4_copy_kernel(const StridedCopy& c) {
  std::ostringstream g;
  g << "#version 450\nlayout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(std430, binding = 1) writeonly buffer Out { uvec4 o[]; };\n"
       "layout(push_constant) uniform Params { uint n; uint base; int in_offset; int out_offset; } "
       "pc;\n"
    << copy_main("i");
  for (size_t d = c.box.size(); d-- > 0;) {
    const bool last = d + 1 == c.box.size();
    const int64_t box = last ? c.box[d] / 4 : c.box[d];
    const int64_t in_stride = last ? 1 : c.in_strides[d] / 4,
                  out_stride = last ? 1 : c.out_strides[d] / 4;
    g << "  { const int k = int(rest % " << box << "u); rest /= " << box << "u; si += k * ("
      << in_stride << "); so += k * (" << out_stride << "); }\n";
  }
  g << "  o[so] = texelFetch(src, si);\n}\n";
  return g.str();
}

// The copy of one tile (a sub-box whose extents come as push constants) between windows of the
// input and output: strides are compiled in, offsets are relative to the windows.
std::string tiled_kernel(const StridedCopy& c) {
  std::ostringstream g;
  g << copy_prologue(c)
    << "layout(push_constant) uniform Params { uint n; int in_offset; int out_offset; uint ext["
    << c.box.size()
    << "]; } pc;\n"
    << copy_main("i");
  for (size_t d = c.box.size(); d-- > 0;) {
    g << "  { const int k = int(rest % pc.ext[" << d << "]); rest /= pc.ext[" << d
      << "]; si += k * (" << c.in_strides[d] << "); so += k * (" << c.out_strides[d] << "); }\n";
  }
  g << copy_store(c);
  return g.str();
}

// Lowest and highest element a box of extents `ext` from `offset` touches.
std::pair<int64_t, int64_t> reach(const std::vector<int64_t>& ext,
                                  const std::vector<int64_t>& strides, int64_t offset) {
  int64_t lo = offset, hi = offset;
  for (size_t d = 0; d < ext.size(); ++d) {
    const int64_t v = (ext[d] - 1) * strides[d];
    (v < 0 ? lo : hi) += v;
  }
  return {lo, hi};
}

// Pieces larger than one binding: the box is cut into equal tiles whose input and output each
// fit one window, and each tile is one dispatch binding just those windows. Tiles shrink the
// dimension that spreads the offending side most, so a transpose cuts both axes into blocks.
void record_tiled_copy(detail::RuntimeState& rt, detail::Recording& rec, const StridedCopy& c,
                       const WindowLimits& w, const detail::DeviceBuffer& in,
                       const detail::DeviceBuffer& out) {
  const size_t rank = c.box.size();
  // Push constants: 3 words and one extent per dimension within the guaranteed 128 bytes.
  if (rank > 29)
    throw Error("internal: a layout change of " + std::to_string(rank) +
                " dimensions is too deep to tile");
  // Each tile's invocation count also stays well inside a 32-bit index.
  const int64_t max_tile = int64_t{1} << 30;
  // The windows' limits in elements (w counts 4-byte words; a 16-bit texel is one element).
  const uint64_t es = c.element_bytes;
  const uint64_t align = w.align * 4 / es;
  const uint64_t texels = w.texel_count - align, storage = w.storage_bytes / es - align;
  std::vector<int64_t> tile = c.box;
  for (;;) {
    int64_t size = 1;
    for (const int64_t t : tile) size *= t;
    const auto [in_lo, in_hi] = reach(tile, c.in_strides, 0);
    const auto [out_lo, out_hi] = reach(tile, c.out_strides, 0);
    const bool in_over = in_hi - in_lo + 1 > static_cast<int64_t>(texels);
    const bool out_over = out_hi - out_lo + 1 > static_cast<int64_t>(storage);
    if (!in_over && !out_over) {
      if (size <= max_tile) break;
      *std::max_element(tile.begin(), tile.end()) /= 2;
      continue;
    }
    const std::vector<int64_t>& strides = in_over ? c.in_strides : c.out_strides;
    const int64_t width = in_over ? in_hi - in_lo + 1 : out_hi - out_lo + 1;
    const int64_t limit = static_cast<int64_t>(in_over ? texels : storage);
    // The dimension spreading this side most gets as long as the others leave room for.
    size_t d = 0;
    int64_t spread = -1;
    for (size_t k = 0; k < rank; ++k) {
      const int64_t v = (tile[k] - 1) * std::abs(strides[k]);
      if (v > spread) {
        spread = v;
        d = k;
      }
    }
    const int64_t others = width - spread;
    const int64_t fits = others <= limit ? (limit - others) / std::abs(strides[d]) + 1 : 1;
    tile[d] = std::clamp<int64_t>(fits, 1, tile[d] - 1);
  }

  const std::string glsl = tiled_kernel(c);
  struct Params {
    uint32_t n;
    int32_t in_offset, out_offset;
    uint32_t ext[29];
  } p{};
  const uint32_t push_bytes = 12 + 4 * static_cast<uint32_t>(rank);
  std::vector<int64_t> origin(rank, 0), ext(rank);
  for (;;) {
    int64_t in_at = c.in_offset, out_at = c.out_offset, n = 1;
    for (size_t d = 0; d < rank; ++d) {
      ext[d] = std::min(tile[d], c.box[d] - origin[d]);
      in_at += origin[d] * c.in_strides[d];
      out_at += origin[d] * c.out_strides[d];
      n *= ext[d];
      p.ext[d] = static_cast<uint32_t>(ext[d]);
    }
    const auto [in_lo, in_hi] = reach(ext, c.in_strides, in_at);
    const auto [out_lo, out_hi] = reach(ext, c.out_strides, out_at);
    const uint64_t in_start = align_down(static_cast<uint64_t>(in_lo), align);
    const uint64_t out_start = align_down(static_cast<uint64_t>(out_lo), align);
    p.n = static_cast<uint32_t>(n);
    p.in_offset = static_cast<int32_t>(in_at - static_cast<int64_t>(in_start));
    p.out_offset = static_cast<int32_t>(out_at - static_cast<int64_t>(out_start));
    const Binding bindings[] = {
        Binding::texels(in, texel_format(c), in_start * es,
                        (static_cast<uint64_t>(in_hi) + 1 - in_start) * es),
        Binding::storage(out, out_start * es,
                         ((static_cast<uint64_t>(out_hi) + 1 - out_start) * es + 3) / 4 * 4)};
    dispatch(rt, rec, {"strided_copy", glsl}, bindings, &p, push_bytes,
             groups_for(rt, (static_cast<uint64_t>(n) + 63) / 64));
    // The next tile origin, last dimension fastest.
    size_t d = rank;
    while (d-- > 0) {
      origin[d] += tile[d];
      if (origin[d] < c.box[d]) break;
      origin[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
  barrier(rec.cb);
}

}  // namespace

namespace {

// An 8-byte element is two 32-bit words: the same copy over words, with a last dimension of 2.
StridedCopy as_words(const StridedCopy& c) {
  StridedCopy w = c;
  w.element_bytes = 4;
  for (auto& s : w.in_strides) s *= 2;
  for (auto& s : w.out_strides) s *= 2;
  w.in_offset *= 2;
  w.out_offset *= 2;
  w.box.push_back(2);
  w.in_strides.push_back(1);
  w.out_strides.push_back(1);
  return w;
}

}  // namespace

std::optional<CopyRun> contiguous_run(const StridedCopy& copy, const detail::DeviceBuffer& in,
                                      const detail::DeviceBuffer& out) {
  if (copy.element_bytes == 8) return std::nullopt;
  int64_t count = 1;
  for (const int64_t b : copy.box) count *= b;
  const StridedCopy c = simplify(copy);
  if (!c.box.empty() && !(c.box.size() == 1 && c.in_strides[0] == 1 && c.out_strides[0] == 1)) return std::nullopt;
  return CopyRun{&in, &out, static_cast<uint64_t>(c.in_offset), static_cast<uint64_t>(c.out_offset),
                 static_cast<uint64_t>(count)};
}

void record_copy_runs(detail::RuntimeState&, detail::Recording& rec, std::span<const CopyRun> runs,
                      uint32_t element_bytes) {
  std::vector<std::pair<std::pair<VkBuffer, VkBuffer>, std::vector<VkBufferCopy>>> commands;
  for (const CopyRun& r : runs) {
    if (r.count == 0) continue;
    // Data movement: each element read and written once, no flops.
    const CountedOp counted(rec, [&] { return OpCost{0, 0, 2 * r.count * element_bytes}; });
    const std::pair<VkBuffer, VkBuffer> key{r.from->vk_buffer(), r.to->vk_buffer()};
    auto it = std::find_if(commands.begin(), commands.end(), [&](const auto& c) { return c.first == key; });
    if (it == commands.end()) it = commands.insert(commands.end(), {key, {}});
    it->second.push_back({r.from->offset() + r.from_offset * element_bytes, r.to->offset() + r.to_offset * element_bytes,
                          r.count * element_bytes});
  }
  if (commands.empty()) return;
  for (const auto& [buffers, regions] : commands) {
    uint64_t bytes = 0;
    for (const VkBufferCopy& r : regions) bytes += r.size;
    const profile::DeviceSpan span(rec.profile.get(), profile::Kind::copy, "copy", bytes);  // profile hook
    if (rec.cb)
      vk::copy_buffer(rec.cb, buffers.first, buffers.second, static_cast<uint32_t>(regions.size()), regions.data());
  }
  barrier(rec.cb);
}

void record_strided_copy(detail::RuntimeState& rt, detail::Recording& rec, const StridedCopy& copy,
                         const detail::DeviceBuffer& in, const detail::DeviceBuffer& out) {
  if (copy.element_bytes == 8) return record_strided_copy(rt, rec, as_words(copy), in, out);
  if (copy.element_bytes != 1 && copy.element_bytes != 2 && copy.element_bytes != 4)
    throw Error("internal: a strided copy of " + std::to_string(copy.element_bytes) +
                "-byte elements");
  int64_t count = 1;
  for (const int64_t b : copy.box) count *= b;
  if (count == 0) return;
  // Data movement: each element of the box read and written once, no flops.
  const CountedOp counted(rec, [&] {
    return OpCost{0, 0, 2 * static_cast<uint64_t>(count) * copy.element_bytes};
  });
  const StridedCopy c = simplify(copy);
  // A contiguous copy is a plain transfer, which no binding limit applies to (one element
  // simplifies to no dimensions at all).
  if (c.box.empty() || (c.box.size() == 1 && c.in_strides[0] == 1 && c.out_strides[0] == 1)) {
    // Byte offsets: a 16-bit element's may be only 2-aligned, which copies allow.
    const uint64_t es = c.element_bytes;
    const VkBufferCopy region{in.offset() + c.in_offset * es, out.offset() + c.out_offset * es,
                              static_cast<uint64_t>(count) * es};
    {
      const profile::DeviceSpan span(rec.profile.get(), profile::Kind::copy,
                                     "copy",  // profile hook
                                     region.size);
      if (rec.cb) vk::copy_buffer(rec.cb, in.vk_buffer(), out.vk_buffer(), 1, &region);
    }
    barrier(rec.cb);
    return;
  }
  if (c.element_bytes == 2) require_storage16(rt, rec.device);
  if (c.element_bytes == 1) require_dtype(rt, rec.device, DType::uint8);
  const WindowLimits w = window_limits(rt);
  if (in.capacity() / c.element_bytes > w.texel_count || out.capacity() > w.storage_bytes) {
    record_tiled_copy(rt, rec, c, w, in, out);
    return;
  }
  struct Params {
    uint32_t n, base;
    int32_t in_offset, out_offset;
  } p{static_cast<uint32_t>(count), 0, static_cast<int32_t>(c.in_offset),
      static_cast<int32_t>(c.out_offset)};
  if (moves_vec4s(c)) {
    p = {static_cast<uint32_t>(count / 4), 0, static_cast<int32_t>(c.in_offset / 4),
         static_cast<int32_t>(c.out_offset / 4)};
    const Binding vec4_bindings[] = {
        Binding::texels(in, VK_FORMAT_R32G32B32A32_UINT, 0, in.capacity() / 16 * 16),
        Binding::storage(out)};
    dispatch(rt, rec, {"strided_copy", vec4_copy_kernel(c)}, vec4_bindings, &p, sizeof p,
             groups_for(rt, (static_cast<uint64_t>(count / 4) + 63) / 64));
    barrier(rec.cb);
    return;
  }
  const Binding bindings[] = {Binding::texels(in, texel_format(c), 0, in.capacity() / 4 * 4),
                              Binding::storage(out)};
  dispatch(rt, rec, {"strided_copy", copy_kernel(c)}, bindings, &p, sizeof p,
           groups_for(rt, (static_cast<uint64_t>(count) + 63) / 64));
  barrier(rec.cb);
}

void record_fill_words(detail::RuntimeState& rt, detail::Recording& rec,
                       const detail::DeviceBuffer& out, uint64_t count, uint32_t word,
                       DType dtype) {
  if (count == 0 || rec.remote) return;
  if (is_64bit(dtype)) return record_fill64(rt, rec, out, count, word, dtype);
  const CountedOp counted(rec, [&] { return OpCost{0, 0, count * dtype_size(dtype)}; });
  // Fills take whole words: a 16-bit array's odd last element fills its word, which the buffer's
  // capacity (a multiple of 4) holds.
  vkCmdFillBuffer(rec.cb, out.vk_buffer(), out.offset(), (count * dtype_size(dtype) + 3) / 4 * 4,
                  fill_pattern(dtype, word));
  barrier(rec.cb);
}

}  // namespace meshvk::kernels

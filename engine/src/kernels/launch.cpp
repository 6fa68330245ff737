#include "kernels/launch.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernels/cost.hpp"
#include "kernels/glsl_compiler.hpp"
#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "runtime/env.hpp"
#include "vk/buffer_view.hpp"

namespace meshvk::kernels {

Binding Binding::storage(const detail::DeviceBuffer& b, uint64_t offset, uint64_t range) {
  return {b.vk_buffer(), b.offset() + offset, range ? range : b.capacity() - offset, VK_FORMAT_UNDEFINED};
}

Binding Binding::texels(const detail::DeviceBuffer& b, VkFormat format, uint64_t offset, uint64_t range) {
  return {b.vk_buffer(), b.offset() + offset, range ? range : b.capacity() - offset, format};
}

Groups groups_for(const detail::RuntimeState& rt, uint64_t count) {
  const auto& limits = rt.device_limits();
  const uint64_t max_x = std::min<uint64_t>(limits.maxComputeWorkGroupCount[0], 65535);
  count = std::max<uint64_t>(count, 1);
  const uint64_t x = std::min(count, max_x);
  const uint64_t y = (count + x - 1) / x;
  if (y > limits.maxComputeWorkGroupCount[1])
    throw Error("internal: dispatch of " + std::to_string(count) + " workgroups exceeds the grid");
  return {static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1};
}

WindowLimits window_limits(const detail::RuntimeState& rt) {
  const auto& l = rt.device_limits();
  WindowLimits w;
  w.storage_bytes = l.maxStorageBufferRange;
  w.texel_count = l.maxTexelBufferElements;
  // Tests shrink the limits so small arrays take the windowed paths; unset or empty leaves the
  // adapter's, anything but a number of bytes is an Error.
  if (const auto asked = detail::env_unsigned("MESHVK_TEST_BINDING_BYTES", 1,
                                              std::numeric_limits<uint32_t>::max(), "bytes")) {
    const uint64_t bytes = std::max<uint64_t>(*asked, 64 << 10);
    w.storage_bytes = std::min(w.storage_bytes, bytes);
    w.texel_count = std::min(w.texel_count, bytes / 4);
  }
  w.align =
      std::max<uint64_t>({16, l.minStorageBufferOffsetAlignment, l.minTexelBufferOffsetAlignment}) /
      4;
  w.align = (w.align + 3) / 4 * 4;
  w.storage = w.storage_bytes / 4 - w.align;
  w.texels = w.texel_count - w.align;
  return w;
}

void dispatch(detail::RuntimeState& rt, detail::Recording& rec, const Kernel& kernel,
              std::span<const Binding> bindings, const void* push, uint32_t push_bytes,
              Groups groups, Cost cost) {
  if (rec.remote) return;  // another process's device runs it
  for (const Binding& b : bindings)
    if (b.buffer == VK_NULL_HANDLE)
      throw Error("internal: kernel " + kernel.name + " on device " + std::to_string(rec.device) +
                  " binds another process's buffer");
  // Kernels split their work (or bind windows) to stay inside the binding limits; any that still
  // cannot refuse rather than bind past them.
  const auto& limits = rt.device_limits();
  for (const Binding& b : bindings) {
    const uint64_t texel_bytes = (b.format == VK_FORMAT_R32G32B32A32_UINT || b.format == VK_FORMAT_R32G32B32A32_SFLOAT ||
                                  b.format == VK_FORMAT_R32G32B32A32_SINT) ? 16
                                 : b.format == VK_FORMAT_R16G16B16A16_UINT ? 8
                                 : b.format == VK_FORMAT_R16_UINT          ? 2
                                                                           : 4;
    const uint64_t limit = b.format == VK_FORMAT_UNDEFINED ? limits.maxStorageBufferRange
                                                           : uint64_t{limits.maxTexelBufferElements} * texel_bytes;
    if (b.range > limit)
      throw Error("kernel " + kernel.name + " would bind " + std::to_string(b.range >> 20) + " MiB of one device's memory, over the adapter's " +
                  std::to_string(limit >> 20) + " MiB limit for one binding; shard the array over more devices so each piece is smaller");
  }
  std::vector<VkDescriptorType> types;
  for (const Binding& b : bindings)
    types.push_back(b.format == VK_FORMAT_UNDEFINED ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                                                    : VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER);
  const std::string key = kernel.glsl.empty() ? kernel.name : kernel.glsl;
  vk::Device& vk_device = rt.device_for(rec.device);  // the VkDevice the recording is for
  vk::ComputePipeline& p = rt.pipeline(rec.device, key, [&] {
    const profile::HostSpan compiling(rt.profiler(), "compile");  // profile hook
    std::vector<uint32_t> generated;
    std::span<const uint32_t> spirv = embedded_spirv(kernel.name);
    if (!kernel.glsl.empty()) {
      generated = compile_glsl(kernel.glsl, kernel.name);
      spirv = generated;
    }
    if (spirv.empty()) throw Error("internal: no embedded shader named " + kernel.name);
    return std::make_unique<vk::ComputePipeline>(vk_device.handle(), spirv, types, push_bytes);
  });

  const VkDevice device = vk_device.handle();
  std::vector<VkDescriptorBufferInfo> infos(bindings.size());
  std::vector<VkBufferView> views(bindings.size());
  std::vector<VkWriteDescriptorSet> writes;
  for (size_t i = 0; i < bindings.size(); ++i) {
    const Binding& b = bindings[i];
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstBinding = static_cast<uint32_t>(i);
    w.descriptorCount = 1;
    w.descriptorType = types[i];
    if (b.format == VK_FORMAT_UNDEFINED) {
      infos[i] = {b.buffer, b.offset, b.range};
      w.pBufferInfo = &infos[i];
    } else {
      auto view = std::make_shared<vk::BufferView>(device, b.buffer, b.format, b.offset, b.range);
      views[i] = view->handle();
      rec.keep_alive.push_back(view);
      w.pTexelBufferView = &views[i];
    }
    writes.push_back(w);
  }
  const PFN_vkCmdPushDescriptorSetKHR push_descriptors = vk_device.push_descriptor_set();
  vkCmdBindPipeline(rec.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.handle());
  push_descriptors(rec.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0,
                   static_cast<uint32_t>(writes.size()), writes.data());
  if (push_bytes)
    vkCmdPushConstants(rec.cb, p.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  // profile hook
  const profile::DeviceSpan span(rec.profile.get(), profile::Kind::kernel, kernel.name, cost.bytes,
                                 cost.flops);
  vkCmdDispatch(rec.cb, groups.x, groups.y, groups.z);
  rt.dispatches.fetch_add(1);
}

void barrier(VkCommandBuffer cb) {
  if (cb == VK_NULL_HANDLE) return;  // a remote recording
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  b.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                       0, 1, &b, 0, nullptr, 0, nullptr);
}

void barrier_to_host(VkCommandBuffer cb) {
  if (cb == VK_NULL_HANDLE) return;  // a remote recording
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0,
                       nullptr, 0, nullptr);
}

void record_iota(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& out,
                 uint64_t count, bool is_float, double start, double step) {
  const CountedOp counted(rec, [&] { return OpCost{0, 0, count * kWordBytes}; });
  struct Params {
    uint32_t count, base, is_float, pad;
    float fstart, fstep;
    int32_t istart, istep;
  };
  constexpr uint64_t kGroup = 256;
  // Chunks stay inside maxStorageBufferRange.
  const uint64_t chunk = rt.device_limits().maxStorageBufferRange / 4 / kGroup * kGroup;
  for (uint64_t base = 0; base < count; base += chunk) {
    const uint64_t n = std::min(chunk, count - base);
    const Params p{static_cast<uint32_t>(n),
                   static_cast<uint32_t>(base),
                   is_float ? 1u : 0u,
                   0,
                   static_cast<float>(start),
                   static_cast<float>(step),
                   static_cast<int32_t>(start),
                   static_cast<int32_t>(step)};
    const Binding b = Binding::storage(out, base * 4, n * 4);
    dispatch(rt, rec, {"iota", ""}, std::span(&b, 1), &p, sizeof p, groups_for(rt, (n + kGroup - 1) / kGroup));
  }
}

void record_fill(detail::Recording& rec, const detail::DeviceBuffer& out, uint32_t pattern) {
  if (out.bytes() == 0 || rec.remote) return;
  const CountedOp counted(rec, [&] { return OpCost{0, 0, out.bytes()}; });
  const profile::DeviceSpan span(rec.profile.get(), profile::Kind::copy, "fill",  // profile hook
                                 out.bytes());
  // A 16-bit array's last word may be half used: the capacity (a multiple of 4) covers it.
  vkCmdFillBuffer(rec.cb, out.vk_buffer(), out.offset(), std::min(out.capacity(), (out.bytes() + 3) / 4 * 4) / 4 * 4, pattern);
}

uint32_t fill_pattern(DType dtype, uint32_t word) {
  const float value = std::bit_cast<float>(word);
  const uint32_t h = dtype == DType::bfloat16 ? bfloat16_bits(value)
                     : dtype == DType::float16 ? float16_bits(value)
                                               : 0;
  if (is_8bit(dtype)) return (word & 0xffu) * 0x01010101u;  // an int32 value, wrapped to a byte
  return is_16bit(dtype) ? h | h << 16 : word;
}

}  // namespace meshvk::kernels

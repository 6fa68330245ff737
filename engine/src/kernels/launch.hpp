#pragma once
// Recording compute dispatches and fills into a virtual device's command stream.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

// SPIR-V of shaders/<name>.comp, embedded at build time; empty when there is no such shader.
std::span<const uint32_t> embedded_spirv(std::string_view name);

// One descriptor: `range` bytes of `buffer` from `offset`, as a storage buffer or, when `format`
// is set, as a uniform texel buffer of that format.
struct Binding {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0;
  uint64_t range = 0;
  VkFormat format = VK_FORMAT_UNDEFINED;

  static Binding storage(const detail::DeviceBuffer& b, uint64_t offset = 0, uint64_t range = 0);
  static Binding texels(const detail::DeviceBuffer& b, VkFormat format, uint64_t offset = 0,
                        uint64_t range = 0);
};

// A kernel: shaders/<name>.comp when `glsl` is empty, else GLSL generated at run time (compiled
// once per runtime and cached by its text).
struct Kernel {
  std::string name;
  std::string glsl;
};

struct Groups {
  uint32_t x = 1, y = 1, z = 1;
};
// `count` workgroups laid out over x and y within the device's grid limits; shaders recover the
// linear workgroup index as gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x.
Groups groups_for(const detail::RuntimeState& rt, uint64_t count);

// What a dispatch does, when its launcher knows: the profiler reports GFLOP/s and GB/s from it
// (e.g. a matmul: flops = 2 * m * n * k * batch). Zero means unknown.
struct Cost {
  uint64_t bytes = 0;
  uint64_t flops = 0;
};

// Records one dispatch with `bindings` at 0..n-1 and `push` as push constants.
void dispatch(detail::RuntimeState& rt, detail::Recording& rec, const Kernel& kernel,
              std::span<const Binding> bindings, const void* push, uint32_t push_bytes,
              Groups groups, Cost cost = {});

// Makes every earlier write in the command buffer visible to every later command.
void barrier(VkCommandBuffer cb);
// Makes transfer writes visible to the host after the submission finishes.
void barrier_to_host(VkCommandBuffer cb);

// out[i] = start + step * i for the `count` elements of `out`.
void record_iota(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& out,
                 uint64_t count, bool is_float, double start, double step);
// Every 4-byte word of `out` set to `pattern`.
void record_fill(detail::Recording& rec, const detail::DeviceBuffer& out, uint32_t pattern);

}  // namespace meshvk::kernels

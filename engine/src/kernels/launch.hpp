#pragma once
// Recording compute dispatches and fills into a virtual device's command stream.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "meshvk/dtype.hpp"
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

// Windows: sub-ranges of a buffer bound at an offset, for kernels whose per-device pieces are
// larger than one binding may address. All counts are 4-byte words.
struct WindowLimits {
  // What one binding may address: bytes of a storage buffer, texels of a texel buffer. Pieces
  // within these take a kernel's single-binding path.
  uint64_t storage_bytes = 0;
  uint64_t texel_count = 0;
  // Every window starts at a multiple of this many words (a multiple of 4, so vec4 texel indices
  // stay whole); buffers themselves start at multiples of it.
  uint64_t align = 4;
  // Words one storage binding, and texels one R32 texel binding, may address, less `align`, so
  // a window whose start is rounded down to an aligned offset still fits.
  uint64_t storage = 0;
  uint64_t texels = 0;
};
// The adapter's limits, or smaller ones where MESHVK_TEST_BINDING_BYTES (at least 64 KiB) asks
// for them, so that tests reach the windowed paths with small arrays.
WindowLimits window_limits(const detail::RuntimeState& rt);
// `words` rounded down to a multiple of `align`.
inline uint64_t align_down(uint64_t words, uint64_t align) {
  return words / align * align;
}

// Makes every earlier write in the command buffer visible to every later command.
void barrier(VkCommandBuffer cb);
// Makes transfer writes visible to the host after the submission finishes.
void barrier_to_host(VkCommandBuffer cb);

// out[i] = start + step * i for the `count` elements of `out`.
void record_iota(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& out,
                 uint64_t count, bool is_float, double start, double step);
// Every 4-byte word of `out` set to `pattern`, up to its bytes() rounded up to a whole word.
void record_fill(detail::Recording& rec, const detail::DeviceBuffer& out, uint32_t pattern);
// The 4-byte pattern filling elements of `dtype` with the value whose 32 bits are `word` (for
// bfloat16 and float16 the float32 bits of a value of the format: its 16 bits, twice).
uint32_t fill_pattern(DType dtype, uint32_t word);

}  // namespace meshvk::kernels

#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshvk::kernels {

// Compiles a GLSL compute shader generated at run time (fused elementwise chains, kernels
// specialised to shapes) to SPIR-V for Vulkan 1.2, with the glslang library.
std::vector<uint32_t> compile_glsl(const std::string& source, const std::string& name);

}  // namespace meshvk::kernels

#include "kernels/glsl_compiler.hpp"

#include <glslang/Public/ResourceLimits.h>
#include <glslang/Public/ShaderLang.h>
#include <glslang/SPIRV/GlslangToSpv.h>

#include <mutex>

#include "meshvk/error.hpp"

namespace meshvk::kernels {

std::vector<uint32_t> compile_glsl(const std::string& source, const std::string& name) {
  static std::once_flag initialized;
  std::call_once(initialized, [] { glslang::InitializeProcess(); });
  // glslang keeps per-thread state; meshvk compiles under the runtime's lock, one at a time.
  static std::mutex compiling;
  std::lock_guard lock(compiling);

  glslang::TShader shader(EShLangCompute);
  const char* text = source.c_str();
  shader.setStrings(&text, 1);
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_2);
  shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_5);
  const auto messages = static_cast<EShMessages>(EShMsgSpvRules | EShMsgVulkanRules);
  if (!shader.parse(GetDefaultResources(), 450, false, messages))
    throw Error("internal: generated kernel " + name + " does not compile: " + shader.getInfoLog() +
                "\n" + source);
  glslang::TProgram program;
  program.addShader(&shader);
  if (!program.link(messages))
    throw Error("internal: generated kernel " + name + " does not link: " + program.getInfoLog());
  std::vector<uint32_t> spirv;
  glslang::SpvOptions options;
  options.disableOptimizer = false;
  options.optimizeSize = false;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &options);
  return spirv;
}

}  // namespace meshvk::kernels

#include "kernels/glsl_compiler.hpp"

#include <shaderc/shaderc.h>

#include <memory>

#include "meshvk/error.hpp"

namespace meshvk::kernels {

std::vector<uint32_t> compile_glsl(const std::string& source, const std::string& name) {
  // One compiler per thread: shaderc compilers are not safe to share while compiling.
  thread_local const std::unique_ptr<std::remove_pointer_t<shaderc_compiler_t>, void (*)(shaderc_compiler_t)>
      compiler(shaderc_compiler_initialize(), shaderc_compiler_release);
  const std::unique_ptr<std::remove_pointer_t<shaderc_compile_options_t>, void (*)(shaderc_compile_options_t)>
      options(shaderc_compile_options_initialize(), shaderc_compile_options_release);
  shaderc_compile_options_set_target_env(options.get(), shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_2);
  shaderc_compile_options_set_optimization_level(options.get(), shaderc_optimization_level_performance);
  const std::unique_ptr<std::remove_pointer_t<shaderc_compilation_result_t>, void (*)(shaderc_compilation_result_t)>
      result(shaderc_compile_into_spv(compiler.get(), source.data(), source.size(),
                                      shaderc_compute_shader, name.c_str(), "main", options.get()),
             shaderc_result_release);
  if (shaderc_result_get_compilation_status(result.get()) != shaderc_compilation_status_success)
    throw Error("internal: generated kernel " + name + " does not compile: " +
                shaderc_result_get_error_message(result.get()) + "\n" + source);
  const auto* words = reinterpret_cast<const uint32_t*>(shaderc_result_get_bytes(result.get()));
  return std::vector<uint32_t>(words, words + shaderc_result_get_length(result.get()) / 4);
}

}  // namespace meshvk::kernels

# Install rules: the library, its public headers and CMake package (meshvkConfig.cmake,
# meshvkConfigVersion.cmake, meshvkTargets.cmake), meshvk.pc for pkg-config, and the tools that
# were built. The shaders need nothing installed: they are embedded in the library
# (cmake/shaders.cmake) and the generated kernels are compiled in-process.
include(CMakePackageConfigHelpers)

set(MESHVK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/meshvk)

install(TARGETS meshvk EXPORT meshvkTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/engine/include/meshvk ${MESHVK_GENERATED_INCLUDE}/meshvk
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
# Hardware descriptions for Lowered::estimate (meshvk/estimate.hpp).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/hardware/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshvk/hardware
        FILES_MATCHING PATTERN "*.hw")
install(EXPORT meshvkTargets NAMESPACE meshvk:: DESTINATION ${MESHVK_CMAKE_DIR})

configure_package_config_file(cmake/meshvkConfig.cmake.in
  ${PROJECT_BINARY_DIR}/meshvkConfig.cmake
  INSTALL_DESTINATION ${MESHVK_CMAKE_DIR})
# 0.x: a minor release may break the API, so 0.2 accepts 0.2.x only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshvkConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/meshvkConfig.cmake
  ${PROJECT_BINARY_DIR}/meshvkConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/meshvkGlslang.cmake
  DESTINATION ${MESHVK_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own place, so the tree can move.
file(RELATIVE_PATH MESHVK_PC_PREFIX_FROM_PCDIR
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" MESHVK_PC_PREFIX_FROM_PCDIR "${MESHVK_PC_PREFIX_FROM_PCDIR}")
set(MESHVK_PC_GLSLANG_LIBS "")
foreach(lib SPIRV glslang-default-resource-limits glslang MachineIndependent OGLCompiler
            GenericCodeGen OSDependent SPIRV-Tools-opt SPIRV-Tools)
  string(APPEND MESHVK_PC_GLSLANG_LIBS " -l${lib}")
endforeach()
string(STRIP "${MESHVK_PC_GLSLANG_LIBS}" MESHVK_PC_GLSLANG_LIBS)
# Open MPI's libraries, by path, when meshvk was built with it.
set(MESHVK_PC_MPI_LIBS "")
if(MESHVK_WITH_MPI)
  foreach(lib ${MPI_CXX_LIBRARIES})
    string(APPEND MESHVK_PC_MPI_LIBS " ${lib}")
  endforeach()
endif()
configure_file(cmake/meshvk.pc.in ${PROJECT_BINARY_DIR}/meshvk.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/meshvk.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The tools go to bin/; the samples, whose names are too plain for bin/, to libexec/meshvk/.
foreach(tool meshvk_cli meshvk-inspector meshvk-bench)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
if(MESHVK_SAMPLE_TARGETS)
  install(TARGETS ${MESHVK_SAMPLE_TARGETS} RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/meshvk)
endif()

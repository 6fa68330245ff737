#pragma once
#include <cstdlib>
#include <string>

#include "meshvk/runtime.hpp"

// The runtime every test of the binary shares (8 virtual devices under ctest).
meshvk::Runtime& test_runtime();

// ../shared/golden, as ctest passes it; empty when not set.
inline std::string golden_dir() {
  const char* dir = std::getenv("MESHVK_GOLDEN_DIR");
  return dir ? dir : "";
}

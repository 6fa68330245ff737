#pragma once
// Worked programs of the tutorials, written against meshvk's public API only, shared by the
// samples, the tests, meshvk-bench and the inspector.
#include <string>
#include <vector>

namespace meshvk::programs {

// Names of the program families this library provides (for listings).
std::vector<std::string> families();

}  // namespace meshvk::programs

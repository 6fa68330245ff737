#include "programs.hpp"

namespace meshvk::programs {

std::vector<std::string> families() { return {"scaling_book"}; }

}  // namespace meshvk::programs

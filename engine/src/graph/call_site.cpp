#include "graph/call_site.hpp"

#include <string_view>

namespace meshvk::detail {

bool UserCallSite::in_engine(const char* file) {
  const std::string_view f = file ? file : "";
  return f.find("engine/src/") != std::string_view::npos || f.find("include/meshvk/") != std::string_view::npos;
}

}  // namespace meshvk::detail

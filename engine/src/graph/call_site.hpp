#pragma once
// The user's source line for the program text's provenance of collectives: public entry points
// that insert collectives (matmul, einsum, sum, take, device_put, the collectives, ...) take a
// defaulted SourceLocation and open a UserCallSite. A location inside the engine (an op
// calling another op) is not the user's and leaves the outer one in place, so the innermost call
// made from user code names the line, as JAX's source info skips its own frames.
#include <optional>

#include "exec/program_log.hpp"
#include "meshvk/source_location.hpp"

namespace meshvk::detail {

class UserCallSite {
 public:
  explicit UserCallSite(const SourceLocation& loc) {
    if (exec::logging() && loc.file && !in_engine(loc.file))
      scope_.emplace(exec::CallSite{loc.file, loc.line, loc.function, false});
  }
  UserCallSite(const UserCallSite&) = delete;
  UserCallSite& operator=(const UserCallSite&) = delete;

  // Whether `file` is one of the engine's own sources or public headers.
  static bool in_engine(const char* file);

 private:
  std::optional<exec::CallSiteScope> scope_;
};

}  // namespace meshvk::detail

#pragma once
// The caller's source line, as std::source_location::current() gives it: API functions that insert
// collectives take `SourceLocation loc = SourceLocation::current()` as their last parameter, and
// the program text names that line beside the collectives (see Lowered::collectives). Built on
// the compilers' __builtin_FILE/LINE/FUNCTION, which g++ and clang both evaluate at the outermost
// call when used as default arguments (clang 14 cannot compile libstdc++'s <source_location>).
namespace meshvk {

struct SourceLocation {
  const char* file = nullptr;
  unsigned line = 0;
  const char* function = nullptr;
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                                          const char* function = __builtin_FUNCTION()) {
    return {file, line, function};
  }
};

}  // namespace meshvk

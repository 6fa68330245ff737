#pragma once
// Reading MESHVK_* settings from the environment: a value that is set but not what the variable
// takes is an Error naming the variable, never a silent default or a partial parse.
#include <cstdint>
#include <optional>
#include <string>

namespace meshvk::detail {

// The variable's text; nullopt when it is unset or empty (empty counts as unset).
std::optional<std::string> env_text(const char* name);

// A decimal integer from `min` to `max`, digits only (no sign, space or unit); nullopt when
// unset. `unit` names what it counts in the error ("milliseconds").
std::optional<uint64_t> env_unsigned(const char* name, uint64_t min, uint64_t max,
                                     const char* unit);

// A number of bytes: digits, optionally followed by KiB, MiB, GiB or TiB (powers of 1024; no
// space, sign or fraction: 1073741824, 512MiB, 2GiB), at least `min` bytes; nullopt when unset.
std::optional<uint64_t> env_bytes(const char* name, uint64_t min);

// 0 or 1; nullopt when unset.
std::optional<bool> env_switch(const char* name);

}  // namespace meshvk::detail

#include "runtime/env.hpp"

#include <cstdlib>
#include <limits>

#include "meshvk/error.hpp"

namespace meshvk::detail {

std::optional<std::string> env_text(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<uint64_t> env_unsigned(const char* name, uint64_t min, uint64_t max,
                                     const char* unit) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  auto invalid = [&] {
    return Error(std::string(name) + "=" + *text + " is not a number of " + unit +
                 "; give a whole number from " + std::to_string(min) + " to " +
                 std::to_string(max) + ", digits only (e.g. " + name + "=" + std::to_string(min) +
                 ")");
  };
  uint64_t value = 0;
  for (const char c : *text) {
    if (c < '0' || c > '9') throw invalid();
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) throw invalid();
    value = value * 10 + digit;
  }
  if (value < min || value > max) throw invalid();
  return value;
}

std::optional<uint64_t> env_bytes(const char* name, uint64_t min) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  auto invalid = [&] {
    return Error(std::string(name) + "=" + *text +
                 " is not a number of bytes; give digits, optionally followed by KiB, MiB, GiB "
                 "or TiB (e.g. " +
                 name + "=512MiB or " + name + "=2GiB), at least " + std::to_string(min >> 20) +
                 "MiB");
  };
  size_t digits = 0;
  uint64_t value = 0;
  for (; digits < text->size() && (*text)[digits] >= '0' && (*text)[digits] <= '9'; ++digits) {
    const uint64_t digit = static_cast<uint64_t>((*text)[digits] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) throw invalid();
    value = value * 10 + digit;
  }
  if (digits == 0) throw invalid();
  const std::string suffix = text->substr(digits);
  int shift = 0;
  if (suffix == "KiB")
    shift = 10;
  else if (suffix == "MiB")
    shift = 20;
  else if (suffix == "GiB")
    shift = 30;
  else if (suffix == "TiB")
    shift = 40;
  else if (!suffix.empty())
    throw invalid();
  if (value > (std::numeric_limits<uint64_t>::max() >> shift)) throw invalid();
  value <<= shift;
  if (value < min) throw invalid();
  return value;
}

std::optional<bool> env_switch(const char* name) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  if (*text != "0" && *text != "1")
    throw Error(std::string(name) + "=" + *text + " is not a switch; give 0 or 1");
  return *text == "1";
}

}  // namespace meshvk::detail

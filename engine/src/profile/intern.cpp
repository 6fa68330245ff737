#include "profile/intern.hpp"

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace meshvk::profile {

namespace {

struct Hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Never freed: events referring to these names may be read until the process exits.
struct Table {
  std::mutex mutex;
  std::unordered_set<std::string, Hash, std::equal_to<>> names;
};
Table& table() {
  static Table* t = new Table;
  return *t;
}

}  // namespace

const char* intern(std::string_view text) {
  if (text.empty()) return "";
  thread_local std::unordered_map<std::string, const char*, Hash, std::equal_to<>> cache;
  if (const auto it = cache.find(text); it != cache.end()) return it->second;
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const char* p = t.names.emplace(text).first->c_str();
  cache.emplace(std::string(text), p);
  return p;
}

}  // namespace meshvk::profile

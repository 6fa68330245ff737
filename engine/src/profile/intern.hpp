#pragma once
// Names in events are interned C strings, so an event is a few plain words that can be copied
// between threads and kept in a ring buffer without owning memory.
#include <string_view>

namespace meshvk::profile {

// A pointer to a copy of `text` that lives until the process ends; equal texts give the same
// pointer. A per-thread cache answers repeated names without taking the global lock.
const char* intern(std::string_view text);

}  // namespace meshvk::profile

#pragma once
// What the profiler tests share: profiling on for a scope, a runtime's spans and flows.
#include <variant>
#include <vector>

#include "meshvk/profile.hpp"
#include "profile/device_profiler.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

// The shared test runtime's id in profile events.
inline int test_runtime_id() {
  return test_runtime().state()->profiler().runtime();
}

inline std::vector<meshvk::profile::Span> spans_of(const std::vector<meshvk::profile::Event>& events, int runtime) {
  std::vector<meshvk::profile::Span> out;
  for (const auto& e : events)
    if (const auto* s = std::get_if<meshvk::profile::Span>(&e); s && s->runtime == runtime) out.push_back(*s);
  return out;
}

inline std::vector<meshvk::profile::Flow> flows_of(const std::vector<meshvk::profile::Event>& events, int runtime) {
  std::vector<meshvk::profile::Flow> out;
  for (const auto& e : events)
    if (const auto* f = std::get_if<meshvk::profile::Flow>(&e); f && f->runtime == runtime) out.push_back(*f);
  return out;
}

// Profiling on, with an empty buffer, for the scope's duration.
class Profiling {
 public:
  explicit Profiling(meshvk::profile::Options options = {}) {
    meshvk::profile::stop();
    meshvk::profile::start(options);
  }
  ~Profiling() { meshvk::profile::stop(); }
};

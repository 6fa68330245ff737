// The hooks' scopes: what the current thread is running, for the spans it records.
#include "profile/hooks.hpp"
#include "profile/intern.hpp"

namespace meshvk::profile {

Context& context() {
  thread_local Context c;
  return c;
}

JitScope::JitScope(DeviceProfiler& profiler, const std::string& name, bool trace)
    : profiler_(profiler) {
  if (!on()) [[likely]]
    return;
  Context& c = context();
  saved_ = c.program;
  c.program = intern("jit(" + name + ")");
  what_ = "trace";
  was_muted_ = c.muted;
  if (!trace) {
    // Options::sample_replays: the others run without device spans, submits or waits, the
    // profiler's cost per replay (reading back and publishing ~100 events) spent on 1 in N.
    Recorder& rec = Recorder::get();
    replay_ = rec.next_replay(c.program);
    const bool sampled = rec.sampled(replay_);
    what_ = sampled ? "replay" : "replay (not sampled)";
    c.muted = c.muted || !sampled;
  }
  start_ = now_ns();
}

JitScope::~JitScope() {
  if (!start_) [[likely]]
    return;
  Context& c = context();
  c.muted = was_muted_;
  profiler_.host_span(what_, start_, now_ns(), -1, replay_);
  c.program = saved_;
}

OpScope::OpScope(std::string_view op) {
  if (!on()) [[likely]]
    return;
  Context& c = context();
  saved_ = c.op;
  saved_rule_ = c.rule;
  c.op = intern(op);
}

OpScope::~OpScope() {
  if (!saved_) return;
  context().op = saved_;
  context().rule = saved_rule_;
}

void set_rule(std::string_view rule) {
  if (on()) context().rule = intern(rule);
}

CollectiveScope::CollectiveScope(const char* name, const char* algorithm) {
  if (!on()) [[likely]]
    return;
  Context& c = context();
  saved_ = c.collective;
  c.collective = algorithm ? intern(std::string(name) + "(" + algorithm + ")") : intern(name);
}

CollectiveScope::~CollectiveScope() {
  if (saved_) context().collective = saved_;
}

}  // namespace meshvk::profile

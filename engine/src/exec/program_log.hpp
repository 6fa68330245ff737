#pragma once
// The partitioned program as text: while a jit trace runs, each op adds a line saying what every
// device runs (local shapes) and which collectives move data between devices.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meshvk {
class Mesh;
}

namespace meshvk::exec {

bool logging();
const std::string& current_rule();

// Where a collective came from. The call site is the user's source line: the innermost call of
// the public API made from outside the engine (graph/call_site.hpp sets it), or, in a backward
// pass, the line of the forward op whose rule runs. Pointers are SourceLocation's (static strings).
struct CallSite {
  const char* file = nullptr;
  uint32_t line = 0;
  const char* function = nullptr;
  bool backward = false;
  bool known() const { return file != nullptr; }
};
const CallSite& current_call_site();
// While alive, `site` is the thread's call site.
class CallSiteScope {
 public:
  explicit CallSiteScope(const CallSite& site);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  CallSite saved_;
};

// The rule that inserts the collectives and reshards run while it is alive ("dot_general
// contracts dim 1 sharded on 'model'", "out_shardings[0]"). The outermost rule wins: an op that
// lays out its operands with device_put names why, and device_put's own rule does not replace it.
// `describe` (a callable returning std::string) runs only while a trace listens.
class RuleScope {
 public:
  template <class F>
  explicit RuleScope(F&& describe) {
    if (logging() && current_rule().empty()) set(describe());
  }
  ~RuleScope();
  RuleScope(const RuleScope&) = delete;
  RuleScope& operator=(const RuleScope&) = delete;

 private:
  void set(std::string rule);
  bool set_ = false;
};

// A rule set whatever rule is current, restored after: a partial sum taken where a later op
// needs it names the op that made it (the contraction), not the op that reads it.
class RuleOverride {
 public:
  explicit RuleOverride(std::string rule);
  ~RuleOverride();
  RuleOverride(const RuleOverride&) = delete;
  RuleOverride& operator=(const RuleOverride&) = delete;

 private:
  std::string saved_;
};

// Appends a line when a trace is listening; costs nothing otherwise.
void log_op(const std::string& line);
// A line for data moved between devices: `kind` is HLO's name ("all-reduce", "all-gather",
// "reduce-scatter", "all-to-all", "collective-permute", ...), `bytes` what each device sends,
// `axes` the mesh axes it moves along. The current rule and call site are recorded with it and
// appended to the line ("  # <rule> - gpt.cpp:88 (function)").
// `mesh` (optional) gives the axes' sizes to the trace's cost event (Lowered::estimate).
void log_collective(const std::string& kind, uint64_t bytes, const std::string& line,
                    const std::vector<std::string>& axes = {}, const Mesh* mesh = nullptr);
// While a trace listens and the profiler runs: the device work recorded from here to the end of
// the enclosing profile::OpScope carries the current rule and call site (profile::Span::rule),
// so the inspector shows each collective's provenance. log_collective calls it; a reshard, which
// logs its line after it ran, calls it first.
void note_provenance();
// A function's name from a pretty signature ("R ns::name(args)") or a plain name (__builtin_FUNCTION's).
std::string short_function(const char* signature);
// The provenance suffix log_collective appends: "  # rule - file:line (function)".
std::string provenance_text(const std::string& rule, const CallSite& site);
// While a trace listens: names the value whose first buffer is `key` after the op that made it
// and returns the name ("" otherwise).
std::string name_result(const void* key, const std::string& op);
// The name a value got (name_result, ProgramLog::name_value), or "" when it has none.
std::string value_name(const void* key);

struct CollectiveRecord {
  std::string kind;
  uint64_t bytes = 0;
  std::vector<std::string> axes;
  std::string rule;
  CallSite site;
  uint64_t times = 1;  // runs per call of the program: a loop body's, its trip count
};

// A loop replays its body's recording rather than tracing it again: the collectives the body
// logged run once per iteration. mark_collectives() before the body's trace and after it, then
// repeat_collectives(from, to) once per further iteration (each record's count at `to` time is
// added, so a loop nested in the body counts its own trip count times the outer one's).
struct CollectiveMark {
  const void* log = nullptr;
  size_t index = 0;
};
CollectiveMark mark_collectives();
class CollectiveRepeat {
 public:
  CollectiveRepeat(const CollectiveMark& from, const CollectiveMark& to);
  void repeat() const;  // one more iteration (nothing unless the same log still listens)

 private:
  CollectiveMark from_;
  std::vector<uint64_t> times_;
};

class ProgramLog {
 public:
  ProgramLog();
  ~ProgramLog();
  ProgramLog(const ProgramLog&) = delete;
  ProgramLog& operator=(const ProgramLog&) = delete;
  const std::vector<std::string>& lines() const { return lines_; }
  const std::vector<CollectiveRecord>& collectives() const { return collectives_; }
  // Appends `lines` and this log's collectives to the log that was listening when this one
  // began, if one was: a shard_map's program, logged on its own, also shows in the text of
  // the jit trace it runs in.
  void forward(const std::vector<std::string>& lines) const;
  // Names a value (keyed by its first buffer, which the trace keeps alive) for the lines of ops
  // that read it: the jit's inputs are in0, in1, ...; an op's result is named after the op,
  // numbered as HLO numbers repeats ("dot_general", "dot_general.1").
  void name_value(const void* key, const std::string& name) { names_[key] = name; }

 private:
  friend std::string name_result(const void* key, const std::string& op);
  friend std::string value_name(const void* key);
  friend CollectiveMark mark_collectives();
  friend class CollectiveRepeat;

  friend void log_op(const std::string& line);
  friend void log_collective(const std::string& kind, uint64_t bytes, const std::string& line,
                             const std::vector<std::string>& axes, const Mesh* mesh);
  std::vector<std::string> lines_;
  std::vector<CollectiveRecord> collectives_;
  std::map<const void*, std::string> names_;
  std::map<std::string, int> op_counts_;
  ProgramLog* outer_;
};

}  // namespace meshvk::exec

#pragma once
// Scenarios: the samples as a library. Each scenario is a function of a ScenarioContext, so the
// same code runs headless (a sample's thin main prints to stdout) and inside the inspector (on
// a worker thread that shows what the scenario publishes and can pause, step and stop it).
#include <atomic>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <meshvk/meshvk.hpp>

namespace meshvk::scenarios {

// Thrown by ScenarioContext::checkpoint when the viewer asks the scenario to stop.
struct Stopped {};

// A mesh shape chosen instead of the one a scenario would make. Without names the scenario's
// own axis names are kept when the rank matches, else 'a', 'b', 'c', ... are used.
struct MeshOverride {
  std::vector<int> sizes;
  std::vector<std::string> names;
};

// Parses "4x2", "(4, 2)", "8" or "2x2x2"; nullopt when the text is not a mesh shape.
std::optional<MeshOverride> parse_mesh_shape(std::string_view text);

// What a scenario shows besides its text output. Headless runs have none; the inspector
// implements it. Every call comes from the scenario's own thread.
class Observer {
 public:
  virtual ~Observer() = default;
  // A live array worth looking at, under a name unique in the scenario (a later publish under
  // the same name replaces it).
  virtual void on_array(const std::string& name, const Array& array) = 0;
  // The partitioned per-device program of a jit function (JitFunction::program_text).
  virtual void on_program(const std::string& name, const std::string& text) = 0;
  // An input whose PartitionSpec the viewer may override, with the spec the scenario uses
  // when nobody does, and the mesh it is laid out on.
  virtual void on_input(const std::string& name, const PartitionSpec& default_spec,
                        const Mesh& mesh) = 0;
  // A point between two steps of the scenario: the viewer may block here (pause, step) and
  // returns false to stop the scenario.
  virtual bool on_checkpoint(const std::string& label) = 0;
  // The memory of a program published as a Lowered (Lowered::memory_analysis: per device, the
  // peak its buffers take), just after its on_program. Viewers that show none ignore it.
  virtual void on_program_memory(const std::string& name, const MemoryAnalysis& memory) {
    (void)name;
    (void)memory;
  }
};

struct ScenarioContext {
  std::vector<std::string> args;  // command-line arguments after the program name
  std::ostream* out = nullptr;    // what the samples print to stdout
  std::ostream* err = nullptr;    // usage errors
  VisualizeOptions viz;           // the base options; --color / --no-color change a copy
  std::optional<MeshOverride> mesh_override;
  std::map<std::string, PartitionSpec> spec_overrides;  // by input name
  const std::atomic<bool>* stop = nullptr;              // set: leave at the next checkpoint
  Observer* observer = nullptr;

  // The scenario's main mesh: `sizes` and `names` unless a mesh override says otherwise.
  Mesh mesh(std::vector<int> sizes, std::vector<std::string> names,
            std::vector<AxisType> types = {}) const;
  // The spec of input `name`: the override when there is one, else `default_spec`.
  PartitionSpec spec(const std::string& name, const PartitionSpec& default_spec,
                     const Mesh& mesh) const;
  bool has_spec_override(const std::string& name) const { return spec_overrides.count(name) > 0; }
  void publish(const std::string& name, const Array& array) const;
  void publish_program(const std::string& name, const std::string& text) const;
  // The program's text and its memory analysis.
  void publish_program(const std::string& name, const Lowered& lowered) const;
  // Throws Stopped when asked to stop; may block while the viewer pauses.
  void checkpoint(const std::string& label) const;
  // For an argument no option took: prints `usage` and returns 0 for --help / -h, else says the
  // argument is unknown on err and returns 2 (the exit codes of Scenario::run).
  int help_or_unknown(const std::string& arg, const char* usage) const;
  // "meshvk on <adapter>, split into N virtual devices", then a blank line.
  void banner() const;
};

struct Scenario {
  std::string name;  // as the sample binary is called
  std::string description;
  // Arguments the inspector starts it with: smaller sizes, so it runs at an interactive pace.
  std::vector<std::string> interactive_args;
  // The inputs whose PartitionSpec a viewer may choose (the names it passes to ctx.spec).
  std::vector<std::string> inputs;
  // Returns the process exit code: 0 when every check passed, 1 when one failed, 2 for bad
  // arguments. May throw meshvk::Error.
  std::function<int(ScenarioContext&)> run;
};

// Prints "what: equal" or "what: NOT EQUAL" and returns ok, so a scenario can fail its run.
bool report(const ScenarioContext& ctx, const std::string& what, bool ok);
// The values as numpy prints them, one token per element ("1.", "2.682942", "-0.513605"): what
// the tutorials' printed arrays are compared with.
std::vector<std::string> printed_tokens(const std::string& numpy_text);
// Compares `got` with the tutorial's printed values at the printed precision: token by token,
// as numpy prints both (each float32 with the digits that tell it apart, at most 8 decimals).
// Prints "what: equal", or "what: differs" with the first differing values: a difference in
// the last digits is reported, not failed (sin, tanh and exp come from the Vulkan driver until
// meshvk's own correctly rounded math lands; tests/test_tutorial_digits.cpp asserts them).
// Returns whether the digits are equal.
bool report_printed(const ScenarioContext& ctx, const std::string& what, const Array& got,
                    const std::vector<std::string>& printed);
// IPython's %timeit -n loops -r runs: the mean and standard deviation of one loop's time over
// `runs` runs of `loops` calls each (after one untimed call, so tracing is not timed).
struct Timing {
  double mean = 0, std = 0;  // seconds per loop
  int loops = 0, runs = 0;
};
Timing timeit(const std::function<void()>& f, int loops, int runs);
// As %timeit prints it: "144 ms ± 13.5 ms per loop (mean ± std. dev. of 5 runs, 5 loops each)".
std::string timing_text(const Timing& t);
// "<what>\n  this machine: <timing>\n  the tutorial: <tutorial's line>".
void report_timing(const ScenarioContext& ctx, const std::string& what, const Timing& t,
                   const std::string& tutorial);
// Python's textwrap.fill(text, 70) of print_exception's "ValueError: message" as torchax's
// tutorial prints it: the red colour codes around the name count towards the first line's
// width there, so they do here, and are printed only when `color`.
std::string exception_text(const std::string& type, const std::string& message, bool color);
// Largest |a - b|, compared on the host so arrays on different devices (sharded vs one device)
// compare; infinity when the shapes differ or a NaN stands where the other has a number
// (programs::max_abs_diff).
float max_abs_diff(const Array& a, const Array& b);

// Every scenario, in the order the inspector lists them.
const std::vector<Scenario>& all();
const Scenario* find(std::string_view name);

// A sample's main: runs scenario `name` on an 8-device Runtime with argv as its arguments,
// printing to stdout, and turns a meshvk::Error into "meshvk error: ..." and exit code 1.
int run_main(std::string_view name, int argc, char** argv);

// The scenarios, defined one per file.
Scenario sharding_basics();
Scenario manual_parallelism();
Scenario learn_jax_distributed();
Scenario scaling_shard_map();
Scenario mlp_training();
Scenario sharded_matmul();
Scenario automatic_parallelism();
Scenario scaling_book();
Scenario gpt();

}  // namespace meshvk::scenarios

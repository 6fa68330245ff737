#pragma once
// The profiler: per-device timelines of kernels, copies and collective steps, measured with
// Vulkan timestamp queries and converted to the host clock; host spans for jit traces, recording,
// submission and waits; flows linking the span that produced data on one device to the span that
// received it on another. Events go into a bounded ring buffer, are exported as Chrome trace JSON
// (Perfetto UI, chrome://tracing) and can be read live by subscribers such as the inspector.
//
// Off by default. MESHVK_PROFILE=1 or MESHVK_TRACE=path (set when the first Runtime is created),
// profile::start() or profile::trace_to() turn it on. While it is off, each hook in the engine
// costs one branch. With MESHVK_PROFILE=1, summarize().to_string() goes to stderr when the last
// live Runtime is destroyed (again at a later last Runtime's end only if events came in since).
//
//   meshvk::profile::start();
//   ... run programs ...
//   meshvk::profile::stop();                     // reads back what is still in flight
//   meshvk::profile::write_chrome_trace("out.json");
//   std::cout << meshvk::profile::summarize().to_string();
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace meshvk::profile {

enum class Kind : uint8_t { kernel, copy, collective, host };
// "kernel", "copy", "collective", "host".
const char* kind_name(Kind kind);

// A stretch of time on one lane: a virtual device's command stream, or the host.
struct Span {
  uint64_t id = 0;  // unique in the process, > 0
  int runtime = 0;  // which Runtime, numbered from 1 in creation order
  int device = -1;  // virtual device; -1 for the host lane
  int queue = 0;    // the adapter queue the device's stream submits to; host spans: the host
                    // thread, numbered 0, 1, ... in the order threads first recorded a host span
  bool transfer =
      false;  // on the device's transfer stream (collective copies), not its compute stream
  Kind kind = Kind::host;
  const char* name = "";     // kernel name, "copy", a collective, or the host activity
  const char* op = "";       // the program op the work came from; "" when unknown
  const char* program = "";  // the jit function ("jit(f)") it ran in; "" outside jit
  // A collective's or reshard's provenance, traced in jit: the rule that inserted it and the
  // user's source line, as the program text ends its line ("dot_general contracts dim 1 sharded
  // on 'model' - gpt.cpp:88 (block)"); "" otherwise.
  const char* rule = "";
  int64_t start_ns = 0;      // host monotonic clock (CLOCK_MONOTONIC), nanoseconds
  int64_t end_ns = 0;
  // Bytes copied (copies) or moved (kernels that say); a collective step: its copies' bytes, or
  // where it copies nothing (a one-shot fold reading its peers in place) its kernels'; 0 when
  // unknown.
  uint64_t bytes = 0;
  uint64_t flops = 0;  // floating-point operations; 0 when unknown
  int peer = -1;       // host spans: the virtual device the activity was for (waits: waited on)
  uint64_t value = 0;  // host waits and submits: the timeline value waited for or signalled
};

enum class FlowKind : uint8_t { transfer, wait };
// Span `from` produced what span `to` consumed: a copy on one device's stream reading a buffer
// another device wrote (transfer), or a submission waiting on another device's timeline (wait).
struct Flow {
  uint64_t id = 0;
  int runtime = 0;
  FlowKind kind = FlowKind::transfer;
  uint64_t from = 0;
  uint64_t to = 0;
};

using Event = std::variant<Span, Flow>;

struct Options {
  // Events the ring buffer holds (rounded up to a power of two), 1 to 2^32 (start() throws Error
  // otherwise); when it is full the oldest are overwritten, and counted in
  // Counters::dropped_events.
  size_t capacity = size_t{1} << 20;
  // Where stop() and the destruction of a Runtime write the Chrome trace; empty: MESHVK_TRACE,
  // or nowhere when that is not set.
  std::string trace_path;
  // Profile one jit replay in N of each jit function: its replays 1, N+1, 2N+1, ... (numbered
  // per function name from start() or clear()) record their device spans, submits and waits as
  // usual; the others record only a host span "replay (not sampled)", so the trace shows which
  // ones were left out. Every "replay" host span carries its number in Span::value. A traced
  // call and eager ops are always profiled. An unsampled replay still runs the timestamps its
  // traced command buffers carry (they are not read back). 0: MESHVK_PROFILE_SAMPLE when set,
  // else 1 (every replay).
  uint32_t sample_replays = 0;
};

// Starts collecting, with `options` replacing those of an earlier start(). Calling it again
// while running keeps the events (unless the capacity changes); after stop() it starts afresh.
void start(const Options& options = {});
// start() with `path` as Options::trace_path: what the samples' --trace flag calls.
void trace_to(const std::string& path);
// Takes "--trace PATH" (or "--trace=PATH") out of a command line and, when it is there, calls
// trace_to(PATH). Returns false, after saying why on stderr, when --trace has no path or names
// something that cannot be written (a device such as /dev/null, a FIFO, a folder). Samples:
//   if (!meshvk::profile::trace_from_args(argc, argv)) return 2;
bool trace_from_args(int& argc, char** argv);
// Why the last trace written by stop() or a Runtime's destruction could not be written (it goes
// to stderr too, since that happens in destructors); "" when it was written or none was asked
// for. A program asked for a trace exits non-zero when this is set.
std::string trace_error();
// Reads back every submission still in flight (waiting for them), stops collecting and writes
// the trace file when one was asked for. Events stay readable until the next start() or clear().
void stop();
bool enabled();
// Waits for the device work submitted while profiling and turns its timestamps into events.
void flush();
// Turns the timestamps of work that has already finished into events, without waiting.
void poll();
// Forgets every event collected so far (the counters too).
void clear();

struct Counters {
  uint64_t events = 0;          // events written since start() or clear()
  uint64_t dropped_events = 0;  // overwritten in the ring buffer before being read out
  uint64_t dropped_spans = 0;   // device spans lost: no query left, or no read-back slot free
  uint64_t dropped_flows = 0;   // flows whose source span was never seen
};
Counters counters();

// The events in the ring buffer, oldest first.
std::vector<Event> events();

// Lane names as the trace shows them: "CPU 0" (the runtime's platform label and the device),
// or "host" for device -1.
std::string lane_name(int runtime, int device);
// How a runtime's device timestamps are put on the host clock, e.g. "VK_EXT_calibrated_timestamps
// (max deviation 1 us)" or "measured offset (...)"; "" for a runtime the profiler never saw.
std::string clock_source(int runtime);

// The events as Chrome trace JSON: "X" spans (ts, dur in microseconds), "M" lane names and "s"/"f"
// flow pairs. Writing goes to a temporary file in the same folder, renamed over `path` when
// complete; throws meshvk::Error naming the path when it cannot be written. In a job of several
// processes (meshvk/distributed.hpp) each process writes its own file, its index before the
// extension: trace_path_of_process("out.json") is "out.process1.json" on process 1 (and `path`
// itself when the process runs alone). This goes for MESHVK_TRACE and --trace too.
std::string chrome_trace_json();
void write_chrome_trace(const std::string& path);
std::string trace_path_of_process(const std::string& path);

// A live view of the event stream for a reader on another thread (the inspector's UI thread).
// Producers never wait for subscribers: a subscriber that falls more than the buffer's capacity
// behind misses events, and missed() says how many.
class Subscription {
 public:
  // Appends up to `max` events published since the previous read to `out`; returns how many.
  // Also turns the timestamps of finished device work into events first (without waiting).
  size_t read(std::vector<Event>& out, size_t max = std::numeric_limits<size_t>::max());
  uint64_t missed() const { return missed_; }

 private:
  friend Subscription subscribe();
  const void* ring_ = nullptr;  // the buffer cursor_ counts in (a new capacity replaces it)
  uint64_t cursor_ = 0;
  uint64_t missed_ = 0;
};
// Events from now on.
Subscription subscribe();

// Time and work over a set of spans.
struct Totals {
  uint64_t count = 0;
  double seconds = 0;  // summed span durations
  uint64_t bytes = 0;  // over spans that said how many bytes they moved
  double bytes_seconds = 0;
  uint64_t flops = 0;  // over spans that said how many flops they did
  double flops_seconds = 0;
  double gbps() const { return bytes_seconds > 0 ? bytes / bytes_seconds / 1e9 : 0; }
  double gflops() const { return flops_seconds > 0 ? flops / flops_seconds / 1e9 : 0; }
};

struct Summary {
  std::string program;  // the jit function; "" for all events
  // Device time by kind: "kernel" and "copy" count each command once (copies and folds inside a
  // collective included); "collective" counts whole collective steps; "host" the host spans.
  std::map<std::string, Totals> by_kind;
  std::map<std::string, Totals> by_collective;  // "all_gather(one_shot)", ...
  std::map<std::string, Totals> by_name;        // kernels and copies by name
  std::string to_string() const;
};

struct Report {
  Summary overall;
  std::vector<Summary> programs;  // one per jit function, by name
  Counters counters;
  std::string to_string() const;
};
Report summarize(const std::vector<Event>& events);
Report summarize();  // of events()

}  // namespace meshvk::profile

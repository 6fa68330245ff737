#pragma once
// What a program would cost on real hardware: Lowered::estimate(hardware) replays the program's
// recorded dependency graph (every device's submissions, in order, and the waits between
// devices' streams) with each kernel's roofline time and each collective's time by its algorithm
// on the machine's topology, as "How To Scale Your Model" reasons (tutorial 002 and its
// chapters on rooflines and sharded matmuls). Hardware descriptions are small text files
// (hardware/*.hw, shipped and user-writable): see README "What would it cost on real hardware".
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshvk/dtype.hpp"

namespace meshvk {

class Lowered;

// One mesh axis's interconnect. `bandwidth` is one link's, one way (bytes/s); `latency` one
// hop's (s). A "ring" axis is a line of chips joined by neighbour links (a torus axis when
// `wraparound`); on an "all_to_all" axis (NVLink through NVSwitch) every chip reaches every
// other at `bandwidth` (its own total, one way) in one hop.
struct Link {
  std::string topology = "ring";
  double bandwidth = 0;
  double latency = 0;
  bool wraparound = false;
  bool bidirectional = true;  // a ring's links carry bytes both ways at once
};

struct Hardware {
  std::string name;
  std::string description;
  // Peak FLOP/s of the matrix units by dtype name (DType's: "bfloat16", "float32", "int8", ...);
  // a dtype not listed uses "bfloat16"'s (TPUs multiply float32 through bfloat16 passes).
  std::map<std::string, double> peak_flops;
  double vector_flops = 0;     // elementwise and reduction FLOP/s (0: the float32 peak)
  double hbm_bandwidth = 0;    // bytes/s
  double hbm_capacity = 0;     // bytes per chip
  double dispatch = 0;         // seconds each kernel costs on top of its roofline (a launch)
  // Collectives run on an engine of their own (ICI DMA, copy engines), overlapping compute;
  // else they take the compute stream's time.
  bool collective_dma = true;
  // Every device's work runs on one engine, a piece at a time: the virtual devices of one
  // adapter (lavapipe runs all their submissions on one queue). Real chips: false.
  bool shared_engine = false;
  // The compiler fuses a slice or an elementwise op into the matmul it feeds or that feeds it
  // (XLA's operand and output fusions): the fused op costs only its bytes, added to the
  // matmul's roofline.
  bool fuse_into_matmul = false;
  Link link;                          // every mesh axis's, unless `axes` names it
  std::map<std::string, Link> axes;   // by mesh axis name ("axis.Y.bandwidth = ...")
  // The fraction of peak an op kind reaches ("matmul", "elementwise", "reduce", "copy",
  // "collective"): 1 unless given.
  std::map<std::string, double> efficiency;

  const Link& link_for(const std::string& axis) const;
  double efficiency_of(const std::string& kind) const;
  double matmul_flops(DType dtype) const;
  // The text load_hardware reads back.
  std::string to_text() const;
};

// A hardware description: a shipped one by name ("tpu_v5e", "tpu_v5p", "h100_sxm", "a100",
// "this_adapter": see shipped_hardware()) or a file path. The format is `key = value` lines,
// '#' comments; Error names the line and the keys that are valid.
Hardware load_hardware(const std::string& name_or_path);
Hardware parse_hardware(const std::string& text, const std::string& name = "hardware");
// The names load_hardware knows and the folder they are read from (MESHVK_HARDWARE_DIR, else
// the one installed or built with the library).
std::vector<std::string> shipped_hardware();
std::string hardware_dir();
// "this adapter": a short measurement on the current runtime's first device (a float32 matmul's
// FLOP/s, a copy's bandwidth, an empty dispatch's cost), its devices' links as copies within
// the adapter. Takes about a second on lavapipe.
Hardware calibrate_this_adapter();

// The recorded program Lowered::estimate replays: each submission of each device's streams in
// order, what it waits for, and the cost of the ops and collectives recorded into it.
struct ProgramGraph {
  struct Work {
    std::string kind;  // "matmul", "elementwise", "reduce", "copy", or a collective's HLO name
    bool collective = false;
    int device = -1;  // a kernel's
    uint64_t flops = 0, transcendentals = 0, bytes = 0;  // a kernel's: as cost_analysis counts
    DType dtype = DType::float32;
    // A collective: its mesh axes and their sizes, and what each device sends
    // (CollectiveRecord::bytes).
    std::vector<std::string> axes;
    std::vector<int> axis_sizes;
    uint64_t collective_bytes = 0;
  };
  struct Node {
    int device = 0;
    int timeline = 0;  // the stream: its submissions run in order
    uint64_t value = 0;  // the value it signals on its timeline
    std::vector<std::pair<int, uint64_t>> waits;  // (timeline, value) it waits for
    std::vector<uint32_t> work;  // indices into `work`
    std::string activity;       // what recorded it, where known ("all_gather(ring)")
  };
  std::vector<Work> work;
  std::vector<Node> nodes;  // in submission order
};

// One projected piece of work on a device.
struct ProjectedSpan {
  int device = 0;
  std::string name;           // "matmul", "all-gather over Y", ...
  bool communication = false;
  double start = 0, end = 0;  // seconds from the step's start
};
struct DeviceProjection {
  int device = 0;
  double compute = 0;        // seconds its compute engine is busy
  double communication = 0;  // seconds collectives run on it (overlapping compute or not)
  double idle = 0;           // step time - time anything runs on it
};
struct Estimate {
  std::string hardware;
  double step_time = 0;                     // seconds: the last device's end
  std::vector<ProjectedSpan> timeline;      // every device's projected work
  std::vector<ProjectedSpan> critical_path; // the chain that ends last, first to last
  std::vector<DeviceProjection> devices;
  // A table: step time, per-device shares, the critical path's longest pieces.
  std::string to_string() const;
  // Chrome trace JSON (one process per device, lanes "compute" and "communication"), so a
  // projected timeline opens where a measured one does.
  std::string to_chrome_trace() const;
};

// The programs jit traced in this process, oldest first (the last 256): each jit function's name
// and its recorded graph, so a viewer can project what ran (the inspector's "Project onto").
struct TracedProgram {
  std::string name;
  std::shared_ptr<const ProgramGraph> graph;
};
std::vector<TracedProgram> traced_programs();

// Replays `graph` on `hw` (Lowered::estimate calls it).
Estimate estimate(const ProgramGraph& graph, const Hardware& hw);
// The roofline time of one collective on `hw` (seconds), by the model README describes.
double collective_time(const ProgramGraph::Work& collective, const Hardware& hw);

// `hw` with efficiency.<kind> set so that `program` projects to `measured_seconds` (one measured
// figure calibrates the rest, as the scaling book calibrates its matmul). Error if no
// efficiency in (0, 1] reaches it (the program is faster than the peak allows, or `kind`'s ops
// are not on its critical path).
Hardware calibrate(Hardware hw, const Lowered& program, double measured_seconds, const std::string& kind = "matmul");

}  // namespace meshvk

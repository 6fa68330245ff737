#pragma once
// The meshvk tool's command line, parsed and checked without a Vulkan runtime, so the checks run
// at once and a fuzzer can drive them (fuzz/fuzz_cli_args.cpp).
#include <meshvk/sharding.hpp>
#include <meshvk/visualize.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshvk_cli {

extern const std::string_view kUsage;

// Bounds on the work one command line can ask for, each named in the error that enforces it.
// The most devices a --mesh may have: far beyond any picture that fits a terminal.
constexpr long long kMaxDevices = 4096;
// The most mesh axes: 12 axes of 2 already make 4096 devices.
constexpr size_t kMaxMeshAxes = 16;
// The largest --scale: a square array is 10 x scale lines high.
constexpr double kMaxScale = 100;

// A command line that cannot be carried out; main prints it and the usage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Command { Help, Version, Devices, Visualize, Estimate };

struct VisualizeArgs {
  meshvk::Shape shape;
  std::vector<int> mesh_sizes{8};
  std::vector<std::string> axis_names;  // empty: the default names for the mesh rank
  std::string spec = "P()";
  std::optional<std::string> platform;  // unset: ask the runtime
  meshvk::VisualizeOptions options;
};

// meshvk estimate: the samples' programs projected onto hardware descriptions.
struct EstimateArgs {
  std::vector<std::string> hardware;  // names or paths; empty: every shipped one
  std::vector<std::string> programs;  // empty: every one
  std::vector<std::string> samples;   // run these samples (or "all") and project what they traced
  bool small = false;                 // the samples' small sizes instead of the tutorial's
  bool measure = false;               // also time each program on this adapter
  bool list = false;                  // list the programs and the hardware, run nothing
  std::optional<std::string> print_hardware;  // print a description (this_adapter: measured)
  std::optional<std::string> trace;   // write the projected timelines as Chrome trace JSON here
};

struct CliArgs {
  Command command = Command::Help;
  VisualizeArgs visualize;
  EstimateArgs estimate;
};

// The arguments after the program name; throws UsageError.
CliArgs parse_args(const std::vector<std::string>& args);

// The number of devices of v.mesh_sizes (at most kMaxDevices once parse_args accepted them).
int mesh_device_count(const VisualizeArgs& v);

// The sharding `visualize` draws, on devices labelled `platform`: checks the spec, the mesh and
// the shape against each other (throws UsageError or meshvk::Error), needing no runtime.
meshvk::Sharding visualize_sharding_of(const VisualizeArgs& v, const std::string& platform);

}  // namespace meshvk_cli

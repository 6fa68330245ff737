// meshvk: the command-line tool.
//   meshvk devices     lists the virtual devices the Vulkan runtime makes of the adapter(s)
//   meshvk visualize   prints an array's layout over a mesh, as jax.debug.visualize_array_sharding
//   meshvk estimate    projects the scaling book's programs onto hardware descriptions
//   meshvk --version   prints "meshvk 0.2.0", the version of the library it was built with
// Exit status: 0 on success, 2 for a wrong command line (the problem, then the usage, go to
// stderr), 1 when the runtime fails.
#include <algorithm>
#include <iostream>
#include <meshvk/meshvk.hpp>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "cli_estimate.hpp"

namespace {

using meshvk_cli::Command;
using meshvk_cli::UsageError;
using meshvk_cli::VisualizeArgs;
using meshvk_cli::kUsage;

// ---------------------------------------------------------------------------------------------
// Commands

// A failure here is the runtime's, not the command line's: status 1 without the usage.
int run_devices() {
  try {
    meshvk::Runtime rt;
    const std::vector<meshvk::DeviceInfo> devices = rt.devices();
    int adapters = 0;
    for (const meshvk::DeviceInfo& d : devices) adapters = std::max(adapters, d.adapter_index + 1);
    const int processes = meshvk::process_count();
    if (processes > 1)
      std::cout << processes << " processes of " << meshvk::local_device_count() << " devices, "
                << "this is process " << meshvk::process_index() << "\n";
    if (adapters > 1)
      std::cout << adapters << " adapters (" << rt.platform() << "), " << devices.size()
                << " virtual devices\n";
    else
      std::cout << "adapter: " << rt.adapter_name() << " (" << rt.platform() << "), "
                << devices.size() << " virtual devices\n";
    for (const meshvk::DeviceInfo& d : devices) {
      std::cout << "  device " << d.id << ": " << d.repr() << ", platform " << d.platform
                << (processes > 1 ? ", process " + std::to_string(d.process_index) : std::string())
                << ", adapter " << (adapters > 1 ? std::to_string(d.adapter_index) + " " : "")
                << d.adapter << ", queue family " << d.queue_family << " index " << d.queue_index
                << (d.transfer_queue_index >= 0
                        ? ", transfer stream on queue " + std::to_string(d.transfer_queue_index)
                        : std::string(", no transfer stream"))
                << ", memory budget " << d.memory_budget / (1024 * 1024) << " MiB"
                << (d.memory_shared ? " shared by the adapter's devices" : " of its own") << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "meshvk: the Vulkan runtime failed: " << e.what() << "\n";
    return 1;
  }
}

// The platform label of the devices the mesh would run on: the runtime's, or CPU when no
// runtime can start (visualizing needs no device).
std::string runtime_platform(int num_devices) {
  try {
    meshvk::Runtime rt(meshvk::RuntimeOptions{.num_devices = num_devices});
    return rt.platform();
  } catch (const std::exception& e) {
    std::cerr << "meshvk: note: the Vulkan runtime did not start (" << e.what()
              << "); labelling devices CPU (choose with --platform)\n";
    return "CPU";
  }
}

int run_visualize(const VisualizeArgs& v) {
  // Check the whole layout before starting a runtime, so mistakes are reported at once.
  meshvk_cli::visualize_sharding_of(v, "CPU");
  const std::string platform =
      v.platform ? *v.platform : runtime_platform(meshvk_cli::mesh_device_count(v));
  std::cout << meshvk::visualize_sharding(v.shape, meshvk_cli::visualize_sharding_of(v, platform),
                                          v.options);
  return 0;
}

int usage_error(const std::string& what) {
  std::cerr << "meshvk: " << what << "\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    const meshvk_cli::CliArgs cli = meshvk_cli::parse_args(args);
    switch (cli.command) {
      case Command::Help:
        std::cout << kUsage;
        return 0;
      case Command::Version:
        std::cout << "meshvk " << meshvk::version() << "\n";
        return 0;
      case Command::Devices:
        return run_devices();
      case Command::Visualize:
        return run_visualize(cli.visualize);
      case Command::Estimate:
        return meshvk_cli::run_estimate(cli.estimate);
    }
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const meshvk::Error& e) {
    // What the sharding model rejects (an unknown axis, an indivisible dimension) is a wrong
    // command line too.
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::cerr << "meshvk: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

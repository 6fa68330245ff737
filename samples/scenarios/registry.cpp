// The list of scenarios and the samples' shared main.
#include <cstdio>
#include <iostream>

#include <meshvk/profile.hpp>

#include "scenario.hpp"

namespace meshvk::scenarios {

// An explicit list rather than self-registering globals: a static library drops objects that
// nothing references, and the order here is the order the inspector shows.
const std::vector<Scenario>& all() {
  static const std::vector<Scenario> list = {
      sharded_matmul(),        sharding_basics(),   manual_parallelism(),
      learn_jax_distributed(), scaling_shard_map(), mlp_training(),
      automatic_parallelism(), scaling_book(),        gpt(),
  };
  return list;
}

const Scenario* find(std::string_view name) {
  for (const Scenario& s : all())
    if (s.name == name) return &s;
  return nullptr;
}

int run_main(std::string_view name, int argc, char** argv) {
  const Scenario* scenario = find(name);
  if (!scenario) {
    std::fprintf(stderr, "no scenario named %.*s\n", static_cast<int>(name.size()), name.data());
    return 2;
  }
  ScenarioContext ctx;
  ctx.args.assign(argv + 1, argv + argc);
  ctx.out = &std::cout;
  ctx.err = &std::cerr;
  int status = 0;
  try {
    Runtime rt({.num_devices = 8});
    status = scenario->run(ctx);
  } catch (const Error& e) {
    std::cout.flush();
    std::fprintf(stderr, "meshvk error: %s\n", e.what());
    status = 1;
  }
  // The runtime's destruction wrote the trace asked for (--trace, MESHVK_TRACE); a trace that
  // could not be written fails the run, having been reported on stderr.
  if (status == 0 && !profile::trace_error().empty()) status = 1;
  return status;
}

}  // namespace meshvk::scenarios

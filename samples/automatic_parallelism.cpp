// The automatic and explicit parts of the tutorials: jit's sharding propagation ("computation
// follows data") from 000 and 001, sharding in types (explicit mode) from 000, the `layer`
// example in all three modes, the incompatible-device errors and uncommitted arrays of 001,
// with_sharding_constraint, and the partitioned matmul of 002 with its program text.
//
//   build/bin/automatic_parallelism [--size N] [--golden DIR] [--color | --no-color] [--trace FILE]
//
// The body is the scenario in samples/scenarios/automatic_parallelism.cpp, which
// meshvk-inspector runs too.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("automatic_parallelism", argc, argv);
}

// Distributed computing in JAX: learn_jax's intro_to_distributed.py (003), printing what the
// tutorial prints. Computation follows sharded data (tanh, dot), then shard_map with every
// collective the tutorial shows: pmean, all_gather, psum_scatter, ppermute, axis_index, and
// folding an axis index into a random key.
//
//   build/bin/learn_jax_distributed [--color | --no-color]
//
// The body is the scenario in samples/scenarios/learn_jax_distributed.cpp,
// which meshvk-inspector runs too.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("learn_jax_distributed", argc, argv);
}

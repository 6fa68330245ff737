// The sharding tour: the data-sharding part of the JAX "Introduction to parallel programming"
// tutorial (000) and the sharding basics of torchax's "Distributed arrays" tutorial (001),
// printing what the tutorials print.
//
//   build/bin/sharding_basics [--size N] [--color | --no-color]
//
// The body is the scenario in samples/scenarios/sharding_basics.cpp,
// which meshvk-inspector runs too.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("sharding_basics", argc, argv);
}

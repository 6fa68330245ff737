// Every worked program of "How To Scale Your Model", part 10 (seed 002), at small sizes on the
// mesh (2, 4) ('X', 'Y'): the collective matmuls (all-gather, AllReduce and ReduceScatter, one
// way and both ways), the Transformer block, Problem 1 and the mixture of experts of Problem 2,
// each checked against its reference. The programs live in samples/programs/scaling_book.cpp.
//
//   build/bin/scaling_book [--only NAME] [--list] [--help]
//
// The body is the scenario in samples/scenarios/scaling_book.cpp, which meshvk-inspector runs too.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("scaling_book", argc, argv);
}

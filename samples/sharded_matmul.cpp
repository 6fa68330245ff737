// A jitted matmul whose operands' layouts are the thing to play with: x (M, K) and w (K, N) are
// put on the mesh by PartitionSpecs (the inspector's per-input choice), and jit partitions
// tanh(x @ w) to match, inserting the collectives the layouts need. Each step runs the program
// again, so the profiler sees a steady stream of kernels and collectives.
//
//   build/bin/sharded_matmul [--size M,K,N] [--steps N] [--spec-x "P('a', 'b')"]
//                            [--spec-w "P('b', None)"] [--color | --no-color]
//
// The body is the scenario in samples/scenarios/sharded_matmul.cpp,
// which meshvk-inspector runs too.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("sharded_matmul", argc, argv);
}

// The training half of torchax's "Distributed arrays" tutorial (001): an MLP trained with MSE and
// SGD on one device, with 8-way data parallelism, and with 4x2 data + tensor parallelism. Each
// step is one jit of value_and_grad plus the update; the losses of the three modes agree.
//
//   build/bin/mlp_training [--batch N] [--steps N] [--layers 784,1024,1024,1024,10]
//                          [--mode all|single|dp|tp] [--lr 1e-3] [--no-color]
//
// The body is the scenario in samples/scenarios/mlp_training.cpp,
// which meshvk-inspector runs too.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("mlp_training", argc, argv);
}

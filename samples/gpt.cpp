// A character-level GPT trained with Adam in one of five layouts over 8 virtual devices: one
// device, data parallel, data + Megatron tensor parallel, FSDP, sequence parallel with ring
// attention in shard_map. Prints the loss per step, the parameters' layouts and the step's
// collectives.
//
//   build/bin/gpt [--mode single|dp|dp_tp|fsdp|sp] [--steps N] [--seed N] [--text FILE]
//                 [--weights DIR] [--batch-file FILE] [--program] [--help]
//
// The body is the scenario in samples/scenarios/gpt.cpp, which meshvk-inspector runs too; the
// model is samples/programs/gpt.cpp, its layouts samples/programs/gpt_parallel.cpp.
#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scenario.hpp"

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  return meshvk::scenarios::run_main("gpt", argc, argv);
}

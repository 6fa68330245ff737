#pragma once
// The GPT training step of samples/programs (d_model 128, 4 heads, 2 layers as a lax::scan, seq
// 64, batch 16, Adam) as `meshvk-bench peers` times it: one jit replay per step, in one of the
// sample's layouts, and a profile of one replay split by kind of work.
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "meshvk/runtime.hpp"

namespace meshvk::bench {

struct GptStepProfile {
  double wall_ms = 0;
  // Per kind of device work ("matmul", "elementwise", "reduction", "copy", "collective", ...):
  // spans per step and their summed device time, over every device.
  std::map<std::string, int> spans;
  std::map<std::string, double> device_ms;
  int kernels = 0;  // dispatches per step, over every device
  // The program ops that took the most device time: "op / kernel", spans, milliseconds.
  std::vector<std::tuple<std::string, int, double>> top_ops;
};

// Median seconds of one step (the step replayed, then synchronize) in `mode` ("single", "dp",
// "dp_tp", "fsdp", "sp").
double gpt_step_seconds(Runtime& rt, const std::string& mode, int reps);
// One profiled replay of the step in `mode`.
GptStepProfile gpt_step_profile(Runtime& rt, const std::string& mode);

}  // namespace meshvk::bench

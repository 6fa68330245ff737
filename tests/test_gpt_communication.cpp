// The GPT sample's training step (samples/programs/gpt_parallel.hpp: vocab 256, d_model 128, 4
// heads, 2 layers, seq 64, batch 16, optax's Adam) moves no more bytes than XLA would for its
// layouts: the bytes each device sends per step (Lowered::cost_analysis(), the bus-bandwidth
// convention of CollectiveRecord) against the analytical minimum of each mode, worked out here
// from the parameter count and the activations' shapes (the README's table shows both):
//
//   all-reduce of S bytes over n devices: 2 (n - 1) S / n; reduce-scatter: (n - 1) S / n;
//   all-gather of a local S: (n - 1) S; collective-permute: S.
//
//   dp     the gradients, one all-reduce over 'data' of every parameter, and the loss's mean
//   dp_tp  Megatron: per layer two all-reduces over 'model' of the activations [b/2, t, d] in the
//          forward pass and two in the backward pass; each device's gradients (its shards of
//          q, k, v, fc1, attn.proj and fc2, the rest whole) all-reduced over 'data'
//   fsdp   each parameter all-gathered once, each gradient reduce-scattered once
//   sp     ring attention's ppermutes of each layer's (k, v) block, 7 forward and 7 backward;
//          wpe's gradient (rows split by position) all-gathered, the others all-reduced
//
// With the layers unrolled the step meets the minimum (to 1.05x); with the layers in one
// lax::scan its backward pass runs each layer's forward again (the carry is saved, the
// intermediates are not), which repeats the forward collectives: one all-reduce over 'model' per
// layer in dp_tp, every weight's all-gather in fsdp. That ratio is asserted as measured, so a
// change is seen.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "gpt_parallel.hpp"
#include "meshvk/meshvk.hpp"

namespace mv = meshvk;
namespace pg = meshvk::programs;
using mv::Array;

namespace {

uint64_t all_reduce(uint64_t bytes, uint64_t n) { return 2 * (n - 1) * bytes / n; }
uint64_t reduce_scatter(uint64_t bytes, uint64_t n) { return (n - 1) * bytes / n; }
uint64_t all_gather(uint64_t local, uint64_t n) { return (n - 1) * local; }

// Bytes of parameter `name` each device holds in `mode`'s layout.
uint64_t local_bytes(const pg::GptLayout& layout, const pg::GptConfig& cfg, const std::string& name) {
  const mv::Shape shape = pg::gpt_param_shape(cfg, name);
  const mv::Shape local = layout.param(cfg, name).shard_shape(shape);
  return static_cast<uint64_t>(mv::shape_size(local)) * 4;
}

uint64_t minimum_bytes(const std::string& mode, const pg::GptConfig& cfg, const pg::GptLayout& layout) {
  const uint64_t params = static_cast<uint64_t>(pg::gpt_param_count(cfg)) * 4;
  const uint64_t loss = 4;
  if (mode == "dp") return all_reduce(params, 8) + all_reduce(loss, 8);
  if (mode == "fsdp") {
    uint64_t gathers = 0, scatters = 0;
    for (const auto& name : pg::gpt_param_names(cfg)) {
      gathers += all_gather(local_bytes(layout, cfg, name), 8);
      scatters += reduce_scatter(local_bytes(layout, cfg, name) * 8, 8);
    }
    return gathers + scatters + all_reduce(loss, 8);
  }
  if (mode == "dp_tp") {
    const uint64_t activations = static_cast<uint64_t>(cfg.batch / 2) * cfg.seq * cfg.d_model * 4;
    uint64_t grads = 0;
    for (const auto& name : pg::gpt_param_names(cfg)) grads += local_bytes(layout, cfg, name);
    return 4 * static_cast<uint64_t>(cfg.layers) * all_reduce(activations, 4) + all_reduce(grads, 2) +
           all_reduce(loss, 2);
  }
  // sp: mesh (8,) ('seq',).
  const uint64_t kv_block = 2ull * cfg.batch * cfg.seq / 8 * cfg.d_model * 4;
  const uint64_t permutes = 2ull * 7 * cfg.layers * kv_block;
  const uint64_t wpe = static_cast<uint64_t>(cfg.seq) * cfg.d_model * 4;
  return permutes + all_gather(wpe / 8, 8) + all_reduce(params - wpe, 8) + all_reduce(loss, 8);
}

struct Measured {
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> counts;  // per kind, per step
};

Measured measure(const std::string& mode, bool scan) {
  pg::GptConfig cfg;
  cfg.scan_layers = scan;
  const pg::GptLayout layout = pg::gpt_layout(mode, cfg);
  const mv::Params params = pg::gpt_place(layout, cfg, pg::gpt_init(cfg, 0));
  const mv::optax::OptState state = pg::gpt_optimizer(cfg).init(params);
  std::vector<int32_t> ids(static_cast<size_t>(cfg.batch * cfg.seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37) % 256);
  const mv::Shape shape{cfg.batch, cfg.seq};
  const Array tokens = mv::device_put(std::span<const int32_t>(ids), shape, layout.batch);
  const Array targets = mv::device_put(std::span<const int32_t>(ids), shape, layout.batch);
  const pg::GptTrainStep step(cfg, layout);
  const mv::Lowered lowered = step.lower(params, state, tokens, targets);
  Measured m;
  const mv::CostAnalysis cost = lowered.cost_analysis();
  m.bytes = cost.bytes_communicated();
  for (const mv::Communication& c : cost.communication) m.counts[c.kind] += c.count;
  return m;
}

void expect_ratio(const std::string& mode, bool scan, double low, double high) {
  pg::GptConfig cfg;
  const pg::GptLayout layout = pg::gpt_layout(mode, cfg);
  const uint64_t minimum = minimum_bytes(mode, cfg, layout);
  const Measured m = measure(mode, scan);
  const double ratio = static_cast<double>(m.bytes) / static_cast<double>(minimum);
  std::string kinds;
  for (const auto& [kind, n] : m.counts) kinds += " " + kind + " x" + std::to_string(n);
  std::printf("gpt %s (%s): %llu bytes per device per step, minimum %llu, ratio %.4f;%s\n", mode.c_str(),
              scan ? "scan" : "unrolled", static_cast<unsigned long long>(m.bytes),
              static_cast<unsigned long long>(minimum), ratio, kinds.c_str());
  EXPECT_GE(ratio, low) << mode;
  EXPECT_LE(ratio, high) << mode << (scan ? " (scan)" : " (unrolled)") << ":" << kinds;
}

}  // namespace

TEST(GptCommunication, UnrolledLayersMoveTheMinimum) {
  for (const char* mode : {"dp", "dp_tp", "fsdp", "sp"}) expect_ratio(mode, false, 1.0, 1.05);
}

// The scan's backward pass runs each layer's forward again: its collectives repeat.
TEST(GptCommunication, ScannedLayersRepeatTheForwardCollectives) {
  expect_ratio("dp", true, 1.0, 1.05);
  expect_ratio("sp", true, 1.0, 1.05);
  expect_ratio("dp_tp", true, 1.0, 1.15);
  expect_ratio("fsdp", true, 1.0, 1.5);
}

// Collectives per step, as many as XLA's for dp, dp_tp and sp; fsdp gathers and scatters each
// parameter on its own, where XLA's all-gather and reduce-scatter combiners would merge some.
TEST(GptCommunication, CollectivesPerStep) {
  const Measured dp = measure("dp", false);
  EXPECT_EQ(dp.counts["all-reduce"], 2u);  // the gradients (one packed buffer) and the loss
  const Measured tp = measure("dp_tp", false);
  // 8 over 'model' (2 per layer forward and backward), the gradients over 'data' and over
  // ('data', 'model') (the norms', whose input gradients stay partial over 'model'), the loss.
  EXPECT_EQ(tp.counts["all-reduce"], 11u);
  const Measured fsdp = measure("fsdp", false);
  EXPECT_EQ(fsdp.counts["all-gather"], 37u);
  EXPECT_EQ(fsdp.counts["reduce-scatter"], 37u);
  EXPECT_EQ(fsdp.counts["all-reduce"], 1u);
  const Measured sp = measure("sp", false);
  EXPECT_EQ(sp.counts["collective-permute"], 28u);
  EXPECT_EQ(sp.counts["all-gather"], 1u);
  EXPECT_EQ(sp.counts["all-reduce"], 2u);
}

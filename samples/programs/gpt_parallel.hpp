#pragma once
// The layouts the GPT of gpt.hpp trains in, and its training step: one jit of value_and_grad and
// optax's Adam update, with the parameters, the optimizer state and the batch laid out by the
// mode. The layers' stacked parameters keep their leading layer axis whole (None); the rest of
// their axes are laid out as one layer's would be.
//
//   single  everything on device 0
//   dp      data parallel: mesh (N,) ('data',), the batch split, the parameters replicated
//   dp_tp   mesh (N/4, 4) ('data', 'model'): the batch split over 'data', Megatron tensor
//           parallelism over 'model': q, k, v and fc1 column-parallel (their output features,
//           so whole heads, split), attn.proj and fc2 row-parallel (their input features split);
//           the embeddings, norms and lm_head replicated
//   fsdp    mesh (N,) ('fsdp',): the batch and every parameter split along its first axis; the
//           step gathers each parameter where it is used (with_sharding_constraint to
//           replicated), and its gradient comes back split as the parameter
//   sp      sequence parallel: mesh (N,) ('seq',), tokens split by position, attention as ring
//           attention inside shard_map (ppermute), everything else left to jit
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gpt.hpp"
#include "meshvk/meshvk.hpp"

namespace meshvk::programs {

const std::vector<std::string>& gpt_modes();  // single, dp, dp_tp, fsdp, sp

struct GptLayout {
  std::string mode;
  std::string description;                   // "8-way data parallel, mesh (8,) ('data',)"
  std::optional<Mesh> mesh;                  // none for single
  Sharding batch = SingleDeviceSharding(0);  // tokens and targets, [batch, seq]
  bool gather_params = false;
  Attention attention;
  // Where parameter `name` lives between steps.
  Sharding param(const GptConfig& cfg, const std::string& name) const;

  // dp_tp's rule: the PartitionSpec of a parameter over ('data', 'model').
  static PartitionSpec tensor_parallel_spec(const std::string& name);
};

// The layout of `mode` on the current runtime's devices. Throws Error for an unknown mode, or a
// size the mode's mesh does not divide (naming the size and the mode's requirement).
GptLayout gpt_layout(const std::string& mode, const GptConfig& cfg);

// The parameters laid out as the mode keeps them.
Params gpt_place(const GptLayout& layout, const GptConfig& cfg, const Params& params);

// optax.adam(lr, b1, b2, eps) of the config: its init(params) gives the step's OptState (the
// moments laid out as the parameters, the int32 count with them).
optax::GradientTransformation gpt_optimizer(const GptConfig& cfg);

// One training step: (loss, new params, new optimizer state) from (params, state, tokens,
// targets). The first call traces and compiles; later calls with the same layouts replay.
// `donate`: the params and state passed in are donated (jax.jit's donate_argnums) and deleted by
// the call, as a training loop that replaces them with the results wants.
class GptTrainStep {
 public:
  GptTrainStep(GptConfig cfg, GptLayout layout, bool donate = false);
  std::tuple<Array, Params, optax::OptState> operator()(const Params& params,
                                                        const optax::OptState& state,
                                                        const Array& tokens,
                                                        const Array& targets) const;
  Lowered lower(const Params& params, const optax::OptState& state, const Array& tokens,
                const Array& targets) const;
  std::string program_text(const Params& params, const optax::OptState& state,
                           const Array& tokens, const Array& targets) const;

 private:
  using Fn = std::function<std::tuple<Array, Params, optax::OptState>(
      const Params&, const optax::OptState&, const Array&, const Array&)>;
  Jitted<Fn> step_;
};

}  // namespace meshvk::programs

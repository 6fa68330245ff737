#pragma once
// A character-level GPT decoder on meshvk's public API: GPT-2's pre-LayerNorm block (causal
// self-attention, a tanh-GELU MLP 4x wide), learned token and position embeddings and an untied
// output head (lm_head), trained with softmax cross-entropy and Adam. tests/models/
// gpt_reference.py builds the same model in PyTorch; the parameter names are its state_dict's.
//
// The layouts it trains in (one device, data parallel, data + Megatron tensor parallel, FSDP and
// sequence parallel with ring attention) are in gpt_parallel.hpp; the sample is samples/gpt.cpp.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"

namespace meshvk::programs {

struct GptConfig {
  int vocab = 256;  // bytes
  int d_model = 128;
  int heads = 4;
  int layers = 2;
  int seq = 64;
  int batch = 16;
  float ln_eps = 1e-5f;  // torch.nn.LayerNorm's default (flax's is 1e-6)
  // Adam as torch.optim.Adam and optax.adam take them (the reference passes these float32
  // values, so both sides round the same numbers).
  float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  // The layers as one lax::scan over the stacked parameters (the program holds one layer), or
  // unrolled: a Python-style loop that slices layer i out of each stack (the program holds
  // every layer). Both compute the same numbers.
  bool scan_layers = true;
  // The forward pass's parameter dtype: float32, or bfloat16 (mixed precision: each float32
  // master parameter is cast with astype where it is used, matmuls take bfloat16 operands and
  // sum in float32 (preferred_element_type float32), activations, norms, softmax and the loss
  // stay float32, and the gradients come back to the float32 parameters, which Adam updates).
  DType compute = DType::float32;
};

// Throws Error naming the first size that is not positive or a d_model that the heads do not
// divide.
void check_config(const GptConfig& cfg);

// The parameter names, in Params' (sorted) order, and each one's shape (torch's layout: a linear
// layer's weight is [out, in]). The layers' parameters are stacked along a leading axis of
// `layers` (one array per kind of weight, layer i at index i: torch's h.{i}.<name>):
//   wte.weight [vocab, d], wpe.weight [seq, d], ln_f.{weight,bias} [d], lm_head.weight [vocab, d],
//   h.ln_1.{weight,bias}, h.ln_2.{weight,bias} [L, d],
//   h.attn.{q,k,v,proj}.weight [L, d, d] and .bias [L, d],
//   h.mlp.fc1.weight [L, 4d, d], .bias [L, 4d], h.mlp.fc2.weight [L, d, 4d], .bias [L, d].
std::vector<std::string> gpt_param_names(const GptConfig& cfg);
// A layer's parameter names without the "h." of their stacks ("attn.q.weight", ...).
const std::vector<std::string>& gpt_layer_param_names();
Shape gpt_param_shape(const GptConfig& cfg, const std::string& name);
int64_t gpt_param_count(const GptConfig& cfg);

// GPT-2's initialisation from `seed`: weights and embeddings N(0, 0.02), the residual
// projections (attn.proj, mlp.fc2) N(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorm scales 1.
// Uncommitted, on device 0.
Params gpt_init(const GptConfig& cfg, uint32_t seed);
// Every parameter from DIR/<name>.npy as torch's state_dict names them (float32, torch's shapes;
// a stack from DIR/h.0.<name>.npy, DIR/h.1.<name>.npy, ...), uncommitted. A missing file or a
// wrong shape is an Error naming the file and the shape wanted.
Params gpt_load(const GptConfig& cfg, const std::string& dir);

// Attention over heads: q, k, v [batch, heads, seq, head_dim] -> [batch, heads, seq, head_dim].
using Attention = std::function<Array(const Array& q, const Array& k, const Array& v)>;

// softmax(q k^T / sqrt(head_dim) with the future masked to -inf) v, as the reference computes it.
Array causal_attention(const Array& q, const Array& k, const Array& v);

// Ring attention over mesh axis `axis`, along which q, k and v are split by sequence
// (P(None, None, axis, None)): inside shard_map each device keeps its queries and passes its
// keys and values around the ring with ppermute, one block per step, accumulating the softmax
// online (running maximum, denominator and numerator, rescaled as the maximum grows). Blocks from
// later positions are masked whole, the device's own block by the causal triangle. The result is
// split as the inputs; it equals causal_attention up to float32 rounding.
Array ring_attention(const Mesh& mesh, const std::string& axis, const Array& q, const Array& k,
                     const Array& v);

// How parameters are read before they are used (FSDP gathers them, several at once, as one
// packed all-gather); identity when empty. With the layers in a scan, a layer's parameters go
// through it at the start of the scan's body, one layer at a time, and the others at the start;
// unrolled, every parameter at the start (XLA's all-gather combiner would merge those gathers,
// all independent of each other, into one as well).
using ParamUse = std::function<Params(const Params& params)>;

// Logits [batch, seq, vocab] (float32) of int32 tokens [batch, seq].
Array gpt_logits(const GptConfig& cfg, const Params& params, const Array& tokens,
                 const Attention& attention, const ParamUse& use = {});
// Mean softmax cross-entropy over batch and sequence against int32 targets [batch, seq]
// (torch's F.cross_entropy with reduction='mean'): log_softmax times one_hot, summed over the
// vocabulary, so it keeps the logits' layout (the sequence split too).
Array gpt_loss(const GptConfig& cfg, const Params& params, const Array& tokens,
               const Array& targets, const Attention& attention, const ParamUse& use = {});

}  // namespace meshvk::programs

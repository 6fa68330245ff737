#pragma once
// Layers, losses and optimizers enough for the tutorials' training examples, in torch's layout
// (a linear layer's weight is [out, in]) and with torch's default initialisation.
#include <optional>
#include <string>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/tree.hpp"

namespace meshvk::nn {

// x @ weight^T + bias, as torch.nn.Linear: x [..., in] (any leading dimensions) to [..., out].
Array linear(const Array& x, const Array& weight, const Array& bias);

// The 001 tutorial's Model: "layers.{i}.weight" / "layers.{i}.bias" for consecutive sizes, each
// Linear initialised as torch does (uniform in +-1/sqrt(in) for weight and bias).
Params init_mlp(const std::vector<int>& sizes, uint32_t seed);
// Every layer followed by max(x, 0), as the tutorial's forward.
Array mlp(const Params& params, const Array& x);

Array mse_loss(const Array& prediction, const Array& target);
// Mean softmax cross-entropy of logits [batch, classes] against int32 labels [batch], as optax's
// softmax_cross_entropy_with_integer_labels: a negative label counts from the end (-1 is the
// last class), and a label outside [-classes, classes) makes the loss NaN.
Array softmax_cross_entropy(const Array& logits, const Array& labels);
Array log_softmax(const Array& logits, int axis = -1);

// jax.nn's activations and normalisations, composed of meshvk's ops, so each runs under jit,
// grad and shard_map and keeps its operand's sharding as those ops do.
// jax.nn.softmax along `axis` (shifted by the maximum, so large logits do not overflow).
Array softmax(const Array& x, int axis = -1);
// jax.nn.logsumexp over `axes` (all when empty): max + log(sum(exp(x - max))); a slice of only
// -inf gives -inf, as JAX's.
Array logsumexp(const Array& x, std::vector<int> axes = {}, bool keepdims = false);
// jax.nn.gelu: with `approximate` (JAX's default) 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
// without, the exact 0.5 x (1 + erf(x / sqrt(2))).
Array gelu(const Array& x, bool approximate = true);
Array silu(const Array& x);  // x * sigmoid(x); jax.nn.swish is the same
inline Array swish(const Array& x) { return silu(x); }
Array softplus(const Array& x);  // log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))
Array relu(const Array& x);      // max(x, 0)
// More of jax.nn's activations, with JAX's definitions (and so its gradients at the kinks).
Array leaky_relu(const Array& x, float negative_slope = 0.01f);  // where(x >= 0, x, slope * x)
Array elu(const Array& x, float alpha = 1.0f);   // where(x > 0, x, alpha * expm1(x))
Array celu(const Array& x, float alpha = 1.0f);  // max(x, 0) + alpha * expm1(min(x, 0) / alpha)
Array selu(const Array& x);                      // 1.0507... * elu(x, 1.6732...)
Array log_sigmoid(const Array& x);               // -softplus(-x)
Array relu6(const Array& x);                     // min(max(x, 0), 6); gradient 0 at 0 and 6
Array hard_tanh(const Array& x);                 // x clipped to [-1, 1]; gradient 1 at +-1
Array soft_sign(const Array& x);                 // x / (|x| + 1)
// jax.nn.glu: x split in halves a, b along `axis` (of even size), a * sigmoid(b).
Array glu(const Array& x, int axis = -1);
// jax.nn.standardize: (x - mean) * rsqrt(mean(x^2) - mean^2 + epsilon) over `axes`.
Array standardize(const Array& x, std::vector<int> axes = {-1}, float epsilon = 1e-5f);
// jax.nn.dot_product_attention (its XLA implementation): query [B, T, N, H] (or [T, N, H]),
// key and value [B, S, K, H] with N a multiple of K (grouped-query attention: query heads
// k*G .. k*G+G-1 read key/value head k). softmax(q k^T * scale + bias, masked) v, the logits in
// float32 (float64 for float64 queries), the probabilities cast to key's dtype. scale defaults to
// 1/sqrt(H); bias (added) and mask (bool, true = attend) broadcast to [B, N, T, S]; is_causal
// lets query t attend keys s <= t. Masked logits become -0.7 * the dtype's largest value, as
// JAX's, so a row with nothing to attend averages every value uniformly.
Array dot_product_attention(const Array& query, const Array& key, const Array& value,
                            const std::optional<Array>& bias = std::nullopt,
                            const std::optional<Array>& mask = std::nullopt,
                            std::optional<float> scale = std::nullopt, bool is_causal = false);
// Layer norm over the last axis, as flax.linen.LayerNorm computes it (biased variance, eps
// inside the square root; flax's default eps is 1e-6, torch's 1e-5): (x - mean) / sqrt(var +
// eps) * scale + bias, scale and bias of the last axis's size.
Array layer_norm(const Array& x, const Array& scale, const Array& bias, float eps = 1e-6f);
// RMS norm over the last axis, as flax.linen.RMSNorm: x / sqrt(mean(x^2) + eps) * scale.
Array rms_norm(const Array& x, const Array& scale, float eps = 1e-6f);

// Dropout as flax.linen.Dropout in training (jax semantics): each element kept with
// probability 1 - rate (a bernoulli draw from `key`, laid out as x when x is committed, so each
// device draws only its own piece) and scaled by 1 / (1 - rate), the others 0. rate 0 returns x,
// rate 1 zeros; rate outside [0, 1] is an Error. x is float32.
Array dropout(const Array& key, const Array& x, float rate);

// meshvk/optax.hpp has these optimizers as optax's GradientTransformations (with momentum,
// adamw, schedules, clipping and chain); optax::adam's steps equal nn::adam's.

// optax.sgd: p - lr * g for every parameter (each keeps its sharding). grads has the params'
// names and shapes (an Error names the first that differs).
Params sgd(const Params& params, const Params& grads, float lr);

// optax.adam with its defaults. grads and the state have the params' names and shapes; b1 and b2
// lie in [0, 1) and eps is finite and >= 0. A step that throws leaves the state unchanged.
// The state is all Arrays, so jit takes and returns it (a jitted step passes it in and hands the
// updated one back, as optax's state goes through jax.jit): the step count is an int32 scalar on
// the device, from which each step computes the bias corrections 1 - b^t there.
struct AdamState {
  Params m, v;  // zeros_like the params: their shardings
  Array count;  // int32[], the steps taken; stops at 2^31 - 1 (optax's safe_int32_increment)
};
// The count lies with the params when they are all committed to one mesh (replicated there) or
// one device, and is uncommitted on the default device otherwise.
AdamState adam_init(const Params& params);
Params adam(const Params& params, const Params& grads, AdamState& state, float lr, float b1 = 0.9f,
            float b2 = 0.999f, float eps = 1e-8f);

}  // namespace meshvk::nn

namespace meshvk::detail {

// jit's tree of an AdamState: m's Arrays, v's, then the count. out_shardings gives it one sharding
// for all of it or ShardingTree::list({m, v, count}).
template <>
struct Tree<nn::AdamState> {
  static constexpr bool leafy = true;
  static void flatten(const nn::AdamState& s, std::vector<Array>& out) {
    Tree<Params>::flatten(s.m, out);
    Tree<Params>::flatten(s.v, out);
    out.push_back(s.count);
  }
  static void structure(const nn::AdamState& s, std::string& key) {
    key += "Adam(";
    Tree<Params>::structure(s.m, key);
    Tree<Params>::structure(s.v, key);
    key += "A)";
  }
  static nn::AdamState skeleton(const nn::AdamState& s) {
    return {Tree<Params>::skeleton(s.m), Tree<Params>::skeleton(s.v), Array()};
  }
  static nn::AdamState unflatten(const nn::AdamState& like, const std::vector<Array>& leaves,
                                 size_t& pos) {
    nn::AdamState s;
    s.m = Tree<Params>::unflatten(like.m, leaves, pos);
    s.v = Tree<Params>::unflatten(like.v, leaves, pos);
    s.count = leaves.at(pos++);
    return s;
  }
  static void shardings(const nn::AdamState& s, const ShardingTree& t, LeafShardings& out,
                        const TreePlace& where) {
    if (t.kind() == ShardingTree::Kind::leaf) return leaf_shardings(s, t, out);
    list_shardings(3, t, where, "an nn::AdamState (m, v, count)",
                   [&](size_t i, const ShardingTree& e, const TreePlace& at) {
                     if (i == 0)
                       Tree<Params>::shardings(s.m, e, out, at);
                     else if (i == 1)
                       Tree<Params>::shardings(s.v, e, out, at);
                     else
                       Tree<Array>::shardings(s.count, e, out, at);
                   });
  }
};

}  // namespace meshvk::detail

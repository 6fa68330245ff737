#pragma once
// Layers, losses and optimizers enough for the tutorials' training examples, in torch's layout
// (a linear layer's weight is [out, in]) and with torch's default initialisation.
#include <string>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/autodiff.hpp"

namespace meshvk::nn {

// x @ weight^T + bias, as torch.nn.Linear.
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

// optax.sgd: p - lr * g for every parameter (each keeps its sharding). grads has the params'
// names and shapes (an Error names the first that differs).
Params sgd(const Params& params, const Params& grads, float lr);

// optax.adam with its defaults. grads and the state have the params' names and shapes; b1 and b2
// lie in [0, 1) and eps is finite and >= 0. A step that throws leaves the state unchanged.
struct AdamState {
  Params m, v;
  int step = 0;
};
AdamState adam_init(const Params& params);
Params adam(const Params& params, const Params& grads, AdamState& state, float lr, float b1 = 0.9f,
            float b2 = 0.999f, float eps = 1e-8f);

}  // namespace meshvk::nn

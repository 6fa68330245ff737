#include "meshvk/nn.hpp"

#include <cmath>

#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/random.hpp"

namespace meshvk::nn {

Array linear(const Array& x, const Array& weight, const Array& bias) {
  if (weight.ndim() != 2 || bias.ndim() != 1 || weight.shape()[0] != bias.shape()[0])
    throw Error("linear: weight " + shape_to_string(weight.shape()) + " and bias " + shape_to_string(bias.shape()) +
                " must be [out, in] and [out]");
  return einsum("bi,oi->bo", x, weight) + bias;
}

Params init_mlp(const std::vector<int>& sizes, uint32_t seed) {
  if (sizes.size() < 2) throw Error("init_mlp: give at least an input and an output size");
  Params p;
  Array key = random_key(seed);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const Array keys = split(key, 3);
    key = take(keys, scalar(int32_t{0}));
    const float bound = 1.0f / std::sqrt(static_cast<float>(sizes[i]));
    const std::string name = "layers." + std::to_string(i);
    p.emplace(name + ".weight", uniform(take(keys, scalar(int32_t{1})), {sizes[i + 1], sizes[i]}, -bound, bound));
    p.emplace(name + ".bias", uniform(take(keys, scalar(int32_t{2})), {sizes[i + 1]}, -bound, bound));
  }
  return p;
}

namespace {
// Every parameter name must have an entry in `other`, before anything is computed or updated.
void require_names(const char* op, const Params& params, const Params& other, const char* what) {
  for (const auto& [name, p] : params)
    if (!other.count(name))
      throw Error(std::string(op) + ": " + what + " has no entry '" + name +
                  "'; give one for every parameter (the same names as the params)");
}
}  // namespace

Array mlp(const Params& params, const Array& x) {
  Array h = x;
  for (size_t i = 0;; ++i) {
    const std::string name = "layers." + std::to_string(i);
    const auto w = params.find(name + ".weight");
    if (w == params.end()) break;
    const auto b = params.find(name + ".bias");
    if (b == params.end())
      throw Error("mlp: params have " + name + ".weight but no " + name + ".bias");
    h = maximum(linear(h, w->second, b->second), 0.0f);
  }
  return h;
}

Array mse_loss(const Array& prediction, const Array& target) { return mean(square(prediction - target)); }

Array log_softmax(const Array& logits, int axis) {
  const Array shifted = logits - max(logits, {axis}, true);
  return shifted - log(sum(exp(shifted), {axis}, true));
}

Array softmax_cross_entropy(const Array& logits, const Array& labels) {
  if (logits.ndim() != 2 || labels.ndim() != 1 || labels.shape()[0] != logits.shape()[0])
    throw Error("softmax_cross_entropy: logits " + shape_to_string(logits.shape()) + " and labels " +
                shape_to_string(labels.shape()) + " must be [batch, classes] and [batch]");
  return -mean(sum(log_softmax(logits) * one_hot(labels, static_cast<int>(logits.shape()[1])), {1}));
}

Params sgd(const Params& params, const Params& grads, float lr) {
  require_names("sgd", params, grads, "grads");
  Params out;
  for (const auto& [name, p] : params) out.emplace(name, p - lr * grads.at(name));
  return out;
}

AdamState adam_init(const Params& params) {
  AdamState s;
  for (const auto& [name, p] : params) {
    s.m.emplace(name, zeros_like(p));
    s.v.emplace(name, zeros_like(p));
  }
  return s;
}

Params adam(const Params& params, const Params& grads, AdamState& state, float lr, float b1, float b2, float eps) {
  require_names("adam", params, grads, "grads");
  require_names("adam", params, state.m, "the state (from adam_init)");
  require_names("adam", params, state.v, "the state (from adam_init)");
  ++state.step;
  const float c1 = 1.0f - std::pow(b1, static_cast<float>(state.step));
  const float c2 = 1.0f - std::pow(b2, static_cast<float>(state.step));
  Params out;
  for (const auto& [name, p] : params) {
    const Array& g = grads.at(name);
    Array m = b1 * state.m.at(name) + (1.0f - b1) * g;
    Array v = b2 * state.v.at(name) + (1.0f - b2) * g * g;
    out.emplace(name, p - lr * (m / c1) / (sqrt(v / c2) + eps));
    state.m.at(name) = m;
    state.v.at(name) = v;
  }
  return out;
}

}  // namespace meshvk::nn

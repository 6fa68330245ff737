#include "meshvk/nn.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "graph/array_impl.hpp"
#include "graph/dtype_support.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/optax.hpp"
#include "meshvk/random.hpp"

namespace meshvk::nn {

using meshvk::detail::number_text;

Array linear(const Array& x, const Array& weight, const Array& bias) {
  if (weight.ndim() != 2 || bias.ndim() != 1 || weight.shape()[0] != bias.shape()[0])
    throw Error("linear: weight " + shape_to_string(weight.shape()) + " and bias " + shape_to_string(bias.shape()) +
                " must be [out, in] and [out]");
  if (x.ndim() < 1 || x.shape().back() != weight.shape()[1])
    throw Error("linear: x has shape " + shape_to_string(x.shape()) + " for weight " + shape_to_string(weight.shape()) +
                "; give x as [..., " + std::to_string(weight.shape()[1]) + "] (its last axis the inputs)");
  // torch.nn.Linear's [*, in] -> [*, out]; the 2-D case as one product of [batch, in].
  if (x.ndim() == 2) return einsum("bi,oi->bo", x, weight) + bias;
  return einsum("...i,oi->...o", x, weight) + bias;
}

Params init_mlp(const std::vector<int>& sizes, uint32_t seed) {
  if (sizes.size() < 2) throw Error("init_mlp: give at least an input and an output size");
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 1)  // 0 would make the init bound 1/sqrt(0) infinite
      throw Error("init_mlp: sizes[" + std::to_string(i) + "] = " + std::to_string(sizes[i]) +
                  "; every layer size must be at least 1");
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

// What updates a parameter must have its shape: p - lr * g would otherwise broadcast and give
// the parameter a new shape (or quietly apply one gradient row to every row). A name the
// params lack is a gradient for nothing, most likely of another model.
void require_like(const char* op, const Params& params, const Params& other, const char* what) {
  require_names(op, params, other, what);
  for (const auto& [name, g] : other) {
    const auto p = params.find(name);
    if (p == params.end())
      throw Error(std::string(op) + ": " + what + " has an entry '" + name +
                  "' that the params lack; give the same names as the params");
    if (g.shape() != p->second.shape())
      throw Error(std::string(op) + ": " + what + "['" + name + "'] has shape " +
                  shape_to_string(g.shape()) + " but the parameter has " +
                  shape_to_string(p->second.shape()) + "; give it the parameter's shape");
  }
}
}  // namespace

Array mlp(const Params& params, const Array& x) {
  Array h = x;
  size_t layers = 0;
  for (;; ++layers) {
    const std::string name = "layers." + std::to_string(layers);
    const auto w = params.find(name + ".weight");
    if (w == params.end()) break;
    const auto b = params.find(name + ".bias");
    if (b == params.end())
      throw Error("mlp: params have " + name + ".weight but no " + name + ".bias");
    h = maximum(linear(h, w->second, b->second), 0.0f);
  }
  // No layer at all, or a layer after a gap (layers.2 without layers.1), would otherwise give x
  // back, or stop early, without a word.
  if (layers == 0)
    throw Error("mlp: params have no layers.0.weight; give params as init_mlp makes them "
                "(layers.{i}.weight [out, in] and layers.{i}.bias [out])");
  for (const auto& [name, p] : params)
    if (name.rfind("layers.", 0) == 0) {
      const size_t dot = name.find('.', 7);
      const std::string index = name.substr(7, dot == std::string::npos ? std::string::npos : dot - 7);
      if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos ||
          index.size() > 9 || std::stoul(index) >= layers)
        throw Error("mlp: params have " + name + " but the layers end at layers." +
                    std::to_string(layers - 1) + "; number the layers 0, 1, 2, ... without gaps");
    }
  return h;
}

Array mse_loss(const Array& prediction, const Array& target) { return mean(square(prediction - target)); }

Array log_softmax(const Array& logits, int axis) {
  const Array shifted = logits - max(logits, {axis}, true);
  const detail::ReductionInputsUnshared once;  // the exp is read by the sum alone
  return shifted - log(sum(exp(shifted), {axis}, true));
}

Array softmax_cross_entropy(const Array& logits, const Array& labels) {
  if (logits.ndim() != 2 || labels.ndim() != 1 || labels.shape()[0] != logits.shape()[0])
    throw Error("softmax_cross_entropy: logits " + shape_to_string(logits.shape()) + " and labels " +
                shape_to_string(labels.shape()) + " must be [batch, classes] and [batch]");
  if (labels.dtype() != DType::int32)
    throw Error("softmax_cross_entropy: labels are " + type_of(labels) +
                "; give int32 class indices (astype(labels, DType::int32))");
  if (logits.shape()[1] > INT32_MAX)
    throw Error("softmax_cross_entropy: " + std::to_string(logits.shape()[1]) +
                " classes; int32 labels index at most 2^31 - 1");
  const int classes = static_cast<int>(logits.shape()[1]);
  // As optax's softmax_cross_entropy_with_integer_labels (jnp.take_along_axis, mode fill): a
  // negative label counts from the end, and one outside [-classes, classes) makes the loss NaN
  // rather than quietly dropping the example's label term (one_hot of it is all zeros).
  const Array index = where(labels < 0, labels + classes, labels);
  // The label's term selected, not multiplied by a one-hot vector: a class whose logit is -inf
  // (masked) would otherwise add -inf * 0 = NaN to every example, where optax's gather leaves it
  // out. For finite logits the sum is the same: the label's term plus zeros.
  const Array hit = arange(classes).reshape({1, classes}) == index.reshape({logits.shape()[0], 1});
  const Array per_example = -sum(where(hit, log_softmax(logits), 0.0f), {1});
  return mean(where((index >= 0) & (index < classes), per_example, std::nanf("")));
}

Params sgd(const Params& params, const Params& grads, float lr) {
  require_like("sgd", params, grads, "grads");
  Params out;
  for (const auto& [name, p] : params) out.emplace(name, p - lr * grads.at(name));
  return out;
}

namespace {
// The count from adam_init: an int32 scalar, checked before the state changes.
void require_count(const AdamState& state) {
  if (!state.count.valid())
    throw Error("adam: state.count is empty; use the state adam_init made (it counts steps in an int32 scalar)");
  if (state.count.dtype() != DType::int32 || state.count.ndim() != 0)
    throw Error("adam: state.count is " + type_of(state.count) +
                "; a state from adam_init counts steps in an int32 scalar (int32[])");
}
}  // namespace

AdamState adam_init(const Params& params) {
  AdamState s;
  for (const auto& [name, p] : params) {
    s.m.emplace(name, zeros_like(p));
    s.v.emplace(name, zeros_like(p));
  }
  s.count = optax::detail::count_like(params);  // with the params, as optax's counts
  return s;
}

Params adam(const Params& params, const Params& grads, AdamState& state, float lr, float b1, float b2, float eps) {
  // Everything is checked before the state changes: a failed step leaves it as it was.
  require_like("adam", params, grads, "grads");
  require_like("adam", params, state.m, "the state's m (from adam_init)");
  require_like("adam", params, state.v, "the state's v (from adam_init)");
  require_count(state);
  // b = 1 divides by 1 - b^t = 0, and b outside [0, 1) or a NaN eps makes every update NaN.
  if (!(b1 >= 0.0f && b1 < 1.0f) || !(b2 >= 0.0f && b2 < 1.0f) || !(eps >= 0.0f) || !std::isfinite(eps))
    throw Error("adam: b1 = " + number_text(b1) + ", b2 = " + number_text(b2) + ", eps = " +
                number_text(eps) + "; give b1 and b2 in [0, 1) and a finite eps >= 0 (defaults 0.9, 0.999, 1e-8)");
  // On the device, so that a jitted step counts too (a host int would be traced in as a constant).
  const Array count = where(state.count < std::numeric_limits<int32_t>::max(), state.count + 1, state.count);
  const Array t = astype(count, DType::float32);
  const Array c1 = 1.0f - power(b1, t);
  const Array c2 = 1.0f - power(b2, t);
  Params out, m_out, v_out;
  for (const auto& [name, p] : params) {
    const Array& g = grads.at(name);
    const Array m = b1 * state.m.at(name) + (1.0f - b1) * g;
    const Array v = b2 * state.v.at(name) + (1.0f - b2) * g * g;
    out.emplace(name, p - lr * (m / c1) / (sqrt(v / c2) + eps));
    m_out.emplace(name, m);
    v_out.emplace(name, v);
  }
  state.m = std::move(m_out);
  state.v = std::move(v_out);
  state.count = count;
  return out;
}

}  // namespace meshvk::nn

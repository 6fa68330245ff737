// jax.nn's activations and normalisations as compositions of meshvk's ops: each runs under jit,
// grad and shard_map, and lays its result out as the ops it is made of do.
#include <cmath>
#include <string>

#include "graph/array_impl.hpp"
#include "graph/dtype_support.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/error.hpp"
#include "meshvk/nn.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::nn {

namespace {
// axes normalised against x's rank, each in range and named once, else an Error naming op; true
// when a reduced axis is empty (no maximum to shift by: JAX's max starts from -inf there).
bool reduces_empty(const char* op, const Array& x, const std::vector<int>& axes) {
  const int ndim = x.ndim();
  std::vector<bool> seen(static_cast<size_t>(ndim), false);
  bool empty = axes.empty() && x.size() == 0;
  for (const int axis : axes) {
    if (axis < -ndim || axis >= ndim)
      throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for " +
                  std::to_string(ndim) + " dimensions; give one in [" + std::to_string(-ndim) + ", " +
                  std::to_string(ndim) + ")");
    const auto a = static_cast<size_t>(axis < 0 ? axis + ndim : axis);
    if (seen[a]) throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is named twice");
    seen[a] = true;
    empty = empty || x.shape()[a] == 0;
  }
  return empty;
}
}  // namespace

Array softmax(const Array& x, int axis) {
  // An empty axis: an empty result (exp gives the float dtype of the rest).
  if (reduces_empty("softmax", x, {axis})) return exp(x);
  // Shifted by the maximum, which carries no gradient (softmax does not depend on it), as JAX.
  const Array e = exp(x - stop_gradient(max(x, {axis}, true)));
  return e / sum(e, {axis}, true);
}

Array logsumexp(const Array& x, std::vector<int> axes, bool keepdims) {
  // Over an empty slice: log(0) = -inf, as JAX's (its max starts from -inf).
  if (reduces_empty("logsumexp", x, axes)) return log(sum(exp(x), axes, keepdims));
  const Array m = max(x, axes, true);
  // A slice of only -inf (or a +inf) would make x - m NaN: shift by 0 there instead, as JAX does.
  const Array shift = stop_gradient(where(isfinite(m), m, 0.0f));
  const Array out = [&] {
    const detail::ReductionInputsUnshared once;  // the exp is read by the sum alone
    return log(sum(exp(x - shift), axes, true)) + shift;
  }();
  if (keepdims) return out;
  if (axes.empty()) return reshape(out, Shape{});
  return squeeze(out, axes);
}

namespace {
Operand constant_for(const Array& x, double v) { return detail::constant_for(x.dtype(), v); }
}  // namespace

Array gelu(const Array& x, bool approximate) {
  if (approximate) {
    const Operand c = constant_for(x, 0.79788456080286535588);  // sqrt(2 / pi)
    const Operand k = constant_for(x, 0.044715);
    return 0.5f * x * (1.0f + tanh(multiply(c, x + multiply(k, x) * x * x)));
  }
  return 0.5f * x * (1.0f + erf(multiply(x, constant_for(x, 0.70710678118654752440))));
}

Array silu(const Array& x) { return x * sigmoid(x); }

Array softplus(const Array& x) {
  // Bools count as float32 (jnp.logaddexp promotes them; -abs has no bool form).
  if (x.dtype() == DType::bool_) return softplus(astype(x, DType::float32));
  return maximum(x, 0.0f) + log1p(exp(-abs(x)));
}

Array relu(const Array& x) { return ::meshvk::relu(x); }

namespace {
void require_last_axis(const char* op, const Array& x, const Array& p, const char* what) {
  if (x.ndim() < 1 || p.ndim() != 1 || p.shape()[0] != x.shape().back())
    throw Error(std::string(op) + ": " + what + " has shape " + shape_to_string(p.shape()) +
                " for x of shape " + shape_to_string(x.shape()) + "; give " + what +
                " one value per element of x's last axis (" +
                (x.ndim() ? std::to_string(x.shape().back()) : std::string("x needs an axis")) +
                ")");
}
}  // namespace

Array layer_norm(const Array& x, const Array& scale, const Array& bias, float eps) {
  require_last_axis("layer_norm", x, scale, "scale");
  require_last_axis("layer_norm", x, bias, "bias");
  const Array centred = x - mean(x, {-1}, true);
  return centred * rsqrt(mean(square(centred), {-1}, true) + eps) * scale + bias;
}

Array rms_norm(const Array& x, const Array& scale, float eps) {
  require_last_axis("rms_norm", x, scale, "scale");
  return x * rsqrt(mean(square(x), {-1}, true) + eps) * scale;
}

}  // namespace meshvk::nn

// jax.nn's remaining activations and its dot_product_attention, composed of meshvk's ops (so
// each runs under jit, grad and shard_map with those ops' rules), with JAX's definitions.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "graph/dtype_support.hpp"
#include "meshvk/autodiff.hpp"
#include "meshvk/error.hpp"
#include "meshvk/nn.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::nn {

using detail::constant_for;

Array leaky_relu(const Array& x, float negative_slope) { return where(x >= 0.0f, x, negative_slope * x); }

Array elu(const Array& x, float alpha) {
  // expm1 of the negative side only, so the untaken side's overflow never reaches a gradient.
  const Array safe = where(x > 0.0f, 0.0f, x);
  return where(x > 0.0f, x, alpha * expm1(safe));
}

Array celu(const Array& x, float alpha) {
  if (alpha == 0.0f) throw Error("celu: alpha = 0 divides by zero; give a nonzero alpha");
  return maximum(x, 0.0f) + alpha * expm1(minimum(x, 0.0f) / alpha);
}

Array selu(const Array& x) {
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  const Array safe = where(x > 0.0f, 0.0f, x);
  const Array e = where(x > 0.0f, x, multiply(constant_for(x.dtype(), alpha), expm1(safe)));
  return multiply(constant_for(e.dtype(), scale), e);
}

Array log_sigmoid(const Array& x) { return -softplus(-x); }

Array relu6(const Array& x) {
  // JAX's relu6 has gradient 0 at 0 and at 6 (a custom rule): the kinks take the constant side.
  return where((x > 0.0f) & (x < 6.0f), x, minimum(maximum(stop_gradient(x), 0.0f), 6.0f));
}

Array hard_tanh(const Array& x) { return where(x > 1.0f, 1.0f, where(x < -1.0f, -1.0f, x)); }

Array soft_sign(const Array& x) { return x / (abs(x) + 1.0f); }

Array glu(const Array& x, int axis) {
  if (!x.valid()) throw Error("glu: x is an empty meshvk::Array");
  const int a = axis < 0 ? axis + static_cast<int>(x.ndim()) : axis;
  if (a < 0 || a >= static_cast<int>(x.ndim()))
    throw Error("glu: axis " + std::to_string(axis) + " is out of range for " + type_of(x));
  if (x.shape()[static_cast<size_t>(a)] % 2 != 0)
    throw Error("glu: axis " + std::to_string(axis) + " of " + type_of(x) + " has odd size; it splits in two halves");
  const std::vector<Array> halves = split(x, 2, a);
  return halves[0] * sigmoid(halves[1]);
}

Array standardize(const Array& x, std::vector<int> axes, float epsilon) {
  const Array m = mean(x, axes, true);
  const Array variance = mean(square(x), axes, true) - square(m);
  return (x - m) * rsqrt(variance + epsilon);
}

Array dot_product_attention(const Array& query, const Array& key, const Array& value, const std::optional<Array>& bias,
                            const std::optional<Array>& mask, std::optional<float> scale, bool is_causal) {
  if (!query.valid() || !key.valid() || !value.valid())
    throw Error("dot_product_attention: query, key or value is an empty meshvk::Array");
  const size_t rank = query.ndim();
  if ((rank != 3 && rank != 4) || key.ndim() != rank || value.ndim() != rank)
    throw Error("dot_product_attention: query " + type_of(query) + ", key " + type_of(key) + " and value " +
                type_of(value) + " need the same rank, 4 ([batch, length, heads, head_dim]) or 3 (no batch)");
  if (rank == 3)  // bias and mask broadcast from the right: [N, T, S] fits either way
    return squeeze(dot_product_attention(expand_dims(query, 0), expand_dims(key, 0), expand_dims(value, 0), bias,
                                         mask, scale, is_causal),
                   {0});
  const int64_t b = query.shape()[0], t = query.shape()[1], n = query.shape()[2], h = query.shape()[3];
  const int64_t s = key.shape()[1], k = key.shape()[2];
  if (key.shape()[0] != b || value.shape() != key.shape() || key.shape()[3] != h)
    throw Error("dot_product_attention: key " + type_of(key) + " and value " + type_of(value) +
                " must both be [batch, kv_length, kv_heads, head_dim] with query's batch and head_dim (query " +
                type_of(query) + ")");
  if (k == 0 || n % k != 0)
    throw Error("dot_product_attention: " + std::to_string(n) + " query heads and " + std::to_string(k) +
                " key/value heads; the query heads must be a multiple of the key/value heads");
  const int64_t g = n / k;
  const DType logits_dtype = query.dtype() == DType::float64 ? DType::float64 : DType::float32;
  // Query heads grouped by the key/value head they read (head k*G + j reads head k).
  const Array q = reshape(query, Shape{b, t, k, g, h});
  Array logits = einsum("btkgh,bskh->bkgts", {q, key}, logits_dtype);
  const double sc = scale ? static_cast<double>(*scale) : 1.0 / std::sqrt(static_cast<double>(h));
  logits = reshape(multiply(logits, constant_for(logits_dtype, sc)), Shape{b, n, t, s});
  if (bias) logits = astype(logits + *bias, logits_dtype);
  std::optional<Array> keep = mask;
  if (keep && keep->dtype() != DType::bool_)
    throw Error("dot_product_attention: mask is " + type_of(*keep) + "; give a bool mask (true: attend)");
  if (is_causal) {
    const Array causal = tril(ones(Shape{t, s}, DType::int32)) != 0;
    keep = keep ? *keep & causal : causal;
  }
  if (keep) {
    const double large_negative =
        -0.7 * (logits_dtype == DType::float64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max());
    logits = where(*keep, logits, constant_for(logits_dtype, large_negative));
  }
  const Array probs = astype(softmax(logits, -1), key.dtype());
  const Array encoded = einsum("bkgts,bskh->btkgh", reshape(probs, Shape{b, k, g, t, s}), value);
  return reshape(encoded, Shape{b, t, n, h});
}

}  // namespace meshvk::nn

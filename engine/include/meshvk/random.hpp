#pragma once
// jax.random: counter-based pseudo-random numbers from explicit keys, generated on the devices.
//
// The generator is threefry2x32 (20 rounds) with JAX's partitionable counters
// (jax_threefry_partitionable=True, the default since jax 0.5): element i of an output, by
// row-major flat index, depends only on the key and i. So a sharded output, where each device
// makes only its own piece, equals the unsharded output bit for bit, and uniform() matches
// jax.random.uniform for the same key bit for bit.
//
// Keys: a key is a uint32[2] array holding the two words of a jax "raw" key
// (jax.random.PRNGKey(seed), or jax.random.key_data(jax.random.key(seed))) bit for bit; split()
// gives uint32[num, 2] and keys[i] is key i, as in JAX. int32[2] keys (the same words) are
// accepted too. A key lives on devices
// like any array; what is made from it lives where the key lives (on every device of its
// sharding), or where an explicit output sharding says, each device reading the key from its
// own memory.
#include <cstdint>
#include <optional>

#include "meshvk/array.hpp"

namespace meshvk {

// jax.random.key(seed) / PRNGKey(seed): the words (0, seed), uncommitted on device 0.
Array random_key(uint32_t seed);

// jax.random.split: `num` new keys as uint32[num, 2]; key i is threefry2x32(key, (0, i)).
Array split(const Array& key, int num = 2);

// jax.random.fold_in: a new key from `key` and 32 bits of data: threefry2x32(key, (0, data)).
Array fold_in(const Array& key, uint32_t data);
// The same with the data read on the device from an int32 or uint32 scalar array (an axis index computed
// there, say); the data moves to the key's devices device to device, never through the host.
Array fold_in(const Array& key, const Array& data);

// jax.random.bits for 32 bits: uint32 random words (bits b1 ^ b2 of
// threefry2x32(key, (i >> 32, i & 0xffffffff)) for flat index i).
Array random_bits(const Array& key, Shape shape);
Array random_bits(const Array& key, Shape shape, const Sharding& sharding);

// jax.random.uniform: float32 in [minval, maxval). Needs finite minval < maxval.
Array uniform(const Array& key, Shape shape, float minval = 0.0f, float maxval = 1.0f);
Array uniform(const Array& key, Shape shape, const Sharding& sharding, float minval = 0.0f,
              float maxval = 1.0f);

// jax.random.normal: standard normal float32 (sqrt(2) * erfinv of a uniform in (-1, 1)).
Array normal(const Array& key, Shape shape);
Array normal(const Array& key, Shape shape, const Sharding& sharding);

// uniform and normal with jax's dtype argument: float32, bfloat16 or float16 (other dtypes are an
// Error, as in jax). The 16-bit formats follow jax's algorithm for them (threefry
// partitionable): the low 8 (bfloat16) or 16 (float16) bits of each word give the mantissa of a
// value in [1, 2), less 1, scaled by maxval - minval and shifted by minval, each step rounded to
// the dtype; normal is sqrt(2) * erfinv of such a uniform in (nextafter(-1, 0), 1).
Array uniform(const Array& key, Shape shape, DType dtype, float minval = 0.0f, float maxval = 1.0f);
Array normal(const Array& key, Shape shape, DType dtype);

// More of jax.random, composed of uniform and meshvk's ops (so the keys are as above and a
// sharded result equals the unsharded one). bernoulli is uniform(key, shape) < p, JAX's own
// formula, so it follows uniform bit for bit; the others use meshvk's log / erf / erfinv and are
// not promised bit-exact with JAX (the same distribution, from the same key and counters).
// jax.random.bernoulli: bool, true with probability p (p <= 0: never, p >= 1: always).
Array bernoulli(const Array& key, float p = 0.5f, Shape shape = {});
Array bernoulli(const Array& key, float p, Shape shape, const Sharding& sharding);
// With p a float32 array: the shape is p's unless given (p must then broadcast to it).
Array bernoulli(const Array& key, const Array& p, std::optional<Shape> shape = std::nullopt);
// jax.random.categorical: int32 samples from the softmax of float32 `logits` along `axis` (the
// result has logits' shape without it), by the Gumbel-max trick as JAX:
// argmax(logits - log(-log(uniform(key, logits.shape, tiny, 1))), axis).
Array categorical(const Array& key, const Array& logits, int axis = -1);
// jax.random.truncated_normal: standard normals conditioned on [lower, upper] (either may be
// infinite; lower < upper), by the inverse CDF as JAX: sqrt(2) * erfinv(uniform in
// [erf(lower / sqrt(2)), erf(upper / sqrt(2)))), clipped into the open interval as JAX clips.
Array truncated_normal(const Array& key, float lower, float upper, Shape shape);
Array truncated_normal(const Array& key, float lower, float upper, Shape shape, const Sharding& sharding);

namespace detail {
// threefry2x32 itself, for tests against published vectors: counters uint32[n, 2] (or int32) of
// (x0, x1) word pairs give uint32[n, 2] output pairs, computed where the key lives.
Array threefry2x32(const Array& key, const Array& counters);
}  // namespace detail

}  // namespace meshvk

// jax.random on the devices: keys, split, fold_in and the threefry-based samplers, each device
// generating its own piece of the output from the key in its own memory (shaders/random.comp).
//
// What this follows of JAX (jax/_src/prng.py and jax/_src/random.py, jax >= 0.5 where
// jax_threefry_partitionable defaults to True):
//   - threefry2x32 (_threefry2x32_lowering): checked against Random123's known-answer vectors.
//   - random_key(seed) = threefry_seed(seed) = (seed >> 32, seed & 0xffffffff) = (0, seed).
//   - bits (_threefry_random_bits_partitionable): counters (hi, lo) = iota_2x32_shape(shape),
//     i.e. the 64-bit row-major flat index split into words; 32-bit bits = b1 ^ b2.
//   - split (_threefry_split_foldlike): key i = both output words of threefry(key, (0, i)).
//   - fold_in (_threefry_fold_in): threefry_2x32(key, threefry_seed(data)) = threefry(key,
//     (0, data)), both words.
//   - uniform (_uniform): (bits >> 9) | 0x3f800000 as float, minus 1, * (max - min) + min,
//     then lax.max(min, .); normal (_normal_real): sqrt(2) * erf_inv(uniform(key, shape,
//     nextafter(-1, 0), 1)), erf_inv as XLA's ErfInv32 (Giles' approximation through log1p).
// These rest on the JAX source as remembered, cross-checked by outputs remembered from JAX
// (tests/test_random.cpp): split(key(0)) in both the old and the partitionable scheme, and
// normal(key(0)), all of which this code reproduces.
#include "meshvk/random.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>

#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "graph/op_scope.hpp"
#include "kernels/cost.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk {

namespace {

using detail::DeviceBuffer;
using detail::Fence;
using detail::Recording;
using detail::RuntimeState;

// What shaders/random.comp computes (its `mode` push constant).
enum class Mode : uint32_t {
  key_pairs = 0,      // threefry(key, (0, base + i)), both words
  counter_pairs = 1,  // threefry(key, counters[base + i]), both words
  fold_in = 2,        // threefry(key, (0, data)), data read from device memory
  bits = 3,
  uniform = 4,
  normal = 5,
};

constexpr uint32_t kMaxDims = 8;
constexpr uint64_t kWorkgroup = 64;  // local_size_x of the shader

// The shader's push constants (std430).
struct Params {
  uint32_t mode = 0;
  uint32_t count = 0;
  uint32_t base = 0;
  uint32_t rank = 0;
  uint32_t origin_lo = 0, origin_hi = 0;
  float minval = 0.0f;
  float scale = 1.0f;
  uint32_t extent[kMaxDims] = {};
  uint32_t stride_lo[kMaxDims] = {};
  uint32_t stride_hi[kMaxDims] = {};
};
static_assert(sizeof(Params) == 128, "Vulkan guarantees 128 bytes of push constants");

// What to generate: the output array and how the shader fills it.
struct Request {
  const char* op = "";
  Mode mode = Mode::bits;
  Shape shape;
  DType dtype = DType::int32;
  Sharding sharding = SingleDeviceSharding(0);
  bool committed = false;
  uint32_t first_counter = 0;  // key_pairs: the counter of the first key
  float minval = 0.0f;
  float scale = 1.0f;
};

std::string typed_shape(const Array& x) {
  std::string s = std::string(dtype_name(x.dtype())) + "[";
  for (size_t d = 0; d < x.ndim(); ++d) s += (d ? "," : "") + std::to_string(x.shape()[d]);
  return s + "]";
}

std::string float_text(float f) {
  std::ostringstream s;
  s << f;
  return s.str();
}

void check_key(const char* op, const Array& key) {
  if (!key.valid())
    throw Error(std::string(op) +
                ": the key is an empty meshvk::Array; make one with random_key(seed)");
  // uint32[2] as JAX's raw keys; int32[2] holds the same words (keys saved by older meshvk).
  const bool words = key.dtype() == DType::uint32 || key.dtype() == DType::int32;
  if (words && key.shape() == Shape{2}) return;
  std::string hint;
  if (words && key.ndim() == 2 && key.shape()[1] == 2)
    hint = "; take one key of a split() result first, e.g. keys[0]";
  throw Error(std::string(op) +
              ": a key must be uint32[2] (two words from random_key, split or fold_in; int32[2] is "
              "taken as the same words); got " +
              typed_shape(key) + hint);
}

void check_shape(const char* op, const Shape& shape) {
  checked_size(shape, op);
}

// Where a result made from an array placed as `s` lives: on every device of `s`, whole.
Sharding replicated_like(const Sharding& s) {
  if (const NamedSharding* n = s.named()) return NamedSharding(n->mesh(), PartitionSpec());
  return s;
}

size_t position_of_device(const exec::ShardedValue& v, int device) {
  const std::vector<int> ids = v.sharding.device_ids();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == device) return i;
  throw Error("internal: random input is not on device " + std::to_string(device));
}

// The piece's global flat index origin, and its dimensions as (extent, global stride) with
// runs that are contiguous in the global array merged, innermost last.
void set_piece_layout(const char* op, Params& p, const Shape& shape, const Index& box) {
  std::vector<uint64_t> global_stride(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) global_stride[d - 1] = global_stride[d] * shape[d];
  uint64_t origin = 0;
  for (size_t d = 0; d < shape.size(); ++d) origin += box[d].start * global_stride[d];

  struct Dim {
    uint64_t extent, stride;
  };
  std::vector<Dim> dims;  // innermost first
  for (size_t d = shape.size(); d-- > 0;) {
    const uint64_t e = static_cast<uint64_t>(box[d].size());
    if (e == 1) continue;
    if (!dims.empty() && global_stride[d] == dims.back().stride * dims.back().extent)
      dims.back().extent *= e;
    else
      dims.push_back({e, global_stride[d]});
  }
  if (dims.size() > kMaxDims)
    throw Error(std::string(op) + ": a piece of shape " + shape_to_string(shape) + " spans " +
                std::to_string(dims.size()) + " non-contiguous runs of dimensions; at most " +
                std::to_string(kMaxDims) + " are supported (shard fewer dimensions)");
  p.origin_lo = static_cast<uint32_t>(origin);
  p.origin_hi = static_cast<uint32_t>(origin >> 32);
  p.rank = static_cast<uint32_t>(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t slot = dims.size() - 1 - k;
    p.extent[slot] = static_cast<uint32_t>(dims[k].extent);
    p.stride_lo[slot] = static_cast<uint32_t>(dims[k].stride);
    p.stride_hi[slot] = static_cast<uint32_t>(dims[k].stride >> 32);
  }
}

// Records the dispatches that fill `items` outputs of `words` 32-bit words each, in chunks
// whose bindings stay inside maxStorageBufferRange.
void record_random(RuntimeState& rt, Recording& rec, Params params, uint64_t items, uint32_t words,
                   const DeviceBuffer& key, const DeviceBuffer* aux, const DeviceBuffer& out) {
  // Counter-based bits: the key read, the words written (the hash's integer ops are not counted).
  const kernels::CountedOp counted(rec, [&] { return kernels::OpCost{0, 0, (items * words + 2) * kernels::kWordBytes}; });
  const uint64_t max_bytes = rt.device_limits().maxStorageBufferRange;
  const uint64_t chunk = std::max<uint64_t>(max_bytes / (4 * words) / 1024 * 1024, 1024);
  const uint32_t first = params.base;
  const kernels::Binding key_binding = kernels::Binding::storage(key, 0, 8);
  // Modes without an auxiliary input bind the key there too: every binding must be valid.
  const kernels::Binding aux_binding =
      aux ? kernels::Binding::storage(*aux, 0, std::min<uint64_t>(aux->bytes(), max_bytes))
          : key_binding;
  for (uint64_t start = 0; start < items; start += chunk) {
    const uint64_t n = std::min(chunk, items - start);
    params.count = static_cast<uint32_t>(n);
    params.base = first + static_cast<uint32_t>(start);
    const kernels::Binding bindings[] = {
        key_binding, aux_binding, kernels::Binding::storage(out, start * 4 * words, n * 4 * words)};
    kernels::dispatch(rt, rec, {"random", ""}, bindings, &params, sizeof params,
                      kernels::groups_for(rt, (n + kWorkgroup - 1) / kWorkgroup));
  }
}

// Runs `r` with `key` (and `aux`, when the mode reads one) copied device to device onto every
// device of the output, each device filling its own piece.
Array generate(const Request& r, const Array& key, const Array* aux = nullptr) {
  const detail::PartOpScope op_scope(r.op);  // profile hook: no line of its own
  auto rt = key.impl()->runtime;
  std::lock_guard lock(rt->mutex());
  exec::check_devices(*rt, r.sharding);
  r.sharding.check_shape(r.shape);
  const Sharding inputs_at = replicated_like(r.sharding);
  const Array placed_key = device_put(key, inputs_at);
  const Array placed_aux = aux ? device_put(*aux, inputs_at) : Array();
  const exec::ShardedValue& key_value = detail::materialized(placed_key);
  const exec::ShardedValue* aux_value = aux ? &detail::materialized(placed_aux) : nullptr;

  const bool per_element =
      r.mode == Mode::bits || r.mode == Mode::uniform || r.mode == Mode::normal;
  const uint32_t words = per_element ? 1 : 2;
  // The kernel writes 32-bit words; bfloat16 and float16 come from them through astype.
  if (dtype_size(r.dtype) != 4)
    throw Error(std::string("internal: ") + r.op + " generates " + std::string(dtype_name(r.dtype)) + " directly");
  exec::ShardedValue out{r.shape, r.dtype, r.sharding, {}};
  for (const DeviceIndex& piece : r.sharding.devices_indices_map(r.shape)) {
    uint64_t elements = 1;
    for (const Slice& s : piece.index) elements *= static_cast<uint64_t>(s.size());
    if (elements > UINT32_MAX)
      throw Error(std::string(r.op) + ": a piece of " + std::to_string(elements) +
                  " elements is too large; pieces hold at most 2^32 - 1 elements");
    auto buffer = rt->allocate(piece.device, elements * 4);
    Params params;
    params.mode = static_cast<uint32_t>(r.mode);
    params.base = per_element ? 0 : r.first_counter;
    params.minval = r.minval;
    params.scale = r.scale;
    if (per_element) set_piece_layout(r.op, params, r.shape, piece.index);

    Recording rec = rt->begin(piece.device);
    DeviceBuffer& key_piece = *key_value.shards[position_of_device(key_value, piece.device)];
    DeviceBuffer* aux_piece =
        aux_value ? aux_value->shards[position_of_device(*aux_value, piece.device)].get() : nullptr;
    rec.wait_for(key_piece.ready());
    if (aux_piece) rec.wait_for(aux_piece->ready());
    record_random(*rt, rec, params, elements / words, words, key_piece, aux_piece, *buffer);
    const Fence f = rt->submit(std::move(rec));
    key_piece.used_by(f);
    if (aux_piece) aux_piece->used_by(f);
    buffer->written_by(f);
    out.shards.push_back(std::move(buffer));
  }
  std::vector<const Array*> sources{&key};
  if (aux) sources.push_back(aux);
  return detail::make_array(rt, std::move(out), r.committed, detail::varying_of(sources));
}

// A request for a result that lives where the key lives, or on `sharding` when one is given.
Request request_for(const char* op, Mode mode, const Array& key, Shape shape, DType dtype,
                    const Sharding* sharding) {
  check_key(op, key);
  check_shape(op, shape);
  Request r;
  r.op = op;
  r.mode = mode;
  r.shape = std::move(shape);
  r.dtype = dtype;
  r.sharding = sharding ? *sharding : replicated_like(key.sharding());
  r.committed = sharding ? true : key.committed();
  return r;
}

Array uniform_impl(const Array& key, Shape shape, const Sharding* sharding, float minval,
                   float maxval) {
  Request r =
      request_for("uniform", Mode::uniform, key, std::move(shape), DType::float32, sharding);
  if (!(std::isfinite(minval) && std::isfinite(maxval) && minval < maxval))
    throw Error("uniform: needs finite minval < maxval; got minval=" + float_text(minval) +
                ", maxval=" + float_text(maxval));
  r.minval = minval;
  r.scale = maxval - minval;  // in float32, as jax computes it
  return generate(r, key);
}

Array normal_impl(const Array& key, Shape shape, const Sharding* sharding) {
  Request r = request_for("normal", Mode::normal, key, std::move(shape), DType::float32, sharding);
  // jax's _normal_real draws uniform(key, shape, nextafter(-1, 0), 1).
  r.minval = std::nextafter(-1.0f, 0.0f);
  r.scale = 1.0f - r.minval;
  return generate(r, key);
}

// The placement of a result of `key` and `data`: the first committed one decides, as for
// elementwise operations.
const Sharding& placement_of(const char* op, const Array& key, const Array& data) {
  if (!data.committed()) return key.sharding();
  if (!key.committed()) return data.sharding();
  if (key.sharding().device_ids() != data.sharding().device_ids())
    throw Error(std::string(op) + ": the key is committed to " + key.sharding().to_string() +
                " and the data to " + data.sharding().to_string() +
                "; device_put one of them onto the other's devices");
  return key.sharding();
}

}  // namespace

Array random_key(uint32_t seed) {
  // threefry_seed: (seed >> 32, seed & 0xffffffff) for a 32-bit seed.
  const uint32_t words[2] = {0, seed};
  return array(std::span<const uint32_t>(words, 2));
}

Array split(const Array& key, int num) {
  check_key("split", key);
  if (num < 0) throw Error("split: num must be >= 0; got " + std::to_string(num));
  Request r = request_for("split", Mode::key_pairs, key, Shape{num, 2}, DType::uint32, nullptr);
  return generate(r, key);
}

Array fold_in(const Array& key, uint32_t data) {
  Request r = request_for("fold_in", Mode::key_pairs, key, Shape{2}, DType::uint32, nullptr);
  r.first_counter = data;
  return generate(r, key);
}

Array fold_in(const Array& key, const Array& data) {
  check_key("fold_in", key);
  if (!data.valid()) throw Error("fold_in: the data is an empty meshvk::Array");
  if ((data.dtype() != DType::int32 && data.dtype() != DType::uint32) || data.ndim() != 0)
    throw Error("fold_in: data must be an int32 or uint32 scalar array (shape ()); got " + typed_shape(data));
  if (data.impl()->runtime != key.impl()->runtime)
    throw Error("fold_in: the key and the data belong to different meshvk::Runtime objects");
  const Sharding& at = placement_of("fold_in", key, data);
  Request r = request_for("fold_in", Mode::fold_in, key, Shape{2}, DType::uint32, nullptr);
  r.sharding = replicated_like(at);
  r.committed = key.committed() || data.committed();
  return generate(r, key, &data);
}

Array random_bits(const Array& key, Shape shape) {
  return generate(
      request_for("random_bits", Mode::bits, key, std::move(shape), DType::uint32, nullptr), key);
}
Array random_bits(const Array& key, Shape shape, const Sharding& sharding) {
  return generate(
      request_for("random_bits", Mode::bits, key, std::move(shape), DType::uint32, &sharding), key);
}

Array uniform(const Array& key, Shape shape, float minval, float maxval) {
  return uniform_impl(key, std::move(shape), nullptr, minval, maxval);
}
Array uniform(const Array& key, Shape shape, const Sharding& sharding, float minval, float maxval) {
  return uniform_impl(key, std::move(shape), &sharding, minval, maxval);
}

Array normal(const Array& key, Shape shape) {
  return normal_impl(key, std::move(shape), nullptr);
}
Array normal(const Array& key, Shape shape, const Sharding& sharding) {
  return normal_impl(key, std::move(shape), &sharding);
}

namespace {

void check_float_dtype(const char* op, DType dtype) {
  if (!is_floating(dtype))
    throw Error(std::string(op) + ": dtype " + std::string(dtype_name(dtype)) +
                " is not a floating type; give float32, bfloat16 or float16 (as jax.random." + op + ")");
  // JAX draws float64 from 64 random bits; values of fewer bits cast up would pass for float64.
  if (dtype == DType::float64)
    throw Error(std::string(op) + ": float64 draws are not supported (JAX's take 64 random bits each); give "
                "float32, bfloat16 or float16, or astype a float32 draw to float64");
}

// jax.random.uniform for bfloat16 and float16 (jax._src.random._uniform): rng_bits = max(8,
// mantissa bits + 1) random bits per value (the low ones of the partitionable threefry word),
// their top `mantissa` bits as the mantissa of a value in [1, 2), minus 1: that is
// m * 2^-mantissa exactly, made here without a bitcast.
Array uniform_16(const Array& key, Shape shape, DType dtype, float minval, float maxval) {
  const bool bf16 = dtype == DType::bfloat16;
  const int mantissa = bf16 ? 7 : 10, rng_bits = bf16 ? 8 : 16;
  const float lo = round_to(dtype, minval), hi = round_to(dtype, maxval);
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi))
    throw Error("uniform: needs finite minval < maxval in " + std::string(dtype_name(dtype)) +
                "; got minval=" + float_text(minval) + ", maxval=" + float_text(maxval));
  // uint32 only moves and casts; its bits as int32 (astype wraps) give the same low bits.
  const Array bits = astype(random_bits(key, std::move(shape)), DType::int32);
  const Array low = bitwise_and(bits, (1 << rng_bits) - 1);
  const Array m = floor_divide(low, 1 << (rng_bits - mantissa));
  const Array floats = astype(astype(m, DType::float32) * std::ldexp(1.0f, -mantissa), dtype);
  const Array scaled = floats * round_to(dtype, hi - lo) + lo;  // weak scalars: rounded in dtype
  return maximum(scaled, lo);
}

}  // namespace

Array uniform(const Array& key, Shape shape, DType dtype, float minval, float maxval) {
  check_float_dtype("uniform", dtype);
  if (dtype == DType::float32) return uniform(key, std::move(shape), minval, maxval);
  return uniform_16(key, std::move(shape), dtype, minval, maxval);
}

Array normal(const Array& key, Shape shape, DType dtype) {
  check_float_dtype("normal", dtype);
  if (dtype == DType::float32) return normal(key, std::move(shape));
  // jax: lo = nextafter(-1, 0) in dtype, u = uniform(key, shape, dtype, lo, 1),
  // sqrt(2) (in dtype) * erf_inv(u).
  const float lo = -(1.0f - std::ldexp(1.0f, dtype == DType::bfloat16 ? -8 : -11));
  const Array u = uniform_16(key, std::move(shape), dtype, lo, 1.0f);
  return astype(erfinv(astype(u, DType::float32)), dtype) * round_to(dtype, std::sqrt(2.0f));
}

namespace detail {

Array threefry2x32(const Array& key, const Array& counters) {
  check_key("threefry2x32", key);
  if (!counters.valid() || (counters.dtype() != DType::int32 && counters.dtype() != DType::uint32) ||
      counters.ndim() != 2 || counters.shape()[1] != 2)
    throw Error("threefry2x32: counters must be uint32[n,2] (or int32[n,2]); got " +
                (counters.valid() ? typed_shape(counters) : std::string("an empty meshvk::Array")));
  const uint64_t bytes = static_cast<uint64_t>(counters.size()) * 4;
  if (bytes > runtime_of(key).device_limits().maxStorageBufferRange)
    throw Error("threefry2x32: at most maxStorageBufferRange bytes of counters at once");
  const Sharding& at = placement_of("threefry2x32", key, counters);
  Request r = request_for("threefry2x32", Mode::counter_pairs, key, counters.shape(), DType::uint32,
                          nullptr);
  r.sharding = replicated_like(at);
  r.committed = key.committed() || counters.committed();
  return generate(r, key, &counters);
}

}  // namespace detail

}  // namespace meshvk

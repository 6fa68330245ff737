#pragma once
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <new>
#include <vector>

#include "meshvk/dtype.hpp"
#include "meshvk/sharding.hpp"
#include "meshvk/source_location.hpp"

namespace meshvk {

namespace detail {
struct ArrayImpl;
[[noreturn]] void axis_out_of_range(const char* op, const std::string& axis, size_t ndim);
// One integer axis as the int the ops take: a wider one past int's range (x.sum(int64_t{1} <<
// 32)) is an Error, not a wrapped axis that names another dimension.
template <std::integral I>
int int_axis(I axis, const char* op, size_t ndim) {
  if constexpr (std::is_signed_v<I>) {
    if (static_cast<long long>(axis) < INT32_MIN || static_cast<long long>(axis) > INT32_MAX)
      axis_out_of_range(op, std::to_string(static_cast<long long>(axis)), ndim);
  } else {
    if (static_cast<unsigned long long>(axis) > INT32_MAX)
      axis_out_of_range(op, std::to_string(static_cast<unsigned long long>(axis)), ndim);
  }
  return static_cast<int>(axis);
}
}  // namespace detail
struct Shard;

// An immutable array (float32, float64, bfloat16, float16, int8, int32, int64, uint8, uint32,
// bool) whose pieces live on virtual devices, laid out by a
// Sharding (jax.Array). Copies of an Array share its device buffers.
class Array {
 public:
  Array() = default;
  explicit Array(std::shared_ptr<const detail::ArrayImpl> impl) : impl_(std::move(impl)) {}

  bool valid() const { return impl_ != nullptr; }
  // On a temporary Array, shape(), sharding() and impl() return copies (see Lowered in jit.hpp):
  // `for (int64_t d : (x + 1).shape())` would otherwise read a destroyed array.
  const Shape& shape() const&;
  Shape shape() const&&;
  size_t ndim() const { return shape().size(); }
  int64_t size() const { return shape_size(shape()); }
  DType dtype() const;
  const Sharding& sharding() const&;
  Sharding sharding() const&&;
  // Placed on purpose (device_put with a sharding); uncommitted arrays may be moved freely.
  bool committed() const;
  // jax.Array.is_deleted: donated to a jitted function (JitOptions::donate_argnums), which took
  // its buffers; its shape, dtype and sharding stay readable, its values do not.
  bool is_deleted() const;
  std::vector<int> devices() const { return sharding().device_ids(); }
  // jax.Array.addressable_shards: one Shard per device holding a piece, in device_ids() order.
  std::vector<Shard> addressable_shards() const;

  // Copies the whole array to the host, row-major; T must match dtype().
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> out;
    try {
      out.resize(static_cast<size_t>(size()));
    } catch (const std::bad_alloc&) {
      host_out_of_memory(sizeof(T));
    }
    copy_to_host(out.data(), dtype_of<T>());
    return out;
  }
  void copy_to_host(void* dst, DType expected) const;
  // An Error for a to_host whose host copy does not fit (size() elements of `element_bytes`).
  [[noreturn]] void host_out_of_memory(size_t element_bytes) const;

  // Same values in a new shape with the same number of elements. Arrays on one device or
  // fully replicated reshape without moving data.
  Array reshape(Shape new_shape) const;
  // x.reshape(2, 4), as jax.Array.reshape takes the dimensions one by one too.
  template <std::integral... I>
    requires(sizeof...(I) > 0)
  Array reshape(I... dims) const {
    return reshape(Shape{static_cast<int64_t>(dims)...});
  }

  // jax.Array's methods: thin spellings of the functions in ops.hpp (defined with them), so they
  // work the same under jit, shard_map and grad. Reductions take a list of axes ({} for all) or
  // one int axis: x.sum(), x.sum(0), x.max(-1, true), x.mean({0, 2}).
  Array sum(std::vector<int> axes = {}, bool keepdims = false) const;
  Array mean(std::vector<int> axes = {}, bool keepdims = false) const;
  Array var(std::vector<int> axes = {}, bool keepdims = false) const;
  Array std(std::vector<int> axes = {}, bool keepdims = false) const;
  Array max(std::vector<int> axes = {}, bool keepdims = false) const;
  Array min(std::vector<int> axes = {}, bool keepdims = false) const;
  // A template, so that x.sum({}) and x.sum({0}) still mean the axis lists (a braced list
  // deduces no template argument) and only a plain integer picks this one.
  template <std::integral I>
  Array sum(I axis, bool keepdims = false) const {
    return sum(std::vector<int>{detail::int_axis(axis, "sum", ndim())}, keepdims);
  }
  template <std::integral I>
  Array mean(I axis, bool keepdims = false) const {
    return mean(std::vector<int>{detail::int_axis(axis, "mean", ndim())}, keepdims);
  }
  template <std::integral I>
  Array var(I axis, bool keepdims = false) const {
    return var(std::vector<int>{detail::int_axis(axis, "var", ndim())}, keepdims);
  }
  template <std::integral I>
  Array std(I axis, bool keepdims = false) const {
    return std(std::vector<int>{detail::int_axis(axis, "std", ndim())}, keepdims);
  }
  template <std::integral I>
  Array max(I axis, bool keepdims = false) const {
    return max(std::vector<int>{detail::int_axis(axis, "max", ndim())}, keepdims);
  }
  template <std::integral I>
  Array min(I axis, bool keepdims = false) const {
    return min(std::vector<int>{detail::int_axis(axis, "min", ndim())}, keepdims);
  }
  // Index of the first maximum / minimum: of the flattened array without an axis, as in JAX.
  Array argmax() const;
  Array argmax(int axis, bool keepdims = false) const;
  Array argmin() const;
  Array argmin(int axis, bool keepdims = false) const;
  // x.T() is jax's x.T (all axes reversed); x.transpose(1, 0) or x.transpose({1, 0}) permutes.
  Array T() const;
  Array transpose(std::vector<int> axes = {}) const;
  template <std::integral... I>
    requires(sizeof...(I) > 0)
  Array transpose(I... axes) const {
    return transpose(std::vector<int>{detail::int_axis(axes, "transpose", ndim())...});
  }
  Array astype(DType dtype) const;
  // x.flatten() / x.ravel(): the values as one dimension, in row-major order.
  Array flatten() const { return reshape(Shape{size()}); }
  Array ravel() const { return flatten(); }

  // JAX's integer indexing x[i]: the sub-array at index i of axis 0 (shape()[1:]); a negative i
  // counts from the end. Throws Error for a 0-d array or an i out of range.
  Array operator[](int64_t i) const;
  // JAX's x[ids] with an int32 index array: gather(x, ids) (ops.hpp), rows of axis 0 in the shape
  // ids.shape + shape()[1:]; out-of-range indices are clamped as JAX's indexing does. A bool
  // mask (x[mask]) is an Error: its result's shape would depend on the values.
  Array operator[](const Array& ids) const;

  // The values as numpy's str() prints them: "[[0. 1.]\n [2. 3.]]".
  std::string to_string() const;

  const std::shared_ptr<const detail::ArrayImpl>& impl() const& { return impl_; }
  std::shared_ptr<const detail::ArrayImpl> impl() const&& { return impl_; }

 private:
  std::shared_ptr<const detail::ArrayImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Array& array);

// jax.Shard: the device, the part of the global array it holds (as devices_indices_map gives),
// which copy of that part it is (0 for the first device holding it), and the part itself as a
// single-device Array on that device (sharing its buffer: no copy).
struct Shard {
  int device = 0;
  Index index;
  int replica_id = 0;
  Array data;
};

// Host values to an uncommitted array on device 0. Without a shape the array is 1-D.
Array array(std::span<const float> values, std::optional<Shape> shape = std::nullopt);
Array array(std::span<const int32_t> values, std::optional<Shape> shape = std::nullopt);
Array array(std::initializer_list<float> values, std::optional<Shape> shape = std::nullopt);
Array array(std::initializer_list<int32_t> values, std::optional<Shape> shape = std::nullopt);
// The same with a braced shape, as numpy users write it: array(values, {2, 3}).
inline Array array(std::span<const float> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::span<const int32_t> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::initializer_list<float> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::initializer_list<int32_t> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
Array scalar(float value);
Array scalar(int32_t value);

// bfloat16 / float16 host values (meshvk/dtype.hpp: 16 bits each), on device 0 or laid out as
// `sharding`; read back with to_host<bfloat16>() / to_host<float16>().
Array array(std::span<const bfloat16> values, std::optional<Shape> shape = std::nullopt);
Array array(std::span<const float16> values, std::optional<Shape> shape = std::nullopt);
inline Array array(std::span<const bfloat16> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::span<const float16> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
Array device_put(std::span<const bfloat16> values, Shape shape, const Sharding& sharding);
Array device_put(std::span<const float16> values, Shape shape, const Sharding& sharding);

// uint32 host values (JAX's raw random keys and bits), on device 0 or laid out as `sharding`.
Array array(std::span<const uint32_t> values, std::optional<Shape> shape = std::nullopt);
inline Array array(std::span<const uint32_t> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
Array device_put(std::span<const uint32_t> values, Shape shape, const Sharding& sharding);

// int8, uint8, int64 and float64 host values (numpy's int8, uint8, int64, float64: 1 and 8 bytes
// per element, as on the device), on device 0 or laid out as `sharding`; read back with
// to_host<int8_t>(), to_host<uint8_t>(), to_host<int64_t>(), to_host<double>(). An adapter
// lacking the Vulkan feature a dtype needs (see meshvk/dtype.hpp) makes these an Error naming it.
Array array(std::span<const int8_t> values, std::optional<Shape> shape = std::nullopt);
Array array(std::span<const uint8_t> values, std::optional<Shape> shape = std::nullopt);
Array array(std::span<const int64_t> values, std::optional<Shape> shape = std::nullopt);
Array array(std::span<const double> values, std::optional<Shape> shape = std::nullopt);
inline Array array(std::span<const int8_t> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::span<const uint8_t> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::span<const int64_t> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
inline Array array(std::span<const double> values, Shape shape) {
  return array(values, std::optional<Shape>(std::move(shape)));
}
Array device_put(std::span<const int8_t> values, Shape shape, const Sharding& sharding);
Array device_put(std::span<const uint8_t> values, Shape shape, const Sharding& sharding);
Array device_put(std::span<const int64_t> values, Shape shape, const Sharding& sharding);
Array device_put(std::span<const double> values, Shape shape, const Sharding& sharding);

// numpy.arange: int32 for integer bounds, float32 for float bounds.
Array arange(int32_t stop);
Array arange(int32_t start, int32_t stop, int32_t step = 1);
Array arange(float stop);
Array arange(float start, float stop, float step = 1.0f);
Array zeros(Shape shape, DType dtype = DType::float32);
Array ones(Shape shape, DType dtype = DType::float32);
Array full(Shape shape, float value);
Array full(Shape shape, int32_t value);
// Made directly in pieces on the devices of `sharding` (committed).
Array zeros(Shape shape, DType dtype, const Sharding& sharding);
Array full(Shape shape, float value, const Sharding& sharding);
// jnp.copy: the same values in new buffers, laid out the same way.
Array copy(const Array& x);
Array zeros_like(const Array& x);
Array ones_like(const Array& x);

// jax.device_put: lays `x` out as `sharding`, moving data device to device (never through the
// host). The result is committed.
Array device_put(const Array& x, const Sharding& sharding, SourceLocation loc = SourceLocation::current());
Array device_put(std::span<const float> values, Shape shape, const Sharding& sharding);
Array device_put(std::span<const int32_t> values, Shape shape, const Sharding& sharding);

// jax.typeof: "int32[4,2]", or with Explicit mesh axes "int32[4@X,2]", "float32[8@(X,Y)]".
// Spelled type_of because `typeof` is a GNU keyword (CMake's default -std=gnu++20).
std::string type_of(const Array& x);

// numpy's .npy format, versions 1.0-3.0, C or Fortran order, either byte order ('<', '>', '=').
// load_npy reads '<f4', '<f8', '<f2', '<i4', '<i8', '|i1', '<u4', '|u1' and '|b1' as float32,
// float64, float16, int32, int64, int8, uint32, uint8 and bool, and converts '<i2' and '<u2' to
// int32 (every value fits) and '<u8' to uint32 (a value past uint32 is an Error naming the first
// such value and its flat (C-order) index). Other dtypes (complex, structured, strings, '<f16')
// are an Error listing these. save_npy writes the dtype's own code ('<f8', '|i1', ...); a
// bfloat16 array is an Error naming astype (numpy has no bfloat16: ml_dtypes saves raw '<V2'
// bytes, which read back as void). The loaded array is uncommitted on device 0.
Array load_npy(const std::string& path);
void save_npy(const std::string& path, const Array& x);

}  // namespace meshvk

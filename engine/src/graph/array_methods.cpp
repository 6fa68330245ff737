// jax.Array's methods (x.sum(), x.T(), x.astype(...)): each is the function of ops.hpp of the
// same name, so tracing, sharding propagation and autodiff see exactly that op.
#include "meshvk/array.hpp"

#include <string>

#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

void detail::axis_out_of_range(const char* op, const std::string& axis, size_t ndim) {
  const int n = static_cast<int>(ndim);
  throw Error(std::string(op) + ": axis " + axis + " is out of range for an array of rank " + std::to_string(n) +
              (n == 0 ? std::string("; a 0-d array has no axes (reduce it whole, or reshape it to 1-D first)")
                      : "; valid axes are " + std::to_string(-n) + ".." + std::to_string(n - 1)));
}

Array Array::sum(std::vector<int> axes, bool keepdims) const {
  return meshvk::sum(*this, std::move(axes), keepdims);
}
Array Array::mean(std::vector<int> axes, bool keepdims) const {
  return meshvk::mean(*this, std::move(axes), keepdims);
}
Array Array::var(std::vector<int> axes, bool keepdims) const {
  return meshvk::var(*this, std::move(axes), keepdims);
}
Array Array::std(std::vector<int> axes, bool keepdims) const {
  return meshvk::std(*this, std::move(axes), keepdims);
}
Array Array::max(std::vector<int> axes, bool keepdims) const {
  return meshvk::max(*this, std::move(axes), keepdims);
}
Array Array::min(std::vector<int> axes, bool keepdims) const {
  return meshvk::min(*this, std::move(axes), keepdims);
}
Array Array::argmax() const {
  return meshvk::argmax(*this);
}
Array Array::argmax(int axis, bool keepdims) const {
  return meshvk::argmax(*this, axis, keepdims);
}
Array Array::argmin() const {
  return meshvk::argmin(*this);
}
Array Array::argmin(int axis, bool keepdims) const {
  return meshvk::argmin(*this, axis, keepdims);
}
Array Array::T() const {
  return meshvk::transpose(*this);
}
Array Array::transpose(std::vector<int> axes) const {
  return meshvk::transpose(*this, std::move(axes));
}
Array Array::astype(DType dtype) const {
  return meshvk::astype(*this, dtype);
}

// jnp.argmax(x) with axis=None: the index into the flattened array.
Array argmax(const Array& x) {
  return argmax(x.flatten(), 0);
}
Array argmin(const Array& x) {
  return argmin(x.flatten(), 0);
}

}  // namespace meshvk

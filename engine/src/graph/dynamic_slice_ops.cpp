// lax.dynamic_slice / dynamic_update_slice with braced starts (host integers and device-side
// int32 scalars mixed), and dynamic_update_slice with starts computed on the device.
#include <algorithm>
#include <limits>

#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

namespace {

bool all_host(std::initializer_list<StartIndex> start) {
  return std::all_of(start.begin(), start.end(),
                     [](const StartIndex& s) { return std::holds_alternative<int64_t>(s.get()); });
}

std::vector<int64_t> host_starts(std::initializer_list<StartIndex> start) {
  std::vector<int64_t> out;
  for (const StartIndex& s : start) out.push_back(std::get<int64_t>(s.get()));
  return out;
}

// Host integers become int32 scalars beside the device ones; starts are clamped into the array
// anyway, so a host start past int32 is clamped to int32's range first (same result).
std::vector<Array> device_starts(std::initializer_list<StartIndex> start) {
  std::vector<Array> out;
  for (const StartIndex& s : start) {
    if (const auto* a = std::get_if<Array>(&s.get())) {
      out.push_back(*a);
      continue;
    }
    const int64_t v =
        std::clamp<int64_t>(std::get<int64_t>(s.get()), std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max());
    out.push_back(scalar(static_cast<int32_t>(v)));
  }
  return out;
}

}  // namespace

Array dynamic_slice(const Array& x, std::initializer_list<StartIndex> start, Shape sizes) {
  if (all_host(start)) return dynamic_slice(x, host_starts(start), std::move(sizes));
  return dynamic_slice(x, device_starts(start), std::move(sizes));
}

Array dynamic_update_slice(const Array& x, const Array& update,
                           std::initializer_list<StartIndex> start) {
  if (all_host(start)) return dynamic_update_slice(x, update, host_starts(start));
  return dynamic_update_slice(x, update, device_starts(start));
}

Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& start) {
  if (!x.valid() || !update.valid())
    throw Error("dynamic_update_slice: an operand is an empty meshvk::Array");
  const size_t rank = x.ndim();
  if (update.ndim() != rank || start.size() != rank)
    throw Error("dynamic_update_slice: update " + shape_to_string(update.shape()) +
                " and start need the rank of " + shape_to_string(x.shape()) +
                " (one start per dimension)");
  for (size_t d = 0; d < rank; ++d) {
    if (!start[d].valid() || start[d].ndim() != 0 || start[d].dtype() != DType::int32)
      throw Error("dynamic_update_slice: start index " + std::to_string(d) +
                  " must be an int32 scalar, got " +
                  (start[d].valid() ? type_of(start[d]) : std::string("an empty Array")));
    if (update.shape()[d] > x.shape()[d])
      throw Error("dynamic_update_slice: update " + shape_to_string(update.shape()) +
                  " does not fit in " + shape_to_string(x.shape()));
  }
  if (x.dtype() == DType::uint32) {
    // Data movement that uint32 (keys, bits) supports, as the host-start form does: where()
    // computes and refuses uint32, so move the same bits as int32 and reinterpret them back.
    return astype(dynamic_update_slice(astype(x, DType::int32), astype(update, DType::int32), start),
                  DType::uint32);
  }
  const Array u = astype(update, x.dtype());
  if (rank == 0) return u;
  if (update.size() == 0) return x;
  // The update spread over x's shape: along each dimension, element i reads update[i - s]
  // (clamped; a mask keeps only [s, s + size)), with s (negative: from the end) clamped so the
  // update fits, as in JAX.
  Array spread = u;
  Array inside;
  for (size_t d = 0; d < rank; ++d) {
    const auto n = static_cast<int32_t>(x.shape()[d]), m = static_cast<int32_t>(update.shape()[d]);
    const Array s = minimum(maximum(where(start[d] < 0, start[d] + n, start[d]), 0), n - m);
    const Array rel = arange(n) - s;
    const Array in_d = (rel >= 0) & (rel < m);
    spread = take(spread, minimum(maximum(rel, 0), m - 1), static_cast<int>(d), TakeMode::clip);
    Shape along(rank, 1);
    along[d] = n;
    inside = inside.valid() ? inside & in_d.reshape(along) : in_d.reshape(along);
  }
  return where(inside, spread, x);
}

}  // namespace meshvk

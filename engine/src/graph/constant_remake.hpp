#pragma once
// Constants made where they are used. An uncommitted constant (zeros, full, arange, a small
// host array, and what elementwise ops and reshapes make of only such values) lives on device 0,
// as in JAX's eager mode; when it is moved onto other devices (combined with a sharded value, say),
// it is made again on each target device rather than copied from device 0, as XLA materialises
// constants and iotas on every device. Inside jit that turns a broadcast replayed on every call
// (the causal mask of an attention layer, one_hot's index range, a scan's slice indices) into a
// fill or an iota on each device.
#include <functional>
#include <optional>

#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"

namespace meshvk::detail {

using Remake = std::function<Array(const Sharding& replicated)>;

// x with `remake` as the way to make its value again (a copy of x's impl: the same buffers).
Array with_remake(const Array& x, Remake remake);
// The remake of x, or null when x is committed or depends on data.
std::shared_ptr<const Remake> remake_of(const Array& x);
// An uncommitted constant x laid out as `target` by making it on each target device, or nullopt
// where x is not such a constant, already is on target's devices, or target is neither a
// NamedSharding nor a single device. Prints a "constant" line in the program text.
std::optional<exec::ShardedValue> remade_on(const Array& x, const Sharding& target);
// start + step * i over a 1-D array, replicated on the devices of `replicated` (one iota each).
exec::ShardedValue iota_on(RuntimeState& rt, int64_t count, DType dtype, double start, double step,
                           const Sharding& replicated);

}  // namespace meshvk::detail

#pragma once
// Values partial over mesh axes (JAX's `unreduced`, PyTorch DTensor's Partial placement): a
// contraction or a sum over a split dimension leaves each device a summand instead of
// all-reducing at once, linear ops carry the summands on, and the sum is taken where a consumer
// needs the value: an all-reduce, or a reduce-scatter where the value is wanted split along one
// of the axes (half the bytes), or one all-reduce of several values packed together.
//
// detail::materialized() takes the sum, so a path that forgets partial values costs bytes,
// never correctness. Only sums are ever partial (float32 and int32: int32 summands wrap as numpy
// does, exactly, in any order).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collectives.hpp"
#include "graph/array_impl.hpp"

namespace meshvk::detail {

bool is_partial(const Array& x);
// The mesh axes x is partial over (empty when it is not).
const std::vector<std::string>& partial_axes(const Array& x);
// Whether s splits a dimension over any of `axes`.
bool shards_over_any(const Sharding& s, const std::vector<std::string>& axes);
// The array of x's summands (x itself when x is not partial).
Array summands_of(const Array& x);
// A value partial over `axes` whose summands are `summands` (already partial ones: over the
// union). `axes` must not shard summands. No axes: summands itself. `op` names the sum in the
// program text once it is taken, as if op had made it. The sum keeps the rule and line of
// `made_from` (a partial operand of the op that made `summands`) where it has one. `addend` (not
// partial, or an empty Array) is added once the sum is taken (PartialSum::addend).
Array make_partial(const Array& summands, std::vector<std::string> axes, const std::string& op = "",
                   const Array* made_from = nullptr, const Array& addend = Array());
// x's addend (an empty Array when x has none or is not partial).
const Array& addend_of(const Array& x);

// x's value: the all-reduce of its summands, kept in x (called by materialized(), under the
// runtime's lock).
const exec::ShardedValue& resolve_partial(const Array& x);
// Resolves the partial ones of `values` that are partial over the same axes of the same mesh
// and of one dtype together, packed into as few all-reduces as the byte threshold allows (XLA's
// all-reduce combiner; PyTorch DDP's buckets): the gradients an optimizer reads, a jit's results.
void resolve_together(const std::vector<Array>& values);
// A value the next optax update's resolve_together sums too, if it is still partial then over
// the same axes as gradients it packs (value_and_grad's value: the loss beside its gradients).
// Held weakly, on this thread.
void sum_with_gradients(const Array& value);
// resolve_together for an optimizer's gradients: the values sum_with_gradients named go in too.
void resolve_gradients(const std::vector<Array>& gradients);

// A linear op of one operand (a transpose, broadcast, slice, reshape that moves no data, a sum):
// `op` on x's summands, partial over x's axes; op(x) when x is not partial. `op` must not move
// data between devices (it sees summands as if they were one value). `moves_only`: op only moves
// elements (no arithmetic), so it applies to an addend of x's shape too; otherwise a value with an
// addend takes its sum first.
Array on_summands(const Array& x, const std::function<Array(const Array&)>& op, bool moves_only = false);

// device_put of a partial x into `target` where target splits a dimension x holds whole over
// some of x's partial axes: a reduce-scatter over them (partial over the rest, if any); nothing
// when target splits no such dimension.
std::optional<Array> scatter_partial(const Array& x, const Sharding& target);

// Whether x is a reduce-scatter not yet run (PartialSum::scatter_dim): scatter_partial defers
// one that takes the whole sum, and resolve_together packs them.
bool is_pending_scatter(const Array& x);

// The reduce-scatter over `axes` of per-device summands (mesh position order) of local shape
// `local`, scattered along dimension `dim`; results in mesh position order.
collectives::Buffers reduce_scatter_over(const std::shared_ptr<RuntimeState>& rt, const Mesh& mesh,
                                         const std::vector<std::string>& axes, const collectives::Buffers& summands,
                                         const Shape& local, DType dtype, int dim);

}  // namespace meshvk::detail

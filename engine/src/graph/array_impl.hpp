#pragma once
#include <initializer_list>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exec/program_log.hpp"
#include "exec/sharded_value.hpp"
#include "kernels/elementwise.hpp"
#include "meshvk/array.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

// Elementwise work not yet run: a fused program over materialized inputs, each already laid
// out so that every device holds what its output piece needs.
struct PendingElementwise {
  kernels::EwProgram program;
  std::vector<Array> inputs;
};

// A value partial over mesh axes (JAX's `unreduced`, DTensor's Partial placement): each device
// holds a summand, the value is the sum over `axes` of what the devices along them hold.
// `summands` is an ordinary array laid out as the value is (its sharding names none of `axes`)
// whose per-device pieces are those summands; it never leaves graph/. See partial_sum.hpp.
struct PartialSum {
  std::vector<std::string> axes;  // in the mesh's order
  Array summands;
  std::string op;  // the op that made it ("dot_general", "sum"), naming the sum in the program text
  // That op's rule and the user's line, while a trace listened: the collective that takes the
  // sum, wherever it runs, names them.
  std::string rule;
  exec::CallSite site;
  // A value that is not partial added to the sum once it is taken (empty Array: none): x + p1 +
  // p2, the residual gradient beside two partial input gradients, is one all-reduce of p1 + p2
  // plus x, and p + bias is all-reduce(p) + bias, the same bits as taking the sum first.
  Array addend;
  // A reduce-scatter not yet run (>= 0): the value is the sum over `axes` (in the order the
  // value's layout splits this dimension over them) scattered along this dimension of the
  // summands, laid out as the Array's sharding says, which splits it (partial_sum.hpp,
  // scatter_partial). Such a value is not partial to the ops that read it: they take it whole.
  int scatter_dim = -1;
};

// What an Array is: a value on the devices of one runtime, and whether it was placed on purpose.
// An elementwise result stays pending until something needs its data, so chains of elementwise
// ops run as one fused dispatch per device.
struct ArrayImpl {
  std::shared_ptr<RuntimeState> runtime;
  mutable exec::ShardedValue value;  // shape, dtype and sharding always; shards once materialized
  bool committed = false;
  mutable std::shared_ptr<const PendingElementwise> pending;
  // Inside shard_map: the mesh axes along which the per-device values may differ. A value that
  // varies over an axis cannot be returned as replicated over it. Mutable for a scan's backward
  // pass only: its cotangent placeholders, traced before the cotangents were known, take the axes
  // the real ones vary over (scan.cpp).
  mutable std::vector<std::string> varying;
  // The summands of a partial value (PartialSum::summands, set by make_partial): its pieces differ
  // along the partial axes though its sharding calls them replicas.
  mutable bool summands = false;
  // A jitted function's result whose buffers are still the compiled program's outputs, which its
  // next replay overwrites (jit.cpp copies this array's buffers first, then clears the flag).
  // Only this ArrayImpl is moved to copies then, so nothing else may share its buffers: see
  // shareable_value. Read and written under the runtime's lock.
  mutable bool lent = false;
  // Donated to this jitted function (JitOptions::donate_argnums), which deleted it: its buffers are
  // gone, and materialized() raises naming the function. Read and written under the runtime's lock.
  mutable std::string donated_to;
  // Set while the value is a sum not yet taken (value.shards empty then): materialized() takes
  // it, with an all-reduce over partial->axes, and clears this.
  mutable std::shared_ptr<const PartialSum> partial;
  // A value with no data dependence (a fill, an iota, a small host constant, and what elementwise
  // ops and reshapes make of only such values): how to make it again, replicated on the devices
  // of a given sharding (see graph/constant_remake.hpp). Null for everything else.
  std::shared_ptr<const std::function<Array(const Sharding& replicated)>> remake;
};

// device_put's rule on the tapes: `placed` is x laid out anew; its cotangent goes back to x's
// layout.
Array device_put_on_tape(const Array& x, const Array& placed);

// The value with its device buffers, running pending work first and summing a partial value
// (partial_sum.hpp): the one accessor ops read data through.
const exec::ShardedValue& materialized(const Array& x);
// An Error naming op unless every valid array belongs to one Runtime: buffers of two Vulkan
// instances never meet in one command.
void require_one_runtime(const char* op, std::initializer_list<const Array*> arrays);
// With several processes, whether every process holds its own copy of x: uncommitted, on this
// process's first device (where each process makes its uncommitted arrays).
bool on_every_process(const Array& x);
bool is_pending(const Array& x);
// A pending program's inputs, materialized, with each one's pieces.
struct PendingInputs {
  std::vector<const exec::ShardedValue*> values;
  std::vector<std::vector<DeviceIndex>> pieces;
};
PendingInputs materialize_inputs(const PendingElementwise& p);
// How the kernel computing `piece` of the program's result (of `out_shape`) reads each input.
std::vector<kernels::EwInput> piece_inputs(const PendingInputs& in, const Shape& out_shape, const DeviceIndex& piece);
// Runs `program` over the pieces of a result of `shape` laid out by `sharding` (`pieces`, its
// devices_indices_map), storing nodes `results` (32-bit ones where there are several): per result,
// one new buffer per piece. Of devices of one VkDevice holding the same piece, the first computes it
// and the others copy it (graph/pending_pieces.cpp), unless `pieces_differ` (pieces_may_differ).
std::vector<std::vector<std::shared_ptr<DeviceBuffer>>> run_pending_pieces(
    RuntimeState& rt, const kernels::EwProgram& program, std::span<const int> results, const PendingInputs& in,
    const Shape& shape, const std::vector<DeviceIndex>& pieces, const Sharding& sharding, bool pieces_differ);
// Whether the pieces of `result` (pending `p`) may differ between devices its sharding calls
// replicas: inside a shard_map (varying), or where it or an input holds a partial value's summands.
bool pieces_may_differ(const ArrayImpl& result, const PendingElementwise& p);
// Whether x's pieces may differ between devices its sharding calls replicas (as above), or work
// on its replicas may not be shared (MESHVK_SPLIT_REPLICAS=0).
bool replicas_may_differ(const Array& x);
// While alive, and while no tape records, the thread's reductions take a pending input of costly
// ops as read by them alone (log_softmax's and logsumexp's exp): computed inside the reduction and
// not stored (graph/reduce_ops.cpp). Under a tape the input is stored, for the backward pass.
class ReductionInputsUnshared {
 public:
  ReductionInputsUnshared();
  ~ReductionInputsUnshared();
  ReductionInputsUnshared(const ReductionInputsUnshared&) = delete;
  ReductionInputsUnshared& operator=(const ReductionInputsUnshared&) = delete;
  static bool active();

 private:
  bool saved_;
};

// Runs the pending ones among `arrays` that read the same arrays (beyond scalars) and have one
// shape and layout as one kernel with several results (multi_output_fusion.cpp); the others stay
// pending.
void materialize_together(const std::vector<Array>& arrays);
// The program as the program text shows it, its inputs named by what they are.
std::string pending_text(const PendingElementwise& p, const PendingInputs& in);
// The value for a new Array that shares x's buffers (a reshape, an equivalent device_put, a
// Shard): materialized(x), or a copy of its buffers while x is a jitted result still lent (a
// shared buffer would change under the new Array at the function's next call). Call it under
// the runtime's lock.
exec::ShardedValue shareable_value(const Array& x);

RuntimeState& runtime_of(const Array& x);
RuntimeState& current_runtime();
Array make_array(std::shared_ptr<RuntimeState> rt, exec::ShardedValue value, bool committed,
                 std::vector<std::string> varying = {});
Array make_pending(std::shared_ptr<RuntimeState> rt, Shape shape, DType dtype, Sharding sharding,
                   bool committed, PendingElementwise pending, std::vector<std::string> varying = {});
// The mesh axes any of `arrays` varies over.
std::vector<std::string> varying_of(const std::vector<const Array*>& arrays);

}  // namespace meshvk::detail

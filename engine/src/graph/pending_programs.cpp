// Pending elementwise programs (ArrayImpl::pending): made by the elementwise ops
// (elementwise_ops.cpp), run as one fused kernel per device piece when something needs their data.
#include <mutex>

#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "kernels/elementwise.hpp"
#include "meshvk/error.hpp"
#include "sharding/checked_shape.hpp"

namespace meshvk::detail {

bool is_pending(const Array& x) { return x.valid() && x.impl()->pending != nullptr; }

exec::ShardedValue shareable_value(const Array& x) {
  const exec::ShardedValue& v = materialized(x);
  return x.impl()->lent ? exec::copy_value(*x.impl()->runtime, v) : v;
}

Array make_pending(std::shared_ptr<RuntimeState> rt, Shape shape, DType dtype, Sharding sharding,
                   bool committed, PendingElementwise pending, std::vector<std::string> varying) {
  checked_size(shape, "result");
  auto impl = std::make_shared<ArrayImpl>(
      ArrayImpl{std::move(rt), exec::ShardedValue{std::move(shape), dtype, std::move(sharding), {}}, committed,
                std::make_shared<const PendingElementwise>(std::move(pending)), std::move(varying)});
  return Array(std::shared_ptr<const ArrayImpl>(std::move(impl)));
}

PendingInputs materialize_inputs(const PendingElementwise& p) {
  PendingInputs in;
  for (const Array& a : p.inputs) {
    in.values.push_back(&materialized(a));
    in.pieces.push_back(a.sharding().devices_indices_map(a.shape()));
  }
  return in;
}

std::vector<kernels::EwInput> piece_inputs(const PendingInputs& in, const Shape& out_shape, const DeviceIndex& piece) {
  std::vector<kernels::EwInput> inputs;
  for (size_t k = 0; k < in.values.size(); ++k) {
    // This device's piece of input k.
    size_t at = 0;
    while (at < in.pieces[k].size() && in.pieces[k][at].device != piece.device) ++at;
    if (at == in.pieces[k].size()) throw Error("internal: elementwise input is not on device " + std::to_string(piece.device));
    const Index& ii = in.pieces[k][at].index;
    kernels::EwInput e;
    e.buffer = in.values[k]->shards[at].get();
    e.dtype = in.values[k]->dtype;
    const Shape& ishape = in.values[k]->shape;
    if (ishape == out_shape && ii == piece.index) {
      e.mode = kernels::EwInput::Mode::same;
    } else if (shape_size(ishape) == 1) {
      e.mode = kernels::EwInput::Mode::scalar;
    } else {
      e.mode = kernels::EwInput::Mode::strided;
      const size_t lead = out_shape.size() - ishape.size();
      std::vector<int64_t> local_stride(ishape.size(), 1);
      for (size_t d = ishape.size(); d-- > 1;) local_stride[d - 1] = local_stride[d] * ii[d].size();
      e.strides.assign(out_shape.size(), 0);
      for (size_t d = 0; d < ishape.size(); ++d) {
        if (ishape[d] == 1 && out_shape[lead + d] != 1) continue;  // broadcast
        e.strides[lead + d] = local_stride[d];
        e.offset += (piece.index[lead + d].start - ii[d].start) * local_stride[d];
      }
    }
    inputs.push_back(std::move(e));
  }
  return inputs;
}

std::string pending_text(const PendingElementwise& p, const PendingInputs& in) {
  // Each input by what it is in the program (in0 for the jit's input 0, dot_general for a
  // matmul's result, ...), else by its local type, never by its position in the fusion.
  std::vector<std::string> names;
  for (const exec::ShardedValue* v : in.values) {
    std::string name = v->shards.empty() ? "" : exec::value_name(v->shards.front().get());
    if (name.empty()) name = std::string(dtype_name(v->dtype)) + shape_to_string(v->sharding.shard_shape(v->shape));
    names.push_back(std::move(name));
  }
  return p.program.to_string(names);
}

void require_one_runtime(const char* op, std::initializer_list<const Array*> arrays) {
  const RuntimeState* first = nullptr;
  for (const Array* a : arrays) {
    if (!a || !a->valid()) continue;
    if (!first) first = a->impl()->runtime.get();
    else if (a->impl()->runtime.get() != first)
      throw Error(std::string(op) + ": operands belong to different meshvk::Runtime objects (" + type_of(*a) +
                  " to another than the first); arrays cannot move between runtimes: make them under one Runtime");
  }
}

const exec::ShardedValue& materialized(const Array& x) {
  if (!x.valid()) throw Error("use of an empty meshvk::Array (default-constructed or moved from)");
  const ArrayImpl& impl = *x.impl();
  RuntimeState& rt = *impl.runtime;
  std::lock_guard lock(rt.mutex());
  if (!impl.donated_to.empty())
    throw Error("this " + type_of(x) + " Array was donated to " + impl.donated_to +
                " (donate_argnums) and deleted by that call; read what the call returned instead"
                " (a value computed from it and not yet used is gone with it: use such values before the call)");
  if (impl.partial) return resolve_partial(x);
  if (!impl.pending) return impl.value;
  // The chain runs now, not where its ops were called: its dispatches are the "fusion" line.
  const OpScope op_scope("fusion");  // profile hook
  const PendingElementwise& p = *impl.pending;
  exec::ShardedValue& out = impl.value;
  const auto pieces = out.sharding.devices_indices_map(out.shape);
  // Inputs are laid out for the result already; see choose_layout.
  const PendingInputs in = materialize_inputs(p);
  const int result = static_cast<int>(p.program.nodes.size()) - 1;
  auto shards = run_pending_pieces(rt, p.program, std::span<const int>(&result, 1), in, out.shape, pieces,
                                   out.sharding, pieces_may_differ(impl, p));
  out.shards = std::move(shards.front());
  if (exec::logging()) {  // the text is built only while a trace listens
    const std::string text = pending_text(p, in);
    exec::name_result(out.shards.empty() ? nullptr : out.shards.front().get(), "fusion");
    exec::log_op("fusion " + text + ": local " +
                 std::string(dtype_name(out.dtype)) +
                 shape_to_string(out.sharding.shard_shape(out.shape)) + " on each of " +
                 std::to_string(pieces.size()) + " devices");
  }
  impl.pending.reset();  // lets go of the inputs
  return impl.value;
}

}  // namespace meshvk::detail

// Running a pending elementwise program over its result's pieces, one kernel per device piece;
// and, where several virtual devices of one VkDevice hold the same piece (a replicated value:
// Adam's update of replicated parameters in data parallelism), one of them computing it and the
// others copying it. The devices share one adapter's compute, so computing the piece on each of n
// devices costs n times the work; once plus n - 1 copies costs the work once, and a copy moves a
// float in about a third of the time the cheapest kernel computes one (docs/LAVAPIPE.md, "Memory
// and dispatch"). The copies are replica waits (Lowered::estimate leaves them out), and each counts
// the kernel it stands for, so the projection still sees every device compute its own replica.
#include <map>

#include "collectives/transport.hpp"
#include "graph/array_impl.hpp"
#include "kernels/elementwise.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

namespace {

// Below this many elements a piece is computed on each device: a copy would cost lavapipe as much
// as the kernel it saves.
constexpr int64_t kMinSplitElements = 32768;

bool manual_mesh(const Sharding& s) {
  const NamedSharding* named = s.named();
  if (!named) return false;
  for (const AxisType t : named->mesh().axis_types())
    if (t == AxisType::Manual) return true;
  return false;
}

// Pieces (indices into `pieces`) computed once for their group: those of one box on local devices
// of one VkDevice, whose inputs are read whole (the same box) or as scalars, 32-bit throughout.
std::vector<std::vector<size_t>> split_groups(RuntimeState& rt, const kernels::EwProgram& program,
                                              std::span<const int> results, const PendingInputs& in,
                                              const Shape& shape,
                                              const std::vector<DeviceIndex>& pieces,
                                              const Sharding& sharding, bool pieces_differ) {
  if (!rt.splits_replicas() || pieces_differ || manual_mesh(sharding) || pieces.size() < 2)
    return {};
  for (const int r : results)
    if (dtype_size(program.nodes[static_cast<size_t>(r)].dtype) != 4) return {};
  for (const exec::ShardedValue* v : in.values)
    if (dtype_size(v->dtype) != 4 && shape_size(v->shape) != 1) return {};
  std::map<std::pair<int, std::vector<std::pair<int64_t, int64_t>>>, std::vector<size_t>> by_box;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const DeviceIndex& p = pieces[i];
    if (!rt.is_local(p.device)) continue;
    int64_t elements = 1;
    std::vector<std::pair<int64_t, int64_t>> box;
    for (const Slice& s : p.index) {
      box.emplace_back(s.start, s.stop);
      elements *= s.size();
    }
    if (elements < kMinSplitElements) continue;
    bool whole = true;
    for (const kernels::EwInput& e : piece_inputs(in, shape, p))
      whole = whole &&
              (e.mode == kernels::EwInput::Mode::same || e.mode == kernels::EwInput::Mode::scalar);
    if (whole) by_box[{rt.adapter_of(p.device), std::move(box)}].push_back(i);
  }
  std::vector<std::vector<size_t>> groups;
  for (auto& [key, members] : by_box)
    if (members.size() >= 2) groups.push_back(std::move(members));
  return groups;
}

}  // namespace

bool replicas_may_differ(const Array& x) {
  const ArrayImpl& impl = *x.impl();
  return !impl.runtime->splits_replicas() || !impl.varying.empty() || impl.summands ||
         manual_mesh(impl.value.sharding);
}

bool pieces_may_differ(const ArrayImpl& result, const PendingElementwise& p) {
  if (!result.varying.empty() || result.summands) return true;
  for (const Array& a : p.inputs)
    if (!a.impl()->varying.empty() || a.impl()->summands) return true;
  return false;
}

std::vector<std::vector<std::shared_ptr<DeviceBuffer>>> run_pending_pieces(
    RuntimeState& rt, const kernels::EwProgram& program, std::span<const int> results,
    const PendingInputs& in, const Shape& shape, const std::vector<DeviceIndex>& pieces,
    const Sharding& sharding, bool pieces_differ) {
  std::vector<std::vector<std::shared_ptr<DeviceBuffer>>> out(
      results.size(), std::vector<std::shared_ptr<DeviceBuffer>>(pieces.size()));
  auto allocate = [&](size_t i, const Shape& local) {
    std::vector<const DeviceBuffer*> outs;
    for (size_t j = 0; j < results.size(); ++j) {
      const DType d = program.nodes[static_cast<size_t>(results[j])].dtype;
      out[j][i] =
          rt.allocate(pieces[i].device, static_cast<uint64_t>(shape_size(local)) * dtype_size(d));
      outs.push_back(out[j][i].get());
    }
    return outs;
  };
  auto local_shape = [](const DeviceIndex& p) {
    Shape local;
    for (const Slice& s : p.index) local.push_back(s.size());
    return local;
  };

  const std::vector<std::vector<size_t>> groups =
      split_groups(rt, program, results, in, shape, pieces, sharding, pieces_differ);
  std::vector<bool> split(pieces.size(), false);
  for (const auto& g : groups)
    for (const size_t i : g) split[i] = true;

  // Piece i computed by its own device's kernel.
  auto compute = [&](size_t i) {
    const Shape local = local_shape(pieces[i]);
    const std::vector<const DeviceBuffer*> outs = allocate(i, local);
    Recording rec = rt.begin(pieces[i].device);
    const std::vector<kernels::EwInput> inputs = piece_inputs(in, shape, pieces[i]);
    for (const auto& e : inputs) rec.wait_for(e.buffer->ready());
    kernels::record_elementwise_outputs(rt, rec, program, results, inputs, local, outs);
    const Fence f = rt.submit(std::move(rec));
    for (const auto& e : inputs) const_cast<DeviceBuffer*>(e.buffer)->used_by(f);
    for (size_t j = 0; j < results.size(); ++j) out[j][i]->written_by(f);
    return f;
  };
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!split[i]) compute(i);

  // A group's first member computes the piece; the others copy it. One kernel and n - 1 copies of
  // the whole piece move the same bytes as n kernels of a share each and n (n - 1) copies of
  // shares, in n times fewer commands, each of which lavapipe charges a few microseconds.
  for (const std::vector<size_t>& g : groups) {
    const Shape local = local_shape(pieces[g.front()]);
    const size_t first = g.front();
    const Fence computed = compute(first);
    for (size_t k = 1; k < g.size(); ++k) {
      const size_t i = g[k];
      allocate(i, local);
      Recording copy = rt.begin(pieces[i].device);
      // Its own inputs too, as its own kernel would: the projection's dependencies (they are
      // ready by now in practice).
      const std::vector<kernels::EwInput> own = piece_inputs(in, shape, pieces[i]);
      for (const auto& e : own) copy.wait_for(e.buffer->ready());
      copy.wait_for_replica(computed);
      // It counts the kernel it would run on hardware of its own, as separate devices would.
      kernels::count_elementwise_outputs(copy, program, results, own, local);
      for (size_t j = 0; j < results.size(); ++j) {
        const DeviceBuffer& src = *out[j][first];
        const DeviceBuffer& dst = *out[j][i];
        const VkBufferCopy region{src.offset(), dst.offset(), src.bytes()};
        collectives::transport_between(rt, src.device(), dst.device())
            .copy_regions(rt, copy, src, dst, std::span<const VkBufferCopy>(&region, 1), "replica copy");
      }
      const Fence f = rt.submit(std::move(copy));
      for (size_t j = 0; j < results.size(); ++j) {
        out[j][first]->used_by(f);
        out[j][i]->written_by(f);
      }
    }
    rt.shared_pieces += g.size();
  }
  return out;
}

}  // namespace meshvk::detail

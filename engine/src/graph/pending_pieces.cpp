// Running a pending elementwise program over its result's pieces, one kernel per device piece;
// and, where several virtual devices of one VkDevice hold the same piece (a replicated value:
// Adam's update of replicated parameters in data parallelism), each computing a share of it and
// copying the others' shares. The devices share one adapter's compute, so computing the piece on
// each of n devices costs n times the work; the shares cost the work once plus copies, which on
// lavapipe move a float in about a third of the time the cheapest kernel computes one
// (docs/LAVAPIPE.md, "Memory and dispatch"). Every element is computed by the same kernel code
// from the same inputs, so the bits are those of computing it whole on every device.
#include <algorithm>
#include <map>

#include "collectives/transport.hpp"
#include "graph/array_impl.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

namespace {

// Below this many elements a piece is computed on each device: the copies' commands would cost
// more than the work they save.
constexpr int64_t kMinSplitElements = 32768;

bool manual_mesh(const Sharding& s) {
  const NamedSharding* named = s.named();
  if (!named) return false;
  for (const AxisType t : named->mesh().axis_types())
    if (t == AxisType::Manual) return true;
  return false;
}

// Pieces (indices into `pieces`) that may split: those of one box on local devices of one
// VkDevice, whose inputs are read whole (the same box) or as scalars, 32-bit throughout.
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

  for (size_t i = 0; i < pieces.size(); ++i) {
    if (split[i]) continue;
    const Shape local = local_shape(pieces[i]);
    const std::vector<const DeviceBuffer*> outs = allocate(i, local);
    Recording rec = rt.begin(pieces[i].device);
    const std::vector<kernels::EwInput> inputs = piece_inputs(in, shape, pieces[i]);
    for (const auto& e : inputs) rec.wait_for(e.buffer->ready());
    kernels::record_elementwise_outputs(rt, rec, program, results, inputs, local, outs);
    const Fence f = rt.submit(std::move(rec));
    for (const auto& e : inputs) const_cast<DeviceBuffer*>(e.buffer)->used_by(f);
    for (size_t j = 0; j < results.size(); ++j) out[j][i]->written_by(f);
  }

  for (const std::vector<size_t>& g : groups) {
    const Shape local = local_shape(pieces[g.front()]);
    const int64_t count = shape_size(local);
    // Shares start at offsets every binding may start at (whole vec4s, the adapter's alignment).
    const int64_t align = static_cast<int64_t>(kernels::window_limits(rt).align);
    const int64_t members = static_cast<int64_t>(g.size());
    const int64_t share = (count + members * align - 1) / (members * align) * align;
    struct Range {
      int64_t lo, hi;
    };
    std::vector<Range> ranges;
    for (int64_t k = 0; k < members; ++k)
      ranges.push_back({std::min(count, k * share), std::min(count, (k + 1) * share)});
    // Each member computes its share into its own buffers.
    for (size_t k = 0; k < g.size(); ++k) {
      const size_t i = g[k];
      const std::vector<const DeviceBuffer*> outs = allocate(i, local);
      const Range r = ranges[k];
      if (r.hi <= r.lo) continue;
      Recording rec = rt.begin(pieces[i].device);
      std::vector<kernels::EwInput> inputs = piece_inputs(in, shape, pieces[i]);
      for (auto& e : inputs) {
        rec.wait_for(e.buffer->ready());
        if (e.mode == kernels::EwInput::Mode::same) e.start = static_cast<uint64_t>(r.lo);
      }
      // The kernel counts the whole piece's cost: separate hardware would compute it whole.
      kernels::record_elementwise_outputs(rt, rec, program, results, inputs, {r.hi - r.lo}, outs,
                                          static_cast<uint64_t>(r.lo),
                                          static_cast<uint64_t>(count));
      const Fence f = rt.submit(std::move(rec));
      for (const auto& e : inputs) const_cast<DeviceBuffer*>(e.buffer)->used_by(f);
      for (size_t j = 0; j < results.size(); ++j) out[j][i]->written_by(f);
    }
    // Then takes the others' shares.
    for (size_t k = 0; k < g.size(); ++k) {
      const size_t i = g[k];
      Recording rec = rt.begin(pieces[i].device);
      std::vector<DeviceBuffer*> sources;
      for (size_t j = 0; j < results.size(); ++j) {
        const DeviceBuffer& dst = *out[j][i];
        rec.wait_for(dst.ready());
        const uint64_t es = 4;
        for (size_t from = 0; from < g.size(); ++from) {
          const Range r = ranges[from];
          if (from == k || r.hi <= r.lo) continue;
          DeviceBuffer& src = *out[j][g[from]];
          rec.wait_for_replica(src.ready());
          const VkBufferCopy region{src.offset() + static_cast<uint64_t>(r.lo) * es,
                                    dst.offset() + static_cast<uint64_t>(r.lo) * es,
                                    static_cast<uint64_t>(r.hi - r.lo) * es};
          collectives::transport_between(rt, src.device(), dst.device())
              .copy_regions(rt, rec, src, dst, std::span<const VkBufferCopy>(&region, 1),
                            "replica share");
          sources.push_back(&src);
        }
      }
      const Fence f = rt.submit(std::move(rec));
      for (DeviceBuffer* s : sources) s->used_by(f);
      for (size_t j = 0; j < results.size(); ++j) out[j][i]->written_by(f);
    }
    rt.split_pieces += g.size();
  }
  return out;
}

}  // namespace meshvk::detail

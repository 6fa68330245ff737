// A result assembled from boxes of its sources (shape_op_support.hpp): the layout of slice, pad,
// roll and concatenate along dimensions split over mesh axes.
#include <algorithm>
#include <mutex>
#include <string>

#include "exec/program_log.hpp"
#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "graph/op_scope.hpp"
#include "graph/shape_op_support.hpp"
#include "kernels/strided_copy.hpp"

namespace meshvk::detail {

std::vector<SpecEntry> keep_dividing(const NamedSharding& n, const Shape& shape) {
  std::vector<SpecEntry> spec;
  for (size_t d = 0; d < shape.size(); ++d) {
    SpecEntry entry = d < n.spec().size() ? n.spec()[d] : SpecEntry();
    int64_t ways = 1;
    for (const std::string& axis : entry.axes) ways *= n.mesh().axis_size(axis);
    if (shape[d] % ways != 0) entry = SpecEntry();
    spec.push_back(entry);
  }
  return spec;
}

Array assemble(const char* op, const std::vector<Array>& sources, const Shape& shape, DType dtype,
               const Sharding& target, std::optional<uint32_t> fill_word,
               const std::function<std::vector<Part>(const Index&)>& parts_of) {
  const detail::PartOpScope op_scope(op);  // profile hook
  const exec::RuleScope rule([&] { return std::string(op) + " of a split dimension: pieces fetched from their holders"; });
  exec::note_provenance();  // profile hook
  auto rt = sources.front().impl()->runtime;
  std::lock_guard lock(rt->mutex());
  std::vector<const exec::ShardedValue*> values;
  std::vector<bool> per_process;  // each process's own copy: it fills only its own pieces
  bool committed = false;
  for (const Array& a : sources) {
    values.push_back(&detail::materialized(a));
    per_process.push_back(detail::on_every_process(a));
    committed = committed || a.committed();
  }
  exec::ShardedValue out{shape, dtype, target, {}};
  exec::Moved moved;
  for (const DeviceIndex& piece : target.devices_indices_map(shape)) {
    const Shape box = local_shape(piece.index);
    auto buffer = rt->allocate(piece.device, static_cast<uint64_t>(shape_size(box)) * dtype_size(dtype));
    if (shape_size(box) > 0) {
      std::vector<std::shared_ptr<DeviceBuffer>> gathered;
      std::vector<Part> parts;
      for (Part& part : parts_of(piece.index)) {
        if (shape_size(local_shape(part.box)) == 0) continue;
        if (per_process[part.source] && !rt->is_local(piece.device)) continue;
        gathered.push_back(
            exec::gather_box(*rt, *values[part.source], part.box, piece.device, moved));
        parts.push_back(std::move(part));
      }
      Recording rec = rt->begin(piece.device);
      if (fill_word)
        kernels::record_fill_words(*rt, rec, *buffer, static_cast<uint64_t>(shape_size(box)),
                                   *fill_word, dtype);
      const auto out_strides = strides_of(box);
      for (size_t k = 0; k < parts.size(); ++k) {
        const Part& part = parts[k];
        rec.wait_for(gathered[k]->ready());
        auto in_strides = strides_of(local_shape(part.box));
        Shape placed(box.size());
        int64_t at = 0;
        for (size_t d = 0; d < box.size(); ++d) {
          placed[d] = (part.box[d].size() + part.step[d] - 1) / part.step[d];
          in_strides[d] *= part.step[d];
          at += part.at[d] * out_strides[d];
        }
        kernels::record_strided_copy(*rt, rec, copy_into(placed, in_strides, 0, out_strides, at, dtype),
                                     *gathered[k], *buffer);
        rec.keep_alive.push_back(gathered[k]);
      }
      const detail::Fence f = rt->submit(std::move(rec));
      for (const auto& g : gathered) g->used_by(f);
      buffer->written_by(f);
    }
    out.shards.push_back(std::move(buffer));
  }
  if (exec::logging()) {
    std::string from;
    for (const Array& a : sources)
      from += (from.empty() ? "" : ", ") + (a.sharding().named()
                                                ? a.sharding().named()->spec().to_string()
                                                : a.sharding().to_string());
    const std::string line = std::string(op) + " " + from + " -> " +
                             target.named()->spec().to_string() + ": " +
                             std::to_string(moved.between) + " bytes between devices, " +
                             std::to_string(moved.within) + " bytes within devices";
    if (moved.between) {
      std::vector<std::string> axes;
      for (const Array& a : sources)
        for (const auto& axis : exec::moved_axes(a.sharding(), target, shape.size()))
          if (std::find(axes.begin(), axes.end(), axis) == axes.end()) axes.push_back(axis);
      exec::log_collective("reshard", moved.most_sent(), line, axes, &target.named()->mesh());
    }
    else
      exec::log_op(line);
  }
  std::vector<const Array*> inputs;
  for (const Array& a : sources) inputs.push_back(&a);
  return detail::make_array(rt, std::move(out), committed, detail::varying_of(inputs));
}

}  // namespace meshvk::detail

#include "kernels/cost.hpp"
#include "exec/sharded_value.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "collectives/transport.hpp"
#include "exec/box.hpp"
#include "exec/program_log.hpp"
#include "kernels/launch.hpp"
#include "kernels/storage16.hpp"
#include "kernels/wide_types.hpp"
#include "meshvk/error.hpp"
#include "profile/hooks.hpp"
#include "vk/copy.hpp"

namespace meshvk::exec {

using detail::DeviceBuffer;
using detail::Fence;
using detail::Recording;
using detail::RuntimeState;

void check_devices(const RuntimeState& rt, const Sharding& sharding) {
  for (const int d : sharding.device_ids())
    if (d < 0 || d >= rt.num_devices())
      throw Error(sharding.to_string() + " uses device " + std::to_string(d) +
                  ", but the runtime has devices 0.." + std::to_string(rt.num_devices() - 1));
}

static uint64_t piece_bytes(const Index& index, DType dtype) {
  uint64_t n = dtype_size(dtype);
  for (const Slice& s : index) n *= static_cast<uint64_t>(s.size());
  return n;
}

namespace {
// Host-visible staging for `bytes` in parts of at most vk::kMaxCopyBytes: one allocation past the
// adapter's heap (lavapipe's is 2 GiB) is refused, and each part is one copy region.
struct StagingParts {
  std::vector<std::shared_ptr<vk::Buffer>> parts;
  StagingParts(RuntimeState& rt, int device, uint64_t bytes) {
    parts.push_back(rt.staging(device, std::min<uint64_t>(bytes, vk::kMaxCopyBytes)));
    for (uint64_t at = vk::kMaxCopyBytes; at < bytes; at += vk::kMaxCopyBytes)
      parts.push_back(rt.staging(device, std::min<uint64_t>(bytes - at, vk::kMaxCopyBytes)));
  }
  // n bytes between the host and the staging at `offset`, split where a part ends.
  void put(uint64_t offset, const std::byte* src, uint64_t n) const {
    for_parts(offset, n, [&](std::byte* part, uint64_t done, uint64_t take) { std::memcpy(part, src + done, take); });
  }
  void get(uint64_t offset, std::byte* dst, uint64_t n) const {
    for_parts(offset, n, [&](std::byte* part, uint64_t done, uint64_t take) { std::memcpy(dst + done, part, take); });
  }
  template <class F>
  void for_parts(uint64_t offset, uint64_t n, const F& f) const {
    for (uint64_t done = 0; done < n;) {
      const uint64_t k = (offset + done) / vk::kMaxCopyBytes, within = (offset + done) % vk::kMaxCopyBytes;
      const uint64_t take = std::min(n - done, vk::kMaxCopyBytes - within);
      f(static_cast<std::byte*>(parts[k]->mapped()) + within, done, take);
      done += take;
    }
  }
};
}  // namespace

ShardedValue upload(RuntimeState& rt, const void* host, const Shape& shape, DType dtype,
                    const Sharding& sharding) {
  check_devices(rt, sharding);
  ShardedValue v{shape, dtype, sharding, {}};
  const Index global = whole(shape);
  for (const DeviceIndex& di : sharding.devices_indices_map(shape)) {
    const uint64_t bytes = piece_bytes(di.index, dtype);
    kernels::require_dtype(rt, di.device, dtype);
    auto buffer = rt.allocate(di.device, bytes);
    if (!rt.is_local(di.device)) {  // that process uploads it from its own copy of `host`
      v.shards.push_back(std::move(buffer));
      continue;
    }
    const StagingParts staging(rt, di.device, bytes);
    const auto* src = static_cast<const std::byte*>(host);
    const uint64_t es = dtype_size(dtype);
    for_each_run(di.index, global, di.index, [&](uint64_t so, uint64_t doff, uint64_t n) {
      staging.put(doff * es, src + so * es, n * es);
    });
    Recording rec = rt.begin(di.device);
    rec.constant = true;  // host values a trace bakes in, as jit makes them constants
    if (bytes) {
      // profile hook
      const profile::DeviceSpan span(rec.profile.get(), profile::Kind::copy, "upload", bytes);
      for (size_t k = 0; k < staging.parts.size(); ++k) {
        const uint64_t at = k * vk::kMaxCopyBytes;
        const VkBufferCopy region{0, buffer->offset() + at, std::min<uint64_t>(bytes - at, vk::kMaxCopyBytes)};
        vk::copy_buffer(rec.cb, staging.parts[k]->handle(), buffer->vk_buffer(), 1, &region);
      }
    }
    for (const auto& part : staging.parts) rec.keep_alive.push_back(part);
    buffer->written_by(rt.submit(std::move(rec)));
    v.shards.push_back(std::move(buffer));
  }
  return v;
}

namespace {
// The row-major bytes of the pieces map[chosen[k]] (each read from device map[chosen[k]].device)
// into `host`.
void download_pieces(RuntimeState& rt, const ShardedValue& v,
                     const std::vector<DeviceIndex>& map, const std::vector<size_t>& chosen,
                     void* host);
}  // namespace

void download(RuntimeState& rt, const ShardedValue& v, void* host, bool across_processes) {
  // One holder per distinct piece: replicas hold the same values. With several processes, a
  // holder of this process where there is one.
  const auto map = v.sharding.devices_indices_map(v.shape);
  std::vector<size_t> chosen;
  std::vector<size_t> first;  // per distinct piece, its first holder (the same on every process)
  for (size_t i = 0; i < map.size(); ++i) {
    size_t k = 0;
    while (k < first.size() && !(map[first[k]].index == map[i].index)) ++k;
    if (k == first.size()) {
      first.push_back(i);
      chosen.push_back(i);
    } else if (!rt.is_local(map[chosen[k]].device) && rt.is_local(map[i].device)) {
      chosen[k] = i;
    }
  }
  if (!rt.multi_process()) return download_pieces(rt, v, map, chosen, host);
  if (!across_processes) {
    // Only this process reads: its own copies of every piece, or JAX's error.
    bool all_local = true;
    for (const size_t c : chosen) all_local = all_local && rt.is_local(map[c].device);
    if (all_local) return download_pieces(rt, v, map, chosen, host);
    throw Error(
        "to_host: fetching the value of an array that spans non-addressable (non process-local) "
        "devices is not possible (" + v.sharding.to_string() + " on process " +
        std::to_string(rt.process_index()) + " of " + std::to_string(rt.process_count()) +
        "); use meshvk::multihost::process_allgather to read the global array, or "
        "addressable_shards() to read this process's pieces");
  }
  // Read collectively. Whether some process lacks a piece: the same answer on every process, so
  // that all of them exchange or none does.
  bool exchange = false;
  for (int p = 0; p < rt.process_count() && !exchange; ++p)
    for (const size_t f : first) {
      bool held = false;
      for (const DeviceIndex& di : map) held = held || (di.index == map[f].index && rt.process_of(di.device) == p);
      if (!held) exchange = true;
    }
  if (!exchange) return download_pieces(rt, v, map, chosen, host);
  // Each piece from the process of its first holder, then every process's bytes to every one.
  std::vector<size_t> mine;
  for (const size_t f : first)
    if (rt.is_local(map[f].device)) mine.push_back(f);
  const uint64_t bytes = piece_bytes(whole(v.shape), v.dtype);
  std::vector<std::byte> own(bytes);
  download_pieces(rt, v, map, mine, own.data());
  const std::vector<uint8_t> all = rt.exchange(own.data(), bytes,
                                               "to_host of " + std::string(dtype_name(v.dtype)) +
                                                   shape_to_string(v.shape) +
                                                   " (spans processes: read collectively)");
  const Index global = whole(v.shape);
  const uint64_t es = dtype_size(v.dtype);
  for (const size_t f : first) {
    const auto* src = reinterpret_cast<const std::byte*>(all.data()) +
                      static_cast<uint64_t>(rt.process_of(map[f].device)) * bytes;
    for_each_run(map[f].index, global, global, [&](uint64_t so, uint64_t doff, uint64_t n) {
      std::memcpy(static_cast<std::byte*>(host) + doff * es, src + so * es, n * es);
    });
  }
}

namespace {
void download_pieces(RuntimeState& rt, const ShardedValue& v,
                     const std::vector<DeviceIndex>& map, const std::vector<size_t>& chosen,
                     void* host) {
  std::vector<std::pair<StagingParts, Fence>> staged;
  for (const size_t i : chosen) {
    const DeviceBuffer& piece = *v.shards[i];
    StagingParts staging(rt, piece.device(), piece.bytes());
    Recording rec = rt.begin(piece.device());
    rec.wait_for(piece.ready());
    if (piece.bytes()) {
      // profile hook
      const profile::DeviceSpan span(rec.profile.get(), profile::Kind::copy, "download", piece.bytes());
      for (size_t k = 0; k < staging.parts.size(); ++k) {
        const uint64_t at = k * vk::kMaxCopyBytes;
        const VkBufferCopy region{piece.offset() + at, 0, std::min<uint64_t>(piece.bytes() - at, vk::kMaxCopyBytes)};
        vk::copy_buffer(rec.cb, piece.vk_buffer(), staging.parts[k]->handle(), 1, &region);
      }
    }
    kernels::barrier_to_host(rec.cb);
    // The submission keeps its staging buffers until it finished: a wait below that times out
    // throws, and the copy still queued must not write into freed memory.
    for (const auto& part : staging.parts) rec.keep_alive.push_back(part);
    const Fence f = rt.submit(std::move(rec));
    v.shards[i]->used_by(f);
    staged.push_back({std::move(staging), f});
  }
  const Index global = whole(v.shape);
  const uint64_t es = dtype_size(v.dtype);
  for (size_t k = 0; k < chosen.size(); ++k) {
    rt.wait(staged[k].second, "to_host");
    const Index& piece = map[chosen[k]].index;
    auto* dst = static_cast<std::byte*>(host);
    for_each_run(piece, piece, global, [&](uint64_t so, uint64_t doff, uint64_t n) {
      staged[k].first.get(so * es, dst + doff * es, n * es);
    });
  }
}
}  // namespace

ShardedValue iota(RuntimeState& rt, int64_t count, DType dtype, double start, double step,
                  const Sharding& single_device) {
  check_devices(rt, single_device);
  const int device = single_device.device_ids().front();
  ShardedValue v{Shape{count}, dtype, single_device, {}};
  auto buffer = rt.allocate(device, static_cast<uint64_t>(count) * dtype_size(dtype));
  Recording rec = rt.begin(device);
  rec.constant = true;
  if (count > 0 && is_16bit(dtype)) {  // computed in float32, then rounded to the format
    auto wide = rt.allocate(device, static_cast<uint64_t>(count) * 4);
    rec.keep_alive.push_back(wide);
    kernels::record_iota(rt, rec, *wide, static_cast<uint64_t>(count), true, start, step);
    kernels::record_narrow(rt, rec, *wide, 0, dtype, static_cast<uint64_t>(count), *buffer, 0);
  } else if (count > 0) {
    kernels::record_iota(rt, rec, *buffer, static_cast<uint64_t>(count), dtype == DType::float32,
                         start, step);
  }
  buffer->written_by(rt.submit(std::move(rec)));
  v.shards.push_back(std::move(buffer));
  return v;
}

ShardedValue fill(RuntimeState& rt, const Shape& shape, DType dtype, uint32_t word,
                  const Sharding& sharding) {
  check_devices(rt, sharding);
  ShardedValue v{shape, dtype, sharding, {}};
  for (const DeviceIndex& di : sharding.devices_indices_map(shape)) {
    auto buffer = rt.allocate(di.device, piece_bytes(di.index, dtype));
    Recording rec = rt.begin(di.device);
    rec.constant = true;
    kernels::require_dtype(rt, di.device, dtype);
    if (is_64bit(dtype))
      kernels::record_fill64(rt, rec, *buffer, piece_bytes(di.index, dtype) / 8, word, dtype);
    else
      kernels::record_fill(rec, *buffer, kernels::fill_pattern(dtype, word));
    buffer->written_by(rt.submit(std::move(rec)));
    v.shards.push_back(std::move(buffer));
  }
  return v;
}

ShardedValue copy_value(RuntimeState& rt, const ShardedValue& value) {
  ShardedValue out{value.shape, value.dtype, value.sharding, {}};
  for (const auto& piece : value.shards) {
    auto buffer = rt.allocate(piece->device(), piece->bytes());
    Recording rec = rt.begin(piece->device());
    rec.wait_for(piece->ready());
    if (piece->bytes()) {
      const VkBufferCopy region{piece->offset(), buffer->offset(), piece->bytes()};
      // profile hook
      const profile::DeviceSpan span(rec.profile.get(), profile::Kind::copy, "copy", piece->bytes());
      if (rec.cb) vk::copy_buffer(rec.cb, piece->vk_buffer(), buffer->vk_buffer(), 1, &region);
    }
    const Fence f = rt.submit(std::move(rec));
    piece->used_by(f);
    buffer->written_by(f);
    out.shards.push_back(std::move(buffer));
  }
  return out;
}

std::shared_ptr<DeviceBuffer> gather_box(RuntimeState& rt, const ShardedValue& value,
                                         const Index& box, int device, Moved& moved) {
  const auto from = value.sharding.devices_indices_map(value.shape);
  // Distinct source pieces, each with the devices (positions in `from`) that hold it.
  std::vector<std::pair<Index, std::vector<size_t>>> pieces;
  for (size_t i = 0; i < from.size(); ++i) {
    auto it = std::find_if(pieces.begin(), pieces.end(), [&](const auto& p) { return p.first == from[i].index; });
    if (it == pieces.end())
      pieces.push_back({from[i].index, {i}});
    else
      it->second.push_back(i);
  }
  auto buffer = rt.allocate(device, piece_bytes(box, value.dtype));
  const uint64_t es = dtype_size(value.dtype);
  // Only copies: on the device's transfer stream, where it has one, to overlap its kernels.
  const detail::ActivityScope activity("reshard");
  Recording rec = rt.begin_transfer(device);
  std::vector<DeviceBuffer*> sources;
  for (const auto& [index, holders] : pieces) {
    const auto overlap = intersect(index, box);
    if (!overlap) continue;
    // Inside a shard_map that is manual over some mesh axes only (axis_names), a value's pieces
    // differ along the manual axes though its spec calls them replicas: read only from the
    // devices at this device's coordinates along the manual axes.
    std::vector<size_t> same = holders;
    if (const auto* named = value.sharding.named()) {
      const Mesh& mesh = named->mesh();
      const int here = mesh.position_of(device);
      bool any_manual = false;
      for (const AxisType t : mesh.axis_types()) any_manual = any_manual || t == AxisType::Manual;
      if (any_manual && here >= 0) {
        const std::vector<int> hc = mesh.coords(here);
        same.clear();
        for (const size_t h : holders) {
          const std::vector<int> c = mesh.coords(mesh.position_of(from[h].device));
          bool match = true;
          for (int d = 0; d < mesh.ndim(); ++d)
            match = match && (mesh.axis_types()[static_cast<size_t>(d)] != AxisType::Manual || c[static_cast<size_t>(d)] == hc[static_cast<size_t>(d)]);
          if (match) same.push_back(h);
        }
        if (same.empty())
          throw Error("reshard: no device at device " + std::to_string(device) +
                      "'s coordinates along the manual mesh axes holds the piece it needs");
      }
    }
    // Read from this device when it holds the piece, else spread readers over the holders.
    size_t pick = same[static_cast<size_t>(device) % same.size()];
    for (const size_t h : same)
      if (from[h].device == device) pick = h;
    DeviceBuffer& src = *value.shards[pick];
    std::vector<VkBufferCopy> regions;
    for_each_run(*overlap, index, box, [&](uint64_t so, uint64_t doff, uint64_t n) {
      regions.push_back({src.offset() + so * es, buffer->offset() + doff * es, n * es});
    });
    if (regions.empty()) continue;
    uint64_t bytes = 0;
    for (const auto& r : regions) bytes += r.size;
    // Through the transport: the source may be a device of another adapter.
    collectives::transport_between(rt, src.device(), device)
        .copy_regions(rt, rec, src, *buffer, regions, "reshard");
    (src.device() == device ? moved.within : moved.between) += bytes;
    if (src.device() != device) moved.sent[src.device()] += bytes;
    sources.push_back(&src);
  }
  const Fence f = rt.submit(std::move(rec));
  for (DeviceBuffer* s : sources) s->used_by(f);
  buffer->written_by(f);
  return buffer;
}

// The mesh axes a move from `from` to `to` gathers when it is exactly an all-gather: the same
// mesh, and each dimension keeps a leading part of its axes (P('x', 'y') -> P('x')), one at least
// fewer; empty otherwise.
static std::vector<std::string> gathered_axes(const Sharding& from, const Sharding& to) {
  const NamedSharding* f = from.named();
  const NamedSharding* t = to.named();
  if (!f || !t || !(f->mesh() == t->mesh())) return {};
  std::vector<std::string> gathered;
  const size_t rank = std::max(f->spec().size(), t->spec().size());
  for (size_t d = 0; d < rank; ++d) {
    const std::vector<std::string> fa = d < f->spec().size() ? f->spec()[d].axes : std::vector<std::string>{};
    const std::vector<std::string> ta = d < t->spec().size() ? t->spec()[d].axes : std::vector<std::string>{};
    if (ta.size() > fa.size() || !std::equal(ta.begin(), ta.end(), fa.begin())) return {};
    gathered.insert(gathered.end(), fa.begin() + static_cast<std::ptrdiff_t>(ta.size()), fa.end());
  }
  return gathered;
}

std::vector<std::string> moved_axes(const Sharding& from, const Sharding& to, size_t rank) {
  const NamedSharding* f = from.named();
  const NamedSharding* t = to.named();
  std::vector<std::string> axes;
  const auto add = [&](const std::string& a) {
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) axes.push_back(a);
  };
  if (!f || !t || f->mesh().axis_names() != t->mesh().axis_names()) {
    for (const NamedSharding* n : {f, t})
      if (n)
        for (const auto& a : n->mesh().axis_names()) add(a);
    return axes;
  }
  for (size_t d = 0; d < rank; ++d) {
    const std::vector<std::string> none;
    const auto& fa = d < f->spec().size() ? f->spec()[d].axes : none;
    const auto& ta = d < t->spec().size() ? t->spec()[d].axes : none;
    if (fa == ta) continue;
    for (const auto& a : fa) add(a);
    for (const auto& a : ta) add(a);
  }
  return axes;
}

ShardedValue reshard(RuntimeState& rt, const ShardedValue& value, const Sharding& target,
                     bool on_every_process) {
  check_devices(rt, target);
  on_every_process = on_every_process && rt.multi_process();
  note_provenance();  // profile hook: its copies carry the rule that asked for them
  const kernels::CollectiveWork work;  // its copies: one collective (Lowered::estimate)
  Moved moved;
  const auto from = value.sharding.devices_indices_map(value.shape);
  const auto to = target.devices_indices_map(value.shape);
  ShardedValue out{value.shape, value.dtype, target, {}};
  for (const DeviceIndex& dst : to) {
    // A piece already on this device with exactly this box is shared, not copied.
    bool shared = false;
    for (size_t i = 0; i < from.size() && !shared; ++i) {
      if (from[i].device == dst.device && from[i].index == dst.index) {
        out.shards.push_back(value.shards[i]);
        shared = true;
      }
    }
    if (shared) continue;
    if (on_every_process && !rt.is_local(dst.device))
      out.shards.push_back(rt.allocate(dst.device, piece_bytes(dst.index, value.dtype)));  // that process's
    else
      out.shards.push_back(gather_box(rt, value, dst.index, dst.device, moved));
  }
  if (logging()) {
    auto spec = [](const Sharding& s) { return s.named() ? s.named()->spec().to_string() : s.to_string(); };
    const std::string line = "reshard " + spec(value.sharding) + " -> " + spec(target) + ": " +
                             std::to_string(moved.between) + " bytes between devices, " +
                             std::to_string(moved.within) + " bytes within devices";
    if (const auto gathered = gathered_axes(value.sharding, target); moved.between && !gathered.empty()) {
      // Exactly an all-gather (FSDP's weights): named so, with what each device sends, each
      // byte once (meshvk::CollectiveRecord): its piece.
      std::string axes;
      for (const auto& a : gathered) axes += (axes.empty() ? "'" : ", '") + a + "'";
      uint64_t per_device = 0;
      for (const auto& piece : value.shards) per_device = std::max(per_device, piece->bytes());
      log_collective("all-gather", per_device,
                     "all-gather over (" + axes + (gathered.size() == 1 ? ",)" : ")") + ": " + line.substr(8) + ", " +
                         std::to_string(per_device) + " bytes per device",
                     gathered, target.named() ? &target.named()->mesh() : nullptr);
    } else if (moved.between) {
      log_collective("reshard", moved.most_sent(), line, moved_axes(value.sharding, target, value.shape.size()),
                     target.named() ? &target.named()->mesh() : nullptr);
    } else {
      log_op(line);
    }
    // A moved value is named for the lines that read it; a shared piece keeps its name.
    if (!out.shards.empty() && !value.shards.empty() && out.shards.front() != value.shards.front())
      name_result(out.shards.front().get(), "reshard");
  }
  return out;
}

}  // namespace meshvk::exec

#include "collectives/peer_reduce.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "collectives/transport.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::collectives {

using detail::DeviceBuffer;
using detail::Fence;
using detail::Recording;
using detail::RuntimeState;

bool fold_kernel_supports(DType dtype) {
  return dtype == DType::float32 || dtype == DType::int32 || dtype == DType::uint32;
}

CollectiveChoice collective_choice_from_env() {
  const char* forced = std::getenv("MESHVK_COLLECTIVE_ALGO");
  if (!forced || !*forced) return {};
  const std::string f = forced;
  if (f == "one_shot" || f == "oneshot") return {Algorithm::one_shot, false};
  if (f == "ring") return {Algorithm::ring, false};
  if (f == "staged") return {std::nullopt, true};
  if (f == "one_shot_staged") return {Algorithm::one_shot, true};
  if (f == "ring_staged") return {Algorithm::ring, true};
  throw Error("MESHVK_COLLECTIVE_ALGO=" + f +
              " is not an algorithm; use one_shot, ring, staged, one_shot_staged or ring_staged");
}

bool peer_readable(const RuntimeState& rt, int reader, int owner) {
  // The virtual devices of one adapter are slices of its VkDevice, so each may bind the others'
  // buffers; a kernel cannot bind another VkDevice's buffer, so pieces on other adapters (or,
  // processes) go through the staged algorithms and their Transport tiers.
  return reader >= 0 && owner >= 0 && reader < rt.num_devices() && owner < rt.num_devices() &&
         rt.adapter_of(reader) == rt.adapter_of(owner) && rt.process_of(reader) == rt.process_of(owner);
}

namespace {

// The order a fold combines its pieces in: rank order is one-shot's op(op(x0, x1), x2) ...; ring
// order is what the ring's steps compute, each member adding its own piece to what it received:
// op(x_k, op(x_k-1, ... op(x_1, x_0))) over the pieces listed in the order the ring visits them.
enum class Order { rank, ring };

// Where a fold reads one member's piece: `start` elements into `bytes` of memory at `offset` in
// `buffer` (a DeviceBuffer's, or a ring of host memory the VkDevice imports).
struct Piece {
  VkBuffer buffer;
  uint64_t offset;
  uint64_t bytes;
  uint64_t start;
};

Piece piece_of(const DeviceBuffer& b, uint64_t start) {
  return {b.vk_buffer(), b.offset(), b.capacity(), start};
}

// The fold kernel. It computes what the elementwise kernels compute for the same fold (the same
// GLSL operations in the same order, under the same float controls), so its bits are theirs; its
// layout is its own: on lavapipe one SIMD row per workgroup (8 invocations) with many vec4 per
// invocation read 3.5x faster than the elementwise kernels' 64 x 4 (8 inputs, 8 MiB each,
// measured), and 1024 vec4 cost 10-25% less CPU than 256 or 64 (fewer workgroups to set up);
// GPUs get 64 invocations of one vec4 each. At lavapipe's 16 lanes (LP_NATIVE_VECTOR_WIDTH=512)
// 8 invocations, half a SIMD row, still measured as fast as 16 or faster (64 MiB all-reduce over
// 8 devices: 39-50 ms against 53-76 ms, 2026-11-27, load ~1.3), so the shape stays.
struct FoldShape {
  uint32_t workgroup, per_invocation;
};

FoldShape fold_shape(RuntimeState& rt, uint64_t items) {
  if (!rt.device().adapter().is_cpu()) return {64, 1};
  // At least 32 workgroups, to share out over the adapter's threads even for small pieces.
  uint32_t p = 1024;
  while (p > 1 && items < uint64_t{8} * p * 32) p /= 4;
  return {8, p};
}

const char* glsl_type(DType dtype, bool vector) {
  switch (dtype) {
    case DType::float32:
      return vector ? "vec4" : "float";
    case DType::int32:
      return vector ? "ivec4" : "int";
    default:
      return vector ? "uvec4" : "uint";
  }
}

// The operation as elementwise.cpp spells it: float max/min propagate NaN as a + b (numpy).
std::string combine(Reduction op, DType dtype, const std::string& a, const std::string& b) {
  if (op == Reduction::sum) return "(" + a + " + " + b + ")";
  const char* f = op == Reduction::max ? (dtype == DType::float32 ? "mv_max" : "max")
                                       : (dtype == DType::float32 ? "mv_min" : "min");
  return std::string(f) + "(" + a + ", " + b + ")";
}

// k inputs bound as texel buffers (RGBA32UI where `vector`, else R32UI read at an offset each),
// folded in `order` into a storage buffer.
std::string fold_kernel(int k, DType dtype, Reduction op, Order order, bool vector, FoldShape shape,
                        bool preserve_inf_nan) {
  std::ostringstream g;
  g << "#version 450\n";
  if (preserve_inf_nan)  // SignedZeroInfNanPreserve, 32-bit, as the elementwise kernels request it
    g << "#extension GL_EXT_spirv_intrinsics : require\n"
         "spirv_execution_mode(capabilities = [4466], 4461, 32);\n";
  g << "layout(local_size_x = " << shape.workgroup << ") in;\n";
  for (int i = 0; i < k; ++i)
    g << "layout(binding = " << i << ") uniform usamplerBuffer in" << i << ";\n";
  g << "layout(std430, binding = " << k << ") writeonly buffer Out { "
    << (vector ? "uvec4" : "uint") << " o[]; };\n";
  g << "layout(push_constant) uniform Params { uint n; uint off[" << k << "]; } pc;\n";
  if (dtype == DType::float32) {
    const char* t = vector ? "vec4" : "float";
    const std::string nan =
        vector ? "bvec4(uvec4(isnan(a)) | uvec4(isnan(b)))" : "(isnan(a) || isnan(b))";
    for (const char* f : {"max", "min"})
      g << t << " mv_" << f << "(" << t << " a, " << t << " b) { return "
        << (vector ? std::string("mix(") + f + "(a, b), a + b, " + nan + ")"
                   : nan + " ? a + b : " + f + "(a, b)")
        << "; }\n";
  }
  const std::string T = glsl_type(dtype, vector);
  auto load = [&](int i) {
    // Vector reads start at the view's start; single reads past the view's skew from the aligned
    // start.
    const std::string raw =
        "texelFetch(in" + std::to_string(i) + ", int(i" +
        (vector ? std::string("))") : " + pc.off[" + std::to_string(i) + "])).x");
    return dtype == DType::float32 ? "uintBitsToFloat(" + raw + ")" : T + "(" + raw + ")";
  };
  g << "void main() {\n  const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * "
       "gl_NumWorkGroups.x;\n";
  g << "  for (uint u = 0u; u < " << shape.per_invocation << "u; ++u) {\n";
  g << "    const uint i = (wg * " << shape.per_invocation << "u + u) * " << shape.workgroup
    << "u + gl_LocalInvocationID.x;\n";
  g << "    if (i >= pc.n) return;\n";
  g << "    " << T << " acc = " << load(0) << ";\n";
  for (int i = 1; i < k; ++i)
    g << "    acc = "
      << (order == Order::rank ? combine(op, dtype, "acc", load(i))
                               : combine(op, dtype, load(i), "acc"))
      << ";\n";
  g << "    o[i] = "
    << (dtype == DType::float32 ? "floatBitsToUint(acc)"
                                : std::string(vector ? "uvec4" : "uint") + "(acc)")
    << ";\n  }\n}\n";
  return g.str();
}

// out[out_start..] = the fold of `count` elements of each piece, in `order`, in windows that keep
// every binding inside the adapter's limits.
void record_fold(RuntimeState& rt, Recording& rec, const std::vector<Piece>& pieces, uint64_t count,
                 DType dtype, Reduction op, Order order, const DeviceBuffer& out,
                 uint64_t out_start) {
  const kernels::WindowLimits w = kernels::window_limits(rt);
  // Vector reads take whole texels: every piece must start aligned, and its memory must hold the
  // texel of the last `count % 4` elements. A ring piece of host memory ends exactly after its
  // bytes, where the texel view stops and a fetch past it reads zeros (the other processes'
  // values would silently be left out), so such a fold reads element by element.
  const uint64_t whole = (count + 3) / 4 * 4;
  const bool vector =
      std::all_of(pieces.begin(), pieces.end(),
                  [&](const Piece& p) {
                    return p.start % w.align == 0 && p.bytes / 16 * 16 >= (p.start + whole) * 4;
                  }) &&
      out.capacity() >= (out_start + whole) * 4;
  // Elements per window: within one storage binding and one texel binding (less the alignment
  // slack a view of an unaligned piece starts with), and a multiple of the alignment and of 64, so
  // every window of an aligned piece starts aligned.
  const uint64_t step = std::max<uint64_t>(64, w.align);
  const uint64_t window = std::max<uint64_t>(
      std::min<uint64_t>(w.storage, vector ? w.texels * 4 : w.texels) / step * step, step);
  const int k = static_cast<int>(pieces.size());
  struct Params {
    uint32_t n;
    uint32_t off[16];
  };
  for (uint64_t base = 0; base < count; base += window) {
    const uint64_t n = std::min(window, count - base);
    const uint64_t items = vector ? (n + 3) / 4 : n;
    Params params{};
    params.n = static_cast<uint32_t>(items);
    std::vector<kernels::Binding> bindings;
    for (int i = 0; i < k; ++i) {
      const Piece& p = pieces[i];
      const uint64_t first = p.start + base;
      const uint64_t at = kernels::align_down(first, w.align);
      const uint64_t skew = first - at;  // 0 for vector reads (aligned pieces, aligned windows)
      if (vector && skew) throw Error("internal: a vector fold window starts off its alignment");
      const uint64_t bytes =
          std::min<uint64_t>(vector ? items * 16 : (skew + n) * 4, p.bytes - at * 4);
      bindings.push_back({p.buffer, p.offset + at * 4, vector ? bytes / 16 * 16 : bytes / 4 * 4,
                          vector ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT});
      params.off[i] = static_cast<uint32_t>(skew);
    }
    const uint64_t out_at = (out_start + base) * 4;
    bindings.push_back(kernels::Binding::storage(
        out, out_at, std::min<uint64_t>(vector ? items * 16 : n * 4, out.capacity() - out_at)));
    const FoldShape shape = fold_shape(rt, items);
    const uint64_t per_group = uint64_t{shape.workgroup} * shape.per_invocation;
    kernels::dispatch(rt, rec,
                      {"peer_fold", fold_kernel(k, dtype, op, order, vector, shape,
                                                rt.device().adapter().preserves_inf_nan32)},
                      bindings, &params, 4 + 4 * static_cast<uint32_t>(k),
                      kernels::groups_for(rt, (items + per_group - 1) / per_group),
                      {(k + 1) * n * 4, 0});
  }
}

// out[out_start..] = the fold of `count` elements of each piece, in `order`. One kernel takes at
// most 16 inputs: larger groups fold the first 16 into a scratch buffer on the recording's device,
// which then stands first in line for the rest (the same order as one long fold). Scratch
// buffers are appended to `scratch`.
void record_peer_fold(RuntimeState& rt, Recording& rec, std::vector<Piece> pieces, uint64_t count,
                      DType dtype, Reduction op, Order order, const DeviceBuffer& out,
                      uint64_t out_start, std::vector<std::shared_ptr<DeviceBuffer>>& scratch) {
  auto fold = [&](const std::vector<Piece>& from, const DeviceBuffer& to, uint64_t to_start) {
    kernels::barrier(rec.cb);
    record_fold(rt, rec, from, count, dtype, op, order, to, to_start);
    kernels::barrier(rec.cb);
  };
  while (pieces.size() > 16) {
    auto partial = rt.allocate(rec.device, count * 4);
    fold(std::vector<Piece>(pieces.begin(), pieces.begin() + 16), *partial, 0);
    pieces.erase(pieces.begin(), pieces.begin() + 16);
    pieces.insert(pieces.begin(), piece_of(*partial, 0));
    rec.keep_alive.push_back(partial);
    scratch.push_back(std::move(partial));
  }
  fold(pieces, out, out_start);
}

// Whether every member may read every other's memory and the staged path is not forced.
bool tier_applies(const RuntimeState& rt, const Buffers& in, DType dtype) {
  if (collective_choice_from_env().staged) return false;
  if (!fold_kernel_supports(dtype)) return false;
  if (in.size() < 2) return false;
  for (const auto& a : in)
    for (const auto& b : in)
      if (!peer_readable(rt, a->device(), b->device())) return false;
  return true;
}

// The pieces member `r` folds, all at `start`: every member in rank order, or, for the ring, in
// the order the ring reaches member r (r+1, r+2, ..., r).
std::vector<Piece> pieces_for(const Buffers& in, int r, uint64_t start, Order order) {
  const int n = static_cast<int>(in.size());
  std::vector<Piece> pieces;
  for (int k = 0; k < n; ++k) {
    const int q = order == Order::rank ? k : (r + 1 + k) % n;
    pieces.push_back(piece_of(*in[q], start));
  }
  return pieces;
}

// Member `member` folds `count` elements at `start` of every member's input, in `order`, into
// `out` at `out_start`, in one submission on its compute stream that waits for every input's
// producer. The inputs (read in place by another device's kernel) and the scratch buffers are
// marked used by that submission, so none is rewritten or freed before it finishes.
void submit_fold(RuntimeState& rt, const Buffers& in, int member, uint64_t start, uint64_t count,
                 DType dtype, Reduction op, Order order, DeviceBuffer& out, uint64_t out_start) {
  Recording rec = rt.begin(in[member]->device());
  for (const auto& b : in) rec.wait_for(b->ready());
  std::vector<std::shared_ptr<DeviceBuffer>> scratch;
  if (count)
    record_peer_fold(rt, rec, pieces_for(in, member, start, order), count, dtype, op, order, out,
                     out_start, scratch);
  const Fence f = rt.submit(std::move(rec));
  for (const auto& b : in) b->used_by(f);
  for (const auto& s : scratch) s->written_by(f);
  out.written_by(f);
}

// Chunk c of [bounds[c], bounds[c+1]) is folded on member c into its output, then every member
// copies the other chunks from their owners. Each member's copies are recorded (their waits on the
// owners' folds fixed) before any is submitted, so none waits on another member's copies.
Buffers reduce_then_gather(RuntimeState& rt, const Buffers& in, const std::vector<uint64_t>& bounds,
                           DType dtype, Reduction op, Order order) {
  const int n = static_cast<int>(in.size());
  const uint64_t count = bounds[n];
  Buffers out;
  for (int c = 0; c < n; ++c) {
    out.push_back(rt.allocate(in[c]->device(), count * 4));
    submit_fold(rt, in, c, bounds[c], bounds[c + 1] - bounds[c], dtype, op, order, *out[c],
                bounds[c]);
  }
  std::vector<Recording> gathers;
  for (int r = 0; r < n; ++r) {
    Recording rec = rt.begin_transfer(out[r]->device());
    rec.wait_for(out[r]->ready());  // its own chunk: the output is ready when both have run
    for (int c = 0; c < n; ++c)
      if (c != r)
        transport_between(rt, out[c]->device(), out[r]->device())
            .copy(rt, rec, *out[c], bounds[c] * 4, *out[r], bounds[c] * 4,
                  (bounds[c + 1] - bounds[c]) * 4);
    gathers.push_back(std::move(rec));
  }
  for (int r = 0; r < n; ++r) {
    const Fence f = rt.submit(std::move(gathers[r]));
    for (int c = 0; c < n; ++c)
      if (c != r) out[c]->used_by(f);
    out[r]->written_by(f);
  }
  return out;
}

// Chunk boundaries splitting `count` n ways at multiples of 64 elements.
std::vector<uint64_t> even_bounds(uint64_t count, int n) {
  std::vector<uint64_t> b(n + 1);
  for (int c = 0; c <= n; ++c) b[c] = c == n ? count : (count * c / n) / 64 * 64;
  return b;
}

// From this size per member, a one-shot all-reduce folds each chunk once and gathers it with
// copies (n times less kernel reading); below, one fold per member and no copies (fewer
// submissions). The bits are the same either way: every element is folded in rank order.
constexpr uint64_t kGatherFrom = 256 << 10;

}  // namespace

bool record_rank_fold(RuntimeState& rt, Recording& rec,
                      const std::vector<const DeviceBuffer*>& inputs,
                      const std::vector<uint64_t>& starts, uint64_t count, DType dtype,
                      Reduction op, const DeviceBuffer& out, uint64_t out_start) {
  if (!fold_kernel_supports(dtype) || inputs.empty() || inputs.size() > 16 ||
      starts.size() != inputs.size())
    return false;
  std::vector<Piece> pieces;
  for (size_t i = 0; i < inputs.size(); ++i) pieces.push_back(piece_of(*inputs[i], starts[i]));
  kernels::barrier(rec.cb);
  if (count) record_fold(rt, rec, pieces, count, dtype, op, Order::rank, out, out_start);
  kernels::barrier(rec.cb);
  return true;
}

bool record_pair_fold(RuntimeState& rt, Recording& rec, const DeviceBuffer& a, uint64_t a_start,
                      const FoldInput& b, uint64_t count, DType dtype, Reduction op,
                      const DeviceBuffer& out, uint64_t out_start, bool b_first) {
  if (!fold_kernel_supports(dtype)) return false;
  kernels::barrier(rec.cb);
  if (count) {
    const Piece pa = piece_of(a, a_start), pb{b.buffer, b.offset, b.bytes, 0};
    record_fold(rt, rec, b_first ? std::vector<Piece>{pb, pa} : std::vector<Piece>{pa, pb}, count,
                dtype, op, Order::rank, out, out_start);
  }
  kernels::barrier(rec.cb);
  return true;
}

std::optional<Buffers> peer_one_shot_all_reduce(RuntimeState& rt, const Buffers& in, uint64_t count,
                                                DType dtype, Reduction op) {
  if (!tier_applies(rt, in, dtype)) return std::nullopt;
  const int n = static_cast<int>(in.size());
  if (count * 4 >= kGatherFrom && count >= 64ull * n)
    return reduce_then_gather(rt, in, even_bounds(count, n), dtype, op, Order::rank);
  Buffers out;
  for (int r = 0; r < n; ++r) {
    out.push_back(rt.allocate(in[r]->device(), count * 4));
    submit_fold(rt, in, r, 0, count, dtype, op, Order::rank, *out[r], 0);
  }
  return out;
}

std::optional<Buffers> peer_ring_all_reduce(RuntimeState& rt, const Buffers& in,
                                            const std::vector<uint64_t>& bounds, DType dtype,
                                            Reduction op) {
  if (!tier_applies(rt, in, dtype)) return std::nullopt;
  return reduce_then_gather(rt, in, bounds, dtype, op, Order::ring);
}

namespace {

std::optional<Buffers> peer_reduce_scatter(RuntimeState& rt, const Buffers& in, uint64_t chunk,
                                           DType dtype, Reduction op, Order order) {
  if (!tier_applies(rt, in, dtype)) return std::nullopt;
  const int n = static_cast<int>(in.size());
  Buffers out;
  for (int r = 0; r < n; ++r) {
    out.push_back(rt.allocate(in[r]->device(), chunk * 4));
    submit_fold(rt, in, r, r * chunk, chunk, dtype, op, order, *out[r], 0);
  }
  return out;
}

}  // namespace

std::optional<Buffers> peer_one_shot_reduce_scatter(RuntimeState& rt, const Buffers& in,
                                                    uint64_t chunk, DType dtype, Reduction op) {
  return peer_reduce_scatter(rt, in, chunk, dtype, op, Order::rank);
}

std::optional<Buffers> peer_ring_reduce_scatter(RuntimeState& rt, const Buffers& in, uint64_t chunk,
                                                DType dtype, Reduction op) {
  return peer_reduce_scatter(rt, in, chunk, dtype, op, Order::ring);
}

}  // namespace meshvk::collectives

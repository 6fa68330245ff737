#include "kernels/take.hpp"

#include <algorithm>
#include <sstream>

#include "kernels/cost.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

namespace {

// The take kernel. A `windowed` one runs outputs [t0, t_end) over windows of its buffers starting
// at out_off, in_off and idx_off, and writes only the outputs whose index falls in [k0, k1).
// The index k the element reads, per TakeBounds; a fill element is written here and returns.
// GLSL's % is undefined for negative operands, so wrap folds negatives by hand.
std::string index_code(TakeBounds bounds, int64_t n, const std::string& fetch,
                       const std::string& fill_store) {
  const std::string last = std::to_string(n - 1), size = std::to_string(n);
  switch (bounds) {
    case TakeBounds::clip:
      return "  const int k = clamp(" + fetch + ", 0, " + last + ");\n";
    case TakeBounds::wrap:
      return "  const int r = " + fetch + ";\n  const int k = r >= 0 ? r % " + size + " : " + last +
             " - (-(r + 1)) % " + size + ";\n";
    case TakeBounds::fill:
      return "  int k = " + fetch + ";\n  if (k < 0) k += " + size +
             ";\n  if (k < 0 || k >= " + size + ") {\n    " + fill_store + "\n    return;\n  }\n";
  }
  return "";
}

std::string take_kernel(int64_t n, int64_t inner, int64_t count, bool windowed, TakeBounds bounds,
                        uint32_t fill_bits) {
  const std::string fill = std::to_string(fill_bits) + "u;";
  std::ostringstream g;
  g << "#version 450\nlayout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(binding = 1) uniform isamplerBuffer index;\n"
       "layout(std430, binding = 2) writeonly buffer Out { uint o[]; };\n";
  if (!windowed) {
    g << "layout(push_constant) uniform Params { uint total; } pc;\n"
         "void main() {\n"
         "  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + "
         "gl_LocalInvocationID.x;\n"
         "  if (t >= pc.total) return;\n";
  } else {
    g << "layout(push_constant) uniform Params { uint t0; uint t_end; uint out_off; uint in_off; "
         "uint idx_off; int k0; int k1; } pc;\n"
         "void main() {\n"
         "  const uint t = pc.t0 + (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * "
         "64u + gl_LocalInvocationID.x;\n"
         "  if (t >= pc.t_end) return;\n";
  }
  g << "  const uint post = t % " << inner << "u;\n"
    << "  const uint j = (t / " << inner << "u) % " << count << "u;\n"
    << "  const uint pre = t / " << inner * count << "u;\n";
  if (!windowed) {
    g << index_code(bounds, n, "texelFetch(index, int(j)).x", "o[t] = " + fill)
      << "  o[t] = texelFetch(src, int(pre * " << n * inner << "u + uint(k) * " << inner
      << "u + post)).x;\n}\n";
  } else {
    // A fill element is written once, in the pass over the first window of the axis.
    g << index_code(bounds, n, "texelFetch(index, int(j - pc.idx_off)).x",
                    "if (pc.k0 == 0) o[t - pc.out_off] = " + fill)
      << "  if (k < pc.k0 || k >= pc.k1) return;\n"
      << "  o[t - pc.out_off] = texelFetch(src, int(pre * " << n * inner << "u + uint(k) * "
      << inner << "u + post - pc.in_off)).x;\n}\n";
  }
  return g.str();
}

// The take kernel where each taken slice is whole vec4s (inner a multiple of 4): one invocation
// moves a vec4, a quarter of the index arithmetic and of the fetches (a scan's per-iteration slice
// of its stacked inputs, an embedding's rows).
std::string take_kernel_vec4(int64_t n, int64_t inner, int64_t count, TakeBounds bounds, uint32_t fill_bits) {
  const int64_t inner4 = inner / 4;
  const std::string fill = "uvec4(" + std::to_string(fill_bits) + "u);";
  std::ostringstream g;
  g << "#version 450\nlayout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(binding = 1) uniform isamplerBuffer index;\n"
       "layout(std430, binding = 2) writeonly buffer Out { uvec4 o[]; };\n"
       "layout(push_constant) uniform Params { uint total; } pc;\n"
       "void main() {\n"
       "  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + "
       "gl_LocalInvocationID.x;\n"
       "  if (t >= pc.total) return;\n"
    << "  const uint post = t % " << inner4 << "u;\n"
    << "  const uint j = (t / " << inner4 << "u) % " << count << "u;\n"
    << "  const uint pre = t / " << inner4 * count << "u;\n"
    << index_code(bounds, n, "texelFetch(index, int(j)).x", "o[t] = " + fill)
    << "  o[t] = texelFetch(src, int(pre * " << n * inner4 << "u + uint(k) * " << inner4 << "u + post));\n}\n";
  return g.str();
}

// A gather's cost: the indices read, and each output element read from the input and written.
OpCost take_cost(int64_t count, int64_t total) {
  return OpCost{0, 0, static_cast<uint64_t>(count) * dtype_size(DType::int32) + 2 * static_cast<uint64_t>(total) * kWordBytes};
}

}  // namespace

void count_take(detail::Recording& rec, int64_t outer, int64_t inner, int64_t count) {
  const CountedOp counted(rec, [&] { return take_cost(count, outer * count * inner); });
}

void record_take(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                 const detail::DeviceBuffer& indices, const detail::DeviceBuffer& out,
                 int64_t outer, int64_t n, int64_t inner, int64_t count, TakeBounds bounds,
                 uint32_t fill_bits) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  const CountedOp counted(rec, [&] { return take_cost(count, total); });
  const WindowLimits w = window_limits(rt);
  if (in.capacity() / 4 <= w.texel_count && indices.capacity() / 4 <= w.texel_count &&
      out.capacity() <= w.storage_bytes) {
    if (inner % 4 == 0) {
      const uint32_t p = static_cast<uint32_t>(total / 4);
      const Binding bindings[] = {
          Binding::texels(in, VK_FORMAT_R32G32B32A32_UINT, 0, in.capacity() / 16 * 16),
          Binding::texels(indices, VK_FORMAT_R32_SINT, 0, indices.capacity() / 4 * 4),
          Binding::storage(out)};
      dispatch(rt, rec, {"take", take_kernel_vec4(n, inner, count, bounds, fill_bits)}, bindings,
               &p, sizeof p, groups_for(rt, (total / 4 + 63) / 64));
      barrier(rec.cb);
      return;
    }
    const uint32_t p = static_cast<uint32_t>(total);
    const Binding bindings[] = {
        Binding::texels(in, VK_FORMAT_R32_UINT, 0, in.capacity() / 4 * 4),
        Binding::texels(indices, VK_FORMAT_R32_SINT, 0, indices.capacity() / 4 * 4),
        Binding::storage(out)};
    dispatch(rt, rec, {"take", take_kernel(n, inner, count, false, bounds, fill_bits)}, bindings,
             &p, sizeof p, groups_for(rt, (total + 63) / 64));
    barrier(rec.cb);
    return;
  }
  // Pieces larger than one binding. Outputs go in runs of whole blocks (one per outer index) where
  // a block's input fits one window, else block by block; where one block's input does not fit
  // either, each run takes several passes, each over a window of the taken axis, writing just the
  // outputs whose index falls in it.
  const uint64_t block_in = static_cast<uint64_t>(n * inner),
                 block_out = static_cast<uint64_t>(count * inner);
  const uint64_t slice = static_cast<uint64_t>(inner);
  if (slice > w.texels)
    throw Error("take: one slice along the taken axis is " + std::to_string(slice * 4 >> 20) +
                " MiB on one device, over the adapter's limit for one binding (" +
                std::to_string(w.texel_count * 4 >> 20) +
                " MiB); shard the array over more devices so each piece is smaller");
  const bool by_block = block_in > w.texels || static_cast<uint64_t>(count) > w.texels;
  // Outputs per run: within the output window, and within the index window when that is cut.
  uint64_t run = w.storage;
  if (static_cast<uint64_t>(count) > w.texels) run = std::min(run, (w.texels - 2) * slice);
  const uint64_t group =
      by_block ? 1 : std::max<uint64_t>(1, std::min(w.texels / block_in, run / block_out));
  const uint64_t axis_window =
      by_block ? std::max<uint64_t>(1, w.texels / slice) : static_cast<uint64_t>(n);
  const std::string glsl = take_kernel(n, inner, count, true, bounds, fill_bits);
  struct Params {
    uint32_t t0, t_end, out_off, in_off, idx_off;
    int32_t k0, k1;
  } p{};
  for (uint64_t b0 = 0; b0 < static_cast<uint64_t>(outer); b0 += group) {
    const uint64_t b1 = std::min<uint64_t>(outer, b0 + group);
    // Runs of outputs within these blocks: one run when they fit one output window.
    const uint64_t step = group > 1 ? (b1 - b0) * block_out : run;
    for (uint64_t t0 = b0 * block_out; t0 < b1 * block_out; t0 += step) {
      const uint64_t t1 = std::min(b1 * block_out, t0 + step);
      const uint64_t out_start = align_down(t0, w.align);
      // Indices this run reads: all of them, or the run's own when it lies inside one block.
      uint64_t idx_lo = 0, idx_hi = static_cast<uint64_t>(count);
      if (by_block) {
        idx_lo = (t0 % block_out) / slice;
        idx_hi = ((t1 - 1) % block_out) / slice + 1;
      }
      const uint64_t idx_start = align_down(idx_lo, w.align);
      for (uint64_t k0 = 0; k0 < static_cast<uint64_t>(n); k0 += axis_window) {
        const uint64_t k1 = std::min<uint64_t>(n, k0 + axis_window);
        const uint64_t in_lo = b0 * block_in + k0 * slice;
        const uint64_t in_hi = by_block ? b0 * block_in + k1 * slice : b1 * block_in;
        const uint64_t in_start = align_down(in_lo, w.align);
        p = {static_cast<uint32_t>(t0),        static_cast<uint32_t>(t1),
             static_cast<uint32_t>(out_start), static_cast<uint32_t>(in_start),
             static_cast<uint32_t>(idx_start), static_cast<int32_t>(k0),
             static_cast<int32_t>(k1)};
        const Binding bindings[] = {
            Binding::texels(in, VK_FORMAT_R32_UINT, in_start * 4, (in_hi - in_start) * 4),
            Binding::texels(indices, VK_FORMAT_R32_SINT, idx_start * 4, (idx_hi - idx_start) * 4),
            Binding::storage(out, out_start * 4, (t1 - out_start) * 4)};
        dispatch(rt, rec, {"take", glsl}, bindings, &p, sizeof p,
                 groups_for(rt, (t1 - t0 + 63) / 64));
      }
    }
  }
  barrier(rec.cb);
}

void record_argsort(detail::RuntimeState& rt, detail::Recording& rec, const detail::DeviceBuffer& in,
                    const detail::DeviceBuffer& out, int64_t rows, int64_t n, bool is_float) {
  if (rows * n == 0) return;
  // Data movement (compares are not counted as flops, as XLA's sort): the keys read, the indices written.
  const CountedOp counted(rec, [&] {
    return OpCost{0, 0, static_cast<uint64_t>(rows * n) * (kWordBytes + dtype_size(DType::int32))};
  });
  if (n > (int64_t{1} << 31))
    throw Error("argsort: rows of " + std::to_string(n) +
                " elements are longer than the 2^31 a sort handles; "
                "sort shorter rows");
  uint64_t padded = 1;
  while (padded < static_cast<uint64_t>(n)) padded <<= 1;
  const uint32_t p = static_cast<uint32_t>(padded);  // at most 2^31
  const uint64_t slots = static_cast<uint64_t>(rows) * p;
  const WindowLimits w = window_limits(rt);
  const uint64_t max_range = w.storage_bytes;
  // Rows per sort: all of them when every buffer fits one binding; else groups of rows whose
  // windows do, a multiple of the window alignment (so every window starts aligned) or one row
  // (whose unaligned input and output start inside their windows at in_off / out_off).
  uint64_t group = static_cast<uint64_t>(rows);
  const bool windowed =
      in.capacity() > max_range || out.capacity() > max_range || slots * 4 > max_range;
  if (windowed) {
    if (p > w.storage)
      throw Error("argsort: one row of " + std::to_string(n) + " elements needs " +
                  std::to_string(uint64_t{p} * 4 >> 20) +
                  " MiB of sort keys on one device, over the adapter's limit for one binding (" +
                  std::to_string(max_range >> 20) +
                  " MiB); split the rows into shorter ones or sort fewer elements per row");
    group = std::min<uint64_t>(w.storage / p, w.storage / static_cast<uint64_t>(n));
    group = group >= w.align ? align_down(group, w.align) : 1;
  }
  auto keys = rt.allocate(rec.device, std::min<uint64_t>(group, rows) * p * 4);
  auto idx = rt.allocate(rec.device, std::min<uint64_t>(group, rows) * p * 4);
  rec.keep_alive.push_back(keys);
  rec.keep_alive.push_back(idx);
  for (uint64_t r0 = 0; r0 < static_cast<uint64_t>(rows); r0 += group) {
    const uint64_t count = std::min<uint64_t>(group, rows - r0);
    const uint32_t rs = static_cast<uint32_t>(count);
    const Groups groups = groups_for(rt, (count * p + 63) / 64);
    const bool whole = !windowed;
    const Binding keys_b =
        whole ? Binding::storage(*keys) : Binding::storage(*keys, 0, count * p * 4);
    const Binding idx_b = whole ? Binding::storage(*idx) : Binding::storage(*idx, 0, count * p * 4);
    const uint64_t first = r0 * n, words = count * n;
    const uint64_t start = align_down(first, w.align);
    {
      const uint32_t params[5] = {rs, static_cast<uint32_t>(n), p, is_float ? 1u : 0u,
                                  static_cast<uint32_t>(first - start)};
      const Binding b[] = {whole ? Binding::storage(in)
                                 : Binding::storage(in, start * 4, (first + words - start) * 4),
                           keys_b, idx_b};
      dispatch(rt, rec, {"argsort_init", ""}, b, params, sizeof params, groups);
      barrier(rec.cb);
    }
    for (uint32_t k = 2; k <= p; k <<= 1) {
      for (uint32_t j = k >> 1; j > 0; j >>= 1) {
        const uint32_t params[4] = {rs, p, k, j};
        const Binding b[] = {keys_b, idx_b};
        dispatch(rt, rec, {"argsort_step", ""}, b, params, sizeof params, groups);
        barrier(rec.cb);
      }
    }
    const uint32_t params[4] = {rs, static_cast<uint32_t>(n), p,
                                static_cast<uint32_t>(first - start)};
    const Binding b[] = {idx_b,
                         whole ? Binding::storage(out)
                               : Binding::storage(out, start * 4, (first + words - start) * 4)};
    dispatch(rt, rec, {"argsort_final", ""}, b, params, sizeof params,
             groups_for(rt, (words + 63) / 64));
    barrier(rec.cb);
  }
}

}  // namespace meshvk::kernels

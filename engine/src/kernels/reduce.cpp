#include "kernels/reduce.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "kernels/cost.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

namespace {

constexpr int64_t kChunk = kReduceChunk;

bool is_arg(ReduceOp op) { return op == ReduceOp::argmax || op == ReduceOp::argmin; }

// Stores `value` (a float32 sum where `f`) into `target`, through the epilogue's program where
// there is one (its input 0 the value), as record_elementwise would compute it from the stored sum.
std::string epilogue_store(const EwInlineText* epilogue, const std::string& target, const std::string& value, bool f) {
  if (!epilogue) return "  " + target + " = " + (f ? "floatBitsToUint(" : "uint(") + value + ");\n";
  return "  {\n  const float load0 = " + value + ";\n" + epilogue->nodes + "  " + target + " = floatBitsToUint(v" +
         std::to_string(epilogue->result) + ");\n  }\n";
}

// One pass: invocation t reduces chunk t % chunks of row t / chunks. With `with_index`, the
// input carries (value, index) pairs from an earlier pass. A `windowed` pass runs invocations
// [t0, t_end) over windows of its buffers starting at element in_off (input) and out_off (output).
// A `columns` pass reads an input laid out [n, rows] (element q of row r at q * rows + r) with
// scalar loads, in the same order and with the same arithmetic as the row-major pass (`vec4`
// then means: accumulate as the vector pass does), so its results are equal bit for bit.
std::string pass_kernel(const std::string& controls, ReduceOp op, DType dtype, bool vec4, bool with_index,
                        bool windowed, bool columns = false, const EwInlineText* epilogue = nullptr) {
  const bool f = dtype == DType::float32;
  const std::string T = f ? "float" : "int";
  const std::string V = f ? "vec4" : "ivec4";
  const std::string load1 = f ? "uintBitsToFloat(texelFetch(src, int(p)).x)" : "int(texelFetch(src, int(p)).x)";
  const std::string load4 = f ? "uintBitsToFloat(texelFetch(src, int(p)))" : "ivec4(texelFetch(src, int(p)))";
  std::ostringstream g;
  g << "#version 450\n" << controls << "layout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n";
  int b = 1;
  if (with_index) g << "layout(binding = " << b++ << ") uniform isamplerBuffer src_index;\n";
  g << "layout(std430, binding = " << b++ << ") writeonly buffer Out { uint o[]; };\n";
  if (is_arg(op)) g << "layout(std430, binding = " << b++ << ") writeonly buffer OutIndex { int oi[]; };\n";
  g << "layout(push_constant) uniform Params { uint rows; uint n; uint chunk; uint chunks;"
    << (windowed ? " uint t0; uint t_end; uint in_off; uint out_off;" : "") << " } pc;\n";
  if (epilogue) g << epilogue->helpers;
  g << "void main() {\n"
       "  const uint t = "
    << (windowed ? "pc.t0 + " : "")
    << "(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + "
       "gl_LocalInvocationID.x;\n"
    << (windowed ? "  if (t >= pc.t_end) return;\n" : "  if (t >= pc.rows * pc.chunks) return;\n")
    << "  const uint row = t / pc.chunks, c = t % pc.chunks;\n"
       "  const uint first = c * pc.chunk;\n"
       "  const uint len = min(pc.chunk, pc.n - first);\n"
       "  const uint base = row * pc.n + first"
    << (windowed ? " - pc.in_off" : "") << ";\n";
  // Where element `e` (a uint expression, counted from the chunk's start) of this row is.
  auto at_elem = [&](const std::string& e) {
    return columns ? "(first + " + e + ") * pc.rows + row" : "base + " + e;
  };
  // load1 reading element `e`.
  auto load_at_typed = [&](const std::string& e) {
    const std::string fetch = "texelFetch(src, int(" + at_elem(e) + ")).x";
    return f ? "uintBitsToFloat(" + fetch + ")" : "int(" + fetch + ")";
  };
  auto load4_at = [&](const std::string& e) {
    return V + "(" + load_at_typed(e) + ", " + load_at_typed(e + " + 1u") + ", " +
           load_at_typed(e + " + 2u") + ", " + load_at_typed(e + " + 3u") + ")";
  };
  const std::string at = windowed ? "t - pc.out_off" : "t";
  if (op == ReduceOp::sum) {
    const auto load4_texel = [&](const std::string& q) {
      return f ? "uintBitsToFloat(texelFetch(src, int((base + " + q + ") / 4u)))"
               : "ivec4(texelFetch(src, int((base + " + q + ") / 4u)))";
    };
    if (vec4 && columns)
      g << pairwise_sum_glsl(f, load4_at, nullptr);
    else if (vec4)
      g << pairwise_sum_glsl(f, load4_texel, nullptr);
    else
      g << pairwise_sum_glsl(f, nullptr, load_at_typed);
    g << epilogue_store(epilogue, "o[" + at + "]", "total", f) << "}\n";
    return g.str();
  }
  // max / min / argmax / argmin: a running best; NaN wins and stays, ties keep the first.
  const bool is_max = op == ReduceOp::max || op == ReduceOp::argmax;
  const std::string better = is_max ? ">" : "<";
  g << "  " << T << " best = " << T << "(0);\n  int best_i = -1;\n";
  g << "  for (uint q = 0u; q < len; ++q) {\n    const uint p = " << at_elem("q") << ";\n"
    << "    const " << T << " v = " << load1 << ";\n";
  g << "    const int i = " << (with_index ? "texelFetch(src_index, int(p)).x" : "int(first + q)") << ";\n";
  if (f) {
    g << "    if (best_i < 0 || (!isnan(best) && (isnan(v) || v " << better << " best))) { best = v; best_i = i; }\n";
  } else {
    g << "    if (best_i < 0 || v " << better << " best) { best = v; best_i = i; }\n";
  }
  g << "  }\n  o[" << at << "] = " << (f ? "floatBitsToUint(best)" : "uint(best)") << ";\n";
  if (is_arg(op)) g << "  oi[" << at << "] = best_i;\n";
  g << "}\n";
  return g.str();
}

// The column sum of pass_kernel (op sum, `vec4 && columns`) over four adjacent columns per
// invocation, where `rows` (the number of columns) is a multiple of 4: one RGBA32 texel holds
// element e of the four, so each 16 elements take 16 fetches instead of 64. Each accumulator of
// pass_kernel becomes a vec4 across the columns (A<m><j> holds component j of a<m>), and every
// sum is formed in the same order, so each column's result is the same bit for bit.
std::string columns4_kernel(const std::string& controls, DType dtype, const EwInlineText* epilogue = nullptr) {
  const bool f = dtype == DType::float32;
  const std::string V = f ? "vec4" : "ivec4";
  const std::string load = f ? "uintBitsToFloat(texelFetch(src, int(((first + (E)) * pc.rows + row) / 4u)))"
                             : "ivec4(texelFetch(src, int(((first + (E)) * pc.rows + row) / 4u)))";
  auto at = [&](const std::string& e) {
    std::string l = load;
    l.replace(l.find("E"), 1, e);
    return l;
  };
  std::ostringstream g;
  g << "#version 450\n" << controls << "layout(local_size_x = 64) in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(std430, binding = 1) writeonly buffer Out { uint o[]; };\n"
       "layout(push_constant) uniform Params { uint rows; uint n; uint chunk; uint chunks; } pc;\n"
    << (epilogue ? epilogue->helpers : std::string())
    << "void main() {\n"
       "  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + "
       "gl_LocalInvocationID.x;\n"
       "  if (t >= (pc.rows / 4u) * pc.chunks) return;\n"
       "  const uint row = (t / pc.chunks) * 4u, c = t % pc.chunks;\n"
       "  const uint first = c * pc.chunk;\n"
       "  const uint len = min(pc.chunk, pc.n - first);\n"
    << "  " << V << " stack[24];\n  uint count = 0u;\n"
    << "  for (uint blk = 0u; blk < len; blk += 64u) {\n";
  for (int m = 0; m < 4; ++m)
    g << "    " << V << " A" << m << "0 = " << V << "(0), A" << m << "1 = " << V << "(0), A" << m << "2 = " << V
      << "(0), A" << m << "3 = " << V << "(0);\n";
  g << "    const uint end = min(len, blk + 64u);\n"
       "    for (uint q = blk; q < end; q += 16u) {\n";
  for (int m = 0; m < 4; ++m) {
    g << "      " << (m ? "if (q + " + std::to_string(4 * m) + "u < end) " : std::string()) << "{";
    for (int j = 0; j < 4; ++j) g << " A" << m << j << " += " << at("q + " + std::to_string(4 * m + j) + "u") << ";";
    g << " }\n";
  }
  g << "    }\n";
  for (int j = 0; j < 4; ++j)
    g << "    const " << V << " a4" << j << " = (A0" << j << " + A1" << j << ") + (A2" << j << " + A3" << j << ");\n";
  g << "    " << V << " s = (a40 + a41) + (a42 + a43);\n"
       "    uint k = 0u; uint m = count;\n"
       "    while ((m & 1u) == 1u) { s = stack[k] + s; ++k; m >>= 1u; }\n"
       "    stack[k] = s; ++count;\n  }\n"
    << "  " << V << " total = " << V << "(0);\n"
       "  for (uint k = 0u; k < 24u; ++k) if (((count >> k) & 1u) == 1u) total = stack[k] + total;\n"
       "  for (uint i = 0u; i < 4u; ++i) {\n"
    << epilogue_store(epilogue, "o[(row + i) * pc.chunks + c]", "total[i]", f) << "  }\n}\n";
  return g.str();
}

}  // namespace

std::string pairwise_sum_glsl(bool f, const std::function<std::string(const std::string&)>& quad,
                              const std::function<std::string(const std::string&)>& one) {
  const std::string T = f ? "float" : "int", V = f ? "vec4" : "ivec4";
  std::ostringstream g;
  g << "  " << T << " stack[24];\n  uint count = 0u;\n"
    << "  for (uint blk = 0u; blk < len; blk += 64u) {\n";
  if (quad) {
    g << "    " << V << " a0 = " << V << "(0), a1 = " << V << "(0), a2 = " << V << "(0), a3 = " << V << "(0);\n"
      << "    const uint end = min(len, blk + 64u);\n"
      << "    for (uint q = blk; q < end; q += 16u) {\n"
      << "      a0 += " << quad("q") << ";\n"
      << "      if (q + 4u < end) a1 += " << quad("q + 4u") << ";\n"
      << "      if (q + 8u < end) a2 += " << quad("q + 8u") << ";\n"
      << "      if (q + 12u < end) a3 += " << quad("q + 12u") << ";\n"
      << "    }\n"
      << "    const " << V << " a4 = (a0 + a1) + (a2 + a3);\n"
      << "    " << T << " s = (a4.x + a4.y) + (a4.z + a4.w);\n";
  } else {
    g << "    " << T << " s = " << T << "(0);\n"
      << "    for (uint q = 0u; q < 64u && blk + q < len; ++q) s += " << one("blk + q") << ";\n";
  }
  g << "    uint k = 0u; uint m = count;\n"
       "    while ((m & 1u) == 1u) { s = stack[k] + s; ++k; m >>= 1u; }\n"
       "    stack[k] = s; ++count;\n  }\n"
    << "  " << T << " total = " << T << "(0);\n"
       "  for (uint k = 0u; k < 24u; ++k) if (((count >> k) & 1u) == 1u) total = stack[k] + total;\n";
  return g.str();
}

bool can_reduce_columns(detail::RuntimeState& rt, const detail::DeviceBuffer& in, int64_t rows,
                        int64_t n) {
  const WindowLimits w = window_limits(rt);
  const uint64_t partials = static_cast<uint64_t>(rows) * static_cast<uint64_t>((n + kChunk - 1) / kChunk);
  // One binding each for the input (scalar texels) and the first pass's output; element indices
  // (q * rows + row) within 32 bits.
  return in.capacity() / 4 <= w.texel_count && partials * 4 <= w.storage_bytes &&
         static_cast<uint64_t>(rows) * static_cast<uint64_t>(n) < (uint64_t{1} << 32);
}

bool can_take_epilogue(ReduceOp op, DType dtype, const EwProgram& epilogue) {
  if (op != ReduceOp::sum || dtype != DType::float32 || epilogue.nodes.empty() || epilogue.num_inputs != 1 ||
      epilogue.nodes.back().dtype != DType::float32)
    return false;
  // Float zeros are read from push constants the reductions' kernels do not have (ew_constant).
  // Arithmetic only, so the kernels need no helpers beyond the elementwise kernels' own
  // (reduce_fused.cpp has them already).
  return std::all_of(epilogue.nodes.begin(), epilogue.nodes.end(), [](const EwNode& n) {
    const bool arithmetic = n.op == EwOp::input || n.op == EwOp::constant || n.op == EwOp::neg ||
                            n.op == EwOp::add || n.op == EwOp::sub || n.op == EwOp::mul || n.op == EwOp::div;
    return arithmetic && n.dtype == DType::float32 && (n.op != EwOp::input || n.input == 0) &&
           !(n.op == EwOp::constant && n.bits == 0);
  });
}

void record_reduce_rows(detail::RuntimeState& rt, detail::Recording& rec, ReduceOp op, DType dtype,
                        const detail::DeviceBuffer& in, int64_t rows, int64_t n,
                        const detail::DeviceBuffer& out, bool columns, const EwProgram* epilogue) {
  if (epilogue && !can_take_epilogue(op, dtype, *epilogue))
    throw Error("internal: a reduction epilogue its kernels do not take");
  if (columns && n > 0 && rows > 0 && !can_reduce_columns(rt, in, rows, n))
    throw Error("internal: a column reduction does not fit one binding");
  if (rows == 0) return;
  // XLA's count: the reduction applied (input elements - output elements) times; the input read
  // and the output written once, whatever the passes.
  const CountedOp counted(rec, [&] {
    const uint64_t r = static_cast<uint64_t>(rows), len = static_cast<uint64_t>(n);
    const DType out_dtype = op == ReduceOp::argmax || op == ReduceOp::argmin ? DType::int32 : dtype;
    OpCost c{r * (len > 0 ? len - 1 : 0), 0, r * len * dtype_size(dtype) + r * dtype_size(out_dtype)};
    if (epilogue) {  // its arithmetic, once per row; no bytes of its own
      const OpCost e = elementwise_cost(*epilogue, {}, Shape{rows}, r);
      c.flops += e.flops;
      c.transcendentals += e.transcendentals;
    }
    return c;
  }, OpKind::reduce, dtype);
  if (n == 0) {
    if (op != ReduceOp::sum) throw Error("internal: empty max/min reduction reached the kernel");
    if (epilogue) throw Error("internal: an empty sum with an epilogue reached the kernel");
    if (rec.cb) vkCmdFillBuffer(rec.cb, out.vk_buffer(), out.offset(), static_cast<uint64_t>(rows) * 4, 0);
    barrier(rec.cb);
    return;
  }
  // The elementwise kernels' float controls: a sum of subnormals, or a max over NaN, has the same
  // bits here as in a fused reduction (reduce_fused.cpp) on every adapter.
  const vk::Adapter& adapter = rt.device_for(rec.device).adapter();
  const std::string controls = float_controls(adapter.preserves_inf_nan32, adapter.preserves_denorm32);
  std::optional<EwInlineText> epilogue_text;
  if (epilogue) epilogue_text = ew_inline_text(rt, rec, *epilogue, {});
  const detail::DeviceBuffer* src = &in;
  const detail::DeviceBuffer* src_index = nullptr;
  bool with_index = false;
  int64_t length = n;
  for (;;) {
    const int64_t chunks = (length + kChunk - 1) / kChunk;
    const bool last = chunks == 1;
    const EwInlineText* epi = last && epilogue_text ? &*epilogue_text : nullptr;
    // Partial results of this pass: values (and indices) of each chunk of each row.
    std::shared_ptr<detail::DeviceBuffer> values, indices;
    const detail::DeviceBuffer* dst = &out;
    if (!last || is_arg(op)) {
      values = rt.allocate(rec.device, static_cast<uint64_t>(rows * chunks) * 4);
      rec.keep_alive.push_back(values);
      if (!last) dst = values.get();
    }
    if (is_arg(op)) {
      indices = last ? nullptr : rt.allocate(rec.device, static_cast<uint64_t>(rows * chunks) * 4);
      if (indices) rec.keep_alive.push_back(indices);
    }
    const bool vec4 = op == ReduceOp::sum && !with_index && length % 4 == 0 && kChunk % 4 == 0;
    // Only the first pass reads the [n, rows] input; its partials are row-major.
    const bool by_columns = columns && src == &in;
    // Where this pass writes: values (and indices), or the result.
    const detail::DeviceBuffer& out_values = is_arg(op) ? *values : *dst;
    const detail::DeviceBuffer* out_indices = is_arg(op) ? (last ? &out : indices.get()) : nullptr;
    const uint64_t invocations = static_cast<uint64_t>(rows * chunks);
    const WindowLimits w = window_limits(rt);
    const uint64_t texel_bytes = vec4 ? 16 : 4;
    const bool fits = src->capacity() / texel_bytes <= w.texel_count &&
                      (!with_index || src_index->capacity() / 4 <= w.texel_count) &&
                      out_values.capacity() <= w.storage_bytes &&
                      (!out_indices || out_indices->capacity() <= w.storage_bytes);
    if (by_columns && vec4 && rows % 4 == 0) {
      const Binding bindings[] = {
          Binding::texels(*src, VK_FORMAT_R32G32B32A32_UINT, 0, src->capacity() / 16 * 16),
          Binding::storage(out_values)};
      const uint32_t params[4] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(length),
                                  static_cast<uint32_t>(kChunk), static_cast<uint32_t>(chunks)};
      const uint64_t quads = static_cast<uint64_t>(rows / 4 * chunks);
      dispatch(rt, rec, {"reduce_columns", columns4_kernel(controls, dtype, epi)}, bindings, params, sizeof params,
               groups_for(rt, (quads + 63) / 64));
    } else if (by_columns) {
      std::vector<Binding> bindings{
          Binding::texels(*src, VK_FORMAT_R32_UINT, 0, src->capacity() / 4 * 4),
          Binding::storage(out_values)};
      if (out_indices) bindings.push_back(Binding::storage(*out_indices));
      const uint32_t params[4] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(length),
                                  static_cast<uint32_t>(kChunk), static_cast<uint32_t>(chunks)};
      dispatch(rt, rec, {"reduce_columns", pass_kernel(controls, op, dtype, vec4, false, false, true, epi)},
               bindings, params, sizeof params, groups_for(rt, (invocations + 63) / 64));
    } else if (fits) {
      std::vector<Binding> bindings{
          Binding::texels(*src, vec4 ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT, 0,
                          vec4 ? src->capacity() / 16 * 16 : src->capacity() / 4 * 4)};
      if (with_index)
        bindings.push_back(
            Binding::texels(*src_index, VK_FORMAT_R32_SINT, 0, src_index->capacity() / 4 * 4));
      bindings.push_back(Binding::storage(out_values));
      if (out_indices) bindings.push_back(Binding::storage(*out_indices));
      const uint32_t params[4] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(length),
                                  static_cast<uint32_t>(kChunk), static_cast<uint32_t>(chunks)};
      dispatch(rt, rec, {"reduce", pass_kernel(controls, op, dtype, vec4, with_index, false, false, epi)}, bindings,
               params, sizeof params, groups_for(rt, (invocations + 63) / 64));
    } else {
      // Pieces larger than one binding: runs of consecutive invocations, each reading one window
      // of the input (its chunks are contiguous there) and writing one window of the output.
      const uint64_t in_words = vec4 ? w.texels * 4 : w.texels;
      const uint64_t len = static_cast<uint64_t>(length);
      const uint64_t run =
          std::min<uint64_t>(w.storage, in_words / std::min<uint64_t>(len, kChunk));
      if (run == 0) throw Error("internal: a reduction chunk does not fit one binding");
      const std::string glsl = pass_kernel(controls, op, dtype, vec4, with_index, true, false, epi);
      for (uint64_t t0 = 0; t0 < invocations; t0 += run) {
        const uint64_t t1 = std::min(invocations, t0 + run);
        const uint64_t first = t0 / chunks * len + t0 % chunks * kChunk;
        const uint64_t end =
            (t1 - 1) / chunks * len + std::min<uint64_t>(len, ((t1 - 1) % chunks + 1) * kChunk);
        const uint64_t in_start = align_down(first, w.align);
        const uint64_t out_start = align_down(t0, w.align);
        // Vector reads end at a multiple of 4 elements: rows are.
        std::vector<Binding> bindings{
            Binding::texels(*src, vec4 ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT,
                            in_start * 4, (end - in_start) * 4)};
        if (with_index)
          bindings.push_back(
              Binding::texels(*src_index, VK_FORMAT_R32_SINT, in_start * 4, (end - in_start) * 4));
        bindings.push_back(Binding::storage(out_values, out_start * 4, (t1 - out_start) * 4));
        if (out_indices)
          bindings.push_back(Binding::storage(*out_indices, out_start * 4, (t1 - out_start) * 4));
        const uint32_t params[8] = {
            static_cast<uint32_t>(rows),     static_cast<uint32_t>(length),
            static_cast<uint32_t>(kChunk),   static_cast<uint32_t>(chunks),
            static_cast<uint32_t>(t0),       static_cast<uint32_t>(t1),
            static_cast<uint32_t>(in_start), static_cast<uint32_t>(out_start)};
        dispatch(rt, rec, {"reduce", glsl}, bindings, params, sizeof params,
                 groups_for(rt, (t1 - t0 + 63) / 64));
      }
    }
    barrier(rec.cb);
    if (last) return;
    src = values.get();
    src_index = indices.get();
    with_index = is_arg(op);
    length = chunks;
  }
}

}  // namespace meshvk::kernels

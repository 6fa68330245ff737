#include "kernels/reduce_fused.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>

#include "kernels/cost.hpp"
#include "kernels/launch.hpp"
#include "kernels/wide_types.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

namespace {

static_assert(kReduceChunk % 4 == 0, "four-element reads need chunks that start at multiples of 4");

bool is_32bit(DType d) { return dtype_size(d) == 4; }  // bool too (stored as 32 bits)

// Where input k's element at coordinates c of `shape` is: offset + sum of c[d] * strides[d].
struct Placement {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

Placement placement_of(const EwInput& in, const Shape& shape) {
  Placement p;
  p.strides.assign(shape.size(), 0);
  if (in.mode == EwInput::Mode::same) {
    p.offset = static_cast<int64_t>(in.start);
    int64_t s = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      p.strides[d] = shape[d] == 1 ? 0 : s;
      s *= shape[d];
    }
  } else if (in.mode == EwInput::Mode::strided) {
    p.offset = in.offset;
    p.strides = in.strides;
  } else {
    p.offset = in.offset;
  }
  return p;
}

// How the four-element path reads an input over the one reduced (last) dimension: whole vec4
// texels along a contiguous row whose start is a multiple of 4, or one element for all four.
enum class Read4 { texel, splat };

// Each input's Read4, or nothing where some input needs the element-by-element path: the rows
// are a multiple of 4 elements long and only the last dimension is reduced.
std::optional<std::vector<Read4>> reads4(std::span<const Placement> places, size_t kept, size_t rank, int64_t n) {
  if (kept + 1 != rank || n % 4 != 0) return std::nullopt;
  std::vector<Read4> reads;
  for (const Placement& p : places) {
    const int64_t last = p.strides[rank - 1];
    if (last == 0) {
      reads.push_back(Read4::splat);
    } else if (last == 1 && p.offset % 4 == 0 &&
               std::all_of(p.strides.begin(), p.strides.end() - 1, [](int64_t s) { return s % 4 == 0; })) {
      reads.push_back(Read4::texel);
    } else {
      return std::nullopt;
    }
  }
  return reads;
}

// The coordinates of dimensions [begin, end) of `shape` from the linear index `var` (row-major
// within those dimensions), as `c<d>`: a division chain with the sizes compiled in.
std::string coordinates(const Shape& shape, size_t begin, size_t end, const std::string& var) {
  std::ostringstream g;
  g << "  uint rest = " << var << ";\n";
  for (size_t d = end; d-- > begin;) {
    const int64_t s = std::max<int64_t>(shape[d], 1);
    if (d == begin)
      g << "  const uint c" << d << " = rest;\n";
    else
      g << "  const uint c" << d << " = rest % " << s << "u; rest /= " << s << "u;\n";
  }
  return g.str();
}

// The terms c<d> * stride of dimensions [begin, end) that move input k.
std::string index_terms(const Placement& p, size_t begin, size_t end) {
  std::string s;
  for (size_t d = begin; d < end; ++d)
    if (p.strides[d] != 0) s += " + int(c" + std::to_string(d) + ") * " + std::to_string(p.strides[d]);
  return s;
}

// The first pass: pass_kernel (reduce.cpp) with each element computed by mv_element, in the same
// order and with the same accumulators, so its partial results are the same bits.
std::string fused_kernel(ReduceOp op, const EwProgram& program, std::span<const EwInput> inputs,
                         std::span<const Placement> places, const Shape& shape, size_t kept,
                         bool vec4, bool side, const std::optional<std::vector<Read4>>& four,
                         const EwInlineText& text, const EwInlineText* epilogue) {
  const DType dtype = program.nodes.back().dtype;
  const bool f = dtype == DType::float32;
  const std::string T = f ? "float" : "int";
  const std::string V = f ? "vec4" : "ivec4";
  std::ostringstream g;
  g << text.head;
  for (size_t k = 0; k < inputs.size(); ++k)
    g << "layout(binding = " << k << ") uniform usamplerBuffer in" << k << ";\n";
  g << "layout(std430, binding = " << inputs.size() << ") writeonly buffer Out { uint o[]; };\n";
  if (side) g << "layout(std430, binding = " << inputs.size() + 1 << ") writeonly buffer Side { uint so[]; };\n";
  g << "layout(push_constant) uniform Params { uint rows; uint n; uint chunk; uint chunks; uint zero; int off["
    << std::max<size_t>(inputs.size(), 1) << "]; } pc;\n";
  g << text.helpers;
  // An input that does not move along the reduced dimensions (a row statistic, a label, a
  // scalar) is read once per row, into mv_row_load<k>.
  std::vector<bool> per_row(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    per_row[k] = index_terms(places[k], kept, shape.size()).empty();
    g << "int mv_base" << k << ";\n";
    if (per_row[k]) g << ew_type_name(inputs[k].dtype, 1) << " mv_row_load" << k << ";\n";
  }
  g << "uint mv_row;\n";
  // Element e of the current row (mv_base<k>: where the row's first element of input k is).
  g << T << " mv_element(uint e) {\n" << coordinates(shape, kept, shape.size(), "e");
  for (size_t k = 0; k < inputs.size(); ++k) {
    g << "  const " << ew_type_name(inputs[k].dtype, 1) << " load" << k << " = ";
    if (per_row[k])
      g << "mv_row_load" << k;
    else
      g << ew_decode("texelFetch(in" + std::to_string(k) + ", mv_base" + std::to_string(k) +
                         index_terms(places[k], kept, shape.size()) + ")" + ew_fetch_component(inputs[k].dtype),
                     inputs[k].dtype, 1);
    g << ";\n";
  }
  const std::string result = "v" + std::to_string(program.nodes.size() - 1);
  g << text.nodes;
  if (side) g << "  so[mv_row * pc.n + e] = " << (f ? "floatBitsToUint(" : "uint(") << result << ");\n";
  g << "  return " << result << ";\n}\n";
  if (four) {
    // Elements e..e+3 of the row (e a multiple of 4), computed as the vector kernel computes them.
    g << V << " mv_element4(uint e) {\n";
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string in = "in" + std::to_string(k), base = "mv_base" + std::to_string(k);
      g << "  const " << ew_type_name(inputs[k].dtype, 4) << " load" << k << " = ";
      if ((*four)[k] == Read4::texel)
        g << ew_decode("texelFetch(" + in + ", (" + base + " + int(e)) >> 2)", inputs[k].dtype, 4);
      else if (per_row[k])
        g << ew_type_name(inputs[k].dtype, 4) << "(mv_row_load" << k << ")";
      else
        g << ew_type_name(inputs[k].dtype, 4) << "(" << ew_decode("texelFetch(" + in + ", " + base + ").x", inputs[k].dtype, 1) << ")";
      g << ";\n";
    }
    g << text.nodes4;
    if (side)
      for (int j = 0; j < 4; ++j)
        g << "  so[mv_row * pc.n + e + " << j << "u] = " << (f ? "floatBitsToUint(" : "uint(") << result << "[" << j << "]);\n";
    g << "  return " << result << ";\n}\n";
  }
  g << "void main() {\n"
       "  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;\n"
       "  if (t >= pc.rows * pc.chunks) return;\n"
       "  const uint row = t / pc.chunks, c = t % pc.chunks;\n"
       "  const uint first = c * pc.chunk;\n"
       "  const uint len = min(pc.chunk, pc.n - first);\n";
  g << "  mv_row = row;\n  {\n" << (kept ? coordinates(shape, 0, kept, "row") : std::string());
  for (size_t k = 0; k < inputs.size(); ++k) {
    g << "  mv_base" << k << " = pc.off[" << k << "]" << index_terms(places[k], 0, kept) << ";\n";
    if (per_row[k])
      g << "  mv_row_load" << k << " = "
        << ew_decode("texelFetch(in" + std::to_string(k) + ", mv_base" + std::to_string(k) + ")" +
                         ew_fetch_component(inputs[k].dtype),
                     inputs[k].dtype, 1)
        << ";\n";
  }
  g << "  }\n";
  auto el = [](const std::string& q) { return "mv_element(first + " + q + ")"; };
  if (op == ReduceOp::sum) {
    const auto quad = [&](const std::string& q) {
      if (four) return "mv_element4(first + " + q + ")";
      return V + "(" + el(q) + ", " + el(q + " + 1u") + ", " + el(q + " + 2u") + ", " + el(q + " + 3u") + ")";
    };
    if (vec4)
      g << pairwise_sum_glsl(f, quad, nullptr);
    else
      g << pairwise_sum_glsl(f, nullptr, el);
    if (epilogue)  // the sum's last step (a mean's division), as record_reduce_rows takes it
      g << "  {\n  const float load0 = total;\n" << epilogue->nodes << "  o[t] = floatBitsToUint(v" << epilogue->result
        << ");\n  }\n}\n";
    else
      g << "  o[t] = " << (f ? "floatBitsToUint(total)" : "uint(total)") << ";\n}\n";
    return g.str();
  }
  const std::string better = op == ReduceOp::max ? ">" : "<";
  const std::string step = f ? "    if (best_i < 0 || (!isnan(best) && (isnan(v) || v " + better + " best))) { best = v; best_i = i; }\n"
                             : "    if (best_i < 0 || v " + better + " best) { best = v; best_i = i; }\n";
  g << "  " << T << " best = " << T << "(0);\n  int best_i = -1;\n";
  if (four) {
    // The same comparisons in the same order, four elements computed at a time.
    g << "  for (uint q = 0u; q < len; q += 4u) {\n"
      << "    const " << V << " w = mv_element4(first + q);\n"
      << "    for (uint j = 0u; j < 4u; ++j) {\n"
      << "    const " << T << " v = w[j];\n"
      << "    const int i = int(first + q + j);\n" << step << "    }\n";
  } else {
    g << "  for (uint q = 0u; q < len; ++q) {\n"
      << "    const " << T << " v = " << el("q") << ";\n"
      << "    const int i = int(first + q);\n" << step;
  }
  g << "  }\n  o[t] = " << (f ? "floatBitsToUint(best)" : "uint(best)") << ";\n}\n";
  return g.str();
}

// Rows and reduced elements of `shape` with its last `reduced` dimensions reduced.
std::pair<uint64_t, uint64_t> rows_and_n(const Shape& shape, size_t reduced) {
  uint64_t rows = 1, n = 1;
  for (size_t d = 0; d < shape.size(); ++d) (d + reduced < shape.size() ? rows : n) *= static_cast<uint64_t>(shape[d]);
  return {rows, n};
}

}  // namespace

bool can_reduce_fused(detail::RuntimeState& rt, ReduceOp op, const EwProgram& program,
                      std::span<const EwInput> inputs, const Shape& shape, size_t reduced, bool side) {
  if (op != ReduceOp::sum && op != ReduceOp::max && op != ReduceOp::min) return false;
  if (program.nodes.empty() || reduced == 0 || reduced > shape.size() || inputs.size() > kMaxKernelInputs) return false;
  const DType out = program.nodes.back().dtype;
  if (out != DType::float32 && out != DType::int32) return false;
  if (!std::all_of(program.nodes.begin(), program.nodes.end(), [](const EwNode& n) { return is_32bit(n.dtype); }))
    return false;
  const auto [rows, n] = rows_and_n(shape, reduced);
  if (rows == 0 || n == 0) return false;
  const uint64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  const WindowLimits w = window_limits(rt);
  // Indices within 32 bits (the kernel's uint and int arithmetic); partials in one binding.
  if (rows * n >= (uint64_t{1} << 31) || rows * chunks * 4 > w.storage_bytes) return false;
  if (side && rows * n * 4 > w.storage_bytes) return false;
  for (const EwInput& in : inputs) {
    if (!is_32bit(in.dtype) || !in.buffer) return false;
    if (in.buffer->capacity() / 4 > w.texel_count || in.buffer->capacity() / 4 >= (uint64_t{1} << 31)) return false;
    if (in.mode == EwInput::Mode::strided && in.strides.size() != shape.size()) return false;
  }
  return true;
}

void record_reduce_fused(detail::RuntimeState& rt, detail::Recording& rec, ReduceOp op,
                         const EwProgram& program, std::span<const EwInput> inputs,
                         const Shape& shape, size_t reduced, const detail::DeviceBuffer& out,
                         const detail::DeviceBuffer* side, const EwProgram* epilogue) {
  if (!can_reduce_fused(rt, op, program, inputs, shape, reduced, side != nullptr))
    throw Error("internal: a fused reduction its kernel does not take");
  if (epilogue && !can_take_epilogue(op, program.nodes.back().dtype, *epilogue))
    throw Error("internal: a reduction epilogue its kernels do not take");
  // Not structured bindings: the cost lambda below captures them (clang 14 cannot).
  const auto rows_n = rows_and_n(shape, reduced);
  const uint64_t rows = rows_n.first, n = rows_n.second;
  const DType dtype = program.nodes.back().dtype;
  // As XLA counts a fusion: the program's work and the reduction's, the bytes read from its
  // inputs and written to its result (the values in between never reach memory).
  const CountedOp counted(rec, [&] {
    OpCost c = elementwise_cost(program, inputs, shape, rows * n);
    if (!side) c.bytes -= std::min(c.bytes, rows * n * 4);
    c.bytes += rows * 4;
    c.flops += rows * (n - 1);
    if (epilogue) {  // its arithmetic, once per row
      const OpCost e = elementwise_cost(*epilogue, {}, Shape{static_cast<int64_t>(rows)}, rows);
      c.flops += e.flops;
      c.transcendentals += e.transcendentals;
    }
    return c;
  }, OpKind::reduce, dtype);
  const uint64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  std::vector<Placement> places;
  for (const EwInput& in : inputs) places.push_back(placement_of(in, shape));
  const bool vec4 = op == ReduceOp::sum && n % 4 == 0;
  const size_t kept = shape.size() - reduced;
  // Chunks start at multiples of 4 (kReduceChunk is one), so four-element reads stay in a row.
  const std::optional<std::vector<Read4>> four = reads4(places, kept, shape.size(), static_cast<int64_t>(n));
  std::optional<EwInlineText> epilogue_text;
  if (epilogue && chunks == 1) epilogue_text = ew_inline_text(rt, rec, *epilogue, {});
  const std::string glsl = fused_kernel(op, program, inputs, places, shape, kept, vec4, side != nullptr, four,
                                        ew_inline_text(rt, rec, program, inputs),
                                        epilogue_text ? &*epilogue_text : nullptr);
  std::shared_ptr<detail::DeviceBuffer> partials;
  if (chunks > 1) {
    partials = rt.allocate(rec.device, rows * chunks * 4);
    rec.keep_alive.push_back(partials);
  }
  std::vector<Binding> bindings;
  struct Params {
    uint32_t rows, n, chunk, chunks, zero;
    int32_t off[kMaxKernelInputs];
  } params{static_cast<uint32_t>(rows), static_cast<uint32_t>(n), static_cast<uint32_t>(kReduceChunk),
           static_cast<uint32_t>(chunks), 0, {}};
  for (size_t k = 0; k < inputs.size(); ++k) {
    const bool texel4 = four && (*four)[k] == Read4::texel;
    const uint64_t bytes = texel4 ? 16 : 4;
    bindings.push_back(Binding::texels(*inputs[k].buffer, texel4 ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT, 0,
                                       inputs[k].buffer->capacity() / bytes * bytes));
    params.off[k] = static_cast<int32_t>(places[k].offset);
  }
  bindings.push_back(Binding::storage(partials ? *partials : out));
  if (side) bindings.push_back(Binding::storage(*side, 0, rows * n * 4));
  const uint32_t push_bytes = 20 + 4 * static_cast<uint32_t>(std::max<size_t>(inputs.size(), 1));
  dispatch(rt, rec, {"reduce_fused", glsl}, bindings, &params, push_bytes, groups_for(rt, (rows * chunks + 63) / 64));
  barrier(rec.cb);
  if (partials)
    record_reduce_rows(rt, rec, op, dtype, *partials, static_cast<int64_t>(rows), static_cast<int64_t>(chunks), out,
                       false, epilogue);
}

}  // namespace meshvk::kernels

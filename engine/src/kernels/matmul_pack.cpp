// Packing the blocked kernel's operands (the layouts are described in matmul_parts.hpp).
//
// B goes through here unless it is stored as packed, and A wherever the kernel does not read it
// as stored (transposed, rows not whole vec4s, or 8 lanes: matmul_blocked.cpp), so the kernel's
// reads of packed operands have no edge cases: padding is zeros. The pack must run near copy
// speed or it eats the kernel's gain for N ~ 1024, so a workgroup is one SIMD row and each
// invocation moves a run of vec4s (its index arithmetic, integer divisions that x86 has no SIMD
// instruction for, paid once per run) and the lanes of a SIMD row sit on adjacent stored vec4s
// where the layout allows.
#include <algorithm>
#include <sstream>

#include "kernels/matmul_parts.hpp"
#include "kernels/simd.hpp"

namespace meshvk::kernels::matmul_parts {

namespace {

using detail::DeviceBuffer;
using detail::Recording;
using detail::RuntimeState;

struct PackParams {
  uint32_t count;                   // invocations of this dispatch
  uint32_t rows, cols4;             // the chunk: rows and vec4 columns of op(X), padding included
  uint32_t rows_valid, cols_valid;  // op(X)'s rows and columns (elements) from the chunk's origin
  uint32_t in_first, in_batch, in_ld;  // source, in texels
  uint32_t out_first;                  // the chunk's first vec4 in the out binding
  uint32_t out_rows, out_cols4;        // one batch entry of the packed operand
  uint32_t runs;                       // runs per lane line
};

// Per invocation: vec4s along a row (transposed sources), else rows. 16 and 64 measured the same.
constexpr int kRun = 64;

std::string pack_glsl(Packing packing, bool trans, bool vec4, uint32_t lanes) {
  const bool groups = packing.kind == Packing::row_groups;
  const std::string u = std::to_string(packing.unit) + "u";
  // Transposed vec4 sources are moved as 4 x 4 blocks: 4 rows of op(X) per step.
  const bool blocks = trans && vec4;
  std::ostringstream g;
  g << "#version 450\n"
       "layout(local_size_x = "
    << lanes
    << ") in;\n"
       "layout(binding = 0) uniform usamplerBuffer src;\n"
       "layout(std430, binding = 1) writeonly buffer Out { uvec4 o[]; };\n"
       "layout(push_constant) uniform Params { uint count, rows, cols4, rows_valid, cols_valid, "
       "in_first, in_batch, in_ld, out_first, out_rows, out_cols4, runs; } p;\n"
       "uvec4 keep(uvec4 v, int valid) {\n"
       "  return uvec4(valid > 0 ? v.x : 0u, valid > 1 ? v.y : 0u, valid > 2 ? v.z : 0u, "
       "valid > 3 ? v.w : 0u);\n"
       "}\n";
  // The packed position of op(X)[r][4 c4 .. 4 c4 + 3] of batch entry b, from the chunk's origin.
  g << "uint at(uint b, uint r, uint c4) {\n"
    << "  const uint batch = b * p.out_rows * p.out_cols4;\n";
  if (groups)
    g << "  return p.out_first + batch + ((r / " << u << ") * p.out_cols4 + c4) * " << u
      << " + r % " << u << ";\n";
  else
    g << "  return p.out_first + batch + ((c4 / " << u << ") * p.out_rows + r) * " << u
      << " + c4 % " << u << ";\n";
  g << "}\n";
  if (!blocks) {
    g << "uvec4 load(uint b, uint r, uint c4) {\n"
         "  const int left = int(p.cols_valid) - int(4u * c4);\n"
         "  if (r >= p.rows_valid || left <= 0) return uvec4(0u);\n"
         "  const uint base = p.in_first + b * p.in_batch;\n";
    if (vec4)
      g << "  return keep(texelFetch(src, int(base + r * p.in_ld + c4)), left);\n";
    else {
      const std::string at = trans ? "(4u * c4 + t) * p.in_ld + r" : "r * p.in_ld + 4u * c4 + t";
      g << "  uvec4 v = uvec4(0u);\n"
           "  for (uint t = 0u; t < 4u; ++t)\n"
           "    if (int(t) < left) v[t] = texelFetch(src, int(base + "
        << at << ")).x;\n"
        << "  return v;\n";
    }
    g << "}\n";
  } else {
    // op(X)[r .. r + 3][4 c4 .. 4 c4 + 3] from X's rows 4 c4 + j, vec4 r / 4 of each.
    g << "void move_block(uint b, uint r, uint c4) {\n"
         "  uvec4 x[4];\n"
         "  const uint base = p.in_first + b * p.in_batch;\n"
         "  for (uint j = 0u; j < 4u; ++j) {\n"
         "    x[j] = uvec4(0u);\n"
         "    if (4u * c4 + j < p.cols_valid && r < p.rows_valid)\n"
         "      x[j] = keep(texelFetch(src, int(base + (4u * c4 + j) * p.in_ld + r / 4u)), "
         "int(p.rows_valid) - int(r));\n"
         "  }\n"
         "  for (uint t = 0u; t < 4u; ++t) o[at(b, r + t, c4)] = uvec4(x[0][t], x[1][t], x[2][t], "
         "x[3][t]);\n"
         "}\n";
  }
  g << "void main() {\n"
       "  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * "
    << lanes
    << "u + "
       "gl_LocalInvocationID.x;\n"
       "  if (i >= p.count) return;\n";
  const std::string step = blocks ? "4u" : "1u";
  const std::string move =
      blocks ? "    move_block(b, r, c4);\n" : "    o[at(b, r, c4)] = load(b, r, c4);\n";
  if (trans) {
    // Lanes on neighbouring rows of op(X), which are neighbours in a stored row of X; each lane
    // a run along op(X)'s row.
    g << "  const uint lines = p.rows / " << step << ";\n"
      << "  const uint r = (i % lines) * " << step << ";\n"
      << "  const uint t = i / lines;\n"
      << "  const uint c0 = (t % p.runs) * " << kRun << "u;\n"
      << "  const uint b = t / p.runs;\n"
      << "  const uint c1 = min(c0 + " << kRun << "u, p.cols4);\n"
      << "  for (uint c4 = c0; c4 < c1; ++c4)\n"
      << move;
  } else {
    // Lanes on neighbouring vec4s of a stored row, each a run down the rows (consecutive packed
    // vec4s within a group of rows or a panel's column).
    g << "  const uint c4 = i % p.cols4;\n"
      << "  const uint t = i / p.cols4;\n"
      << "  const uint r0 = (t % p.runs) * " << kRun << "u;\n"
      << "  const uint b = t / p.runs;\n"
      << "  const uint r1 = min(r0 + " << kRun << "u, p.rows);\n"
      << "  for (uint r = r0; r < r1; ++r)\n"
      << move;
  }
  g << "}\n";
  return g.str();
}

}  // namespace

std::shared_ptr<DeviceBuffer> pack_operand(RuntimeState& rt, Recording& rec, const DeviceBuffer& in,
                                           Layout layout, bool trans, int64_t batches, int64_t rows,
                                           int64_t cols, int64_t rows_out, int64_t cols4,
                                           Packing packing, const MatmulShape& shape) {
  const bool groups = packing.kind == Packing::row_groups;
  const uint32_t lanes = simd_of(rt).lanes;
  const int64_t per_batch = rows_out * cols4;  // vec4s
  auto out = rt.allocate(rec.device, static_cast<uint64_t>(batches * per_batch) * 16);
  rec.keep_alive.push_back(out);
  // Sources whose stored rows are whole vec4s are read a vec4 at a time, several times faster
  // on lavapipe than element by element.
  const bool vec4 = layout.first % 4 == 0 && layout.batch % 4 == 0 && layout.ld % 4 == 0;
  const int64_t unit = vec4 ? 4 : 1;  // elements per source texel
  const int64_t majors = groups ? rows_out / packing.unit : cols4 / packing.unit;
  // A chunk of majors (row groups or panels) is a rectangle of op(X) whose packed vec4s are
  // contiguous.
  struct Rect {
    int64_t r0, rows, c0, cols4;  // c0 and cols4 in vec4s
  };
  auto rect = [&](const Chunk& c) {
    if (groups) return Rect{c.row0 * packing.unit, c.rows * packing.unit, 0, cols4};
    return Rect{0, rows_out, c.row0 * packing.unit, c.rows * packing.unit};
  };
  auto round_up = [&](int64_t v) { return (v + unit - 1) / unit * unit; };
  auto in_span = [&](const Chunk& c) {
    const Rect x = rect(c);
    const int64_t base = layout.first + c.batch0 * layout.batch;
    const int64_t last = base + (c.batches - 1) * layout.batch;
    const int64_t r_end = std::min(x.r0 + x.rows, rows),
                  c_end = std::min(4 * (x.c0 + x.cols4), cols);
    const int64_t begin =
        trans ? base + 4 * x.c0 * layout.ld + x.r0 : base + x.r0 * layout.ld + 4 * x.c0;
    if (r_end <= x.r0 || c_end <= 4 * x.c0) return Span{begin, begin + unit};
    if (trans) return Span{begin, last + (c_end - 1) * layout.ld + round_up(r_end)};
    return Span{begin, last + (r_end - 1) * layout.ld + round_up(c_end)};
  };
  auto out_span = [&](const Chunk& c) {
    const Rect x = rect(c);
    const int64_t base = c.batch0 * per_batch + (groups ? x.r0 * cols4 : x.c0 * rows_out);
    return Span{4 * base, 4 * (base + (c.batches - 1) * per_batch + x.rows * x.cols4)};
  };
  const bool blocks = trans && vec4;
  auto runs = [&](const Chunk& c) {
    const Rect x = rect(c);
    return trans ? (x.cols4 + kRun - 1) / kRun : (x.rows + kRun - 1) / kRun;
  };
  auto invocations = [&](const Chunk& c) {
    const Rect x = rect(c);
    return c.batches * runs(c) * (trans ? x.rows / (blocks ? 4 : 1) : x.cols4);
  };
  const auto chunks = split_work(
      batches, majors, 1,
      [&](const Chunk& c) {
        return fits(rt, in_span(c), true, 4 * unit) && fits(rt, out_span(c), false, 16) &&
               invocations(c) < (int64_t{1} << 31);
      },
      [&] { return too_large(rt, shape, "pack"); });
  const std::string glsl = pack_glsl(packing, trans, vec4, lanes);
  const VkFormat format = vec4 ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT;
  for (const Chunk& c : chunks) {
    const Rect x = rect(c);
    const Window src = window(rt, in, in_span(c), format, 4 * unit);
    const Window dst = window(rt, *out, out_span(c), VK_FORMAT_UNDEFINED, 16);
    const PackParams p{static_cast<uint32_t>(invocations(c)),
                       static_cast<uint32_t>(x.rows),
                       static_cast<uint32_t>(x.cols4),
                       static_cast<uint32_t>(std::clamp<int64_t>(rows - x.r0, 0, x.rows)),
                       static_cast<uint32_t>(std::clamp<int64_t>(cols - 4 * x.c0, 0, 4 * x.cols4)),
                       src.first,
                       static_cast<uint32_t>(layout.batch / unit),
                       static_cast<uint32_t>(layout.ld / unit),
                       dst.first,
                       static_cast<uint32_t>(rows_out),
                       static_cast<uint32_t>(cols4),
                       static_cast<uint32_t>(runs(c))};
    const Binding bindings[] = {src.binding, dst.binding};
    dispatch(rt, rec, {groups ? "matmul_pack_rows" : "matmul_pack_panels", glsl}, bindings, &p,
             sizeof p, groups_for(rt, (p.count + lanes - 1) / lanes));
  }
  barrier(rec.cb);
  return out;
}

}  // namespace meshvk::kernels::matmul_parts

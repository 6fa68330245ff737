// Matmul kernels. Two paths, chosen per adapter (MESHVK_MATMUL_KERNEL overrides):
// - blocked (lavapipe): a register-blocked kernel generated as GLSL, reading A and B through
//   RGBA32 texel buffers; operands that are transposed or not vec4-aligned are first repacked
//   into zero-padded temporaries (shaders/matmul_repack*.comp).
// - tiled (GPUs): 64 x 64 shared-memory tiles, any layout in its index math. No cooperative
//   matrices yet.
// Both split the work by batch entries and row blocks so that no binding exceeds the adapter's
// maxStorageBufferRange / maxTexelBufferElements.
//
// Both sum in one order, so their results (and every block shape's) agree bit for bit on every
// adapter: C[i][j] = 0 + S_0 + S_1 + ... in turn, where S_q is the sum of the products for
// k = 4q .. 4q + 3 taken in turn, ((p0 + p1) + p2) + p3; every product and sum rounds to float32
// and nothing is fused (`precise`, SPIR-V NoContraction). It is also how XLA summed the
// tutorial's layer on 8 CPU devices (each device its 4 terms of k = 32, then the all-reduce the 8
// pieces in turn), so one device prints the tutorial's digits too (tests/test_matmul_order.cpp).
#include "kernels/matmul.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cost.hpp"
#include "kernels/launch.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

namespace {

using detail::DeviceBuffer;
using detail::Recording;
using detail::RuntimeState;

// ---------------------------------------------------------------------------------------------
// Which kernel runs.

enum class Path { blocked, tiled };

// MESHVK_MATMUL_KERNEL=tiled|blocked|auto overrides the adapter's choice so that the tests run
// both kernels on lavapipe; it is read at every call so a test can switch it.
Path choose_path(RuntimeState& rt) {
  const char* env = std::getenv("MESHVK_MATMUL_KERNEL");
  const std::string v = env ? env : "";
  if (v == "tiled") return Path::tiled;
  if (v == "blocked") return Path::blocked;
  if (!v.empty() && v != "auto")
    throw Error("MESHVK_MATMUL_KERNEL=" + v +
                " names no matmul kernel; use tiled, blocked or auto");
  return rt.device().adapter().is_cpu() ? Path::blocked : Path::tiled;
}

// ---------------------------------------------------------------------------------------------
// Operands as the kernels see them.

// Element (b, i, j) of a stored matrix is at first + b * batch + i * ld + j (elements).
struct Layout {
  int64_t first = 0;
  int64_t batch = 0;  // 0: one matrix for every batch entry
  int64_t ld = 0;
};

// One dispatch's share of the work: batch entries [batch0, batch0 + batches) and, within them,
// rows [row0, row0 + rows) of C (all rows whenever batches > 1).
struct Chunk {
  int64_t batch0 = 0, batches = 1, row0 = 0, rows = 0;
};

// Elements [begin, end) of a buffer that one chunk touches.
struct Span {
  int64_t begin = 0, end = 0;
};

// A binding over a span: texels of `unit` bytes (or a storage buffer when format is undefined),
// starting at an offset aligned for the adapter; `first` is the span's first element in units.
struct Window {
  Binding binding;
  uint32_t first = 0;
  uint64_t bytes = 0;
};

uint64_t offset_alignment(const RuntimeState& rt) {
  const auto& l = rt.device_limits();
  return std::max<uint64_t>(
      {16, l.minStorageBufferOffsetAlignment, l.minTexelBufferOffsetAlignment});
}

Window window(const RuntimeState& rt, const DeviceBuffer& buf, Span span, VkFormat format,
              uint64_t unit) {
  const uint64_t align = offset_alignment(rt);
  const uint64_t begin = static_cast<uint64_t>(span.begin) * 4 / align * align;
  const uint64_t end = std::min<uint64_t>(
      (static_cast<uint64_t>(span.end) * 4 + unit - 1) / unit * unit, buf.capacity() / unit * unit);
  Window w;
  w.bytes = std::max<uint64_t>(end, begin + unit) - begin;
  w.first = static_cast<uint32_t>((static_cast<uint64_t>(span.begin) * 4 - begin) / unit);
  w.binding = format == VK_FORMAT_UNDEFINED ? Binding::storage(buf, begin, w.bytes)
                                            : Binding::texels(buf, format, begin, w.bytes);
  return w;
}

// Whether a window over `span` stays inside the adapter's binding limits.
bool fits(const RuntimeState& rt, Span span, bool texels, uint64_t unit) {
  const auto& l = rt.device_limits();
  const uint64_t limit =
      texels ? uint64_t{l.maxTexelBufferElements} * unit : uint64_t{l.maxStorageBufferRange};
  const uint64_t bytes =
      static_cast<uint64_t>(span.end - span.begin) * 4 + 2 * offset_alignment(rt) + unit;
  // Shaders index in 32 bits.
  return bytes <= limit && bytes / unit < (uint64_t{1} << 31);
}

// Splits the work into chunks each of which `fits_chunk`: as many whole batch entries as fit,
// else one entry in blocks of rows (multiples of `granule` where possible, else of `min_unit`).
// Throws Error with `what_failed()` when not even `min_unit` rows fit.
std::vector<Chunk> split_work(int64_t batch, int64_t m, int64_t granule,
                              const std::function<bool(const Chunk&)>& fits_chunk,
                              const std::function<std::string()>& what_failed,
                              int64_t min_unit = 1) {
  std::vector<Chunk> chunks;
  auto largest = [](int64_t hi, const std::function<bool(int64_t)>& ok) {
    int64_t lo = 0;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (ok(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  };
  for (int64_t b = 0; b < batch;) {
    const int64_t whole = largest(batch - b, [&](int64_t n) { return fits_chunk({b, n, 0, m}); });
    if (whole > 0) {
      chunks.push_back({b, whole, 0, m});
      b += whole;
      continue;
    }
    for (int64_t r = 0; r < m;) {
      const int64_t left = m - r;
      auto rows_of = [&](int64_t g, int64_t unit) { return std::min(left, g * unit); };
      int64_t unit = granule;
      int64_t g = largest((left + unit - 1) / unit, [&](int64_t g) {
        return fits_chunk({b, 1, r, rows_of(g, unit)});
      });
      if (g == 0) {
        unit = min_unit;
        g = largest((left + unit - 1) / unit, [&](int64_t g) {
          return fits_chunk({b, 1, r, rows_of(g, unit)});
        });
      }
      if (g == 0) throw Error(what_failed());
      chunks.push_back({b, 1, r, rows_of(g, unit)});
      r += rows_of(g, unit);
    }
    ++b;
  }
  return chunks;
}

std::string describe(const MatmulShape& s);

// The error for work that does not fit the adapter's bindings even one row at a time.
std::string too_large(const RuntimeState& rt, const MatmulShape& s, const char* kernel) {
  const auto& l = rt.device_limits();
  return "matmul: " + describe(s) +
         " does not fit the adapter's binding limits even one row of C at a time (" + kernel +
         " kernel; maxStorageBufferRange " + std::to_string(l.maxStorageBufferRange) +
         " bytes, maxTexelBufferElements " + std::to_string(l.maxTexelBufferElements) +
         "); each operand matrix must fit one binding: shard the operands over more devices or "
         "split the matmul";
}

std::string describe(const MatmulShape& s) {
  std::ostringstream o;
  o << dtype_name(s.dtype) << " [" << s.batch << "] (" << s.m << " x " << s.k << ")"
    << (s.trans_a ? "^T" : "") << " @ (" << s.k << " x " << s.n << ")" << (s.trans_b ? "^T" : "");
  return o.str();
}

// ---------------------------------------------------------------------------------------------
// Repacking: op(X) copied into a dense, zero-padded [batch][rows_out][cols_out] buffer so that the
// blocked kernel reads aligned vec4 rows; transposes, odd k and odd n go through here.

struct RepackParams {
  uint32_t count;               // output elements in this dispatch
  uint32_t rows, cols;          // valid rows of this dispatch's block and columns of op(X)
  uint32_t out_rows, out_cols;  // padded block
  uint32_t in_first, in_batch, in_ld;
  uint32_t trans;
  uint32_t out_first;
};

// op(X) is rows x cols; X is stored as `in` (cols x rows when transposed). Returns a buffer of
// batches x rows_out x cols_out elements; cols_out must be a multiple of 4.
std::shared_ptr<DeviceBuffer> repack(RuntimeState& rt, Recording& rec, const DeviceBuffer& in,
                                     Layout in_layout, bool trans, int64_t batches, int64_t rows,
                                     int64_t cols, int64_t rows_out, int64_t cols_out,
                                     const MatmulShape& shape) {
  auto out = rt.allocate(rec.device, static_cast<uint64_t>(batches * rows_out * cols_out) * 4);
  rec.keep_alive.push_back(out);
  // Sources whose stored rows are whole vec4s are moved a vec4 (or transposed a 4 x 4 block) at
  // a time, several times faster on lavapipe than element by element.
  const bool vec4 = in_layout.first % 4 == 0 && in_layout.batch % 4 == 0 && in_layout.ld % 4 == 0;
  const int64_t unit = vec4 ? 4 : 1;  // elements per source texel
  auto in_span = [&](const Chunk& c) {
    const int64_t last_row = std::min(c.row0 + c.rows, rows) - 1;  // of op(X)
    const int64_t base = in_layout.first + c.batch0 * in_layout.batch;
    const int64_t end_batch = base + (c.batches - 1) * in_layout.batch;
    if (last_row < c.row0) return Span{base, base + unit};
    auto round_up = [&](int64_t v) { return (v + unit - 1) / unit * unit; };
    if (trans)
      return Span{base + c.row0, end_batch + (cols - 1) * in_layout.ld + round_up(last_row + 1)};
    return Span{base + c.row0 * in_layout.ld, end_batch + last_row * in_layout.ld + round_up(cols)};
  };
  auto out_span = [&](const Chunk& c) {
    const int64_t base = (c.batch0 * rows_out + c.row0) * cols_out;
    return Span{base, base + ((c.batches - 1) * rows_out + c.rows) * cols_out};
  };
  auto invocations = [&](const Chunk& c) {
    return c.batches * (vec4 && trans ? (c.rows + 3) / 4 : c.rows) * (cols_out / 4);
  };
  const auto chunks = split_work(
      batches, rows_out, 64,
      [&](const Chunk& c) {
        return fits(rt, in_span(c), true, 4 * unit) && fits(rt, out_span(c), false, 16) &&
               invocations(c) < (int64_t{1} << 31);
      },
      [&] { return too_large(rt, shape, "repack"); }, unit);
  const VkFormat format = vec4 ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT;
  for (const Chunk& c : chunks) {
    const Window src = window(rt, in, in_span(c), format, 4 * unit);
    const Window dst = window(rt, *out, out_span(c), VK_FORMAT_UNDEFINED, 16);
    const int64_t valid_rows = std::clamp<int64_t>(rows - c.row0, 0, c.rows);
    const RepackParams p{static_cast<uint32_t>(invocations(c)),
                         static_cast<uint32_t>(valid_rows),
                         static_cast<uint32_t>(cols),
                         static_cast<uint32_t>(c.rows),
                         static_cast<uint32_t>(cols_out),
                         src.first,
                         static_cast<uint32_t>(in_layout.batch / unit),
                         static_cast<uint32_t>(in_layout.ld / unit),
                         trans ? 1u : 0u,
                         dst.first};
    const Binding bindings[] = {src.binding, dst.binding};
    dispatch(rt, rec, {vec4 ? "matmul_repack4" : "matmul_repack", ""}, bindings, &p, sizeof p,
             groups_for(rt, (p.count + 63) / 64));
  }
  barrier(rec.cb);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The blocked kernel (lavapipe): see docs/LAVAPIPE.md. One workgroup is one SIMD row of 8
// lanes; it owns `rows` rows of C and 8 * col_vecs vec4 columns; lane l owns vec4 columns
// l, l + 8, ... so the 8 lanes' fetches of a row of B are adjacent. A and B are read through
// RGBA32 texel buffers (much faster than storage buffers there); there is no shared memory and
// no barrier.
//
// What made it fast on lavapipe (LLVM 15, 8-wide AVX2), measured with meshvk-bench:
// - Lane l fetches row l of each group of 8 rows of A and subgroupShuffle hands the values to the
//   other lanes: one texel fetch (a call into a sampler function, ~40 instructions) per 8 rows
//   instead of one per row. (subgroupBroadcast compiles to a loop over the lanes; slower.)
// - The accumulators do not fit in registers and live on the stack, so each is loaded and
//   stored once per 4 (or 8) k, not once per multiply-add: the code walks rows outermost and
//   applies all k of a step to one accumulator before moving on.
// - 16 rows x 4 vec4 columns per lane (16 x 128 per workgroup) was the sweet spot; larger
//   blocks spill more and overflow the instruction cache.

struct BlockShape {
  int rows = 16;
  int col_vecs = 4;
  int ksteps = 1;       // vec4 steps along k per loop iteration
  bool shuffle = true;  // share rows of A through subgroup shuffles
  int columns() const { return col_vecs * 32; }
};

struct BlockedParams {
  uint32_t m, n, k4, n4;            // rows of this chunk, columns, k / 4 and n / 4 rounded up
  uint32_t a_first, a_batch, a_ld;  // in vec4s
  uint32_t b_first, b_batch, b_ld;  // in vec4s
  uint32_t c_first, c_batch, c_ld;  // in elements
  uint32_t tiles_m, tiles_n, groups;
};

class BlockedKernelWriter {
 public:
  BlockedKernelWriter(const BlockShape& s, DType dtype, bool vec4_store)
      : s_(s), f_(dtype == DType::float32), vec4_store_(vec4_store) {}

  std::string glsl() {
    header();
    g_ << "void main() {\n";
    prologue();
    g_ << "  int q = 0;\n  int bk = 0;\n  const int bstep = int(p.b_ld);\n";
    g_ << "  for (; q + " << s_.ksteps << " <= int(p.k4); q += " << s_.ksteps << ") {\n";
    step(s_.ksteps);
    g_ << "  }\n";
    if (s_.ksteps > 1) {
      g_ << "  for (; q < int(p.k4); ++q) {\n";
      step(1);
      g_ << "  }\n";
    }
    epilogue();
    g_ << "}\n";
    return g_.str();
  }

 private:
  std::string vec() const { return f_ ? "vec4" : "ivec4"; }
  std::string scalar() const { return f_ ? "float" : "int"; }
  std::string fetch(const std::string& tex, const std::string& index) const {
    return f_ ? "texelFetch(" + tex + ", " + index + ")"
              : "ivec4(texelFetch(" + tex + ", " + index + "))";
  }
  static std::string n(int v) { return std::to_string(v); }
  // Fetched rows of A: groups of 8 rows (one per lane) when shuffling, else every row.
  int a_fetches() const { return s_.shuffle ? (s_.rows + 7) / 8 : s_.rows; }

  void header() {
    g_ << "#version 450\n";
    if (s_.shuffle) g_ << "#extension GL_KHR_shader_subgroup_shuffle : require\n";
    const std::string sampler = f_ ? "samplerBuffer" : "usamplerBuffer";
    g_ << "layout(local_size_x = 8) in;\n"
       << "layout(binding = 0) uniform " << sampler << " A;\n"
       << "layout(binding = 1) uniform " << sampler << " B;\n"
       << "layout(std430, binding = 2) writeonly buffer C { " << (vec4_store_ ? vec() : scalar())
       << " c[]; };\n"
       << "layout(push_constant) uniform Params { uint m, n, k4, n4, a_first, a_batch, a_ld, "
          "b_first, b_batch, b_ld, c_first, c_batch, c_ld, tiles_m, tiles_n, groups; } p;\n";
  }

  void prologue() {
    // Shuffles address lanes by subgroup invocation; the workgroup is one subgroup of 8 then.
    const char* lane = s_.shuffle ? "gl_SubgroupInvocationID" : "gl_LocalInvocationID.x";
    g_ << "  const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;\n";
    g_ << "  if (wg >= p.groups) return;\n";
    g_ << "  const uint lane = " << lane << ";\n";
    g_ << "  const uint tm = wg % p.tiles_m;\n";
    g_ << "  const uint tn = (wg / p.tiles_m) % p.tiles_n;\n";
    g_ << "  const uint bi = wg / p.tiles_m / p.tiles_n;\n";
    g_ << "  const uint row0 = tm * " << s_.rows << "u;\n";
    g_ << "  const uint col0 = tn * " << s_.col_vecs * 8 << "u + lane;\n";
    g_ << "  const uint abase = p.a_first + bi * p.a_batch;\n";
    g_ << "  const uint bbase = p.b_first + bi * p.b_batch;\n";
    // Rows past m and columns past n read the last valid ones (always inside the binding); their
    // results are not stored.
    for (int r = 0; r < a_fetches(); ++r) {
      const std::string row =
          s_.shuffle ? "row0 + " + n(8 * r) + "u + lane" : "row0 + " + n(r) + "u";
      g_ << "  const int ai" << r << " = int(abase + min(" << row << ", p.m - 1u) * p.a_ld);\n";
    }
    for (int c = 0; c < s_.col_vecs; ++c)
      g_ << "  const int bi" << c << " = int(bbase + min(col0 + " << 8 * c << "u, p.n4 - 1u));\n";
    for (int r = 0; r < s_.rows; ++r)
      for (int c = 0; c < s_.col_vecs; ++c)
        g_ << "  " << (f_ ? "precise " : "") << vec() << " acc" << r << "_" << c << " = " << vec()
           << "(0);\n";
  }

  // A[row][k] for k = 4 (q + j) + t, as this lane sees it.
  std::string a_value(int r, int j, int t) const {
    const std::string comp(1, "xyzw"[t]);
    if (s_.shuffle)
      return "subgroupShuffle(a" + n(j) + "_" + n(r / 8) + "." + comp + ", " + n(r % 8) + "u)";
    return "a" + n(j) + "_" + n(r) + "." + comp;
  }

  // One loop iteration over `steps` vec4s of k: fetch, then every accumulator in turn takes all
  // 4 * steps products (one load and store of a spilled accumulator per 4 * steps).
  void step(int steps) {
    for (int j = 0; j < steps; ++j)
      for (int r = 0; r < a_fetches(); ++r)
        g_ << "    const " << vec() << " a" << j << "_" << r << " = "
           << fetch("A", "ai" + n(r) + " + q + " + n(j)) << ";\n";
    for (int j = 0; j < steps; ++j)
      for (int t = 0; t < 4; ++t) {
        for (int c = 0; c < s_.col_vecs; ++c)
          g_ << "    const " << vec() << " b" << j << t << "_" << c << " = "
             << fetch("B", "bi" + n(c) + " + bk") << ";\n";
        g_ << "    bk += bstep;\n";
      }
    for (int r = 0; r < s_.rows; ++r) {
      g_ << "    {\n";
      for (int j = 0; j < steps; ++j)
        for (int t = 0; t < 4; ++t)
          g_ << "      const " << scalar() << " s" << j << t << " = " << a_value(r, j, t) << ";\n";
      // acc += ((p0 + p1) + p2) + p3 (GLSL's + associates to the left): the 4 products of a
      // vec4 step are summed first, then added (the order in the header comment; the
      // accumulators are `precise`, so no driver re-associates or fuses).
      for (int c = 0; c < s_.col_vecs; ++c)
        for (int j = 0; j < steps; ++j) {
          g_ << "      acc" << r << "_" << c << " += ";
          for (int t = 0; t < 4; ++t)
            g_ << (t == 0 ? "" : " + ") << "s" << j << t << " * b" << j << t << "_" << c;
          g_ << ";\n";
        }
      g_ << "    }\n";
    }
  }

  void epilogue() {
    g_ << "  const uint cbase = p.c_first + bi * p.c_batch;\n";
    for (int r = 0; r < s_.rows; ++r) {
      g_ << "  if (row0 + " << r << "u < p.m) {\n    const uint crow = cbase + (row0 + " << r
         << "u) * p.c_ld;\n";
      for (int c = 0; c < s_.col_vecs; ++c) {
        const std::string col = "(col0 + " + n(8 * c) + "u) * 4u";
        const std::string acc = "acc" + n(r) + "_" + n(c);
        if (vec4_store_) {
          g_ << "    if (" << col << " < p.n) c[(crow + " << col << ") / 4u] = " << acc << ";\n";
        } else {
          for (int t = 0; t < 4; ++t)
            g_ << "    if (" << col << " + " << t << "u < p.n) c[crow + " << col << " + " << t
               << "u] = " << acc << "."
               << "xyzw"[t] << ";\n";
        }
      }
      g_ << "  }\n";
    }
  }

  BlockShape s_;
  bool f_;
  bool vec4_store_;
  std::ostringstream g_;
};

// Whether the blocked kernel's 8 lanes can share values through subgroup shuffles.
bool has_subgroup_shuffle(RuntimeState& rt) {
  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &sg;
  vkGetPhysicalDeviceProperties2(rt.device().adapter().handle, &props);
  // Exactly 8: then a workgroup of 8 is one whole subgroup and shuffle indices are its lanes.
  return sg.subgroupSize == 8 && (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
         (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
}

// MESHVK_MATMUL_BLOCK=<rows>x<col_vecs>[x<ksteps>] overrides the block shape, for tuning.
BlockShape block_shape_for(RuntimeState& rt, const MatmulShape& s) {
  BlockShape b;
  // Small problems take smaller blocks so rows and columns past the edges cost less.
  if (s.m <= 8) b.rows = 8;
  if (s.n <= 32)
    b.col_vecs = 1;
  else if (s.n <= 64)
    b.col_vecs = 2;
  b.shuffle = has_subgroup_shuffle(rt);
  if (const char* env = std::getenv("MESHVK_MATMUL_BLOCK"); env && *env) {
    // ROWSxCOLVECS[xKSTEPS][noshuffle], or just noshuffle; anything else is an Error.
    std::string text = env;
    if (text.size() >= 9 && text.compare(text.size() - 9, 9, "noshuffle") == 0) {
      b.shuffle = false;
      text.resize(text.size() - 9);
    }
    if (!text.empty()) {
      int rows = 0, cv = 0, ks = 1, used = 0;
      const int n = std::sscanf(text.c_str(), "%3dx%3d%n", &rows, &cv, &used);
      if (n == 2 && text[used] == 'x') {
        int more = 0;
        if (std::sscanf(text.c_str() + used, "x%3d%n", &ks, &more) == 1) used += more;
      }
      const bool digits = text.find_first_not_of("0123456789x") == std::string::npos;
      if (n != 2 || !digits || static_cast<size_t>(used) != text.size() || rows <= 0 || cv <= 0 ||
          ks <= 0)
        throw Error(std::string("MESHVK_MATMUL_BLOCK=") + env +
                    " is not a block shape; give ROWSxCOLVECS or ROWSxCOLVECSxKSTEPS (positive "
                    "integers), optionally followed by noshuffle, e.g. 4x2x1 or 4x2noshuffle");
      b.rows = rows;
      b.col_vecs = cv;
      b.ksteps = ks;
    }
  }
  return b;
}

void record_blocked(RuntimeState& rt, Recording& rec, const MatmulShape& s, const DeviceBuffer& a,
                    const DeviceBuffer& b, const DeviceBuffer& c) {
  const int64_t k4 = (s.k + 3) / 4, n4 = (s.n + 3) / 4;
  // The kernel reads A as m rows of whole vec4s along k and B as k rows of whole vec4s along n;
  // operands laid out otherwise are repacked, zero-padded, first.
  Layout la{0, s.a_batch_stride, s.trans_a ? s.m : s.k};
  Layout lb{0, s.b_batch_stride, s.trans_b ? s.k : s.n};
  std::shared_ptr<DeviceBuffer> a_packed, b_packed;
  const DeviceBuffer* pa = &a;
  const DeviceBuffer* pb = &b;
  if (s.trans_a || s.k % 4 != 0 || s.a_batch_stride % 4 != 0) {
    const int64_t batches = s.a_batch_stride == 0 ? 1 : s.batch;
    a_packed = repack(rt, rec, a, la, s.trans_a, batches, s.m, s.k, s.m, 4 * k4, s);
    pa = a_packed.get();
    la = {0, s.a_batch_stride == 0 ? 0 : s.m * 4 * k4, 4 * k4};
  }
  if (s.trans_b || s.k % 4 != 0 || s.n % 4 != 0 || s.b_batch_stride % 4 != 0) {
    const int64_t batches = s.b_batch_stride == 0 ? 1 : s.batch;
    b_packed = repack(rt, rec, b, lb, s.trans_b, batches, s.k, s.n, 4 * k4, 4 * n4, s);
    pb = b_packed.get();
    lb = {0, s.b_batch_stride == 0 ? 0 : 4 * k4 * 4 * n4, 4 * n4};
  }

  const BlockShape shape = block_shape_for(rt, s);
  const bool vec4_store = s.n % 4 == 0;
  // The text depends on a handful of choices: written once each, not on every eager call.
  static std::mutex written_mutex;
  static std::map<std::tuple<int, int, int, bool, DType, bool>, std::string> written;
  std::string glsl;
  {
    std::lock_guard lock(written_mutex);
    auto& text = written[{shape.rows, shape.col_vecs, shape.ksteps, shape.shuffle, s.dtype, vec4_store}];
    if (text.empty()) text = BlockedKernelWriter(shape, s.dtype, vec4_store).glsl();
    glsl = text;
  }
  const VkFormat texel =
      s.dtype == DType::float32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32G32B32A32_UINT;

  auto a_span = [&](const Chunk& ch) {
    const int64_t first = la.first + ch.batch0 * la.batch + ch.row0 * la.ld;
    return Span{first, la.first + (ch.batch0 + ch.batches - 1) * la.batch +
                           (ch.row0 + ch.rows - 1) * la.ld + 4 * k4};
  };
  auto b_span = [&](const Chunk& ch) {
    const int64_t first = lb.first + ch.batch0 * lb.batch;
    return Span{first,
                lb.first + (ch.batch0 + ch.batches - 1) * lb.batch + (4 * k4 - 1) * lb.ld + 4 * n4};
  };
  auto c_span = [&](const Chunk& ch) {
    const int64_t first = (ch.batch0 * s.m + ch.row0) * s.n;
    return Span{first, first + ((ch.batches - 1) * s.m + ch.rows) * s.n};
  };
  const int64_t tiles_n = (s.n + shape.columns() - 1) / shape.columns();
  const auto chunks = split_work(
      s.batch, s.m, shape.rows,
      [&](const Chunk& ch) {
        const int64_t groups = ch.batches * ((ch.rows + shape.rows - 1) / shape.rows) * tiles_n;
        return fits(rt, a_span(ch), true, 16) && fits(rt, b_span(ch), true, 16) &&
               fits(rt, c_span(ch), false, vec4_store ? 16 : 4) && groups < (int64_t{1} << 31);
      },
      [&] { return too_large(rt, s, "blocked"); });

  for (const Chunk& ch : chunks) {
    const Window wa = window(rt, *pa, a_span(ch), texel, 16);
    const Window wb = window(rt, *pb, b_span(ch), texel, 16);
    const Window wc = window(rt, c, c_span(ch), VK_FORMAT_UNDEFINED, vec4_store ? 16 : 4);
    BlockedParams p{};
    p.m = static_cast<uint32_t>(ch.rows);
    p.n = static_cast<uint32_t>(s.n);
    p.k4 = static_cast<uint32_t>(k4);
    p.n4 = static_cast<uint32_t>(n4);
    p.a_first = wa.first;
    p.a_batch = static_cast<uint32_t>(la.batch / 4);
    p.a_ld = static_cast<uint32_t>(la.ld / 4);
    p.b_first = wb.first;
    p.b_batch = static_cast<uint32_t>(lb.batch / 4);
    p.b_ld = static_cast<uint32_t>(lb.ld / 4);
    p.c_first = wc.first * (vec4_store ? 4 : 1);
    p.c_batch = static_cast<uint32_t>(s.m * s.n);
    p.c_ld = static_cast<uint32_t>(s.n);
    p.tiles_m = static_cast<uint32_t>((ch.rows + shape.rows - 1) / shape.rows);
    p.tiles_n = static_cast<uint32_t>(tiles_n);
    p.groups = static_cast<uint32_t>(ch.batches * p.tiles_m * p.tiles_n);
    const Binding bindings[] = {wa.binding, wb.binding, wc.binding};
    dispatch(rt, rec, {"matmul_blocked", glsl}, bindings, &p, sizeof p, groups_for(rt, p.groups),
             {.flops = 2ull * static_cast<uint64_t>(ch.batches * ch.rows * s.n * s.k)});
  }
}

// ---------------------------------------------------------------------------------------------
// The tiled kernel (GPUs): 16 x 16 threads share 64 x 64 tiles of A and B in shared memory, 16
// along k at a time; each thread accumulates 4 x 4 outputs, strided by 16 so neighbouring
// threads touch neighbouring addresses. General: any layout, transposes and edges in the index
// math, no repacking.

struct TiledParams {
  uint32_t m, n, k;
  uint32_t a_first, a_batch, a_ld;
  uint32_t b_first, b_batch, b_ld;
  uint32_t c_first, c_batch, c_ld;
  uint32_t tiles_m, tiles_n, groups;
};

std::string tiled_kernel(DType dtype, bool trans_a, bool trans_b) {
  const std::string S = dtype == DType::float32 ? "float" : "int";
  std::ostringstream g;
  g << "#version 450\n"
       "layout(local_size_x = 16, local_size_y = 16) in;\n"
       "layout(std430, binding = 0) readonly buffer A { "
    << S
    << " a[]; };\n"
       "layout(std430, binding = 1) readonly buffer B { "
    << S
    << " b[]; };\n"
       "layout(std430, binding = 2) writeonly buffer C { "
    << S
    << " c[]; };\n"
       "layout(push_constant) uniform Params { uint m, n, k, a_first, a_batch, a_ld, b_first, "
       "b_batch, b_ld, c_first, c_batch, c_ld, tiles_m, tiles_n, groups; } p;\n"
       "shared "
    << S
    << " As[16][65];\n"
       "shared "
    << S
    << " Bs[16][65];\n"
       "void main() {\n"
       "  const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;\n"
       "  if (wg >= p.groups) return;\n"
       "  const uint tm = wg % p.tiles_m;\n"
       "  const uint tn = (wg / p.tiles_m) % p.tiles_n;\n"
       "  const uint bi = wg / p.tiles_m / p.tiles_n;\n"
       "  const uint row0 = tm * 64u, col0 = tn * 64u;\n"
       "  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;\n"
       "  const uint tid = ty * 16u + tx;\n"
       "  const uint abase = p.a_first + bi * p.a_batch, bbase = p.b_first + bi * p.b_batch;\n"
       "  "
    << (dtype == DType::float32 ? "precise " : "") << S
    << " acc[4][4];\n"
       "  for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) acc[i][j] = "
    << S
    << "(0);\n"
       "  for (uint k0 = 0u; k0 < p.k; k0 += 16u) {\n"
       "    for (uint l = 0u; l < 4u; ++l) {\n"
       "      const uint e = tid + 256u * l;\n";
  // Each tile is loaded along the stored rows so that neighbouring threads read neighbouring
  // addresses.
  if (trans_a)
    g << "      const uint ak = e / 64u, ar = e % 64u;\n"
         "      As[ak][ar] = (row0 + ar < p.m && k0 + ak < p.k) ? a[abase + (k0 + ak) * p.a_ld + "
         "row0 + ar] : "
      << S << "(0);\n";
  else
    g << "      const uint ar = e / 16u, ak = e % 16u;\n"
         "      As[ak][ar] = (row0 + ar < p.m && k0 + ak < p.k) ? a[abase + (row0 + ar) * p.a_ld + "
         "k0 + ak] : "
      << S << "(0);\n";
  if (trans_b)
    g << "      const uint bc = e / 16u, bk = e % 16u;\n"
         "      Bs[bk][bc] = (col0 + bc < p.n && k0 + bk < p.k) ? b[bbase + (col0 + bc) * p.b_ld + "
         "k0 + bk] : "
      << S << "(0);\n";
  else
    g << "      const uint bk = e / 64u, bc = e % 64u;\n"
         "      Bs[bk][bc] = (col0 + bc < p.n && k0 + bk < p.k) ? b[bbase + (k0 + bk) * p.b_ld + "
         "col0 + bc] : "
      << S << "(0);\n";
  g << "    }\n"
       "    barrier();\n"
       "    for (uint kk = 0u; kk < 16u; kk += 4u) {\n"
       "      "
    << S
    << " av[4][4], bv[4][4];\n"
       "      for (uint t = 0u; t < 4u; ++t) for (uint i = 0u; i < 4u; ++i) {\n"
       "        av[t][i] = As[kk + t][ty + 16u * i];\n"
       "        bv[t][i] = Bs[kk + t][tx + 16u * i];\n"
       "      }\n"
       // The blocked kernel's order: the 4 products of k = kk .. kk + 3 summed in turn, then added.
       "      for (uint i = 0u; i < 4u; ++i) for (uint j = 0u; j < 4u; ++j)\n"
       "        acc[i][j] += av[0][i] * bv[0][j] + av[1][i] * bv[1][j] + av[2][i] * bv[2][j] + "
       "av[3][i] * bv[3][j];\n"
       "    }\n"
       "    barrier();\n"
       "  }\n"
       "  const uint cbase = p.c_first + bi * p.c_batch;\n"
       "  for (uint i = 0u; i < 4u; ++i) {\n"
       "    const uint r = row0 + ty + 16u * i;\n"
       "    if (r >= p.m) continue;\n"
       "    for (uint j = 0u; j < 4u; ++j) {\n"
       "      const uint col = col0 + tx + 16u * j;\n"
       "      if (col < p.n) c[cbase + r * p.c_ld + col] = acc[i][j];\n"
       "    }\n"
       "  }\n"
       "}\n";
  return g.str();
}

void record_tiled(RuntimeState& rt, Recording& rec, const MatmulShape& s, const DeviceBuffer& a,
                  const DeviceBuffer& b, const DeviceBuffer& c) {
  const Layout la{0, s.a_batch_stride, s.trans_a ? s.m : s.k};
  const Layout lb{0, s.b_batch_stride, s.trans_b ? s.k : s.n};
  const std::string glsl = tiled_kernel(s.dtype, s.trans_a, s.trans_b);
  auto a_span = [&](const Chunk& ch) {
    const int64_t base = ch.batch0 * la.batch, last = (ch.batch0 + ch.batches - 1) * la.batch;
    if (s.trans_a) return Span{base + ch.row0, last + (s.k - 1) * la.ld + ch.row0 + ch.rows};
    return Span{base + ch.row0 * la.ld, last + (ch.row0 + ch.rows - 1) * la.ld + s.k};
  };
  auto b_span = [&](const Chunk& ch) {
    const int64_t base = ch.batch0 * lb.batch, last = (ch.batch0 + ch.batches - 1) * lb.batch;
    return Span{base, last + s.k * s.n};
  };
  auto c_span = [&](const Chunk& ch) {
    const int64_t first = (ch.batch0 * s.m + ch.row0) * s.n;
    return Span{first, first + ((ch.batches - 1) * s.m + ch.rows) * s.n};
  };
  const int64_t tiles_n = (s.n + 63) / 64;
  const auto chunks = split_work(
      s.batch, s.m, 64,
      [&](const Chunk& ch) {
        const int64_t groups = ch.batches * ((ch.rows + 63) / 64) * tiles_n;
        return fits(rt, a_span(ch), false, 4) && fits(rt, b_span(ch), false, 4) &&
               fits(rt, c_span(ch), false, 4) && groups < (int64_t{1} << 31);
      },
      [&] { return too_large(rt, s, "tiled"); });
  for (const Chunk& ch : chunks) {
    const Window wa = window(rt, a, a_span(ch), VK_FORMAT_UNDEFINED, 4);
    const Window wb = window(rt, b, b_span(ch), VK_FORMAT_UNDEFINED, 4);
    const Window wc = window(rt, c, c_span(ch), VK_FORMAT_UNDEFINED, 4);
    TiledParams p{};
    p.m = static_cast<uint32_t>(ch.rows);
    p.n = static_cast<uint32_t>(s.n);
    p.k = static_cast<uint32_t>(s.k);
    p.a_first = wa.first;
    p.a_batch = static_cast<uint32_t>(la.batch);
    p.a_ld = static_cast<uint32_t>(la.ld);
    p.b_first = wb.first;
    p.b_batch = static_cast<uint32_t>(lb.batch);
    p.b_ld = static_cast<uint32_t>(lb.ld);
    p.c_first = wc.first;
    p.c_batch = static_cast<uint32_t>(s.m * s.n);
    p.c_ld = static_cast<uint32_t>(s.n);
    p.tiles_m = static_cast<uint32_t>((ch.rows + 63) / 64);
    p.tiles_n = static_cast<uint32_t>(tiles_n);
    p.groups = static_cast<uint32_t>(ch.batches * p.tiles_m * p.tiles_n);
    const Binding bindings[] = {wa.binding, wb.binding, wc.binding};
    dispatch(rt, rec, {"matmul_tiled", glsl}, bindings, &p, sizeof p, groups_for(rt, p.groups),
             {.flops = 2ull * static_cast<uint64_t>(ch.batches * ch.rows * s.n * s.k)});
  }
}

void check_shape(const MatmulShape& s, const DeviceBuffer& a, const DeviceBuffer& b,
                 const DeviceBuffer& c) {
  if (s.dtype != DType::float32 && s.dtype != DType::int32)
    throw Error("matmul: dtype " + std::string(dtype_name(s.dtype)) +
                " is not supported; use float32 or int32");
  if (s.batch < 1 || s.m < 0 || s.n < 0 || s.k < 0 || s.a_batch_stride < 0 || s.b_batch_stride < 0)
    throw Error("matmul: invalid shape " + describe(s));
  auto needs = [&](int64_t stride, int64_t matrix) { return (s.batch - 1) * stride + matrix; };
  if (static_cast<int64_t>(a.bytes() / 4) < needs(s.a_batch_stride, s.m * s.k) ||
      static_cast<int64_t>(b.bytes() / 4) < needs(s.b_batch_stride, s.k * s.n) ||
      static_cast<int64_t>(c.bytes() / 4) < s.batch * s.m * s.n)
    throw Error("matmul: buffers of " + std::to_string(a.bytes()) + ", " +
                std::to_string(b.bytes()) + " and " + std::to_string(c.bytes()) +
                " bytes are too small for " + describe(s));
  if (a.device() != c.device() || b.device() != c.device())
    throw Error("matmul: operands on devices " + std::to_string(a.device()) + " and " +
                std::to_string(b.device()) + " and the result on device " +
                std::to_string(c.device()) + "; they must share one device");
}

}  // namespace

void record_matmul(RuntimeState& rt, Recording& rec, const MatmulShape& s, const DeviceBuffer& a,
                   const DeviceBuffer& b, const DeviceBuffer& c) {
  check_shape(s, a, b, c);
  if (c.device() != rec.device)
    throw Error("matmul: operands on device " + std::to_string(c.device()) +
                " but recording for device " + std::to_string(rec.device));
  // 2 * M * N * K per batch entry (a multiply and an add); A, B and C each touched once.
  const CountedOp counted(rec, [&] {
    const uint64_t batch = static_cast<uint64_t>(s.batch), m = static_cast<uint64_t>(s.m),
                   n = static_cast<uint64_t>(s.n), k = static_cast<uint64_t>(s.k);
    const uint64_t a_elements = (s.a_batch_stride ? batch : 1) * m * k;
    const uint64_t b_elements = (s.b_batch_stride ? batch : 1) * k * n;
    return OpCost{2 * batch * m * n * k, 0, (a_elements + b_elements + batch * m * n) * dtype_size(s.dtype)};
  }, OpKind::matmul, s.dtype);
  const Path path = choose_path(rt);
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    // An empty sum: zeros (0.0f and 0 share their bits).
    if (rec.cb) vkCmdFillBuffer(rec.cb, c.vk_buffer(), c.offset(),
                    static_cast<uint64_t>(s.batch * s.m * s.n) * 4, 0);
    barrier(rec.cb);
    return;
  }
  // One entry's strides mean nothing; dropping them spares the blocked kernel a repack.
  MatmulShape shape = s;
  if (shape.batch == 1) shape.a_batch_stride = shape.b_batch_stride = 0;
  if (path == Path::blocked)
    record_blocked(rt, rec, shape, a, b, c);
  else
    record_tiled(rt, rec, shape, a, b, c);
  barrier(rec.cb);
}

}  // namespace meshvk::kernels

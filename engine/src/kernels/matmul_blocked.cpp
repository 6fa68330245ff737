// The blocked matmul kernel (lavapipe): see docs/LAVAPIPE.md. One workgroup is one SIMD row of L
// lanes (L = 8 at 256-bit vectors, 16 at 512; kernels/simd.hpp); it owns `rows` rows of C and
// L * col_vecs vec4 columns; lane l owns vec4 columns l, l + L, ... so the lanes' fetches of a
// row of B are adjacent. B is packed first into panels as wide as a workgroup's columns, A into
// groups of L rows where that pays (matmul_parts.hpp, record_blocked), and both are read through
// RGBA32 texel buffers (much faster than storage buffers there); there is no shared memory and
// no barrier.
//
// What made it fast on lavapipe (LLVM 15), measured with meshvk-bench:
// - Lane l fetches row l of each group of L rows of A and subgroupShuffle hands the values to the
//   other lanes: one texel fetch (a call into a sampler function, ~45 instructions) per L rows
//   instead of one per row. (subgroupBroadcast compiles to a loop over the lanes; slower.)
// - The packed layouts: a workgroup's B streams through one contiguous panel instead of starting
//   a new page on every row of k, and (8 lanes) the L rows of A a fetch reads are adjacent instead
//   of a stored row apart.
// - The accumulators do not fit in registers and live on the stack, so each is loaded and
//   stored once per 4 * ksteps k, not once per multiply-add: the code walks rows outermost and
//   applies all k of a step to one accumulator before moving on.
// - 8 lanes: 16 rows x 4 vec4 columns per lane; 16 lanes: 32 rows x 2 vec4 columns.
//   Larger blocks spill more and overflow the instruction cache.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <tuple>

#include "kernels/matmul_parts.hpp"
#include "kernels/simd.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels::matmul_parts {

namespace {

using detail::DeviceBuffer;
using detail::Recording;
using detail::RuntimeState;

struct BlockShape {
  int lanes = 8;
  int rows = 16;
  int col_vecs = 4;
  int ksteps = 1;        // vec4 steps along k per loop iteration
  bool shuffle = true;   // share rows of A through subgroup shuffles
  bool a_packed = true;  // else A is read as stored (row-major, rows of whole vec4s)
  int panel() const { return col_vecs * lanes; }  // vec4 columns per workgroup
};

struct BlockedParams {
  uint32_t m, n, k4;                   // rows of this chunk, columns, k / 4 rounded up
  uint32_t a_ld;                       // in vec4s, for A read as stored
  uint32_t a_first, a_batch;           // in vec4s
  uint32_t b_first, b_batch, b_panel;  // in vec4s
  uint32_t c_first, c_batch, c_ld;     // in elements
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
    g_ << "  int q = 0;\n  int qa = 0;\n  int bk = 0;\n";
    g_ << "  for (; q + " << s_.ksteps << " <= int(p.k4); q += " << s_.ksteps
       << ", qa += " << s_.ksteps * astep() << ") {\n";
    step(s_.ksteps);
    g_ << "  }\n";
    if (s_.ksteps > 1) {
      g_ << "  for (; q < int(p.k4); ++q, qa += " << astep() << ") {\n";
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
  int astep() const { return s_.a_packed ? s_.lanes : 1; }
  // Fetched rows of A: groups of L rows (one per lane) when shuffling, else every row.
  int a_fetches() const { return s_.shuffle ? s_.rows / s_.lanes : s_.rows; }

  void header() {
    g_ << "#version 450\n";
    if (s_.shuffle) g_ << "#extension GL_KHR_shader_subgroup_shuffle : require\n";
    const std::string sampler = f_ ? "samplerBuffer" : "usamplerBuffer";
    g_ << "layout(local_size_x = " << s_.lanes << ") in;\n"
       << "layout(binding = 0) uniform " << sampler << " A;\n"
       << "layout(binding = 1) uniform " << sampler << " B;\n"
       << "layout(std430, binding = 2) writeonly buffer C { " << (vec4_store_ ? vec() : scalar())
       << " c[]; };\n"
       << "layout(push_constant) uniform Params { uint m, n, k4, a_ld, a_first, a_batch, "
          "b_first, "
          "b_batch, b_panel, c_first, c_batch, c_ld, tiles_m, tiles_n, groups; } p;\n";
  }

  void prologue() {
    // Shuffles address lanes by subgroup invocation; the workgroup is one subgroup then.
    const char* lane = s_.shuffle ? "gl_SubgroupInvocationID" : "gl_LocalInvocationID.x";
    const std::string L = n(s_.lanes) + "u";
    g_ << "  const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;\n";
    g_ << "  if (wg >= p.groups) return;\n";
    g_ << "  const uint lane = " << lane << ";\n";
    g_ << "  const uint tm = wg % p.tiles_m;\n";
    g_ << "  const uint tn = (wg / p.tiles_m) % p.tiles_n;\n";
    g_ << "  const uint bi = wg / p.tiles_m / p.tiles_n;\n";
    g_ << "  const uint row0 = tm * " << s_.rows << "u;\n";
    g_ << "  const uint col0 = tn * " << s_.panel() << "u + lane;\n";
    g_ << "  const uint abase = p.a_first + bi * p.a_batch;\n";
    g_ << "  const uint bbase = p.b_first + bi * p.b_batch + tn * p.b_panel + lane;\n";
    // Rows and columns past m and n are zero padding of the packed operands (rows of A read as
    // stored: row m - 1 again); their results are not stored.
    for (int r = 0; r < a_fetches(); ++r) {
      if (!s_.a_packed) {
        const std::string row =
            s_.shuffle ? "row0 + " + n(s_.lanes * r) + "u + lane" : "row0 + " + n(r) + "u";
        g_ << "  const int ai" << r << " = int(abase + min(" << row << ", p.m - 1u) * p.a_ld);\n";
      } else if (s_.shuffle)
        g_ << "  const int ai" << r << " = int(abase + (row0 / " << L << " + " << r
           << "u) * p.k4 * " << L << " + lane);\n";
      else
        g_ << "  const int ai" << r << " = int(abase + ((row0 + " << r << "u) / " << L
           << ") * p.k4 * " << L << " + (row0 + " << r << "u) % " << L << ");\n";
    }
    for (int c = 0; c < s_.col_vecs; ++c)
      g_ << "  const int bi" << c << " = int(bbase + " << s_.lanes * c << "u);\n";
    for (int r = 0; r < s_.rows; ++r)
      for (int c = 0; c < s_.col_vecs; ++c)
        g_ << "  " << (f_ ? "precise " : "") << vec() << " acc" << r << "_" << c << " = " << vec()
           << "(0);\n";
  }

  // A[row][k] for k = 4 (q + j) + t, as this lane sees it.
  std::string a_value(int r, int j, int t) const {
    const std::string comp(1, "xyzw"[t]);
    if (s_.shuffle)
      return "subgroupShuffle(a" + n(j) + "_" + n(r / s_.lanes) + "." + comp + ", " +
             n(r % s_.lanes) + "u)";
    return "a" + n(j) + "_" + n(r) + "." + comp;
  }

  // One loop iteration over `steps` vec4s of k: fetch, then every accumulator in turn takes all
  // 4 * steps products (one load and store of a spilled accumulator per 4 * steps).
  void step(int steps) {
    for (int j = 0; j < steps; ++j)
      for (int r = 0; r < a_fetches(); ++r)
        g_ << "    const " << vec() << " a" << j << "_" << r << " = "
           << fetch("A", "ai" + n(r) + " + qa + " + n(j * astep())) << ";\n";
    for (int j = 0; j < steps; ++j)
      for (int t = 0; t < 4; ++t) {
        for (int c = 0; c < s_.col_vecs; ++c)
          g_ << "    const " << vec() << " b" << j << t << "_" << c << " = "
             << fetch("B", "bi" + n(c) + " + bk") << ";\n";
        g_ << "    bk += " << s_.panel() << ";\n";
      }
    for (int r = 0; r < s_.rows; ++r) {
      g_ << "    {\n";
      for (int j = 0; j < steps; ++j)
        for (int t = 0; t < 4; ++t)
          g_ << "      const " << scalar() << " s" << j << t << " = " << a_value(r, j, t) << ";\n";
      // acc += ((p0 + p1) + p2) + p3 (GLSL's + associates to the left): the 4 products of a
      // vec4 step are summed first, then added (the order in matmul.cpp's header comment; the
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
        const std::string col = "(col0 + " + n(s_.lanes * c) + "u) * 4u";
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

// MESHVK_MATMUL_BLOCK=<rows>x<col_vecs>[x<ksteps>] overrides the block shape, for tuning.
BlockShape block_shape_for(RuntimeState& rt, const MatmulShape& s) {
  const Simd simd = simd_of(rt);
  BlockShape b;
  b.lanes = static_cast<int>(simd.lanes);
  b.shuffle = simd.shuffle;
  if (b.lanes == 16) {
    b.rows = 32;
    b.col_vecs = 2;
  }
  // Small problems take smaller blocks so rows and columns past the edges cost less.
  if (s.m <= b.lanes) b.rows = b.lanes;
  const int64_t n4 = (s.n + 3) / 4;
  b.col_vecs = static_cast<int>(std::min<int64_t>(b.col_vecs, (n4 + b.lanes - 1) / b.lanes));
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
  // A shuffle shares one fetch among L rows: whole groups of L rows per block.
  if (b.shuffle) b.rows = (b.rows + b.lanes - 1) / b.lanes * b.lanes;
  return b;
}

// Whether B's stored layout is already its packed one, so the kernel reads it in place: one
// panel as wide as B's rows (its rows then follow one another as in a panel), no padding along
// k or n, batch entries back to back. The GPT step's products by 128 columns (d_model) are such:
// their packs were plain copies of up to 512 KiB, 0.43 ms each on lavapipe.
bool b_read_as_stored(const BlockShape& shape, const MatmulShape& s) {
  return !s.trans_b && s.n % 4 == 0 && s.k % 4 == 0 && s.n / 4 == shape.panel() &&
         (s.batch == 1 || s.b_batch_stride == 0 || s.b_batch_stride == s.k * s.n);
}

}  // namespace

std::shared_ptr<DeviceBuffer> pack_blocked_b(RuntimeState& rt, Recording& rec, const MatmulShape& s,
                                             const DeviceBuffer& b) {
  const BlockShape shape = block_shape_for(rt, s);
  if (b_read_as_stored(shape, s)) return nullptr;
  const int64_t k4 = (s.k + 3) / 4, n4 = (s.n + 3) / 4;
  const int64_t panel = shape.panel();
  const int64_t n4_out = (n4 + panel - 1) / panel * panel;
  const int64_t b_batches = s.b_batch_stride == 0 ? 1 : s.batch;
  return pack_operand(rt, rec, b, {0, s.b_batch_stride, s.trans_b ? s.k : s.n}, s.trans_b, b_batches, s.k, s.n,
                      4 * k4, n4_out, {Packing::column_panels, panel}, s);
}

void record_blocked(RuntimeState& rt, Recording& rec, const MatmulShape& s, const DeviceBuffer& a,
                    const DeviceBuffer& b, const DeviceBuffer& c, const std::shared_ptr<DeviceBuffer>& packed_b) {
  BlockShape shape = block_shape_for(rt, s);
  const int64_t k4 = (s.k + 3) / 4, n4 = (s.n + 3) / 4;
  // Packed sizes: whole blocks of rows (and whole groups of L rows), whole panels of columns.
  const int64_t rows_pad = std::lcm<int64_t>(shape.rows, shape.lanes);
  const int64_t m_out = (s.m + rows_pad - 1) / rows_pad * rows_pad;
  const int64_t panel = shape.panel();
  const int64_t n4_out = (n4 + panel - 1) / panel * panel;
  const int64_t a_batches = s.a_batch_stride == 0 ? 1 : s.batch;
  const int64_t b_batches = s.b_batch_stride == 0 ? 1 : s.batch;
  // B is packed unless it is stored as packed (b_read_as_stored); A where the kernel cannot read
  // it as stored (transposed, or rows not whole vec4s), at 8 lanes, and at 16 lanes when its
  // stored rows are 8 KiB or longer. At 8 lanes packing A paid at N = 1024 and 2048 (one lavapipe thread: 44-47% of OpenBLAS packed,
  // 23-29% as stored). At 16 it did not at N = 1024 (two threads: 42-53% packed, 53-56% as
  // stored) but did from 2048 on, where the stored rows' stride costs more (2048: 62-63% against
  // 53-59%; 4096 in `meshvk-bench peers`: 773-786 ms against 908-1013 ms; docs/LAVAPIPE.md).
  shape.a_packed =
      shape.lanes == 8 || s.k >= 2048 || s.trans_a || s.k % 4 != 0 || s.a_batch_stride % 4 != 0;
  std::shared_ptr<DeviceBuffer> a_buf;
  const DeviceBuffer* pa = &a;
  int64_t a_batch = s.a_batch_stride / 4;  // vec4s
  const int64_t a_ld = k4;
  if (shape.a_packed) {
    a_buf = pack_operand(rt, rec, a, {0, s.a_batch_stride, s.trans_a ? s.m : s.k}, s.trans_a,
                         a_batches, s.m, s.k, m_out, k4, {Packing::row_groups, shape.lanes}, s);
    pa = a_buf.get();
    a_batch = s.a_batch_stride == 0 ? 0 : m_out * k4;
  }
  std::shared_ptr<DeviceBuffer> b_buf = packed_b;
  const DeviceBuffer* pb = &b;
  if (b_read_as_stored(shape, s)) {
    if (b_buf) throw Error("internal: a packed B given for " + describe(s) + ", read as stored");
  } else if (b_buf) {
    // Packed by pack_blocked_b for the same shape (here or on another device, then copied).
    if (b_buf->bytes() != static_cast<uint64_t>(b_batches * 4 * k4 * n4_out) * 16)
      throw Error("internal: a packed B of " + std::to_string(b_buf->bytes()) + " bytes for " + describe(s));
    rec.keep_alive.push_back(b_buf);
  } else {
    b_buf = pack_blocked_b(rt, rec, s, b);
  }
  if (b_buf) pb = b_buf.get();
  const int64_t b_batch = s.b_batch_stride == 0 ? 0 : 4 * k4 * n4_out;

  const bool vec4_store = s.n % 4 == 0;
  // The text depends on a handful of choices: written once each, not on every eager call.
  static std::mutex written_mutex;
  static std::map<std::tuple<int, int, int, int, bool, bool, DType, bool>, std::string> written;
  std::string glsl;
  {
    std::lock_guard lock(written_mutex);
    auto& text = written[{shape.lanes, shape.rows, shape.col_vecs, shape.ksteps, shape.shuffle,
                          shape.a_packed, s.dtype, vec4_store}];
    if (text.empty()) text = BlockedKernelWriter(shape, s.dtype, vec4_store).glsl();
    glsl = text;
  }
  const VkFormat texel =
      s.dtype == DType::float32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32G32B32A32_UINT;

  auto a_span = [&](const Chunk& ch) {
    // Packed, the padding rows of the last block are there to read; as stored, they read row
    // m - 1 instead.
    const int64_t rows_end = shape.a_packed
                                 ? (ch.row0 + ch.rows + rows_pad - 1) / rows_pad * rows_pad
                                 : ch.row0 + ch.rows;
    return Span{4 * (ch.batch0 * a_batch + ch.row0 * a_ld),
                4 * ((ch.batch0 + ch.batches - 1) * a_batch + rows_end * a_ld)};
  };
  auto b_span = [&](const Chunk& ch) {
    return Span{4 * ch.batch0 * b_batch,
                4 * ((ch.batch0 + ch.batches - 1) * b_batch + 4 * k4 * n4_out)};
  };
  auto c_span = [&](const Chunk& ch) {
    const int64_t first = (ch.batch0 * s.m + ch.row0) * s.n;
    return Span{first, first + ((ch.batches - 1) * s.m + ch.rows) * s.n};
  };
  const int64_t tiles_n = n4_out / panel;
  const auto chunks = split_work(
      s.batch, s.m, rows_pad,
      [&](const Chunk& ch) {
        const int64_t groups = ch.batches * ((ch.rows + shape.rows - 1) / shape.rows) * tiles_n;
        return fits(rt, a_span(ch), true, 16) && fits(rt, b_span(ch), true, 16) &&
               fits(rt, c_span(ch), false, vec4_store ? 16 : 4) && groups < (int64_t{1} << 31);
      },
      [&] { return too_large(rt, s, "blocked"); }, rows_pad);

  for (const Chunk& ch : chunks) {
    const Window wa = window(rt, *pa, a_span(ch), texel, 16);
    const Window wb = window(rt, *pb, b_span(ch), texel, 16);
    const Window wc = window(rt, c, c_span(ch), VK_FORMAT_UNDEFINED, vec4_store ? 16 : 4);
    BlockedParams p{};
    p.m = static_cast<uint32_t>(ch.rows);
    p.n = static_cast<uint32_t>(s.n);
    p.k4 = static_cast<uint32_t>(k4);
    p.a_ld = static_cast<uint32_t>(a_ld);
    p.a_first = wa.first;
    p.a_batch = static_cast<uint32_t>(a_batch);
    p.b_first = wb.first;
    p.b_batch = static_cast<uint32_t>(b_batch);
    p.b_panel = static_cast<uint32_t>(4 * k4 * panel);
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

}  // namespace meshvk::kernels::matmul_parts

// Matmul kernels. Two paths, chosen per adapter (MESHVK_MATMUL_KERNEL overrides):
// - blocked (lavapipe, matmul_blocked.cpp): a register-blocked kernel generated as GLSL, one
//   SIMD row per workgroup, reading A and B through RGBA32 texel buffers after packing B (and A
//   where that pays) into zero-padded layouts that its lanes read contiguously (matmul_pack.cpp,
//   matmul_parts.hpp).
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
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cost.hpp"
#include "kernels/launch.hpp"
#include "kernels/matmul_parts.hpp"
#include "meshvk/error.hpp"

namespace meshvk::kernels {

using detail::DeviceBuffer;
using detail::Recording;
using detail::RuntimeState;
using namespace matmul_parts;

// ---------------------------------------------------------------------------------------------
// Splitting work to fit the adapter's bindings.

namespace matmul_parts {

namespace {

uint64_t offset_alignment(const RuntimeState& rt) {
  const auto& l = rt.device_limits();
  return std::max<uint64_t>(
      {16, l.minStorageBufferOffsetAlignment, l.minTexelBufferOffsetAlignment});
}

}  // namespace

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

bool fits(const RuntimeState& rt, Span span, bool texels, uint64_t unit) {
  const auto& l = rt.device_limits();
  const uint64_t limit =
      texels ? uint64_t{l.maxTexelBufferElements} * unit : uint64_t{l.maxStorageBufferRange};
  const uint64_t bytes =
      static_cast<uint64_t>(span.end - span.begin) * 4 + 2 * offset_alignment(rt) + unit;
  // Shaders index in 32 bits.
  return bytes <= limit && bytes / unit < (uint64_t{1} << 31);
}

std::vector<Chunk> split_work(int64_t batch, int64_t m, int64_t granule,
                              const std::function<bool(const Chunk&)>& fits_chunk,
                              const std::function<std::string()>& what_failed,
                              int64_t min_unit) {
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

}  // namespace matmul_parts

namespace {

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
  if (s.batch < 0 || s.m < 0 || s.n < 0 || s.k < 0 || s.a_batch_stride < 0 || s.b_batch_stride < 0)
    throw Error("matmul: invalid shape " + describe(s));
  if (s.batch == 0) return;  // no products: nothing is read or written
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

std::shared_ptr<DeviceBuffer> record_pack_b(RuntimeState& rt, Recording& rec, const MatmulShape& s,
                                            const DeviceBuffer& b) {
  if (choose_path(rt) != Path::blocked || s.batch == 0 || s.m == 0 || s.n == 0 || s.k == 0) return nullptr;
  MatmulShape shape = s;
  if (shape.batch == 1) shape.a_batch_stride = shape.b_batch_stride = 0;
  return matmul_parts::pack_blocked_b(rt, rec, shape, b);
}

void record_matmul(RuntimeState& rt, Recording& rec, const MatmulShape& s, const DeviceBuffer& a,
                   const DeviceBuffer& b, const DeviceBuffer& c, const std::shared_ptr<DeviceBuffer>& packed_b) {
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
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
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
    record_blocked(rt, rec, shape, a, b, c, packed_b);
  else
    record_tiled(rt, rec, shape, a, b, c);
  barrier(rec.cb);
}

}  // namespace meshvk::kernels

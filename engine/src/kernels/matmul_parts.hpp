#pragma once
// The pieces the matmul kernels share (matmul.cpp, matmul_blocked.cpp, matmul_pack.cpp): how
// work is split so that no binding exceeds the adapter's limits, and the packed operand layouts of
// the blocked kernel.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/launch.hpp"
#include "kernels/matmul.hpp"

namespace meshvk::kernels::matmul_parts {

// Element (b, i, j) of a stored matrix is at first + b * batch + i * ld + j (elements).
struct Layout {
  int64_t first = 0;
  int64_t batch = 0;  // 0: one matrix for every batch entry
  int64_t ld = 0;
};

// One dispatch's share of the work: batch entries [batch0, batch0 + batches) and, within them,
// rows [row0, row0 + rows) (all rows whenever batches > 1).
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

Window window(const detail::RuntimeState& rt, const detail::DeviceBuffer& buf, Span span,
              VkFormat format, uint64_t unit);

// Whether a window over `span` stays inside the adapter's binding limits.
bool fits(const detail::RuntimeState& rt, Span span, bool texels, uint64_t unit);

// Splits the work into chunks each of which `fits_chunk`: as many whole batch entries as fit,
// else one entry in blocks of rows (multiples of `granule` where possible, else of `min_unit`).
// Throws Error with `what_failed()` when not even `min_unit` rows fit.
std::vector<Chunk> split_work(int64_t batch, int64_t m, int64_t granule,
                              const std::function<bool(const Chunk&)>& fits_chunk,
                              const std::function<std::string()>& what_failed,
                              int64_t min_unit = 1);

std::string describe(const MatmulShape& s);

// The error for work that does not fit the adapter's bindings even one row at a time.
std::string too_large(const detail::RuntimeState& rt, const MatmulShape& s, const char* kernel);

// The blocked kernel's operand layouts, in vec4s (4 consecutive elements along k for A, along n
// for B), zero-padded:
// - A packed in groups of `group` rows: vec4 q of row r is at ((r / group) * k4 + q) * group +
//   r % group, so the `group` lanes of a SIMD row fetching one row each of a group read adjacent
//   vec4s, and a group's rows stream through memory as q grows.
// - B packed in column panels of `panel` vec4s: vec4 c of row k is at ((c / panel) * k_rows + k)
//   * panel + c % panel, so a workgroup's tile of B is one contiguous stream along k.
struct Packing {
  enum Kind { row_groups, column_panels } kind = row_groups;
  int64_t unit = 8;  // group (row_groups) or panel (column_panels)
};

// op(X) (rows x cols; X stored as `layout`, cols x rows when `trans`) packed for `batches` batch
// entries into a new buffer of batches x rows_out x cols4 vec4s (rows_out and cols4 are padded
// sizes: multiples of the packing's unit along its dimension).
std::shared_ptr<detail::DeviceBuffer> pack_operand(detail::RuntimeState& rt, detail::Recording& rec,
                                                   const detail::DeviceBuffer& in, Layout layout,
                                                   bool trans, int64_t batches, int64_t rows,
                                                   int64_t cols, int64_t rows_out, int64_t cols4,
                                                   Packing packing, const MatmulShape& shape);

void record_blocked(detail::RuntimeState& rt, detail::Recording& rec, const MatmulShape& s,
                    const detail::DeviceBuffer& a, const detail::DeviceBuffer& b,
                    const detail::DeviceBuffer& c,
                    const std::shared_ptr<detail::DeviceBuffer>& packed_b = nullptr);
// B packed for the blocked kernel (the column panels record_blocked reads).
std::shared_ptr<detail::DeviceBuffer> pack_blocked_b(detail::RuntimeState& rt, detail::Recording& rec,
                                                     const MatmulShape& s, const detail::DeviceBuffer& b);

}  // namespace meshvk::kernels::matmul_parts

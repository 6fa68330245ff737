#include "exec/box.hpp"

#include <algorithm>
#include <vector>

namespace meshvk::exec {

std::optional<Index> intersect(const Index& a, const Index& b) {
  Index out(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    out[d] = {std::max(a[d].start, b[d].start), std::min(a[d].stop, b[d].stop)};
    if (out[d].start > out[d].stop) return std::nullopt;
    // Empty overlap of non-empty ranges is no overlap; empty arrays still have one (empty) box.
    if (out[d].start == out[d].stop && a[d].size() > 0 && b[d].size() > 0) return std::nullopt;
  }
  return out;
}

Index whole(const Shape& shape) {
  Index index;
  for (const int64_t d : shape) index.push_back({0, d});
  return index;
}

void for_each_run(const Index& box, const Index& src, const Index& dst,
                  const std::function<void(uint64_t, uint64_t, uint64_t)>& run) {
  const size_t rank = box.size();
  for (const Slice& s : box)
    if (s.size() == 0) return;
  // Row-major strides of both layouts.
  std::vector<uint64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) {
    src_stride[d - 1] = src_stride[d] * src[d].size();
    dst_stride[d - 1] = dst_stride[d] * dst[d].size();
  }
  // Runs span dimensions k.. : every dimension after k is whole in the box, the source and the
  // destination alike, so those elements are contiguous in both layouts.
  size_t k = rank == 0 ? 0 : rank - 1;
  while (k > 0 && box[k] == src[k] && box[k] == dst[k]) --k;
  uint64_t length = 1;
  for (size_t d = k; d < rank; ++d) length *= box[d].size();
  if (rank == 0) {
    run(0, 0, 1);
    return;
  }
  std::vector<int64_t> i(k);
  for (size_t d = 0; d < k; ++d) i[d] = box[d].start;
  while (true) {
    uint64_t so = 0, doff = 0;
    for (size_t d = 0; d < k; ++d) {
      so += (i[d] - src[d].start) * src_stride[d];
      doff += (i[d] - dst[d].start) * dst_stride[d];
    }
    so += (box[k].start - src[k].start) * src_stride[k];
    doff += (box[k].start - dst[k].start) * dst_stride[k];
    run(so, doff, length);
    size_t d = k;
    while (d > 0) {
      --d;
      if (++i[d] < box[d].stop) break;
      i[d] = box[d].start;
      if (d == 0) return;
    }
    if (k == 0) return;
  }
}

}  // namespace meshvk::exec

#pragma once
// Host references the fast-path tests share (test_fast_paths_*.cpp): numpy's broadcasting and
// transposes on host vectors, exact comparisons, small integer values, a mesh of n devices.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace fast_paths {

namespace mv = meshvk;
using mv::Array;
using mv::P;
using mv::Shape;


inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

inline std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// Flat index into `in` (shape `ins`, right-aligned numpy broadcast) of the output's multi-index.
inline int64_t bcast_index(const std::vector<int64_t>& idx, const Shape& ins) {
  const auto st = strides_of(ins);
  const size_t off = idx.size() - ins.size();
  int64_t f = 0;
  for (size_t k = 0; k < ins.size(); ++k) f += (ins[k] == 1 ? 0 : idx[off + k]) * st[k];
  return f;
}

inline std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

inline Shape bshape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape o(n, 1);
  for (size_t k = 0; k < n; ++k) {
    const int64_t da = k + a.size() >= n ? a[k + a.size() - n] : 1;
    const int64_t db = k + b.size() >= n ? b[k + b.size() - n] : 1;
    o[k] = da == 1 ? db : da;
  }
  return o;
}

// Host transpose: out[i] = in[i permuted back].
template <class T>
std::vector<T> host_transpose(const std::vector<T>& in, const Shape& s, const std::vector<int>& perm) {
  Shape os(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) os[k] = s[perm[k]];
  const auto ist = strides_of(s);
  std::vector<T> out(in.size());
  for (int64_t f = 0; f < static_cast<int64_t>(out.size()); ++f) {
    const auto idx = unravel(f, os);
    int64_t src = 0;
    for (size_t k = 0; k < perm.size(); ++k) src += idx[k] * ist[perm[k]];
    out[f] = in[src];
  }
  return out;
}

template <class T>
void expect_exact(const Array& got, const std::vector<T>& want, const std::string& what) {
  const auto v = got.to_host<T>();
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(v[i])) << what << " at " << i;
        continue;
      }
    }
    ASSERT_EQ(v[i], want[i]) << what << " at " << i;
  }
}

inline std::vector<float> small_ints(size_t n, uint32_t seed) {
  std::vector<float> v = random_floats(n, seed, -50.f, 50.f);
  for (auto& x : v) x = std::round(x);
  return v;
}

inline mv::Mesh mesh_of(int n) {
  std::vector<int> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return mv::make_mesh({n}, {"x"}, {}, ids);
}


}  // namespace fast_paths

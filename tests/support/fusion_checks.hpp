#pragma once
// Helpers of the fusion adversarial tests (test_fusion_adversarial_reduce.cpp and
// test_fusion_adversarial_multi.cpp): random inputs, bit comparisons, host references in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace optax = meshvk::optax;
using mv::P;

namespace fusion_checks {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::nanf("");

int64_t size_of(const mv::Shape& s) {
  int64_t n = 1;
  for (const int64_t d : s) n *= d;
  return n;
}

std::string str(const mv::Shape& s) { return mv::shape_to_string(s); }
std::string str(const std::vector<int>& axes) {
  std::string t = "{";
  for (size_t i = 0; i < axes.size(); ++i) t += (i ? "," : "") + std::to_string(axes[i]);
  return t + "}";
}

// Mixed magnitudes (so a change of summation order shows in the low bits).
std::vector<float> random_values(int64_t n, uint32_t seed, int lo = -6, int hi = 6) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> expo(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  return v;
}

std::vector<int32_t> random_ints(int64_t n, uint32_t seed, int lo = -1000, int hi = 1000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// A host array: values in double and a shape (for the references).
struct Host {
  std::vector<double> v;
  mv::Shape shape;
};

Host host_of(const std::vector<float>& v, mv::Shape shape) { return {std::vector<double>(v.begin(), v.end()), shape}; }
Host host_of(const std::vector<int32_t>& v, mv::Shape shape) { return {std::vector<double>(v.begin(), v.end()), shape}; }

mv::Array dev(const std::vector<float>& v, mv::Shape shape) { return mv::array(std::span<const float>(v), shape); }
mv::Array dev(const std::vector<int32_t>& v, mv::Shape shape) { return mv::array(std::span<const int32_t>(v), shape); }

// The numpy broadcast of the inputs' shapes.
mv::Shape broadcast_shape(const std::vector<Host>& ins) {
  size_t rank = 0;
  for (const Host& h : ins) rank = std::max(rank, h.shape.size());
  mv::Shape out(rank, 1);
  for (const Host& h : ins)
    for (size_t i = 0; i < h.shape.size(); ++i) {
      const size_t d = rank - h.shape.size() + i;
      if (h.shape[i] != 1) out[d] = h.shape[i];
    }
  return out;
}

// f applied elementwise over the inputs broadcast together, in double.
Host host_eval(const std::vector<Host>& ins, const std::function<double(const std::vector<double>&)>& f) {
  const mv::Shape out = broadcast_shape(ins);
  Host r{{}, out};
  const int64_t n = size_of(out);
  r.v.resize(static_cast<size_t>(n));
  std::vector<int64_t> idx(out.size(), 0);
  std::vector<double> args(ins.size());
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e;
    for (size_t d = out.size(); d-- > 0;) {
      idx[d] = out[d] ? rest % out[d] : 0;
      rest = out[d] ? rest / out[d] : 0;
    }
    for (size_t k = 0; k < ins.size(); ++k) {
      const Host& h = ins[k];
      int64_t at = 0;
      for (size_t i = 0; i < h.shape.size(); ++i) {
        const size_t d = out.size() - h.shape.size() + i;
        at = at * h.shape[i] + (h.shape[i] == 1 ? 0 : idx[d]);
      }
      args[k] = h.v[static_cast<size_t>(at)];
    }
    r.v[static_cast<size_t>(e)] = f(args);
  }
  return r;
}

enum class Op { sum, max, min, mean };
const char* name_of(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::max: return "max";
    case Op::min: return "min";
    case Op::mean: return "mean";
  }
  return "?";
}

mv::Array apply(Op op, const mv::Array& a, const std::vector<int>& axes, bool keepdims) {
  switch (op) {
    case Op::sum: return mv::sum(a, axes, keepdims);
    case Op::max: return mv::max(a, axes, keepdims);
    case Op::min: return mv::min(a, axes, keepdims);
    case Op::mean: return mv::mean(a, axes, keepdims);
  }
  return a;
}

// The reduction of a host array over `axes` (all when empty; negative from the end): each kept
// row's values in double, with numpy's NaN propagation; also the sum of magnitudes (tolerance).
struct HostReduced {
  std::vector<double> value, magnitude;
};
HostReduced host_reduce(const Host& h, Op op, std::vector<int> axes) {
  const size_t rank = h.shape.size();
  std::vector<bool> red(rank, axes.empty());
  for (int a : axes) red[static_cast<size_t>(a < 0 ? a + static_cast<int>(rank) : a)] = true;
  int64_t kept = 1, count = 1;
  for (size_t d = 0; d < rank; ++d) (red[d] ? count : kept) *= h.shape[d];
  HostReduced r;
  r.value.assign(static_cast<size_t>(kept), op == Op::max ? -INFINITY : op == Op::min ? INFINITY : 0.0);
  r.magnitude.assign(static_cast<size_t>(kept), 0.0);
  std::vector<bool> nan(static_cast<size_t>(kept), false);
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < size_of(h.shape); ++e) {
    int64_t rest = e;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = rest % h.shape[d];
      rest /= h.shape[d];
    }
    int64_t row = 0;
    for (size_t d = 0; d < rank; ++d)
      if (!red[d]) row = row * h.shape[d] + idx[d];
    const double v = h.v[static_cast<size_t>(e)];
    const size_t k = static_cast<size_t>(row);
    if (std::isnan(v)) nan[k] = true;
    if (op == Op::max) r.value[k] = std::max(r.value[k], v);
    else if (op == Op::min) r.value[k] = std::min(r.value[k], v);
    else r.value[k] += v;
    r.magnitude[k] += std::isfinite(v) ? std::abs(v) : 0;
  }
  for (size_t k = 0; k < r.value.size(); ++k) {
    if (nan[k]) r.value[k] = NAN;
    if (op == Op::mean) {
      r.value[k] /= static_cast<double>(count);
      r.magnitude[k] /= static_cast<double>(count);
    }
  }
  return r;
}

template <class T>
bool same_bits(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) && std::isnan(b)) return true;  // a NaN's sign and payload may differ
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
void expect_same_bits(const mv::Array& got, const mv::Array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.to_host<T>(), w = want.to_host<T>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    if (!same_bits(g[i], w[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << +g[i] << ", unfused/reference " << +w[i];
      return;
    }
}

void expect_same_bits_any(const mv::Array& got, const mv::Array& want, const std::string& what) {
  switch (want.dtype()) {
    case mv::DType::float32: expect_same_bits<float>(got, want, what); break;
    case mv::DType::int32: expect_same_bits<int32_t>(got, want, what); break;
    case mv::DType::bool_:
      expect_same_bits<int32_t>(mv::astype(got, mv::DType::int32), mv::astype(want, mv::DType::int32), what);
      break;
    default: FAIL() << what << ": unexpected dtype";
  }
}

// Device values near the host reference: NaN where it is NaN, infinities equal, else within
// rel * (the row's sum of magnitudes) + abs.
void expect_near_host(const mv::Array& got, const std::vector<double>& want, const std::vector<double>& magnitude,
                      const std::string& what, double rel = 2e-6, double abs_tol = 1e-30) {
  std::vector<double> g;
  if (got.dtype() == mv::DType::float32) {
    for (float f : got.to_host<float>()) g.push_back(f);
  } else if (got.dtype() == mv::DType::int32 || got.dtype() == mv::DType::bool_) {
    for (int32_t i : mv::astype(got, mv::DType::int32).to_host<int32_t>()) g.push_back(i);
  } else {
    FAIL() << what << ": dtype";
  }
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = want[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g[i])) << what << ": element " << i << " is " << g[i] << ", host NaN";
    } else if (std::isinf(w)) {
      EXPECT_EQ(g[i], w) << what << ": element " << i;
    } else {
      EXPECT_NEAR(g[i], w, rel * magnitude[i] + abs_tol + rel * std::abs(w)) << what << ": element " << i;
    }
    if (::testing::Test::HasFailure()) return;  // one message per check is enough
  }
}

using Program = std::function<mv::Array()>;

// op(program()) over axes, fused, against the program materialized first and reduced (bits), and
// against the host's reduction of `host` (the program's values in double).
void check_reduction(const Program& program, const Host& host, Op op, const std::vector<int>& axes, bool keepdims,
                     const std::string& what, double rel = 2e-6) {
  const std::string where = what + " " + name_of(op) + str(axes) + (keepdims ? " keepdims" : "");
  const mv::Array unfused_input = program();
  mv::detail::materialized(unfused_input);
  // mean converts ints and bools to float32 and sum converts bools to int32 first, as a pending
  // program the reduction would fuse: convert and materialize for the unfused reference.
  mv::Array reduced_input = unfused_input;
  if (op == Op::mean && unfused_input.dtype() != mv::DType::float32) reduced_input = mv::astype(unfused_input, mv::DType::float32);
  if (op == Op::sum && unfused_input.dtype() == mv::DType::bool_) reduced_input = mv::astype(unfused_input, mv::DType::int32);
  mv::detail::materialized(reduced_input);
  const mv::Array want = apply(op, reduced_input, axes, keepdims);
  const mv::Array fused_input = program();
  const bool was_pending = mv::detail::is_pending(fused_input);
  const mv::Array got = apply(op, fused_input, axes, keepdims);
  expect_same_bits_any(got, want, where + " (fused vs unfused)");
  // The program's values, read afterwards, are unchanged by whatever the fusion did with them.
  if (was_pending) expect_same_bits_any(fused_input, unfused_input, where + " (the input afterwards)");
  const HostReduced ref = host_reduce(host, op, axes);
  expect_near_host(got, ref.value, ref.magnitude, where + " (host)", rel);
}

const std::vector<Op> kAllOps = {Op::sum, Op::max, Op::min, Op::mean};

}  // namespace fusion_checks

using namespace fusion_checks;


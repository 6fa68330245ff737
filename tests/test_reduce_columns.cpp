// Reductions over leading axes (a bias gradient's sum over the batch) read their input in place
// instead of transposing it first: one dispatch instead of a strided copy plus the reduction, with
// results equal bit for bit to reducing the transpose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

uint64_t dispatches() {
  return test_runtime().state()->dispatches.load();
}

mv::Array random_array(mv::Shape shape, uint32_t seed) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  // Values of mixed magnitude, so any change of summation order shows in the low bits.
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-8, 8);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  return mv::array(std::span<const float>(v), shape);
}

template <class T>
void expect_same_bits(const mv::Array& got, const mv::Array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_host<T>(), w = want.to_host<T>();
  ASSERT_EQ(g.size(), w.size()) << what;
  EXPECT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(T)), 0) << what;
}

// x reduced over its leading `lead` axes, against the same reduction of its transpose
// ([rows, n], reduced over the trailing axis: the path that reads contiguous rows).
mv::Array transposed_rows(const mv::Array& x, size_t lead) {
  int64_t n = 1, rows = 1;
  for (size_t d = 0; d < x.ndim(); ++d) (d < lead ? n : rows) *= x.shape()[d];
  return mv::transpose(mv::reshape(x, {n, rows}));
}

}  // namespace

TEST(ReduceColumns, SumOverLeadingAxesEqualsSumOfTransposeBitForBit) {
  struct Case {
    mv::Shape shape;
    size_t lead;
  };
  // n a multiple of 4 (vector accumulation) or not, one pass or several (n > 4096), 3-D; columns
  // a multiple of 4 (four per invocation, read as one texel) or not.
  const Case cases[] = {{{64, 1024}, 1}, {{1000, 33}, 1}, {{1001, 5}, 1}, {{9000, 12}, 1},
                        {{3, 4, 5}, 2},  {{6, 7, 2, 3}, 1}, {{4, 4}, 1},    {{8200, 8}, 1},
                        {{12, 1028}, 1}, {{16, 2, 4}, 1},  {{20, 3, 4}, 2}, {{4100, 4}, 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const mv::Array x = random_array(c.shape, seed++);
    std::vector<int> axes;
    for (size_t d = 0; d < c.lead; ++d) axes.push_back(static_cast<int>(d));
    const mv::Array want = mv::sum(transposed_rows(x, c.lead), {1});
    const mv::Shape kept(c.shape.begin() + static_cast<ptrdiff_t>(c.lead), c.shape.end());
    const mv::Array got = mv::sum(x, axes);
    EXPECT_EQ(got.shape(), kept);
    expect_same_bits<float>(got.flatten(), want,
                            "sum over the " + std::to_string(c.lead) + " leading axes of a " +
                                std::to_string(x.size()) + "-element array");
  }
}

TEST(ReduceColumns, MaxMinArgmaxAndIntegersOverAxisZero) {
  const mv::Array x = random_array({777, 9}, 42);
  const mv::Array t = mv::transpose(x);
  expect_same_bits<float>(mv::max(x, {0}), mv::max(t, {1}), "max");
  expect_same_bits<float>(mv::min(x, {0}), mv::min(t, {1}), "min");
  expect_same_bits<int32_t>(mv::argmax(x, 0), mv::argmax(t, 1), "argmax");
  expect_same_bits<int32_t>(mv::argmin(x, 0), mv::argmin(t, 1), "argmin");
  std::vector<int32_t> iv(600);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int32_t>(i * 7919 % 1000) - 500;
  const mv::Array xi = mv::array(std::span<const int32_t>(iv), mv::Shape{100, 6});
  expect_same_bits<int32_t>(mv::sum(xi, {0}), mv::sum(mv::transpose(xi), {1}), "int32 sum");
  const mv::Array x4 = mv::reshape(xi, {75, 8});  // four columns per invocation, int32
  expect_same_bits<int32_t>(mv::sum(x4, {0}), mv::sum(mv::transpose(x4), {1}), "int32 sum, 8 columns");
}

TEST(ReduceColumns, BiasGradientSumIsOneDispatch) {
  const mv::Array x = random_array({256, 1024}, 7);
  meshvk::detail::materialized(x);
  test_runtime().synchronize();
  const uint64_t before = dispatches();
  const mv::Array s = mv::sum(x, {0});
  // One reduction pass, no transposing copy before it (that was two dispatches).
  EXPECT_EQ(dispatches() - before, 1u);
  expect_same_bits<float>(s, mv::sum(mv::transpose(x), {1}), "sum over the batch");
}

TEST(ReduceColumns, ShardedBatchSumStillAllReduces) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Array x = mv::device_put(random_array({64, 16}, 9), mv::NamedSharding(mesh, P("x")));
  const mv::Array s = mv::sum(x, {0});
  const auto got = s.to_host<float>();
  const auto host = x.to_host<float>();
  for (int c = 0; c < 16; ++c) {
    double want = 0;
    for (int r = 0; r < 64; ++r) want += host[static_cast<size_t>(r * 16 + c)];
    EXPECT_NEAR(got[static_cast<size_t>(c)], want, 1e-3 * (1 + std::abs(want))) << c;
  }
}

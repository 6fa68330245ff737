// Reductions of elementwise programs not yet run (kernels/reduce_fused.hpp): the program is
// computed inside the reduction, one dispatch instead of two, with results equal bit for bit to
// running the program first and reducing what it wrote.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "fusion_checks.hpp"
#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace {

uint64_t dispatches() { return test_runtime().state()->dispatches.load(); }

mv::Array random_array(mv::Shape shape, uint32_t seed, int max_exponent = 8) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  // Mixed magnitudes, so a change of summation order shows in the low bits.
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-8, max_exponent);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  return mv::array(std::span<const float>(v), shape);
}

using Reduction = std::function<mv::Array(const mv::Array&)>;

// Program and expect_same_bits (NaN-tolerant) are fusion_checks.hpp's.
// reduce(program()) fused, against reduce of the same program run first.
template <class T>
void check_fused(const Program& program, const Reduction& reduce, const std::string& what) {
  const mv::Array unfused_input = program();
  ASSERT_TRUE(mv::detail::is_pending(unfused_input)) << what << ": the program should be pending";
  mv::detail::materialized(unfused_input);
  const mv::Array want = reduce(unfused_input);
  const mv::Array fused_input = program();
  const mv::Array got = reduce(fused_input);
  expect_same_bits<T>(got, want, what);
  // Whatever the fusion did with its input, the input still reads as the program's values.
  if (fused_input.dtype() == got.dtype())
    expect_same_bits<T>(fused_input, unfused_input, what + " (the input afterwards)");
}

}  // namespace

TEST(ReduceFused, SumsMaxAndMinOfProgramsEqualUnfusedBitForBit) {
  // Rows of a multiple of 4 (vector accumulation) or not; one pass or several (n > 4096); rows
  // over several dimensions; one or two reduced dimensions.
  const std::vector<std::pair<mv::Shape, std::vector<int>>> cases = {
      {{7, 10}, {1}},       {{64, 64}, {1}},    {{3, 5, 12}, {2}},   {{3, 5, 12}, {1, 2}},
      {{2, 4100}, {1}},     {{3, 9000}, {1}},   {{1, 1}, {1}},       {{5, 1}, {1}},
      {{13}, {0}},          {{8192}, {0}},      {{2, 3, 4, 5}, {3}}, {{4, 2, 2049}, {1, 2}},
  };
  uint32_t seed = 1;
  for (const auto& c : cases) {
    // Copies, not structured bindings: the lambdas below capture them (clang 14 cannot).
    const mv::Shape shape = c.first;
    const std::vector<int> axes = c.second;
    const mv::Array x = random_array(shape, seed++);
    mv::Shape row_shape = shape;
    for (const int a : axes) row_shape[static_cast<size_t>(a)] = 1;
    const mv::Array r = random_array(row_shape, seed++);  // broadcast along the reduced axes
    const mv::Array bias = random_array({shape.back()}, seed++);  // broadcast along the rows
    const std::string where = mv::shape_to_string(shape) + " over " + std::to_string(axes.size()) + " axes";
    const Program cheap = [&] { return x * 2.f - r + bias; };
    const Program costly = [&] { return mv::exp(x - r) / (mv::abs(bias) + 1.f); };
    for (const auto& [name, program] : {std::pair{"cheap", cheap}, std::pair{"costly", costly}}) {
      check_fused<float>(program, [&](const mv::Array& a) { return mv::sum(a, axes); }, std::string("sum ") + name + " " + where);
      check_fused<float>(program, [&](const mv::Array& a) { return mv::max(a, axes, true); }, std::string("max ") + name + " " + where);
      check_fused<float>(program, [&](const mv::Array& a) { return mv::min(a, axes); }, std::string("min ") + name + " " + where);
      check_fused<float>(program, [&](const mv::Array& a) { return mv::mean(a, axes, true); }, std::string("mean ") + name + " " + where);
    }
  }
}

TEST(ReduceFused, IntegerBoolNaNAndSignedZeroPrograms) {
  std::vector<int32_t> iv(6 * 37);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int32_t>(i * 7919 % 1000) - 500;
  const mv::Array xi = mv::array(std::span<const int32_t>(iv), mv::Shape{6, 37});
  check_fused<int32_t>([&] { return xi * 3 + 1; }, [](const mv::Array& a) { return mv::sum(a, {1}); }, "int32 sum");
  check_fused<int32_t>([&] { return xi - 7; }, [](const mv::Array& a) { return mv::max(a, {1}); }, "int32 max");
  // A count of bools: the comparison's program, cast to int32 by the sum.
  check_fused<int32_t>([&] { return xi > 0; }, [](const mv::Array& a) { return mv::sum(a, {1}); }, "bool count");

  std::vector<float> v = {1, std::nanf(""), 3, 4, -0.f, -0.f, -0.f, -0.f, 5, 6, 7, 8, -0.f, -0.f, -0.f, 2};
  const mv::Array x = mv::array(std::span<const float>(v), mv::Shape{4, 4});
  for (const auto& [name, program] : std::vector<std::pair<std::string, Program>>{
           {"x * 1", [&] { return x * 1.f; }}, {"-x", [&] { return -x; }}, {"x * -1 + -0", [&] { return x * -1.f + (-0.f); }}}) {
    check_fused<float>(program, [](const mv::Array& a) { return mv::sum(a, {1}); }, "sum of " + name);
    check_fused<float>(program, [](const mv::Array& a) { return mv::max(a, {1}); }, "max of " + name);
    check_fused<float>(program, [](const mv::Array& a) { return mv::min(a, {1}); }, "min of " + name);
  }
  // Rows of -0.0 alone sum to +0.0, as XLA's reduce (from +0.0) gives, fused or not.
  for (const int64_t n : {3, 8, 5000}) {
    const auto zeros = mv::sum(mv::zeros({3, n}) * -1.f, {1}).to_host<float>();
    for (const float z : zeros) EXPECT_TRUE(z == 0.f && !std::signbit(z)) << "sum of -0.0 rows is " << z;
  }
}

TEST(ReduceFused, ReductionOfAProgramIsOneDispatch) {
  const mv::Array x = random_array({256, 64}, 3, 2);
  const mv::Array m = random_array({256, 1}, 4, 2);
  mv::detail::materialized(x);
  mv::detail::materialized(m);
  test_runtime().synchronize();
  uint64_t before = dispatches();
  const mv::Array s = mv::sum(x * 2.f - m, {1});
  EXPECT_EQ(dispatches() - before, 1u) << "sum of a cheap program";
  // A costly program is stored by the same dispatch, so its other readers do not compute it again.
  before = dispatches();
  const mv::Array e = mv::exp(x - m);
  const mv::Array total = mv::sum(e, {1}, true);
  EXPECT_EQ(dispatches() - before, 1u) << "sum of exp";
  EXPECT_FALSE(mv::detail::is_pending(e));
  before = dispatches();
  const mv::Array p = e / total;
  mv::detail::materialized(p);
  EXPECT_EQ(dispatches() - before, 1u) << "the division reads exp's stored values";
  const auto host = p.to_host<float>();
  for (int r = 0; r < 256; r += 51) {
    double row = 0;
    for (int c = 0; c < 64; ++c) row += host[static_cast<size_t>(r * 64 + c)];
    EXPECT_NEAR(row, 1.0, 1e-5) << r;
  }
}

TEST(ReduceFused, ShardedInputsAndJitReplays) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const mv::Array x = mv::device_put(random_array({24, 40}, 11), mv::NamedSharding(mesh, P("x", "y")));
  const mv::Array b = mv::device_put(random_array({40}, 12), mv::NamedSharding(mesh, P("y")));
  const auto f = [&](const mv::Array& a, const mv::Array& c) {
    return std::vector<mv::Array>{mv::sum(a * c + 1.f, {1}), mv::max(mv::exp(a - c), {1}), mv::sum(a - c, {0})};
  };
  const auto run_unfused = [&] {
    const mv::Array p0 = x * b + 1.f, p1 = mv::exp(x - b), p2 = x - b;
    for (const auto* a : {&p0, &p1, &p2}) mv::detail::materialized(*a);
    return std::vector<mv::Array>{mv::sum(p0, {1}), mv::max(p1, {1}), mv::sum(p2, {0})};
  };
  const auto want = run_unfused();
  const auto eager = f(x, b);
  const auto jitted = mv::jit([&](const mv::Array& a, const mv::Array& c) { return f(a, c); });
  for (int call = 0; call < 3; ++call) {
    const auto got = call == 0 ? eager : jitted(x, b);
    for (size_t i = 0; i < want.size(); ++i)
      expect_same_bits<float>(got[i], want[i], "output " + std::to_string(i) + ", call " + std::to_string(call));
  }
}

TEST(ReduceFused, GradientsThroughFusedReductions) {
  const mv::Array x = random_array({16, 24}, 21, 2);
  const auto loss = [](const mv::Array& a) {
    const mv::Array e = mv::exp(a - mv::stop_gradient(mv::max(a, {1}, true)));
    return mv::sum(mv::log(mv::sum(e, {1})) + mv::sum(a * a, {1}));
  };
  const mv::Array g = mv::grad(loss)(x);
  const auto host = x.to_host<float>();
  const auto got = g.to_host<float>();
  for (int r = 0; r < 16; ++r) {
    double mx = -1e30, z = 0;
    for (int c = 0; c < 24; ++c) mx = std::max<double>(mx, host[static_cast<size_t>(r * 24 + c)]);
    for (int c = 0; c < 24; ++c) z += std::exp(host[static_cast<size_t>(r * 24 + c)] - mx);
    for (int c = 0; c < 24; ++c) {
      const double xv = host[static_cast<size_t>(r * 24 + c)];
      const double want = std::exp(xv - mx) / z + 2 * xv;
      EXPECT_NEAR(got[static_cast<size_t>(r * 24 + c)], want, 1e-4 * (1 + std::abs(want))) << r << "," << c;
    }
  }
}

TEST(ReduceFused, ReshapeOfAProgramStaysPending) {
  // Computed arrays (random draws), not host constants (those are remade, not reshaped pending).
  const mv::Array x = mv::normal(mv::random_key(31), {8, 20}), y = mv::normal(mv::random_key(32), {8, 20});
  const mv::Array bias = mv::normal(mv::random_key(33), {20});
  // Inputs laid out as the result: the reshape is the program over reshaped inputs.
  const mv::Array r = mv::reshape(x * y + 1.f, {4, 2, 4, 5});
  EXPECT_TRUE(mv::detail::is_pending(r));
  const mv::Array want = mv::reshape(x * y + 1.f, {4, 2, 4, 5});
  mv::detail::materialized(want);
  expect_same_bits<float>(mv::sum(r, {2, 3}), mv::sum(want, {2, 3}), "sum of a reshaped program");
  expect_same_bits<float>(r, want, "the reshaped program");
  // A broadcast input is no plain elementwise read of the new shape: materialized first.
  const mv::Array b = mv::reshape(x + bias, {160});
  EXPECT_FALSE(mv::detail::is_pending(b));
  // Sharded along the leading axis, reshaped without moving data.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Array xs = mv::device_put(x, mv::NamedSharding(mesh, P("x")));
  const mv::Array rs = mv::reshape(xs * 2.f, {8, 4, 5});
  EXPECT_TRUE(mv::detail::is_pending(rs));
  expect_same_bits<float>(mv::max(rs, {1, 2}), mv::max(x * 2.f, {1}), "sharded");
  // one_hot of a pending index computes the index in the consumer's kernel.
  const std::vector<int32_t> labels = {3, -1, 0, 9, 12, -10};
  const mv::Array l = mv::array(std::span<const int32_t>(labels));
  const auto f = mv::jit([](const mv::Array& z, const mv::Array& t) { return mv::nn::softmax_cross_entropy(z, t); });
  const mv::Array z = random_array({6, 10}, 34, 1);
  const std::string text = f.program_text(z, l);
  EXPECT_EQ(text.find("fusion where(lt(in1"), std::string::npos) << text;
  EXPECT_TRUE(std::isnan(f(z, l).to_host<float>()[0])) << "label 12 is out of range: NaN, as optax";
}

TEST(ReduceFused, ForwardLogSoftmaxDoesNotStoreItsExpSoftmaxDoes) {
  const mv::Array z = random_array({16, 24}, 41, 1);
  const auto ls = mv::jit([](const mv::Array& a) { return mv::nn::log_softmax(a); });
  const auto sm = mv::jit([](const mv::Array& a) { return mv::nn::softmax(a); });
  const auto lse = mv::jit([](const mv::Array& a) { return mv::nn::logsumexp(a, {1}); });
  EXPECT_EQ(ls.program_text(z).find("stored by"), std::string::npos) << ls.program_text(z);
  EXPECT_EQ(lse.program_text(z).find("stored by"), std::string::npos) << lse.program_text(z);
  EXPECT_NE(sm.program_text(z).find("stored by"), std::string::npos) << sm.program_text(z);
  // The values: softmax rows sum to 1, log_softmax is log of softmax.
  const auto s = sm(z).to_host<float>(), l = ls(z).to_host<float>();
  for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(std::log(s[i]), l[i], 1e-5f * (1 + std::abs(l[i]))) << i;
}

TEST(ReduceFused, MeanDividesInTheSumsOwnKernel) {
  // Rows of every kind (vector, scalar, several passes, columns), plain and pending inputs: the
  // mean equals the sum divided afterwards bit for bit, in one dispatch.
  const std::vector<std::pair<mv::Shape, std::vector<int>>> cases = {
      {{7, 10}, {1}}, {{16, 128}, {1}}, {{3, 9000}, {1}}, {{4100, 8}, {0}}, {{5, 6, 7}, {0, 1}},
      {{8192}, {0}},  {{2, 3}, {}},     {{1001, 3}, {0}}, {{20000, 8}, {1}}};
  uint32_t seed = 50;
  for (const auto& c : cases) {
    const mv::Shape shape = c.first;
    const std::vector<int> axes = c.second;
    const mv::Array x = mv::normal(mv::random_key(seed++), shape);
    int64_t count = 1;
    if (axes.empty()) count = x.size();
    for (const int a : axes) count *= shape[static_cast<size_t>(a)];
    const std::string what = mv::shape_to_string(shape) + " over " + std::to_string(axes.size()) + " axes";
    mv::detail::materialized(x);
    test_runtime().synchronize();
    const uint64_t before = dispatches();
    const mv::Array m = mv::mean(x, axes, true);
    mv::detail::materialized(m);
    const uint64_t used = dispatches() - before;
    const uint64_t before_sum = dispatches();
    const mv::Array s = mv::sum(x, axes, true);
    mv::detail::materialized(s);
    const uint64_t used_by_sum = dispatches() - before_sum;
    const mv::Array want = s / static_cast<float>(count);
    expect_same_bits<float>(m, want, "mean of " + what);
    // As many dispatches as the sum alone, whatever path the sum takes (windows, transposes).
    EXPECT_EQ(used, used_by_sum) << what << ": the division needs no kernel";
    check_fused<float>([&] { return x * 3.f - 1.f; }, [&](const mv::Array& a) { return mv::mean(a, axes); },
                       "mean of a program, " + what);
  }
  // Over a split axis the sum is taken across devices first, then divided, as before.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Array host = mv::normal(mv::random_key(77), {16, 12});
  const mv::Array split = mv::device_put(host, mv::NamedSharding(mesh, P("x")));
  const auto got = mv::mean(split, {0}).to_host<float>(), values = host.to_host<float>();
  for (int col = 0; col < 12; ++col) {
    double want = 0;
    for (int r = 0; r < 16; ++r) want += values[static_cast<size_t>(r * 12 + col)];
    EXPECT_NEAR(got[static_cast<size_t>(col)], want / 16, 1e-5) << col;
  }
  // Gradients: the division's, spread, as for sum / count; also through a split axis.
  for (const mv::Array& a : {host, split}) {
    const mv::Array g = mv::grad([](const mv::Array& v) { return mv::sum(mv::mean(v * v, {1})); })(a);
    const mv::Array w = mv::grad([](const mv::Array& v) { return mv::sum(mv::sum(v * v, {1}) / 12.f); })(a);
    expect_same_bits<float>(g, w, "gradient of mean");
  }
  EXPECT_TRUE(std::isnan(mv::mean(mv::zeros({0})).to_host<float>()[0])) << "the mean of nothing is NaN";
  const mv::Array z = mv::normal(mv::random_key(78), {4, 6});
  const auto f = mv::jit([](const mv::Array& a) { return mv::mean(a * 2.f, {1}); });
  EXPECT_NE(f.program_text(z).find("then div(mean, 6) in the same kernel"), std::string::npos) << f.program_text(z);
}

// A jit's pending results that read the same arrays run as one kernel with several outputs
// (graph/multi_output_fusion.cpp): the same bits as computing each alone, fewer kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "fusion_checks.hpp"
#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace {

mv::Array random_array(mv::Shape shape, uint32_t seed) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return mv::array(std::span<const float>(v), shape);
}


size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

using Fn = std::function<std::vector<mv::Array>(const mv::Array&, const mv::Array&, const mv::Array&)>;

// f jitted (replayed twice) against f run eagerly, where each result is computed alone.
void expect_jit_matches_eager(const Fn& f, const mv::Array& a, const mv::Array& b, const mv::Array& c,
                              const std::string& what) {
  const auto eager = f(a, b, c);
  const auto jitted = mv::jit([&](const mv::Array& x, const mv::Array& y, const mv::Array& z) { return f(x, y, z); });
  for (int call = 0; call < 2; ++call) {
    const auto got = jitted(a, b, c);
    ASSERT_EQ(got.size(), eager.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string where = what + ", result " + std::to_string(i) + ", call " + std::to_string(call);
      if (eager[i].dtype() == mv::DType::float32) expect_same_bits<float>(got[i], eager[i], where);
      else expect_same_bits<int32_t>(got[i], eager[i], where);
    }
  }
}

}  // namespace

TEST(MultiOutputFusion, ResultsReadingTheSameArraysAreOneKernel) {
  const Fn f = [](const mv::Array& a, const mv::Array& b, const mv::Array& c) {
    return std::vector<mv::Array>{a * b + c, a - b, mv::exp(a) * b, mv::astype(a > b, mv::DType::int32)};
  };
  for (const mv::Shape& shape : std::vector<mv::Shape>{{13}, {4, 8}, {7, 33}, {1001}, {2, 3, 5}}) {
    const mv::Array a = random_array(shape, 1), b = random_array(shape, 2), c = random_array(shape, 3);
    expect_jit_matches_eager(f, a, b, c, mv::shape_to_string(shape));
    const auto jitted = mv::jit([&](const mv::Array& x, const mv::Array& y, const mv::Array& z) { return f(x, y, z); });
    const std::string text = jitted.program_text(a, b, c);
    EXPECT_EQ(count_of(text, "fusion of 4 results in one kernel"), 1u) << text;
  }
}

TEST(MultiOutputFusion, ShardedMixedAndUnrelatedResults) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const mv::NamedSharding rows(mesh, P("x", "y"));
  const mv::Array a = mv::device_put(random_array({12, 10}, 4), rows);
  const mv::Array b = mv::device_put(random_array({12, 10}, 5), rows);
  const mv::Array c = mv::device_put(random_array({10}, 6), mv::NamedSharding(mesh, P("y")));
  const Fn f = [](const mv::Array& x, const mv::Array& y, const mv::Array& z) {
    return std::vector<mv::Array>{
        x * z + y,                          // reads x and y: fused with the next
        mv::astype(x < y, mv::DType::int32),  // an int32 result beside float ones
        z * 2.f,                            // another shape: alone
        x,                                  // an input itself: not pending
        mv::tanh(y) - x,
        mv::sum(x * y, {1}),                // a reduction's result
    };
  };
  expect_jit_matches_eager(f, a, b, c, "sharded");
  const auto jitted = mv::jit([&](const mv::Array& x, const mv::Array& y, const mv::Array& z) { return f(x, y, z); });
  const std::string text = jitted.program_text(a, b, c);
  EXPECT_EQ(count_of(text, "fusion of 3 results in one kernel"), 1u) << text;
}

TEST(MultiOutputFusion, ManyInputsSplitAcrossKernels) {
  // 20 results, each reading a shared array and one of its own: more inputs than one kernel takes.
  std::vector<mv::Array> own;
  for (uint32_t i = 0; i < 20; ++i) own.push_back(random_array({37}, 10 + i));
  const mv::Array shared = random_array({37}, 99);
  const auto f = [&](const mv::Array& s) {
    std::vector<mv::Array> r;
    for (size_t i = 0; i < own.size(); ++i) r.push_back(s * own[i] + static_cast<float>(i));
    r.push_back(r.front());  // the same result twice
    return r;
  };
  const auto eager = f(shared);
  const auto jitted = mv::jit(f);
  const auto got = jitted(shared);
  ASSERT_EQ(got.size(), eager.size());
  for (size_t i = 0; i < got.size(); ++i) expect_same_bits<float>(got[i], eager[i], "result " + std::to_string(i));
  const std::string text = jitted.program_text(shared);
  EXPECT_GE(count_of(text, "results in one kernel"), 2u) << text;
}

TEST(MultiOutputFusion, AdamStepInJitEqualsEagerBitForBit) {
  mv::Params params{{"w", random_array({33, 17}, 21)}, {"b", random_array({17}, 22)}};
  const optax::GradientTransformation opt = optax::adam(0.01f);
  const auto step = [&](const mv::Params& p, const optax::OptState& s) {
    mv::Params grads;
    for (const auto& [name, v] : p) grads.emplace(name, mv::sin(v) * 0.5f);
    auto [updates, state] = opt.update(grads, s, p);
    return std::make_pair(optax::apply_updates(p, updates), state);
  };
  optax::OptState eager_state = opt.init(params), jit_state = eager_state;
  mv::Params eager_params = params, jit_params = params;
  const auto jitted = mv::jit(step);
  for (int i = 0; i < 3; ++i) {
    std::tie(eager_params, eager_state) = step(eager_params, eager_state);
    std::tie(jit_params, jit_state) = jitted(jit_params, jit_state);
    for (const auto& [name, v] : eager_params)
      expect_same_bits<float>(jit_params.at(name), v, name + " after step " + std::to_string(i + 1));
  }
  const std::string text = jitted.program_text(jit_params, jit_state);
  EXPECT_GE(count_of(text, "results in one kernel"), 2u) << text;
}

TEST(MultiOutputFusion, LoopBodyResultsReadingTheSameCarry) {
  // A leapfrog-like update: both new values read both old ones; one kernel per iteration.
  const mv::Array x0 = random_array({40}, 31), v0 = random_array({40}, 32);
  const auto step = [](const auto&, const std::pair<mv::Array, mv::Array>& c) {
    return std::make_pair(c.first + 0.1f * c.second, c.second - 0.1f * c.first);
  };
  const auto looped = mv::jit([&](const mv::Array& x, const mv::Array& v) {
    const auto r = mv::lax::fori_loop(0, 5, step, std::make_pair(x, v));
    return std::vector<mv::Array>{r.first, r.second};
  });
  std::pair<mv::Array, mv::Array> want{x0, v0};
  for (int64_t i = 0; i < 5; ++i) {
    want = step(i, want);
    mv::detail::materialized(want.first);  // each alone
    mv::detail::materialized(want.second);
  }
  for (int call = 0; call < 2; ++call) {
    const auto got = looped(x0, v0);
    expect_same_bits<float>(got[0], want.first, "x, call " + std::to_string(call));
    expect_same_bits<float>(got[1], want.second, "v, call " + std::to_string(call));
  }
  EXPECT_GE(count_of(looped.program_text(x0, v0), "fusion of 2 results in one kernel"), 1u) << looped.program_text(x0, v0);
}

TEST(MultiOutputFusion, OddDeviceCountsFuseReductionsAndResults) {
  // Meshes of 3 and 5 devices (rows 15 and 35, columns 13: nothing a multiple of 4), sharded by
  // rows and replicated: fused reductions (a mean over the columns, a max over the split rows)
  // and a jit's results sharing inputs, against the same computed unfused.
  for (const int devices : {3, 5}) {
    std::vector<int> ids(static_cast<size_t>(devices));
    for (int i = 0; i < devices; ++i) ids[static_cast<size_t>(i)] = (i * 3 + 1) % 8;  // not 0..n-1
    const mv::Mesh mesh = mv::make_mesh({devices}, {"x"}, {}, ids);
    const int64_t rows = 5 * devices, cols = 13;
    const mv::NamedSharding split(mesh, P("x"));
    const mv::Array a = mv::device_put(random_array({rows, cols}, 40 + devices), split);
    const mv::Array b = mv::device_put(random_array({rows, cols}, 50 + devices), split);
    const mv::Array c = mv::device_put(random_array({cols}, 60 + devices), mv::NamedSharding(mesh, P()));
    const Fn f = [](const mv::Array& x, const mv::Array& y, const mv::Array& z) {
      return std::vector<mv::Array>{mv::mean(mv::exp(x) * z, {1}), mv::max(x - y, {0}), x * y + z, y - z * 2.f};
    };
    const auto unfused = [&] {
      const mv::Array p0 = mv::exp(a) * c, p1 = a - b, p2 = a * b + c, p3 = b - c * 2.f;
      for (const auto* p : {&p0, &p1, &p2, &p3}) mv::detail::materialized(*p);
      return std::vector<mv::Array>{mv::mean(p0, {1}), mv::max(p1, {0}), p2, p3};
    }();
    const auto jitted = mv::jit([&](const mv::Array& x, const mv::Array& y, const mv::Array& z) { return f(x, y, z); });
    for (int call = 0; call < 2; ++call) {
      const auto got = call ? jitted(a, b, c) : f(a, b, c);
      for (size_t i = 0; i < got.size(); ++i)
        expect_same_bits<float>(got[i], unfused[i],
                                std::to_string(devices) + " devices, result " + std::to_string(i) + ", call " +
                                    std::to_string(call));
    }
    const std::string text = jitted.program_text(a, b, c);
    EXPECT_EQ(count_of(text, "fusion of 2 results in one kernel"), 1u) << text;
    EXPECT_NE(text.find("mean of fusion"), std::string::npos) << text;
  }
}

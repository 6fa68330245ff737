// The profiler and jit programs that run command buffers again within one replay: a loop body's
// iterations each keep their spans, and a program's constants run only when it is traced.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"
#include "profile_checks.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
namespace prof = meshvk::profile;

// A scan's body runs once per iteration from the same command buffers, so each run overwrote the
// last one's timestamp queries before the replay could copy them out: all iterations but the
// last were dropped (counted, and gaps in the lanes). Each run is saved before the next now: a
// scan of 5 iterations, eager and jitted (traced, then replayed), every matmul of every
// iteration as a span, nothing dropped.
TEST(Profile, EveryIterationOfALoopBodyKeepsItsSpans) {
  const int64_t n = 5;
  const mv::Array h0 = mv::ones({8, 8});
  const mv::Array ws = mv::ones({n, 8, 8}) * 0.01f;
  auto scanned = [](const mv::Array& h, const mv::Array& w) {
    auto [last, ys] = mv::lax::scan(
        [](const mv::Array& c, const std::vector<mv::Array>& x) {
          const mv::Array next = mv::tanh(mv::matmul(c, x[0]));
          return std::make_pair(next, next);
        },
        h, std::vector<mv::Array>{w});
    return last;
  };
  const auto jitted = mv::jit(scanned, mv::JitOptions{.name = "scanned_matmuls"});
  Profiling on;  // before the trace: a program traced unprofiled has no timestamp queries
  (void)scanned(h0, ws).to_host<float>();
  for (int call = 0; call < 2; ++call) (void)jitted(h0, ws).to_host<float>();
  prof::flush();
  int matmuls = 0;
  for (const auto& s : spans_of(prof::events(), test_runtime_id())) {
    if (s.device < 0) continue;
    if (std::string(s.name).find("matmul_blocked") != std::string::npos ||
        std::string(s.name).find("matmul_tiled") != std::string::npos)
      ++matmuls;
  }
  EXPECT_EQ(matmuls, 3 * n);  // eager, then the trace's run and a replay
  EXPECT_EQ(prof::counters().dropped_spans, 0u);
}

// Constants a program makes (an arange, zeros, a causal mask's iotas, host values it bakes in),
// in its body or in a scan's body, run when it is traced and not on replays: their buffers keep
// what the trace wrote (a program owns them and nothing writes them again). Replays with new
// inputs give the values of the same function called eagerly, and run no iota, fill or upload.
TEST(Profile, ReplaysLeaveOutTheProgramsConstants) {
  auto f = [](const mv::Array& x) {
    const mv::Array mask = mv::astype(
        mv::less_equal(mv::arange(5).reshape({1, 5}), mv::arange(5).reshape({5, 1})), mv::DType::float32);
    auto [last, ys] = mv::lax::scan(
        [](const mv::Array& c, const std::vector<mv::Array>& xs) {
          const mv::Array next = c * 0.5f + xs[0] + mv::arange(5.f);
          return std::make_pair(next, next + mv::zeros({5}));
        },
        mv::zeros({5}), std::vector<mv::Array>{x});
    return mv::matmul(x, mask) + last + mv::sum(ys, 0) + mv::array({1.f, 2.f, 3.f, 4.f, 5.f});
  };
  const auto jitted = mv::jit(f, mv::JitOptions{.name = "with_constants"});
  auto constants_run = [] {
    prof::flush();
    int n = 0;
    for (const auto& s : spans_of(prof::events(), test_runtime_id()))
      if (s.device >= 0 && std::string(s.program) == "jit(with_constants)" &&
          (std::string(s.name) == "iota" || std::string(s.name) == "fill" || std::string(s.name) == "upload"))
        ++n;
    return n;
  };
  Profiling on;
  const mv::Array x0 = mv::array(random_floats(25, 70), mv::Shape{5, 5});
  const std::vector<float> traced = jitted(x0).to_host<float>();
  EXPECT_GT(constants_run(), 0);  // the trace made them
  for (int call = 1; call < 3; ++call) {
    const mv::Array x = mv::array(random_floats(25, 70 + call), mv::Shape{5, 5});
    prof::clear();
    const std::vector<float> replayed = jitted(x).to_host<float>();
    EXPECT_EQ(constants_run(), 0) << "replay " << call;
    expect_close(f(x), replayed, 0.f);
  }
  expect_close(f(x0), traced, 0.f);
}

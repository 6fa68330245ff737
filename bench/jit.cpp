// meshvk-bench jit: what a jit cache hit costs over submitting its recorded command buffers
// directly, and what an eager op costs over a replayed one, for a program of 100 ops that do not
// fuse (matmuls of 64x64 matrices on one device).
#include <cstdio>
#include <iostream>
#include <vector>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "exec/program.hpp"
#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"

namespace meshvk::bench {

namespace {

constexpr int kOps = 100;

Array hundred_ops(const Array& x, const Array& w) {
  Array h = x;
  for (int i = 0; i < kOps; ++i) h = matmul(h, w);
  return h;
}

}  // namespace

int run_jit(const Options& options) {
  Runtime rt({.num_devices = 8});
  std::cout << "meshvk-bench jit: a program of " << kOps << " matmuls (64x64) on one device\n"
            << machine_summary(rt.adapter_name()) << "\n";
  const Array x = normal(random_key(0), {64, 64});
  const Array w = normal(random_key(1), {64, 64}) * 0.1f;
  auto& state = *rt.state();
  const int reps = std::max(options.reps, 5);

  // The recorded command buffers alone: a capture of the program, resubmitted in order, each
  // waiting on the one before.
  auto capture = std::make_unique<detail::Capture>();
  detail::materialized(x);
  detail::materialized(w);
  state.begin_capture(capture.get());
  const Array traced = hundred_ops(x, w);
  detail::materialized(traced);
  state.end_capture();
  rt.synchronize();
  const auto& submissions = capture->submissions;
  const double direct = median_seconds(reps, [&] {
    detail::Fence last;
    for (const auto& s : submissions) last = state.resubmit(s.timeline, s.cb, {last});
    state.wait(last, "bench");
  });
  exec::Program released(rt.state(), std::move(capture), {}, {});  // frees the command buffers

  const auto f = jit([](const Array& a, const Array& b) { return hundred_ops(a, b); });
  f(x, w);
  const double replay = median_seconds(reps, [&] {
    f(x, w);
    rt.synchronize();
  });
  const double eager = median_seconds(reps, [&] {
    detail::materialized(hundred_ops(x, w));
    rt.synchronize();
  });
  std::printf("recorded command buffers, submitted directly: %8.1f us per op\n", direct / kOps * 1e6);
  std::printf("jit cache hit (replay):                       %8.1f us per op  %.2fx direct (target <= 1.10x: %s)\n",
              replay / kOps * 1e6, replay / direct, replay / direct <= 1.10 ? "PASS" : "MISS");
  std::printf("eager op (pipelines cached):                  %8.1f us per op  %.2fx replay (target <= 2.00x: %s)\n",
              eager / kOps * 1e6, eager / replay, eager / replay <= 2.0 ? "PASS" : "MISS");
  return 0;
}

}  // namespace meshvk::bench

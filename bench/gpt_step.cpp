#include "gpt_step.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <variant>
#include <vector>

#include "bench.hpp"
#include "gpt_parallel.hpp"
#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"

namespace meshvk::bench {

namespace {

namespace pg = meshvk::programs;

// The sample's step in `mode` with its arguments, ready to call.
struct GptSetup {
  pg::GptConfig cfg;
  pg::GptLayout layout;
  Params params;
  optax::OptState state;
  Array tokens, targets;
  pg::GptTrainStep step;

  explicit GptSetup(const std::string& mode)
      : layout(pg::gpt_layout(mode, cfg)),
        params(pg::gpt_place(layout, cfg, pg::gpt_init(cfg, 0))),
        state(pg::gpt_optimizer(cfg).init(params)),
        step(cfg, layout) {
    std::vector<int32_t> ids(static_cast<size_t>(cfg.batch) * static_cast<size_t>(cfg.seq + 1));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + i / 7) % 256);
    std::vector<int32_t> in, out;
    for (int b = 0; b < cfg.batch; ++b)
      for (int s = 0; s < cfg.seq; ++s) {
        const size_t at =
            static_cast<size_t>(b) * static_cast<size_t>(cfg.seq + 1) + static_cast<size_t>(s);
        in.push_back(ids[at]);
        out.push_back(ids[at + 1]);
      }
    const Shape shape{cfg.batch, cfg.seq};
    tokens = device_put(std::span<const int32_t>(in), shape, layout.batch);
    targets = device_put(std::span<const int32_t>(out), shape, layout.batch);
  }
  // One step on the same parameters and state each time (a replay of the same program: the
  // parameters' values do not change its cost).
  void run() const { (void)step(params, state, tokens, targets); }
};

std::string kind_of(const profile::Span& s) {
  if (s.kind == profile::Kind::collective) return "collective";
  if (s.kind == profile::Kind::copy) return "copy";
  const std::string name = s.name;
  if (name.find("matmul") != std::string::npos) return "matmul";
  if (name.find("reduce") != std::string::npos) return "reduction";
  if (name == "strided_copy") return "strided copy";
  if (name.find("take") != std::string::npos || name.find("gather") != std::string::npos ||
      name.find("scatter") != std::string::npos)
    return "gather/scatter";
  return "elementwise and other";
}

}  // namespace

double gpt_step_seconds(Runtime& rt, const std::string& mode, int reps) {
  const GptSetup setup(mode);
  setup.run();  // traced here; the timed calls replay
  rt.synchronize();
  return median_seconds(reps, [&] {
    setup.run();
    rt.synchronize();
  });
}

GptStepProfile gpt_step_profile(Runtime& rt, const std::string& mode) {
  const GptSetup setup(mode);
  rt.synchronize();
  profile::start();
  GptStepProfile out;
  try {
    setup.run();  // traced with timestamp queries
    rt.synchronize();
    profile::flush();
    profile::clear();  // only the replay's events
    const auto start = std::chrono::steady_clock::now();
    setup.run();
    rt.synchronize();
    out.wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    profile::stop();
  } catch (...) {
    profile::stop();
    throw;
  }
  // MESHVK_BENCH_SPANS=1: every span of the replay, as `meshvk-bench train` prints them.
  if (std::getenv("MESHVK_BENCH_SPANS"))
    for (const auto& e : profile::events())
      if (const auto* sp = std::get_if<profile::Span>(&e); sp && sp->device >= 0)
        std::printf("  span d%d %-14s %-16s %8.3f ms %10llu bytes %12llu flops\n", sp->device,
                    sp->op, sp->name, static_cast<double>(sp->end_ns - sp->start_ns) * 1e-6,
                    static_cast<unsigned long long>(sp->bytes),
                    static_cast<unsigned long long>(sp->flops));
  std::map<std::string, std::pair<int, double>> by_op;
  for (const auto& e : profile::events()) {
    const auto* sp = std::get_if<profile::Span>(&e);
    if (!sp || sp->device < 0) continue;
    const std::string kind = kind_of(*sp);
    ++out.spans[kind];
    out.device_ms[kind] += static_cast<double>(sp->end_ns - sp->start_ns) * 1e-6;
    if (sp->kind == profile::Kind::kernel) ++out.kernels;
    auto& [count, ms] = by_op[std::string(*sp->op ? sp->op : "(none)") + " / " + sp->name];
    ++count;
    ms += static_cast<double>(sp->end_ns - sp->start_ns) * 1e-6;
  }
  for (const auto& [name, v] : by_op) out.top_ops.emplace_back(name, v.first, v.second);
  std::sort(out.top_ops.begin(), out.top_ops.end(),
            [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
  if (out.top_ops.size() > 12) out.top_ops.resize(12);
  profile::clear();
  return out;
}

}  // namespace meshvk::bench

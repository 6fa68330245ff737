// A jitted matmul whose operands' layouts are the thing to play with: x (M, K) and w (K, N) are
// put on the mesh by PartitionSpecs (the inspector's per-input choice), and jit partitions
// tanh(x @ w) to match, inserting the collectives the layouts need. Each step runs the program
// again, so the profiler sees a steady stream of kernels and collectives.
//
//   build/bin/sharded_matmul [--size M,K,N] [--steps N] [--spec-x "P('a', 'b')"]
//                            [--spec-w "P('b', None)"] [--color | --no-color]
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>

#include "scenario.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace meshvk::scenarios {
namespace {

const char* const kUsage =
    "usage: sharded_matmul [--size M,K,N] [--steps N] [--spec-x SPEC] [--spec-w SPEC] "
    "[--color | --no-color]\n";

int run(ScenarioContext& ctx) {
  std::ostream& out = *ctx.out;
  int64_t m = 256, k = 512, n = 256;
  int steps = 10;
  mv::VisualizeOptions viz = ctx.viz;
  std::optional<std::string> spec_x, spec_w;
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    const std::string& a = ctx.args[i];
    const bool has_value = i + 1 < ctx.args.size();
    if (a == "--size" && has_value) {
      char comma1 = 0, comma2 = 0;
      std::istringstream in(ctx.args[++i]);
      if (!(in >> m >> comma1 >> k >> comma2 >> n) || comma1 != ',' || comma2 != ',' || m < 1 ||
          k < 1 || n < 1) {
        *ctx.err << "--size takes M,K,N (positive), got " << ctx.args[i] << "\n" << kUsage;
        return 2;
      }
    } else if (a == "--steps" && has_value) {
      steps = std::atoi(ctx.args[++i].c_str());
    } else if (a == "--spec-x" && has_value) {
      spec_x = ctx.args[++i];
    } else if (a == "--spec-w" && has_value) {
      spec_w = ctx.args[++i];
    } else if (a == "--color") {
      viz.use_color = true;
    } else if (a == "--no-color") {
      viz.use_color = false;
    } else {
      return ctx.help_or_unknown(a, kUsage);
    }
  }
  const auto mesh = ctx.mesh({4, 2}, {"a", "b"});
  const auto x_spec = ctx.spec("x", spec_x ? PartitionSpec::parse(*spec_x) : P("a", "b"), mesh);
  const auto w_spec =
      ctx.spec("w", spec_w ? PartitionSpec::parse(*spec_w) : P("b", mv::None), mesh);
  out << ">>> mesh = " << mesh.to_string() << "\n";

  const auto x = mv::normal(mv::random_key(0), {m, k}, mv::NamedSharding(mesh, x_spec));
  const auto w = mv::normal(mv::random_key(1), {k, n}, mv::NamedSharding(mesh, w_spec));
  out << ">>> x = jax.random.normal(key(0), (" << m << ", " << k
      << "), out_sharding=" << x_spec.to_string() << ")\n"
      << mv::visualize_array_sharding(x, viz) << "\n"
      << ">>> w = jax.random.normal(key(1), (" << k << ", " << n
      << "), out_sharding=" << w_spec.to_string() << ")\n"
      << mv::visualize_array_sharding(w, viz) << "\n";
  ctx.publish("x", x);
  ctx.publish("w", w);
  ctx.checkpoint("inputs");

  const auto f = mv::jit([](const Array& x, const Array& w) { return mv::tanh(mv::matmul(x, w)); },
                         {.name = "layer"});
  const auto lowered = f.lower(x, w);
  out << ">>> jax.jit(lambda x, w: jnp.tanh(x @ w)).lower(x, w)  # the partitioned program\n"
      << lowered.as_text() << "\n";
  ctx.publish_program("layer", lowered);

  Array y;
  for (int step = 0; step < steps; ++step) {
    y = f(x, w);
    ctx.publish("y", y);
    ctx.checkpoint("step " + std::to_string(step + 1));
  }
  out << ">>> y = layer(x, w)  # " << steps << " times\n"
      << mv::type_of(y) << " " << y.sharding().to_string() << "\n"
      << mv::visualize_array_sharding(y, viz) << "\n";

  // The same product on one device, as the reference.
  const auto xs = x.to_host<float>(), ws = w.to_host<float>();
  const auto reference = mv::tanh(mv::matmul(mv::array(std::span<const float>(xs), x.shape()),
                                             mv::array(std::span<const float>(ws), w.shape())));
  return report(ctx, "y vs tanh(x @ w) on one device (atol 1e-4)",
                max_abs_diff(y, reference) <= 1e-4f)
             ? 0
             : 1;
}

}  // namespace

Scenario sharded_matmul() {
  return {"sharded_matmul",
          "tanh(x @ w) under jit with x and w laid out by your PartitionSpecs: the partitioned "
          "program, its collectives and their timeline",
          {"--steps", "200"},
          {"x", "w"},
          run};
}

}  // namespace meshvk::scenarios

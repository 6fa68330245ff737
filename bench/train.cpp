// meshvk-bench train: one training step of the 001 tutorial's MLP (forward, backward, SGD) on one
// device, against the sum of the same step's matmuls measured alone in the same run. Everything
// that is not a matmul (elementwise, reductions, layout changes, submission) should cost at most
// 30% on top: a step within 1.3x of its matmuls.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "meshvk/meshvk.hpp"

namespace meshvk::bench {

int run_train(const Options& options) {
  Runtime rt({.num_devices = 8});
  const std::vector<int> sizes = {784, 1024, 1024, 1024, 10};
  const int64_t batch = options.only.empty() ? 8192 : std::stoll(options.only);
  std::cout << "meshvk-bench train: MLP 784-1024-1024-1024-10, batch " << batch << ", MSE, SGD, one device\n"
            << machine_summary(rt.adapter_name()) << "\n";

  Params params = nn::init_mlp(sizes, 0);
  const Array x = normal(random_key(1), {batch, sizes.front()});
  const Array y = normal(random_key(2), {batch, sizes.back()});
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  const JitFunction step(
      [&](const std::vector<Array>& a) {
        Params p;
        for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], a[i]);
        auto [loss, grads] = value_and_grad_params([&](const Params& q) { return nn::mse_loss(nn::mlp(q, a[names.size()]), a[names.size() + 1]); }, p);
        std::vector<Array> out{loss};
        for (const auto& [name, v] : nn::sgd(p, grads, 1e-3f)) out.push_back(v);
        return out;
      },
      {.name = "train_step"});
  std::vector<Array> args;
  for (const auto& name : names) args.push_back(params.at(name));
  args.push_back(x);
  args.push_back(y);
  const double step_s = median_seconds(options.reps, [&] {
    step.call(args);
    rt.synchronize();
  });

  // The step's matmuls alone: per layer the forward product, the weight gradient and (past the
  // first layer) the input gradient.
  double matmul_s = 0, flops = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    const int64_t in = sizes[l], out = sizes[l + 1];
    const auto mm = jit([](const Array& a, const Array& b) { return matmul(a, b); });
    auto time_product = [&](int64_t m, int64_t k, int64_t n) {
      const Array a = zeros({m, k}), b = zeros({k, n});
      flops += 2.0 * m * k * n;
      return median_seconds(options.reps, [&] {
        mm(a, b);
        rt.synchronize();
      });
    };
    matmul_s += time_product(batch, in, out);    // forward
    matmul_s += time_product(out, batch, in);    // weight gradient
    if (l > 0) matmul_s += time_product(batch, out, in);  // input gradient
  }
  const double ratio = step_s / matmul_s;
  std::printf("training step:          %8.1f ms  (%.1f GFLOP/s counting matmul FLOPs)\n", step_s * 1e3, flops / step_s / 1e9);
  std::printf("its matmuls alone:      %8.1f ms  (%.1f GFLOP/s)\n", matmul_s * 1e3, flops / matmul_s / 1e9);
  std::printf("step / matmuls:         %8.2fx  (target <= 1.30x: %s)\n", ratio, ratio <= 1.3 ? "PASS" : "MISS");
  return 0;
}

}  // namespace meshvk::bench

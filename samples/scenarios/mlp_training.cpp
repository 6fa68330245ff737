// The training half of torchax's "Distributed arrays" tutorial (001): an MLP trained with MSE and
// SGD on one device, with 8-way data parallelism, and with 4x2 data + tensor parallelism. Each
// step is one jit of value_and_grad plus the update; the losses of the three modes agree.
//
//   build/bin/mlp_training [--batch N] [--steps N] [--layers 784,1024,1024,1024,10]
//                          [--mode all|single|dp|tp] [--lr 1e-3] [--no-color]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "scenario.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace meshvk::scenarios {
namespace {

struct Flags {
  int64_t batch = 8192;
  int steps = 5;
  std::vector<int> layers = {784, 1024, 1024, 1024, 10};
  std::string mode = "all";
  float lr = 1e-3f;
  mv::VisualizeOptions viz;
};

int usage(const ScenarioContext& ctx, int rc) {
  *(rc ? ctx.err : ctx.out)
      << ("usage: mlp_training [--batch N] [--steps N] [--layers A,B,...] [--mode "
          "all|single|dp|tp] [--lr X] "
          "[--color | --no-color]\n");
  return rc;
}

// How the parameters and the batch are laid out in one mode.
struct Layout {
  std::string name;
  std::function<mv::Sharding(const std::string& param)> param;
  std::optional<mv::Sharding> batch;
  std::string tutorial_timing;  // the tutorial's %timeit of grad_fn_jit in this mode
};

// params.keys() as torch's state_dict orders them: layer by layer, weight before bias (Params
// is a sorted map, where bias comes first).
std::vector<std::string> state_dict_order(const mv::Params& params) {
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  const auto rank = [](const std::string& name) {
    const size_t dot = name.find('.'), last = name.rfind('.');
    const int layer = dot == last ? 0 : std::atoi(name.c_str() + dot + 1);
    return std::make_pair(layer, name.substr(last + 1) == "weight" ? 0 : 1);
  };
  std::stable_sort(names.begin(), names.end(),
                   [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return names;
}

// What one mode produced: the losses of its steps and the gradients of its first step.
struct ModeResult {
  std::vector<float> losses;
  mv::Params first_grads;
};

ModeResult run_mode(const ScenarioContext& ctx, const Flags& f, const Layout& layout,
                    const mv::Params* single_grads) {
  std::ostream& os = *ctx.out;
  os << "\n=== " << layout.name << " ===\n";
  mv::Params params = mv::nn::init_mlp(f.layers, 0);
  Array inputs = mv::normal(mv::random_key(1), {f.batch, f.layers.front()});
  Array targets = mv::normal(mv::random_key(2), {f.batch, f.layers.back()});
  for (auto& [name, p] : params) p = mv::device_put(p, layout.param(name));
  if (layout.batch) {
    inputs = mv::device_put(inputs, *layout.batch);
    targets = mv::device_put(targets, *layout.batch);
  }
  auto describe = [&](const char* when) {
    os << "parameter layouts " << when << ":\n";
    for (const auto& [name, p] : params) {
      const auto* n = p.sharding().named();
      os << "  " << name << " " << mv::type_of(p) << " "
         << (n ? n->spec().to_string() : std::string("one device")) << "\n";
    }
  };
  const bool tensor_parallel = layout.name.find("tensor") != std::string::npos;
  if (tensor_parallel) {
    os << ">>> batch = jax_device_put(batch, NamedSharding(mesh, P('batch', None)))\n"
       << ">>> visualize_array_sharding(batch[0])\n"
       << mv::visualize_array_sharding(inputs, f.viz) << ">>> visualize_array_sharding(batch[1])\n"
       << mv::visualize_array_sharding(targets, f.viz) << ">>> params.keys()\nodict_keys([";
    const auto keys = state_dict_order(params);
    for (size_t k = 0; k < keys.size(); ++k) os << (k ? ", '" : "'") << keys[k] << "'";
    os << "])\n";
  }
  describe("before");
  if (tensor_parallel) {
    for (const char* name : {"layers.1.weight", "layers.2.weight"})  // --layers may have fewer
      if (params.count(name))
        os << ">>> visualize_array_sharding(params['" << name << "'])\n"
           << mv::visualize_array_sharding(params.at(name), f.viz);
  }
  std::map<std::string, mv::Sharding> before;
  for (const auto& [name, p] : params) before.emplace(name, p.sharding());

  // One training step over the flattened parameters (name order) and the batch.
  const std::vector<std::string> names = state_dict_order(params);
  // loss_jit = jax_jit(loss_fun): the loss alone, before and after the steps.
  const mv::JitFunction loss_jit(
      [&](const std::vector<Array>& a) {
        mv::Params p;
        for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], a[i]);
        return std::vector<Array>{mv::nn::mse_loss(mv::nn::mlp(p, a[names.size()]), a[names.size() + 1])};
      },
      {.name = "loss_jit"});
  const auto loss_now = [&] {
    std::vector<Array> args;
    for (const auto& name : names) args.push_back(params.at(name));
    args.push_back(inputs);
    args.push_back(targets);
    char text[64];
    std::snprintf(text, sizeof text, "%.7g", loss_jit.call(args)[0].to_host<float>()[0]);
    return std::string(text);
  };
  os << ">>> print(loss_jit(params, batch))\n" << loss_now() << "\n";
  const mv::JitFunction step(
      [&](const std::vector<Array>& a) {
        mv::Params p;
        for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], a[i]);
        const Array& x = a[names.size()];
        const Array& y = a[names.size() + 1];
        auto [loss, grads] = mv::value_and_grad_params(
            [&](const mv::Params& q) { return mv::nn::mse_loss(mv::nn::mlp(q, x), y); }, p);
        std::vector<Array> out{loss};
        const mv::Params updated = mv::nn::sgd(p, grads, f.lr);
        for (const auto& name : names) out.push_back(updated.at(name));
        for (const auto& name : names) out.push_back(grads.at(name));
        return out;
      },
      {.name = "train_step"});

  ModeResult result;
  std::vector<float>& losses = result.losses;
  std::vector<double> step_seconds;
  mv::Runtime& rt = mv::Runtime::current();
  for (int i = 0; i < f.steps; ++i) {
    std::vector<Array> args;
    for (const auto& name : names) args.push_back(params.at(name));
    args.push_back(inputs);
    args.push_back(targets);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Array> out = step.call(args);
    rt.synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (size_t k = 0; k < names.size(); ++k) params.at(names[k]) = out[k + 1];
    if (i == 0)
      for (size_t k = 0; k < names.size(); ++k) result.first_grads.emplace(names[k], out[1 + names.size() + k]);
    if (i > 0) step_seconds.push_back(seconds);
    losses.push_back(out[0].to_host<float>()[0]);
    char line[160];
    std::snprintf(line, sizeof line, "step %d/%d  loss %.6f  step time %.3f s%s\n", i + 1, f.steps,
                  losses.back(), seconds, i == 0 ? " (includes tracing)" : "");
    os << line << std::flush;
    if (ctx.observer) {
      // After the first step the program is compiled, so asking for its text runs nothing.
      if (i == 0) ctx.publish_program("train_step", step.lower(args));
      for (const auto& [name, p] : params) ctx.publish(name, p);
      ctx.publish("inputs", inputs);
    }
    ctx.checkpoint("step " + std::to_string(i + 1));
  }
  os << ">>> print(loss_jit(params, batch))\n" << loss_now() << "\n";
  if (!step_seconds.empty()) {
    Timing t;
    t.loops = 1;
    t.runs = static_cast<int>(step_seconds.size());
    for (const double v : step_seconds) t.mean += v / t.runs;
    for (const double v : step_seconds) t.std += (v - t.mean) * (v - t.mean) / t.runs;
    t.std = std::sqrt(t.std);
    report_timing(ctx, ">>> %timeit grad_fn_jit(params, batch)  # here: steps 2-" + std::to_string(f.steps) +
                           " above (value_and_grad and the SGD update), batch " + std::to_string(f.batch),
                  t, layout.tutorial_timing);
  }
  if (single_grads) {
    // The first step's gradients against the single-device run's, parameter by parameter.
    float worst = 0, largest = 0;
    for (const auto& name : names) {
      worst = std::max(worst, max_abs_diff(result.first_grads.at(name), single_grads->at(name)));
      largest = std::max(largest, mv::max(mv::abs(single_grads->at(name))).to_host<float>()[0]);
    }
    os << "gradients vs the single-device gradients: max |difference| " << worst
       << " (largest |gradient| " << largest << ")\n";
    if (!report(ctx, "gradients vs the single-device gradients (1e-4 of the largest)",
                worst <= 1e-4f * largest))
      losses.clear();
  }
  describe("after");
  bool unchanged = true;
  for (const auto& [name, p] : params)
    unchanged = unchanged && before.at(name).is_equivalent_to(p.sharding(), p.ndim());
  os << "parameter shardings unchanged by the steps: " << (unchanged ? "yes" : "NO") << "\n";
  if (!unchanged) losses.clear();
  return result;
}

int run(ScenarioContext& ctx) {
  std::ostream& out = *ctx.out;
  Flags f;
  f.viz = ctx.viz;
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    const std::string& a = ctx.args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= ctx.args.size()) throw std::invalid_argument(a + " needs a value");
      return ctx.args[++i];
    };
    try {
      if (a == "--help" || a == "-h") return usage(ctx, 0);
      if (a == "--batch")
        f.batch = std::stoll(value());
      else if (a == "--steps")
        f.steps = std::stoi(value());
      else if (a == "--lr")
        f.lr = std::stof(value());
      else if (a == "--mode")
        f.mode = value();
      else if (a == "--color")
        f.viz.use_color = true;
      else if (a == "--no-color")
        f.viz.use_color = false;
      else if (a == "--layers") {
        f.layers.clear();
        std::stringstream ss(value());
        for (std::string part; std::getline(ss, part, ',');) f.layers.push_back(std::stoi(part));
      } else {
        *ctx.err << "unknown argument " << a << "\n";
        return usage(ctx, 2);
      }
    } catch (const std::exception& e) {
      *ctx.err << "bad value: " << e.what() << "\n";
      return usage(ctx, 2);
    }
  }
  if (f.batch < 8 || f.batch % 8 || f.steps < 1 || f.layers.size() < 3 ||
      (f.mode != "all" && f.mode != "single" && f.mode != "dp" && f.mode != "tp")) {
    *ctx.err << "--batch must be a positive multiple of 8, --steps positive, --layers at least 3 "
                "sizes, --mode all|single|dp|tp\n";
    return usage(ctx, 2);
  }
  mv::Runtime& rt = mv::Runtime::current();
  out << "MLP " << f.layers.front();
  for (size_t i = 1; i < f.layers.size(); ++i) out << " -> " << f.layers[i];
  out << ", batch " << f.batch << ", MSE loss, SGD lr " << f.lr << ", " << f.steps << " steps on "
      << rt.adapter_name() << " split into " << rt.num_devices() << " virtual devices\n";
  const auto dp_mesh = mv::make_mesh({rt.num_devices()}, {"batch"});
  const auto tp_mesh = ctx.mesh({4, 2}, {"batch", "model"});
  std::vector<Layout> layouts;
  const Layout single{"single device",
                      [&](const std::string&) {
                        return mv::Sharding(mv::SingleDeviceSharding(0, rt.platform()));
                      },
                      std::nullopt,
                       "248 ms \u00b1 6.91 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)  # batch 8192"};
  if (f.mode == "all" || f.mode == "single") layouts.push_back(single);
  if (f.mode == "all" || f.mode == "dp")
    layouts.push_back(
        {"8-way data parallel, mesh (8,) ('batch',)",
         [&](const std::string&) { return mv::Sharding(mv::NamedSharding(dp_mesh, P())); },
         mv::NamedSharding(dp_mesh, P("batch")),
         "263 ms \u00b1 7.32 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)  # batch 8192"});
  if (f.mode == "all" || f.mode == "tp") {
    // Column-parallel layer 1 (weight rows and bias split), row-parallel layer 2; the inspector
    // may choose others.
    const auto w1 = ctx.spec("layers.1.weight", P("model"), tp_mesh);
    const auto b1 = ctx.spec("layers.1.bias", P("model"), tp_mesh);
    const auto w2 = ctx.spec("layers.2.weight", P(mv::None, "model"), tp_mesh);
    const auto batch = ctx.spec("batch", P("batch", mv::None), tp_mesh);
    layouts.push_back({"4x2 data + tensor parallel, mesh (4, 2) ('batch', 'model')",
                       [&, w1, b1, w2](const std::string& name) {
                         if (name == "layers.1.weight")
                           return mv::Sharding(mv::NamedSharding(tp_mesh, w1));
                         if (name == "layers.1.bias")
                           return mv::Sharding(mv::NamedSharding(tp_mesh, b1));
                         if (name == "layers.2.weight")
                           return mv::Sharding(mv::NamedSharding(tp_mesh, w2));
                         return mv::Sharding(mv::NamedSharding(tp_mesh, P()));
                       },
                       mv::NamedSharding(tp_mesh, batch),
                       "320 ms \u00b1 8.59 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)  # batch 8192"});
  }
  std::vector<std::vector<float>> all;
  std::optional<mv::Params> single_grads;
  if (f.mode != "all" && f.mode != "single") {
    // The reference gradients: one step of the single-device run, printed apart.
    std::ostringstream ignored;
    ScenarioContext quiet = ctx;
    quiet.out = &ignored;
    quiet.observer = nullptr;
    Flags one = f;
    one.steps = 1;
    single_grads = run_mode(quiet, one, single, nullptr).first_grads;
  }
  for (const Layout& l : layouts) {
    ModeResult r = run_mode(ctx, f, l, single_grads ? &*single_grads : nullptr);
    if (r.losses.empty()) return 1;
    if (!single_grads) single_grads = std::move(r.first_grads);
    all.push_back(std::move(r.losses));
  }
  bool agree = true;
  for (size_t m = 1; m < all.size(); ++m)
    for (int s = 0; s < f.steps; ++s)
      agree = agree && std::fabs(all[m][s] - all[0][s]) <= 1e-5f * std::fabs(all[0][s]) + 1e-7f;
  bool decreasing = true;
  for (const auto& l : all)
    for (size_t s = 1; s < l.size(); ++s) decreasing = decreasing && l[s] < l[s - 1];
  if (all.size() > 1)
    out << "\nlosses equal across modes (1e-5 relative): " << (agree ? "yes" : "NO") << "\n";
  out << "losses decreasing: " << (decreasing ? "yes" : "NO") << "\n";
  return agree && decreasing ? 0 : 1;
}

}  // namespace

Scenario mlp_training() {
  return {"mlp_training",
          "An MLP trained with MSE and SGD on one device, 8-way data parallel and 4x2 data + "
          "tensor parallel (torchax 001); one jit of value_and_grad per step",
          {"--batch", "512", "--steps", "20", "--layers", "64,256,256,256,10", "--mode", "tp"},
          {"layers.1.weight", "layers.1.bias", "layers.2.weight", "batch"},
          run};
}

}  // namespace meshvk::scenarios

#pragma once
// The programs compared bit for bit between runtimes of the same 8 devices laid out differently:
// 1 adapter, 2 adapters in one process (tests/standalone/test_adapters.cpp), 2 processes
// (tests/processes/): every collective at one-shot and ring sizes, over a line and over both
// axes of a (4, 2) mesh, reshards, a jit replayed 3 times and the MLP training step in dp and tp.
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"

namespace meshvk::testing {

namespace mv = meshvk;
using meshvk::Array;
using meshvk::P;

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);  // not exactly summable: the reduction order shows in the bits
  return v;
}

using Results = std::map<std::string, std::vector<float>>;

// Everything compared between the runtimes, keyed by what produced it.
inline Results workload() {
  Results r;
  const auto line = mv::make_mesh({8}, {"x"});
  const auto grid = mv::make_mesh({4, 2}, {"x", "y"});
  // Collectives: 256 floats per member is one-shot, 128 Ki (512 KiB) is ring.
  for (const int64_t local : {int64_t{256}, int64_t{128} << 10}) {
    const std::string size = local < 1024 ? " one_shot" : " ring";
    const auto host = random_floats(static_cast<size_t>(8 * local), 7);
    const auto x =
        mv::device_put(std::span<const float>(host), {8 * local}, mv::NamedSharding(line, P("x")));
    std::vector<std::pair<int, int>> shift;
    for (int i = 0; i < 8; ++i) shift.push_back({i, (i + 3) % 8});
    const std::vector<std::pair<std::string, std::function<Array(const Array&)>>> cases = {
        {"psum", [](const Array& v) { return mv::psum(v, "x"); }},
        {"pmax", [](const Array& v) { return mv::pmax(v, "x"); }},
        {"all_gather", [](const Array& v) { return mv::all_gather(v, "x", 0, true); }},
        {"psum_scatter", [](const Array& v) { return mv::psum_scatter(v, "x", 0, true); }},
        {"ppermute", [&](const Array& v) { return mv::ppermute(v, "x", shift); }},
        {"all_to_all", [](const Array& v) { return mv::all_to_all(v, "x", 0, 0, true); }},
    };
    for (const auto& [name, body] : cases)
      r[name + size] = mv::shard_map(body, line, {P("x")}, P("x"))(x).to_host<float>();
    // Groups of a 2-D mesh: over "x" (devices 0,2,4,6 / 1,3,5,7 span both adapters) and "y".
    const auto g = mv::device_put(std::span<const float>(host), {8 * local},
                                  mv::NamedSharding(grid, P(mv::SpecEntry({"x", "y"}))));
    r["psum over x of (4,2)" + size] =
        mv::shard_map([](const Array& v) { return mv::psum(v, "x"); }, grid,
                      {P(mv::SpecEntry({"x", "y"}))}, P(mv::SpecEntry({"x", "y"})))(g)
            .to_host<float>();
    r["psum over y of (4,2)" + size] =
        mv::shard_map([](const Array& v) { return mv::psum(v, "y"); }, grid,
                      {P(mv::SpecEntry({"x", "y"}))}, P(mv::SpecEntry({"x", "y"})))(g)
            .to_host<float>();
  }
  // Reshards between shardings (device_put of an array to another layout).
  {
    const auto host = random_floats(64 * 96, 11);
    Array a =
        mv::device_put(std::span<const float>(host), {64, 96}, mv::NamedSharding(line, P("x")));
    const std::vector<std::pair<std::string, mv::Sharding>> layouts = {
        {"P(None,'x')", mv::NamedSharding(line, P(mv::None, "x"))},
        {"(4,2) P('x','y')", mv::NamedSharding(grid, P("x", "y"))},
        {"(4,2) P('y','x')", mv::NamedSharding(grid, P("y", "x"))},
        {"(4,2) P(None,'x')", mv::NamedSharding(grid, P(mv::None, "x"))},
        {"replicated", mv::NamedSharding(line, P())},
        {"device 5", mv::SingleDeviceSharding(5, mv::Runtime::current().platform())},
        {"P('x') again", mv::NamedSharding(line, P("x"))},
    };
    for (const auto& [name, sharding] : layouts) {
      a = mv::device_put(a, sharding);
      r["reshard to " + name] = a.to_host<float>();
    }
  }
  // A jit with an all-reduce (the contraction over the sharded axis), replayed 3 times.
  {
    const auto f = mv::jit([](const Array& x) { return (x * 2.0f + 1.0f).sum(0); });
    for (int call = 0; call < 4; ++call) {
      const auto host = random_floats(64 * 32, 20 + call);
      const Array x = mv::device_put(std::span<const float>(host), {64, 32},
                                     mv::NamedSharding(grid, P("x", "y")));
      r["jit call " + std::to_string(call)] = f(x).to_host<float>();
    }
  }
  // The MLP training step (samples/mlp_training.cpp) in dp and tp, 3 steps each.
  for (const std::string mode : {"dp", "tp"}) {
    const std::vector<int> layers = {32, 64, 64, 64, 8};
    mv::Params params = mv::nn::init_mlp(layers, 0);
    Array inputs = mv::normal(mv::random_key(1), {64, layers.front()});
    Array targets = mv::normal(mv::random_key(2), {64, layers.back()});
    const auto& mesh = mode == "dp" ? line : grid;
    for (auto& [name, p] : params) {
      mv::PartitionSpec spec = P();
      if (mode == "tp" && (name == "layers.1.weight" || name == "layers.1.bias")) spec = P("y");
      if (mode == "tp" && name == "layers.2.weight") spec = P(mv::None, "y");
      p = mv::device_put(p, mv::NamedSharding(mesh, spec));
    }
    inputs = mv::device_put(inputs, mv::NamedSharding(mesh, P("x", mv::None)));
    targets = mv::device_put(targets, mv::NamedSharding(mesh, P("x", mv::None)));
    std::vector<std::string> names;
    for (const auto& [name, p] : params) names.push_back(name);
    const mv::JitFunction step(
        [&](const std::vector<Array>& a) {
          mv::Params p;
          for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], a[i]);
          auto [loss, grads] = mv::value_and_grad_params(
              [&](const mv::Params& q) {
                return mv::nn::mse_loss(mv::nn::mlp(q, a[names.size()]), a[names.size() + 1]);
              },
              p);
          std::vector<Array> out{loss};
          for (const auto& [name, value] : mv::nn::sgd(p, grads, 1e-2f)) out.push_back(value);
          return out;
        },
        {.name = "train_step"});
    for (int s = 0; s < 3; ++s) {
      std::vector<Array> args;
      for (const auto& name : names) args.push_back(params.at(name));
      args.push_back(inputs);
      args.push_back(targets);
      const std::vector<Array> out = step.call(args);
      for (size_t k = 0; k < names.size(); ++k) params.at(names[k]) = out[k + 1];
      r["mlp " + mode + " loss step " + std::to_string(s)] = out[0].to_host<float>();
    }
    for (const auto& [name, p] : params) r["mlp " + mode + " " + name] = p.to_host<float>();
  }
  return r;
}

}  // namespace meshvk::testing

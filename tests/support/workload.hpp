#pragma once
// The programs compared bit for bit between runtimes of the same 8 devices laid out differently:
// 1 adapter, 2 adapters in one process (tests/standalone/test_adapters.cpp), 2 processes
// (tests/processes/): every collective at one-shot and ring sizes, over a line and over both
// axes of a (4, 2) mesh, reshards, a jit replayed 3 times and the MLP training step in dp and tp.
#include <algorithm>
#include <cstring>
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
  // Replicated elementwise results past the share threshold (graph/pending_pieces.cpp): each
  // process's devices of one adapter compute shares; eagerly, and a jit's several results.
  {
    const auto ha = random_floats(260 * 131, 30), hb = random_floats(260 * 131, 31);
    const std::vector<std::pair<std::string, mv::Sharding>> layouts = {
        {"replicated", mv::NamedSharding(line, P())}, {"(4,2) P('x')", mv::NamedSharding(grid, P("x"))}};
    for (const auto& [name, sharding] : layouts) {
      const Array a = mv::device_put(std::span<const float>(ha), {260, 131}, sharding);
      const Array b = mv::device_put(std::span<const float>(hb), {260, 131}, sharding);
      r["shares " + name] = (mv::exp(a * 0.5f) * b - mv::tanh(a)).to_host<float>();
      const auto step = mv::jit([](const Array& p, const Array& g) {
        const Array m = 0.1f * g + 0.9f * p;
        return std::vector<Array>{p - 0.01f * m / (mv::sqrt(g * g) + 1e-8f), m};
      });
      const std::vector<Array> out = step(a, b);
      r["shares jit " + name + " 0"] = out[0].to_host<float>();
      r["shares jit " + name + " 1"] = out[1].to_host<float>();
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

// Every collective over a line of all the runtime's devices at sizes that are not multiples of a
// vector's 4 elements (and at one-shot and ring sizes), in float32, int32 and uint32 (the moving
// collectives), run between processes and adapters and compared bit for bit with one process.
// Integer results are also checked here against a host reference (exact: no order to differ
// in); a mismatch is a result "MISMATCH ..." that no other run prints. uint32 and int32 values
// are kept as their bits in the floats.
// The float32 values of 16-bit host values, as Results hold them.
template <class H>
std::vector<float> values_16(const std::vector<H>& v) {
  std::vector<float> out;
  for (const H& h : v) out.push_back(h.to_float());
  return out;
}

inline Results collective_sweep() {
  Results r;
  const int n = Runtime::current().num_devices();
  const auto line = mv::make_mesh({n}, {"x"});
  const auto bits_of = [](const auto& values) {
    std::vector<float> out(values.size());
    if (!values.empty()) std::memcpy(out.data(), values.data(), values.size() * 4);
    return out;
  };
  std::vector<std::pair<int, int>> shift;
  for (int i = 0; i < n; ++i) shift.push_back({i, (i + 1) % n});
  // Local pieces of L elements: 1 and 3 (one-shot), 65537 and 80002 (ring, L mod 4 = 1 and 2),
  // 1048579 (ring, several 4 MiB pieces between processes, L mod 4 = 3).
  for (const int64_t L : {int64_t{1}, int64_t{3}, int64_t{65537}, int64_t{80002}, int64_t{1048579}}) {
    const std::string size = " L=" + std::to_string(L);
    const bool big = L > (1 << 20);
    const auto floats = random_floats(static_cast<size_t>(n * L), static_cast<uint32_t>(L));
    std::vector<int32_t> ints(floats.size());
    for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(floats[i] * 1000000.f);
    std::vector<uint32_t> words(floats.size());
    for (size_t i = 0; i < words.size(); ++i) words[i] = static_cast<uint32_t>(ints[i]) * 2654435761u;
    const mv::NamedSharding split(line, P("x"));
    const Array xf = mv::device_put(std::span<const float>(floats), {n * L}, split);
    const Array xi = mv::device_put(std::span<const int32_t>(ints), {n * L}, split);
    const Array xu = mv::device_put(std::span<const uint32_t>(words), {n * L}, split);
    const auto run = [&](const std::function<Array(const Array&)>& body, const Array& x) {
      return mv::shard_map(body, line, {P("x")}, P("x"))(x);
    };
    const std::vector<std::pair<std::string, std::function<Array(const Array&)>>> reducing = {
        {"psum", [](const Array& v) { return mv::psum(v, "x"); }},
        {"pmax", [](const Array& v) { return mv::pmax(v, "x"); }},
        {"pmin", [](const Array& v) { return mv::pmin(v, "x"); }},
    };
    for (const auto& [name, body] : reducing) {
      if (big && name != "psum") continue;  // the largest size: one reduction is enough
      r[name + " float32" + size] = run(body, xf).to_host<float>();
      const auto got = run(body, xi).to_host<int32_t>();
      r[name + " int32" + size] = bits_of(got);
      // The host's answer: the same in every member's piece.
      size_t wrong = 0;
      for (int64_t i = 0; i < L; ++i) {
        int32_t want = ints[static_cast<size_t>(i)];
        for (int q = 1; q < n; ++q) {
          const int32_t v = ints[static_cast<size_t>(q * L + i)];
          want = name == "psum"   ? static_cast<int32_t>(static_cast<uint32_t>(want) + static_cast<uint32_t>(v))
                 : name == "pmax" ? std::max(want, v)
                                  : std::min(want, v);
        }
        for (int q = 0; q < n; ++q) wrong += got[static_cast<size_t>(q * L + i)] != want;
      }
      if (wrong) r["MISMATCH " + name + " int32" + size] = {static_cast<float>(wrong)};
    }
    if (!big) r["pmean float32" + size] = run([](const Array& v) { return mv::pmean(v, "x"); }, xf).to_host<float>();
    const std::vector<std::pair<std::string, std::function<Array(const Array&)>>> moving = {
        {"all_gather", [](const Array& v) { return mv::all_gather(v, "x", 0, true); }},
        {"ppermute", [&](const Array& v) { return mv::ppermute(v, "x", shift); }},
    };
    // Elements a moving collective put in the wrong place, against the members' input `sent`:
    // all_gather: member q holds everything; ppermute: member q holds member q-1's piece.
    const auto wrong_moves = [&](const std::string& name, const auto& got, const auto& sent, auto same) {
      size_t wrong = 0;
      for (int q = 0; q < n; ++q)
        for (int64_t i = 0; i < (name == "all_gather" ? n * L : L); ++i) {
          const size_t from = name == "all_gather" ? static_cast<size_t>(i)
                                                   : static_cast<size_t>(((q + n - 1) % n) * L + i);
          const size_t at = name == "all_gather" ? static_cast<size_t>(q * n * L + i)
                                                 : static_cast<size_t>(q * L + i);
          wrong += !same(got[at], sent[from]);
        }
      return wrong;
    };
    for (const auto& [name, body] : moving) {
      if (big && name != "all_gather") continue;
      r[name + " float32" + size] = run(body, xf).to_host<float>();
      r[name + " int32" + size] = bits_of(run(body, xi).to_host<int32_t>());
      const auto got = run(body, xu).to_host<uint32_t>();
      r[name + " uint32" + size] = bits_of(got);
      if (const size_t wrong = wrong_moves(name, got, words, [](uint32_t a, uint32_t b) { return a == b; }))
        r["MISMATCH " + name + " uint32" + size] = {static_cast<float>(wrong)};
    }
    // bfloat16, 2 bytes per element (an odd L leaves each piece's last word half used, and the
    // pieces' byte offsets only 2-aligned): moved bit for bit, summed in float32.
    std::vector<mv::bfloat16> halves(floats.size());
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = mv::bfloat16(floats[i] * 100.f);
    const Array xh = mv::device_put(std::span<const mv::bfloat16>(halves), {n * L}, split);
    for (const auto& [name, body] : moving) {
      if (big && name != "all_gather") continue;
      const auto got = run(body, xh).to_host<mv::bfloat16>();
      r[name + " bfloat16" + size] = values_16(got);
      if (const size_t wrong =
              wrong_moves(name, got, halves, [](mv::bfloat16 a, mv::bfloat16 b) { return a.bits == b.bits; }))
        r["MISMATCH " + name + " bfloat16" + size] = {static_cast<float>(wrong)};
    }
    if (!big) r["psum bfloat16" + size] = values_16(run(reducing[0].second, xh).to_host<mv::bfloat16>());
    // int8 (1 byte each: pieces' byte offsets unaligned, a piece's last word partly used) and
    // int64 (8 bytes): moved bit for bit; psum in their own type (int8 wraps, int64 exact).
    std::vector<int8_t> bytes(floats.size());
    std::vector<int64_t> longs(floats.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<int8_t>(ints[i]);
      longs[i] = static_cast<int64_t>(ints[i]) * 4294967311LL;
    }
    const Array xb = mv::device_put(std::span<const int8_t>(bytes), {n * L}, split);
    const Array xl = mv::device_put(std::span<const int64_t>(longs), {n * L}, split);
    for (const auto& [name, body] : moving) {
      if (big && name != "all_gather") continue;
      const auto got8 = run(body, xb).to_host<int8_t>();
      r[name + " int8" + size] = std::vector<float>(got8.begin(), got8.end());
      if (const size_t wrong = wrong_moves(name, got8, bytes, [](int8_t a, int8_t b) { return a == b; }))
        r["MISMATCH " + name + " int8" + size] = {static_cast<float>(wrong)};
      const auto got64 = run(body, xl).to_host<int64_t>();
      if (const size_t wrong = wrong_moves(name, got64, longs, [](int64_t a, int64_t b) { return a == b; }))
        r["MISMATCH " + name + " int64" + size] = {static_cast<float>(wrong)};
    }
    if (!big) {
      const auto got8 = run(reducing[0].second, xb).to_host<int8_t>();
      const auto got64 = run(reducing[0].second, xl).to_host<int64_t>();
      r["psum int8" + size] = std::vector<float>(got8.begin(), got8.end());
      size_t wrong = 0;
      for (int64_t i = 0; i < L; ++i) {
        uint8_t want8 = 0;
        uint64_t want64 = 0;
        for (int q = 0; q < n; ++q) {
          want8 = static_cast<uint8_t>(want8 + static_cast<uint8_t>(bytes[static_cast<size_t>(q * L + i)]));
          want64 += static_cast<uint64_t>(longs[static_cast<size_t>(q * L + i)]);
        }
        for (int q = 0; q < n; ++q)
          wrong += got8[static_cast<size_t>(q * L + i)] != static_cast<int8_t>(want8) ||
                   got64[static_cast<size_t>(q * L + i)] != static_cast<int64_t>(want64);
      }
      if (wrong) r["MISMATCH psum int8/int64" + size] = {static_cast<float>(wrong)};
    }
  }
  // The collectives that split each piece n ways: pieces of n * m elements, m odd.
  for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{8193}, int64_t{65539}}) {
    const int64_t L = n * m;
    const std::string size = " L=" + std::to_string(L);
    const auto floats = random_floats(static_cast<size_t>(n * L), static_cast<uint32_t>(m + 99));
    std::vector<int32_t> ints(floats.size());
    for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(floats[i] * 1000000.f);
    const mv::NamedSharding split(line, P("x"));
    const Array xf = mv::device_put(std::span<const float>(floats), {n * L}, split);
    const Array xi = mv::device_put(std::span<const int32_t>(ints), {n * L}, split);
    const auto run = [&](const std::function<Array(const Array&)>& body, const Array& x) {
      return mv::shard_map(body, line, {P("x")}, P("x"))(x);
    };
    const auto scatter = [](const Array& v) { return mv::psum_scatter(v, "x", 0, true); };
    const auto to_all = [](const Array& v) { return mv::all_to_all(v, "x", 0, 0, true); };
    r["psum_scatter float32" + size] = run(scatter, xf).to_host<float>();
    const auto got = run(scatter, xi).to_host<int32_t>();
    r["psum_scatter int32" + size] = bits_of(got);
    size_t wrong = 0;
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < m; ++i) {
        uint32_t want = 0;
        for (int p = 0; p < n; ++p) want += static_cast<uint32_t>(ints[static_cast<size_t>(p * L + q * m + i)]);
        wrong += got[static_cast<size_t>(q * m + i)] != static_cast<int32_t>(want);
      }
    if (wrong) r["MISMATCH psum_scatter int32" + size] = {static_cast<float>(wrong)};
    r["all_to_all float32" + size] = run(to_all, xf).to_host<float>();
    r["all_to_all int32" + size] = bits_of(run(to_all, xi).to_host<int32_t>());
    // float16 (2 bytes per element, odd chunks of m elements).
    std::vector<mv::float16> halves(floats.size());
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = mv::float16(floats[i]);
    const Array xh = mv::device_put(std::span<const mv::float16>(halves), {n * L}, split);
    r["psum_scatter float16" + size] = values_16(run(scatter, xh).to_host<mv::float16>());
    const auto moved = run(to_all, xh).to_host<mv::float16>();
    r["all_to_all float16" + size] = values_16(moved);
    size_t wrong16 = 0;
    for (int q = 0; q < n; ++q)  // member q's chunk p is member p's chunk q
      for (int p = 0; p < n; ++p)
        for (int64_t i = 0; i < m; ++i)
          wrong16 += moved[static_cast<size_t>(q * L + p * m + i)].bits != halves[static_cast<size_t>(p * L + q * m + i)].bits;
    if (wrong16) r["MISMATCH all_to_all float16" + size] = {static_cast<float>(wrong16)};
  }
  // A jit'd psum at a ring size with a tail (the replayed program's transfers).
  {
    const int64_t L = 80002;
    const auto floats = random_floats(static_cast<size_t>(n * L), 5);
    const Array x = mv::device_put(std::span<const float>(floats), {n * L},
                                   mv::NamedSharding(line, P("x")));
    const auto total =
        mv::shard_map([](const Array& v) { return mv::psum(v, "x"); }, line, {P("x")}, P("x"));
    const auto f = mv::jit([&](const Array& v) { return total(v); });
    for (int call = 0; call < 2; ++call)
      r["jit psum float32 L=80002 call " + std::to_string(call)] = f(x).to_host<float>();
  }
  return r;
}

}  // namespace meshvk::testing

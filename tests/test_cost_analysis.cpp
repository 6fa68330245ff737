// Lowered::cost_analysis() and memory_analysis(): FLOPs against hand counts (2 * M * N * K per
// matmul, one per element per elementwise op), a scan of L layers as L times one layer, bytes
// communicated against the collective records, and each device's memory against what its pool
// measured while the program was traced (Runtime::memory_stats' high-water mark).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

const auto put = placed_array;
const uint64_t f32 = mv::dtype_size(mv::DType::float32);

std::vector<int> first_devices(int n) {
  std::vector<int> d(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) d[static_cast<size_t>(i)] = i;
  return d;
}

const mv::DeviceCost& on(const mv::CostAnalysis& c, int device) {
  for (const auto& d : c.devices)
    if (d.device == device) return d;
  throw std::runtime_error("no device " + std::to_string(device) + " in the cost analysis");
}

// Per (axes, kind), what the records say each device sends per call.
std::map<std::pair<std::vector<std::string>, std::string>, std::pair<uint64_t, uint64_t>> from_records(
    const mv::Lowered& l) {
  std::map<std::pair<std::vector<std::string>, std::string>, std::pair<uint64_t, uint64_t>> m;
  for (const auto& r : l.collectives()) {
    auto& e = m[{r.axes, r.kind}];
    e.first += r.times;
    e.second += r.bytes * r.times;
  }
  return m;
}

void expect_communication_matches_records(const mv::Lowered& l) {
  const auto want = from_records(l);
  const auto& got = l.cost_analysis().communication;
  ASSERT_EQ(got.size(), want.size()) << l.as_text();
  uint64_t total = 0;
  for (const auto& c : got) {
    const auto it = want.find({c.axes, c.kind});
    ASSERT_NE(it, want.end()) << c.kind;
    EXPECT_EQ(c.count, it->second.first) << c.kind;
    EXPECT_EQ(c.bytes, it->second.second) << c.kind;
    total += c.bytes;
  }
  EXPECT_EQ(l.cost_analysis().bytes_communicated(), total);
}

// Traces `f` on `args` (its first call) and checks that each device's pool rose by exactly what
// memory_analysis() says the program takes from it: its arguments' copies, outputs and
// temporaries, each rounded up to the pool's alignment.
template <class F, class... A>
mv::Lowered expect_memory_measured(const F& f, const A&... args) {
  mv::Runtime& rt = mv::Runtime::current();
  rt.synchronize();  // nothing in flight: no buffer freed while the trace runs
  std::vector<uint64_t> before;
  for (int d = 0; d < rt.num_devices(); ++d) before.push_back(rt.memory_stats(d).bytes_in_use);
  rt.reset_peak_memory();
  mv::Lowered lowered = f.lower(args...);  // the first call: the trace
  const mv::MemoryAnalysis& m = lowered.memory_analysis();
  EXPECT_FALSE(m.devices.empty());
  for (const mv::DeviceMemory& dm : m.devices) {
    const auto stats = rt.memory_stats(dm.device);
    EXPECT_EQ(stats.peak_bytes_in_use - before[static_cast<size_t>(dm.device)], dm.pool_bytes)
        << "device " << dm.device << "\n" << lowered.as_text();
    EXPECT_EQ(dm.peak_memory_in_bytes,
              dm.argument_size_in_bytes + dm.output_size_in_bytes - dm.alias_size_in_bytes + dm.temp_size_in_bytes);
    // The rounding: at most one alignment's worth per buffer; never less than the bytes.
    EXPECT_GE(dm.pool_bytes, dm.peak_memory_in_bytes);
  }
  // A device the program does not touch: nothing.
  for (int d = 0; d < rt.num_devices(); ++d) {
    bool listed = false;
    for (const auto& dm : m.devices) listed = listed || dm.device == d;
    if (!listed) {
      EXPECT_EQ(rt.memory_stats(d).peak_bytes_in_use, before[static_cast<size_t>(d)]) << "device " << d;
    }
  }
  return lowered;
}

}  // namespace

// M = 9 rows over 3 devices, K and N odd.
TEST(CostAnalysis, ShardedMatmulOddSizesOnThreeDevices) {
  const int64_t m = 9, k = 7, n = 5;
  const auto mesh = mv::make_mesh({3}, {"x"}, {}, first_devices(3));
  const Array a = put(random_floats(m * k, 1), {m, k}, mv::NamedSharding(mesh, P("x")));
  const Array b = put(random_floats(k * n, 2), {k, n}, mv::NamedSharding(mesh, P()));
  const auto f = mv::jit([](const Array& x, const Array& y) { return mv::matmul(x, y); });
  const mv::Lowered l = expect_memory_measured(f, a, b);
  const mv::CostAnalysis& c = l.cost_analysis();
  ASSERT_EQ(c.devices.size(), 3u) << l.as_text();
  const int64_t rows[] = {3, 3, 3};
  for (int d = 0; d < 3; ++d) {
    const uint64_t r = static_cast<uint64_t>(rows[d]);
    EXPECT_EQ(on(c, d).flops, 2 * r * n * k) << d;
    EXPECT_EQ(on(c, d).transcendentals, 0u);
    EXPECT_EQ(on(c, d).bytes_accessed, (r * k + k * n + r * n) * f32) << d << "\n" << l.as_text();
  }
  EXPECT_EQ(c.flops, 2u * 3 * n * k);
  EXPECT_TRUE(c.communication.empty()) << l.as_text();
  const mv::MemoryAnalysis& mem = l.memory_analysis();
  ASSERT_EQ(mem.devices.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    const uint64_t r = static_cast<uint64_t>(rows[d]);
    const mv::DeviceMemory& dm = mem.devices[static_cast<size_t>(d)];
    EXPECT_EQ(dm.device, d);
    EXPECT_EQ(dm.argument_size_in_bytes, (r * k + k * n) * f32);
    EXPECT_EQ(dm.output_size_in_bytes, r * n * f32);
    EXPECT_EQ(dm.alias_size_in_bytes, 0u);
    // No intermediate value; what temporaries there are is the matmul kernel's scratch on this
    // adapter (lavapipe's kernel repacks an operand), measured with the rest above.
  }
  EXPECT_EQ(mem.argument_size_in_bytes, (3u * k + k * n) * f32);
  EXPECT_EQ(c.as_dict().at("flops"), static_cast<double>(c.flops));
}

// K split: each device contracts its 3 of 9 columns (2 * M * N * 3) and the partial sums meet in
// one all-reduce over 'x' of the [M, N] result.
TEST(CostAnalysis, ContractionOverAnAxisCommunicatesTheResult) {
  const int64_t m = 5, k = 9, n = 7;
  const auto mesh = mv::make_mesh({3}, {"x"}, {}, first_devices(3));
  const Array a = put(random_floats(m * k, 3), {m, k}, mv::NamedSharding(mesh, P(mv::None, "x")));
  const Array b = put(random_floats(k * n, 4), {k, n}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::jit([](const Array& x, const Array& y) { return mv::matmul(x, y); });
  const mv::Lowered l = f.lower(a, b);
  const mv::CostAnalysis& c = l.cost_analysis();
  for (const auto& d : c.devices) EXPECT_EQ(d.flops, 2u * m * n * 3) << d.device << "\n" << l.as_text();
  ASSERT_EQ(c.communication.size(), 1u) << l.as_text();
  EXPECT_EQ(c.communication[0].kind, "all-reduce");
  EXPECT_EQ(c.communication[0].axes, std::vector<std::string>{"x"});
  EXPECT_EQ(c.communication[0].count, 1u);
  EXPECT_EQ(c.bytes_communicated({"x"}), m * n * f32);  // each device's whole summand
  EXPECT_EQ(c.bytes_communicated({"y"}), 0u);
  expect_communication_matches_records(l);
}

// relu(x @ w1 + b1) @ w2 + b2 with x's rows over 8 devices: per device (b = 24 / 8 rows)
// 2*b*D*H + 2*b*H*O for the matmuls, b*H for the bias add and b*H for relu (one fused kernel),
// b*O for the second bias add.
TEST(CostAnalysis, MlpForwardFlopsAndBytesByHand) {
  const int64_t batch = 24, d_in = 13, hidden = 11, d_out = 5, b = batch / 8;
  const auto mesh = mv::make_mesh({8}, {"x"});
  const mv::NamedSharding rows(mesh, P("x")), whole(mesh, P());
  const Array x = put(random_floats(batch * d_in, 5), {batch, d_in}, rows);
  const Array w1 = put(random_floats(d_in * hidden, 6), {d_in, hidden}, whole);
  const Array b1 = put(random_floats(hidden, 7), {hidden}, whole);
  const Array w2 = put(random_floats(hidden * d_out, 8), {hidden, d_out}, whole);
  const Array b2 = put(random_floats(d_out, 9), {d_out}, whole);
  const auto f = mv::jit([](const Array& x, const Array& w1, const Array& b1, const Array& w2, const Array& b2) {
    return mv::matmul(mv::relu(mv::matmul(x, w1) + b1), w2) + b2;
  });
  const mv::Lowered l = expect_memory_measured(f, x, w1, b1, w2, b2);
  const uint64_t flops = 2 * b * d_in * hidden + 2 * b * hidden * d_out + 2 * b * hidden + b * d_out;
  const uint64_t bytes = (b * d_in + d_in * hidden + b * hidden) +  // x @ w1
                         (b * hidden + hidden + b * hidden) +      // relu(. + b1), b1 broadcast
                         (b * hidden + hidden * d_out + b * d_out) +  // . @ w2
                         (b * d_out + d_out + b * d_out);             // . + b2
  const mv::CostAnalysis& c = l.cost_analysis();
  ASSERT_EQ(c.devices.size(), 8u);
  for (const auto& d : c.devices) {
    EXPECT_EQ(d.flops, flops) << d.device << "\n" << l.as_text();
    EXPECT_EQ(d.bytes_accessed, bytes * f32) << d.device << "\n" << l.as_text();
    EXPECT_EQ(d.transcendentals, 0u);
  }
  EXPECT_TRUE(c.communication.empty()) << l.as_text();
  // The program's memory: its copies of the 5 arguments, the [b, O] output and the two
  // intermediates it keeps ([b, H] twice: the matmul's result and relu's).
  const mv::MemoryAnalysis& m = l.memory_analysis();
  for (const auto& dm : m.devices) {
    EXPECT_EQ(dm.argument_size_in_bytes, (b * d_in + d_in * hidden + hidden + hidden * d_out + d_out) * f32);
    EXPECT_EQ(dm.output_size_in_bytes, b * d_out * f32);
  }
}

// One SGD step of the MLP, data parallel: forward, backward (two matmuls per forward matmul) and
// the update; the weight gradients are summed over 'x'.
TEST(CostAnalysis, MlpStepOnEightDevices) {
  const int64_t batch = 16, d_in = 12, hidden = 20, d_out = 3, b = batch / 8;
  const auto mesh = mv::make_mesh({8}, {"x"});
  const mv::NamedSharding rows(mesh, P("x")), whole(mesh, P());
  const Array x = put(random_floats(batch * d_in, 10), {batch, d_in}, rows);
  const Array t = put(random_floats(batch * d_out, 11), {batch, d_out}, rows);
  const Array w1 = put(random_floats(d_in * hidden, 12), {d_in, hidden}, whole);
  const Array w2 = put(random_floats(hidden * d_out, 13), {hidden, d_out}, whole);
  const auto loss = [](const Array& w1, const Array& w2, const Array& x, const Array& t) {
    const Array y = mv::matmul(mv::tanh(mv::matmul(x, w1)), w2);
    return mv::mean(mv::square(y - t));
  };
  const auto step = mv::jit([&](const Array& w1, const Array& w2, const Array& x, const Array& t) {
    const auto [value, grads] = mv::value_and_grad(loss, std::vector<int>{0, 1})(w1, w2, x, t);
    return std::vector<Array>{w1 - 0.1f * grads[0], w2 - 0.1f * grads[1], value};
  });
  const mv::Lowered l = expect_memory_measured(step, w1, w2, x, t);
  // Forward: x @ w1, h @ w2; backward: dw2 and dh for the second, dw1 for the first (x is not
  // differentiated: no dx).
  const uint64_t matmuls = 2 * (2 * b * d_in * hidden) + 3 * (2 * b * hidden * d_out);
  const mv::CostAnalysis& c = l.cost_analysis();
  for (const auto& d : c.devices) {
    // Every matmul of the step, and elementwise work of the order of the activations and weights.
    EXPECT_GE(d.flops, matmuls) << d.device;
    EXPECT_LE(d.flops, matmuls + 20 * (b * hidden + d_in * hidden + hidden * d_out)) << d.device << "\n" << l.as_text();
    // tanh forward only (its derivative is 1 - y^2: arithmetic).
    EXPECT_EQ(d.transcendentals, b * hidden) << d.device << "\n" << l.as_text();
  }
  // The weight gradients are each device's summands: all-reduced over 'x'.
  EXPECT_GE(c.bytes_communicated({"x"}), (d_in * hidden + hidden * d_out) * f32) << l.as_text();
  expect_communication_matches_records(l);
  const mv::MemoryAnalysis& m = l.memory_analysis();
  for (const auto& dm : m.devices) {
    EXPECT_EQ(dm.argument_size_in_bytes, (d_in * hidden + hidden * d_out + b * d_in + b * d_out) * f32);
    EXPECT_EQ(dm.output_size_in_bytes, (d_in * hidden + hidden * d_out + 1) * f32);
    EXPECT_GT(dm.temp_size_in_bytes, 0u);
  }
}

// A scan of L layers tanh(h @ w[i]) costs L times one layer (plus the loop's index, a few flops
// per iteration): the body's recording replays, and so does its count.
TEST(CostAnalysis, ScanOfLayersIsLayersTimesOneLayer) {
  const int64_t batch = 6, d = 9;
  const auto mesh = mv::make_mesh({2}, {"x"}, {}, first_devices(2));
  const mv::NamedSharding rows(mesh, P("x")), whole(mesh, P());
  const Array h0 = put(random_floats(batch * d, 14), {batch, d}, rows);
  auto lowered = [&](int64_t layers) {
    const Array ws = put(random_floats(static_cast<size_t>(layers * d * d), 15), {layers, d, d}, whole);
    const auto f = mv::jit([](const Array& h, const Array& ws) {
      return mv::lax::scan([](const Array& c, const Array& w) { return std::make_pair(mv::tanh(mv::matmul(c, w)), std::nullopt); },
                           h, ws)
          .first;
    });
    return layers == 3 ? expect_memory_measured(f, h0, ws) : f.lower(h0, ws);
  };
  const int64_t b = batch / 2;
  const uint64_t layer = 2 * b * d * d;
  const mv::Lowered l1 = lowered(1), l2 = lowered(2), l3 = lowered(3), l7 = lowered(7);
  const auto flops = [](const mv::Lowered& l) { return l.cost_analysis().flops; };
  const auto bytes = [](const mv::Lowered& l) { return l.cost_analysis().bytes_accessed; };
  // One layer and the index's increment; from 2 layers on, the index that picks w[i] is clamped
  // too (2 more scalar flops per iteration, one index for all of xs).
  EXPECT_EQ(flops(l1), layer + 1) << l1.as_text();
  const uint64_t per_iteration = flops(l3) - flops(l2);
  EXPECT_EQ(per_iteration, layer + 3) << l3.as_text();
  EXPECT_EQ(flops(l2), 2 * per_iteration);
  EXPECT_EQ(flops(l7), 7 * per_iteration);
  for (const auto* l : {&l1, &l2, &l3, &l7}) {
    const uint64_t layers = l == &l1 ? 1 : l == &l2 ? 2 : l == &l3 ? 3 : 7;
    EXPECT_EQ(l->cost_analysis().transcendentals, layers * b * d) << l->as_text();
  }
  EXPECT_EQ(bytes(l7) - bytes(l2), 5 * (bytes(l3) - bytes(l2)));
  // The recording does not grow with the trip count; the temporaries neither.
  EXPECT_EQ(l7.memory_analysis().temp_size_in_bytes, l2.memory_analysis().temp_size_in_bytes);
}

// A collective in a loop body runs once per iteration: its record says how many times, and the
// bytes communicated count each.
TEST(CostAnalysis, CollectivesInALoopBodyCountPerIteration) {
  const int64_t m = 4, k = 6, layers = 5;
  const auto mesh = mv::make_mesh({2}, {"x"}, {}, first_devices(2));
  const Array h0 = put(random_floats(m * k, 16), {m, k}, mv::NamedSharding(mesh, P(mv::None, "x")));
  const Array w = put(random_floats(k * k, 17), {k, k}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::jit([](const Array& h, const Array& w) {
    return mv::lax::fori_loop(0, layers, [&](const Array&, const Array& c) {
      return mv::with_sharding_constraint(mv::matmul(c, w), mv::NamedSharding(w.sharding().named()->mesh(), P(mv::None, "x")));
    }, h);
  });
  const mv::Lowered l = f.lower(h0, w);
  uint64_t per_call = 0;
  for (const auto& r : l.collectives()) {
    EXPECT_EQ(r.times, static_cast<uint64_t>(layers)) << r.kind << "\n" << l.as_text();
    per_call += r.bytes * r.times;
  }
  EXPECT_GT(per_call, 0u) << l.as_text();
  EXPECT_EQ(l.cost_analysis().bytes_communicated(), per_call);
  expect_communication_matches_records(l);
}

// Bytes are what each device sends, each byte once: a reduce-scatter keeps 1/n of its operand,
// an all-to-all too; an all-gather sends its shard, a permute its operand.
TEST(CostAnalysis, CollectiveByteConventions) {
  const auto mesh = mv::make_mesh({4}, {"x"}, {}, first_devices(4));
  const Array x = put(random_floats(4 * 12 * 3, 18), {48, 3}, mv::NamedSharding(mesh, P("x")));
  const uint64_t local = 12 * 3 * f32;  // each device's [12, 3]
  auto bytes_of = [&](auto body, const mv::PartitionSpec& out) {
    const auto per_device = mv::shard_map(body, mesh, {P("x")}, out);
    const auto f = mv::jit([&](const Array& a) -> Array { return per_device(a); });
    const mv::Lowered l = f.lower(x);
    EXPECT_EQ(l.collectives().size(), 1u) << l.as_text();
    return l.collectives().empty() ? uint64_t{0} : l.collectives().front().bytes;
  };
  EXPECT_EQ(bytes_of([](const Array& a) { return mv::psum_scatter(a, "x", 0, true); }, P("x")), local * 3 / 4);
  EXPECT_EQ(bytes_of([](const Array& a) { return mv::all_to_all(a, "x", 0, 0, true); }, P("x")), local * 3 / 4);
  EXPECT_EQ(bytes_of([](const Array& a) { return mv::all_gather(a, "x", 0, true); }, P()), local);
  EXPECT_EQ(bytes_of([](const Array& a) { return mv::psum(a, "x"); }, P()), local);
  EXPECT_EQ(bytes_of([](const Array& a) { return mv::ppermute(a, "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); }, P("x")), local);
}

// A loop in a loop: the inner body's collectives run inner x outer times per call, and its
// FLOPs too.
TEST(CostAnalysis, NestedLoopsMultiplyTheirTripCounts) {
  const int64_t m = 4, k = 6, outer = 3, inner = 4;
  const auto mesh = mv::make_mesh({2}, {"x"}, {}, first_devices(2));
  const mv::NamedSharding cols(mesh, P(mv::None, "x"));
  const Array h0 = put(random_floats(m * k, 19), {m, k}, cols);
  const Array w = put(random_floats(k * k, 20), {k, k}, mv::NamedSharding(mesh, P("x")));
  auto lowered = [&](int64_t n_outer, int64_t n_inner) {
    const auto f = mv::jit([&, n_outer, n_inner](const Array& h, const Array& w) {
      return mv::lax::fori_loop(0, n_outer, [&](const Array&, const Array& c) {
        return mv::lax::fori_loop(0, n_inner, [&](const Array&, const Array& ci) {
          return mv::with_sharding_constraint(mv::matmul(ci, w), cols);
        }, c);
      }, h);
    });
    return f.lower(h0, w);
  };
  const mv::Lowered l = lowered(outer, inner);
  ASSERT_FALSE(l.collectives().empty()) << l.as_text();
  for (const auto& r : l.collectives()) EXPECT_EQ(r.times, static_cast<uint64_t>(outer * inner)) << r.kind;
  expect_communication_matches_records(l);
  // Each matmul contracts k split over 2 devices: 2 * m * k * (k / 2) per device, outer * inner
  // times, and a few index flops per iteration of each loop.
  const uint64_t matmuls = static_cast<uint64_t>(outer * inner) * 2 * m * k * (k / 2);
  EXPECT_GE(l.cost_analysis().flops, matmuls) << l.as_text();
  EXPECT_LE(l.cost_analysis().flops, matmuls + 8 * static_cast<uint64_t>(outer * inner + outer)) << l.as_text();
  const mv::Lowered l2 = lowered(outer + 1, inner);
  EXPECT_EQ(l2.cost_analysis().flops - l.cost_analysis().flops,
            l.cost_analysis().flops / static_cast<uint64_t>(outer)) << "one outer iteration more";
}

// f(x) = x: the output is the argument's buffer (alias), and the program takes nothing more
// from the pool than its argument's copy.
TEST(CostAnalysis, AnArgumentReturnedIsAnAlias) {
  const auto mesh = mv::make_mesh({3}, {"x"}, {}, first_devices(3));
  const Array x = put(random_floats(9 * 5, 21), {9, 5}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::jit([](const Array& a) { return a; });
  const mv::Lowered l = expect_memory_measured(f, x);
  for (const auto& dm : l.memory_analysis().devices) {
    EXPECT_EQ(dm.argument_size_in_bytes, 3u * 5 * f32);
    EXPECT_EQ(dm.output_size_in_bytes, 3u * 5 * f32);
    EXPECT_EQ(dm.alias_size_in_bytes, 3u * 5 * f32);
    EXPECT_EQ(dm.peak_memory_in_bytes, 3u * 5 * f32);
  }
  EXPECT_EQ(l.cost_analysis().flops, 0u);
}

// Empty arrays: no FLOPs, no bytes, and the memory the pool measured.
TEST(CostAnalysis, EmptyArrays) {
  const auto mesh = mv::make_mesh({2}, {"x"}, {}, first_devices(2));
  const Array x = put({}, {4, 0}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::jit([](const Array& a) { return mv::exp(a) * 2.0f + 1.0f; });
  const mv::Lowered l = expect_memory_measured(f, x);
  EXPECT_EQ(l.cost_analysis().flops, 0u);
  EXPECT_EQ(l.cost_analysis().transcendentals, 0u);
  EXPECT_EQ(l.cost_analysis().bytes_accessed, 0u);
  for (const auto& dm : l.memory_analysis().devices) EXPECT_EQ(dm.peak_memory_in_bytes, 0u);
}

// exp, tanh, sqrt count as transcendentals, the arithmetic around them as flops; a sum counts
// input - output elements.
TEST(CostAnalysis, TranscendentalsAndReductions) {
  const int64_t r = 6, c = 7;
  const auto mesh = mv::make_mesh({3}, {"x"}, {}, first_devices(3));
  const Array x = put(random_floats(r * c, 22, 0.5f, 1.5f), {r, c}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::jit([](const Array& a) { return mv::sum(mv::sqrt(mv::exp(a) + mv::tanh(a)) * 3.0f, {1}); });
  const mv::Lowered l = f.lower(x);
  const uint64_t local = 2 * c;  // each device's [2, 7]
  for (const auto& d : l.cost_analysis().devices) {
    EXPECT_EQ(d.transcendentals, 3 * local) << l.as_text();
    // The add and the multiply per element, then the row sums: 2 rows of 7 - 1 adds.
    EXPECT_EQ(d.flops, 2 * local + 2 * (c - 1)) << l.as_text();
  }
}

// The fusion computes a value once however often the program uses it (tanh's t in 1 - t * t is
// one tanh per element), and work on a broadcast operand once per own element (LayerNorm's
// rsqrt of the row variances: once per row, not once per element of the rows it scales).
TEST(CostAnalysis, FusionComputesSharedAndBroadcastValuesOnce) {
  const int64_t rows = 6, cols = 10;
  const Array x = host_array(random_floats(rows * cols, 3), {rows, cols});
  const auto tanh_grad = mv::jit([](const Array& v) {
    const Array t = mv::tanh(v);
    return (1.f - t * t) * t;
  });
  const mv::Lowered l = tanh_grad.lower(x);
  EXPECT_EQ(l.cost_analysis().transcendentals, static_cast<uint64_t>(rows * cols)) << l.as_text();
  const auto normalize = mv::jit([](const Array& v) {
    const Array var = (v * v).mean(1, true);
    return v * mv::rsqrt(var + 1e-5f);
  });
  const mv::Lowered n = normalize.lower(x);
  EXPECT_EQ(n.cost_analysis().transcendentals, static_cast<uint64_t>(rows)) << n.as_text();
  const std::vector<float> hx = x.to_host<float>(), got = normalize(x).to_host<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (int64_t c = 0; c < cols; ++c) s += hx[static_cast<size_t>(r * cols + c)] * hx[static_cast<size_t>(r * cols + c)];
    const float scale = 1.f / std::sqrt(s / cols + 1e-5f);
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(got[static_cast<size_t>(r * cols + c)], hx[static_cast<size_t>(r * cols + c)] * scale, 1e-5f);
  }
}

// Devices of one VkDevice that hold the same piece of a replicated result compute it once: the
// first computes it (an elementwise program, graph/pending_pieces.cpp; a take, take_ops.cpp; a
// matmul's packed weight, linalg_ops.cpp) and the others copy it. Every device's piece must hold
// exactly the bits of the same work done on one device, at sizes that do not divide evenly, for
// one result and for a jit's several, eagerly and in replays; and nothing may be shared whose
// pieces differ though the layout calls them replicas (a partial value's summands, a shard_map
// body). The projection (Lowered::graph) still sees every device do its own work.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "profile_checks.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

uint64_t split_pieces() {
  return test_runtime().state()->shared_pieces.load();
}
bool splits() {
  return test_runtime().state()->splits_replicas();
}

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

int64_t size_of(const mv::Shape& s) {
  int64_t n = 1;
  for (const int64_t d : s) n *= d;
  return n;
}

// Every device's piece of `got` against the same box of `want` (on one device), bit for bit.
void expect_pieces_equal(const mv::Array& got, const mv::Array& want, const std::string& what) {
  const std::vector<float> w = want.to_host<float>();
  const mv::Shape& shape = want.shape();
  for (const mv::Shard& s : got.addressable_shards()) {
    const std::vector<float> g = s.data.to_host<float>();
    // Row-major walk of the piece's box within the whole.
    std::vector<int64_t> at(shape.size(), 0);
    for (size_t d = 0; d < shape.size(); ++d) at[d] = s.index[d].start;
    for (size_t i = 0; i < g.size(); ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + at[d];
      uint32_t a = 0, b = 0;
      std::memcpy(&a, &g[i], 4);
      std::memcpy(&b, &w[static_cast<size_t>(flat)], 4);
      if (a != b) {
        ADD_FAILURE() << what << ": device " << s.device << ", element " << i << " of its piece is "
                      << g[i] << ", computed whole on one device " << w[static_cast<size_t>(flat)];
        return;
      }
      for (size_t d = shape.size(); d-- > 0;) {
        if (++at[d] < s.index[d].stop) break;
        at[d] = s.index[d].start;
      }
    }
  }
}

mv::Array on(const std::vector<float>& v, const mv::Shape& shape, const mv::Sharding& s) {
  return mv::device_put(std::span<const float>(v), shape, s);
}

}  // namespace

TEST(ReplicaSplit, ReplicatedResultsHoldTheWholeProgramsBits) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Sharding replicated = mv::NamedSharding(mesh, P());
  const mv::Sharding one = mv::SingleDeviceSharding(0);
  // Around the threshold (32768 elements), odd sizes, several dimensions.
  for (const mv::Shape& shape :
       std::vector<mv::Shape>{{32768}, {32771}, {100003}, {3, 40001}, {2, 129, 257}, {1000}}) {
    const int64_t n = size_of(shape);
    const auto va = random_values(n, 1), vb = random_values(n, 2);
    const auto f = [](const mv::Array& a, const mv::Array& b) {
      return mv::exp(a) * b + mv::tanh(a - 0.5f * b);
    };
    const uint64_t before = split_pieces();
    const mv::Array got = f(on(va, shape, replicated), on(vb, shape, replicated));
    const mv::Array want = f(on(va, shape, one), on(vb, shape, one));
    expect_pieces_equal(got, want, mv::shape_to_string(shape));
    const uint64_t split = split_pieces() - before;
    if (splits() && n >= 32768)
      EXPECT_EQ(split, 8u) << mv::shape_to_string(shape);
    else
      EXPECT_EQ(split, 0u) << mv::shape_to_string(shape)
                           << ": below the threshold, or MESHVK_SPLIT_REPLICAS=0";
  }
}

TEST(ReplicaSplit, OddDeviceCounts) {
  // 3, 5 and 2 devices, not the mesh's first ones.
  const mv::Sharding one = mv::SingleDeviceSharding(0);
  for (const std::vector<int>& ids :
       std::vector<std::vector<int>>{{0, 1, 2}, {1, 2, 3, 4, 5}, {7, 3}}) {
    const mv::Mesh mesh = mv::make_mesh({static_cast<int>(ids.size())}, {"x"}, {}, ids);
    const mv::Shape shape{65537};
    const auto va = random_values(size_of(shape), 31), vb = random_values(size_of(shape), 32);
    const auto f = [](const mv::Array& a, const mv::Array& b) {
      return mv::sqrt(mv::abs(a)) * b - a;
    };
    const uint64_t before = split_pieces();
    const mv::Array got =
        f(on(va, shape, mv::NamedSharding(mesh, P())), on(vb, shape, mv::NamedSharding(mesh, P())));
    expect_pieces_equal(got, f(on(va, shape, one), on(vb, shape, one)),
                        std::to_string(ids.size()) + " devices");
    if (splits()) {
      EXPECT_EQ(split_pieces() - before, ids.size());
    }
  }
}

TEST(ReplicaSplit, PartlyReplicatedPiecesAndScalars) {
  // P('x') on a (2, 4) mesh: each half is held by the 4 devices along 'y'.
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::Sharding half = mv::NamedSharding(mesh, P("x"));
  const mv::Sharding one = mv::SingleDeviceSharding(0);
  const mv::Shape shape{6, 13001};
  const int64_t n = size_of(shape);
  const auto va = random_values(n, 3), vb = random_values(n, 4);
  const auto f = [](const mv::Array& a, const mv::Array& b, const mv::Array& s) {
    return mv::where(a > b, a * s, mv::log1p(mv::abs(b)) - s);
  };
  const std::vector<float> scalar{0.75f};
  const uint64_t before = split_pieces();
  const mv::Array got = f(on(va, shape, half), on(vb, shape, half),
                          mv::array(std::span<const float>(scalar), mv::Shape{}));
  const mv::Array want = f(on(va, shape, one), on(vb, shape, one),
                           mv::array(std::span<const float>(scalar), mv::Shape{}));
  expect_pieces_equal(got, want, "P('x') on (2, 4)");
  if (splits()) {
    EXPECT_EQ(split_pieces() - before, 8u);
  }
}

TEST(ReplicaSplit, JitResultsOfOneKernelInReplays) {
  // Adam's update of a replicated parameter: three results of one kernel, traced and replayed.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Sharding replicated = mv::NamedSharding(mesh, P());
  const mv::Sharding one = mv::SingleDeviceSharding(0);
  const mv::Shape shape{257, 129};
  const int64_t n = size_of(shape);
  const auto step =
      mv::jit([](const mv::Array& p, const mv::Array& g, const mv::Array& m, const mv::Array& v) {
        const mv::Array m2 = 0.1f * g + 0.9f * m;
        const mv::Array v2 = 0.001f * (g * g) + 0.999f * v;
        const mv::Array p2 = p - 0.01f * (m2 / (mv::sqrt(v2) + 1e-8f));
        return std::vector<mv::Array>{p2, m2, v2};
      });
  for (int call = 0; call < 3; ++call) {
    const auto vp = random_values(n, 10 + call), vg = random_values(n, 20 + call),
               vm = random_values(n, 30 + call);
    auto vv = random_values(n, 40 + call);
    for (auto& x : vv) x = x * x;
    const auto got = step(on(vp, shape, replicated), on(vg, shape, replicated),
                          on(vm, shape, replicated), on(vv, shape, replicated));
    const auto want =
        step(on(vp, shape, one), on(vg, shape, one), on(vm, shape, one), on(vv, shape, one));
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      expect_pieces_equal(got[i], want[i],
                          "call " + std::to_string(call) + ", result " + std::to_string(i));
  }
}

TEST(ReplicaSplit, PartialSummandsAreNotSplit) {
  // x @ w contracted over a sharded dimension leaves each device a summand; 2 * (x @ w) doubles the
  // summands before the sum is taken. Splitting the doubling would mix different devices' summands.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const int64_t m = 96, k = 64, cols = 1031;  // the result: 98,976 elements, past the threshold
  const auto vx = random_values(m * k, 5), vw = random_values(k * cols, 6);
  const mv::Array x = on(vx, {m, k}, mv::NamedSharding(mesh, P(mv::None, "x")));
  const mv::Array w = on(vw, {k, cols}, mv::NamedSharding(mesh, P("x")));
  const auto doubled =
      mv::jit([](const mv::Array& a, const mv::Array& b) { return 2.0f * mv::matmul(a, b); });
  const auto plain =
      mv::jit([](const mv::Array& a, const mv::Array& b) { return mv::matmul(a, b); });
  const mv::Array got = doubled(x, w);
  const mv::Array sum = plain(x, w);
  // Doubling is exact: the doubled sum of the summands is twice their sum, bit for bit.
  const std::vector<float> g = got.to_host<float>(), s = sum.to_host<float>();
  ASSERT_EQ(g.size(), s.size());
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != 2.0f * s[i]) {
      FAIL() << "element " << i << ": " << g[i] << ", want 2 * " << s[i];
    }
  // And every device's piece is the same.
  expect_pieces_equal(got, mv::device_put(got, mv::SingleDeviceSharding(0)), "every piece");
}

TEST(ReplicaSplit, ShardMapBodiesComputeTheirOwnValues) {
  // Inside shard_map every device's value is its own, whatever the spec calls it.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const int64_t per = 40000;
  std::vector<float> v(static_cast<size_t>(8 * per));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i / per) + 0.25f;
  const mv::Array x = on(v, {8 * per}, mv::NamedSharding(mesh, P("x")));
  const auto f = mv::shard_map([](const mv::Array& a) { return mv::exp(a * 0.5f) + a; }, mesh,
                               {P("x")}, P("x"));
  const std::vector<float> got = f(x).to_host<float>();
  for (size_t i = 0; i < got.size(); i += 997) {
    const float a = v[i];
    const float want = std::exp(a * 0.5f) + a;
    EXPECT_NEAR(got[i], want, 1e-5f * std::abs(want)) << "element " << i;
  }
}

TEST(ReplicaSplit, TheProjectionSeesEachDeviceComputeItsOwnReplica) {
  // Lowered::graph (what estimate replays) is the program separate hardware would run: each
  // device's kernel counts the whole piece, and no device waits on another's share.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Shape shape{100003};
  const auto va = random_values(size_of(shape), 9);
  const mv::Array x = on(va, shape, mv::NamedSharding(mesh, P()));
  const auto f = mv::jit([](const mv::Array& a) { return mv::exp(a) * 2.0f + 1.0f; });
  const mv::Array first = f(x);
  expect_pieces_equal(first, f(on(va, shape, mv::SingleDeviceSharding(0))), "jit");
  const mv::ProgramGraph& g = f.lower(x).graph();
  std::map<int, int> device_of;  // timeline -> device
  for (const auto& n : g.nodes) device_of[n.timeline] = n.device;
  std::map<int, uint64_t> flops;
  for (const auto& n : g.nodes) {
    for (const auto& [timeline, value] : n.waits)
      EXPECT_EQ(device_of.at(timeline), n.device)
          << "device " << n.device << " waits on device " << device_of.at(timeline);
    for (const uint32_t w : n.work) flops[n.device] += g.work[w].flops + g.work[w].transcendentals;
  }
  ASSERT_EQ(flops.size(), 8u);
  for (const auto& [device, count] : flops)
    EXPECT_EQ(count, flops.begin()->second) << "device " << device;
  EXPECT_GE(flops.begin()->second, static_cast<uint64_t>(size_of(shape)))
      << "each device counts the whole piece";
}

TEST(ReplicaSplit, ScanGradientInsideShardMapIsSummedOverTheDevices) {
  // The scan's cotangents vary over 'd' only through what follows the scan (x differs per device);
  // the gradient of the replicated w must be summed over 'd' as the unrolled loop's is, and be the
  // same on every device.
  const mv::Mesh mesh = mv::make_mesh({4}, {"d"}, {}, {0, 1, 2, 3});
  const int64_t n = 192;  // w: 36,864 elements, past the split's threshold
  const auto vw = random_values(n * n, 21), vx = random_values(4 * 8 * n, 22);
  for (float& v : const_cast<std::vector<float>&>(vw)) v *= 0.05f;
  const mv::Array w = on(vw, {n, n}, mv::NamedSharding(mesh, P()));
  const mv::Array x = on(vx, {4 * 8, n}, mv::NamedSharding(mesh, P("d")));
  const auto body_of = [](bool scanned) {
    return [scanned](const mv::Array& xl, const mv::Array& wl) {
      const mv::Array h0 = mv::ones({8, n});
      mv::Array ys;
      if (scanned) {
        auto [last, stacked] = mv::lax::scan(
            [wl](const mv::Array& h, const mv::Array&) {
              const mv::Array next = mv::tanh(mv::matmul(h, wl));
              return std::make_pair(next, next);
            },
            h0, mv::zeros({3, 1}));
        ys = stacked;
      } else {
        std::vector<mv::Array> steps;
        mv::Array h = h0;
        for (int i = 0; i < 3; ++i) steps.push_back(h = mv::tanh(mv::matmul(h, wl)));
        ys = mv::stack(steps, 0);
      }
      return mv::psum(mv::sum(ys * xl), "d");
    };
  };
  auto loss = [&](bool scanned) {
    return [&, scanned](const mv::Array& wv) {
      return mv::shard_map(body_of(scanned), mesh, {P("d"), P()}, P())(x, wv);
    };
  };
  const mv::Array g_scan = mv::grad(loss(true))(w);
  const mv::Array g_loop = mv::grad(loss(false))(w);
  const std::vector<float> a = g_scan.to_host<float>(), b = g_loop.to_host<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-3f * (1.0f + std::abs(b[i]))) << "element " << i;
  expect_pieces_equal(g_scan, mv::device_put(g_scan, mv::SingleDeviceSharding(0)),
                      "every device's gradient");
  const auto jitted = mv::jit(mv::grad(loss(true)));
  for (int call = 0; call < 2; ++call) {
    const std::vector<float> j = jitted(w).to_host<float>();
    for (size_t i = 0; i < j.size(); ++i)
      ASSERT_NEAR(j[i], b[i], 1e-3f * (1.0f + std::abs(b[i])))
          << "jit call " << call << ", element " << i;
  }
  // An update of w from it: every device's piece the same.
  const mv::Array updated = w - 0.1f * g_scan;
  expect_pieces_equal(updated, mv::device_put(updated, mv::SingleDeviceSharding(0)),
                      "w after the update");
}

namespace {
uint64_t dispatches() {
  return test_runtime().state()->dispatches.load();
}

// The blocked kernel's packs of B (a kernel, or copies where B is untransposed) that `run`
// records, counted from the profile: on every device, and on all but device 0.
template <class Run>
std::pair<size_t, size_t> b_packs(Run&& run) {
  Profiling on;
  run();
  mv::profile::flush();
  size_t all = 0, others = 0;
  for (const auto& s : spans_of(mv::profile::events(), test_runtime_id()))
    if (std::string(s.name) == "matmul_pack_panels") {
      ++all;
      if (s.device != 0) ++others;
    }
  return {all, others};
}
}  // namespace

TEST(ReplicaSplit, ReplicatedWeightsArePackedOnceAndCopied) {
  // x split over rows times a replicated w: the first device packs w for the blocked kernel and
  // the others copy its pack; every product the same bits as on one device. Plain, transposed,
  // batched, and sizes that are not multiples of 4.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Sharding rows = mv::NamedSharding(mesh, P("x"));
  const mv::Sharding replicated = mv::NamedSharding(mesh, P());
  const mv::Sharding one = mv::SingleDeviceSharding(0);
  struct Case {
    mv::Shape x, w;
    bool transpose;
  };
  for (const Case& c : std::vector<Case>{{{8 * 37, 131}, {131, 77}, false},
                                         {{8 * 16, 128}, {384, 128}, true},
                                         {{8, 40, 33}, {33, 259}, false},
                                         {{8 * 3, 97}, {97, 1001}, false},
                                         {{8 * 5, 96}, {96, 512}, false}}) {
    const auto vx = random_values(size_of(c.x), 7), vw = random_values(size_of(c.w), 8);
    const auto f = [&](const mv::Array& a, const mv::Array& b) {
      return c.transpose ? mv::matmul(a, mv::transpose(b)) : mv::matmul(a, b);
    };
    const std::string what = mv::shape_to_string(c.x) + " x " + mv::shape_to_string(c.w);
    const mv::Array x1 = on(vx, c.x, one), w1 = on(vw, c.w, one);
    const mv::Array x8 = on(vx, c.x, rows), w8 = on(vw, c.w, replicated);
    const mv::Array want = f(x1, w1);
    mv::Array got;
    const auto [shared, on_others] = b_packs([&] { got = f(x8, w8); });
    expect_pieces_equal(got, want, what);
    // Jitted and replayed: the copies are part of the program.
    const auto jf = mv::jit(f);
    for (int call = 0; call < 2; ++call)
      expect_pieces_equal(jf(x8, w8), want, what + ", jit call " + std::to_string(call));
    // w packed by the first device alone, as often as one device packs it.
    if (splits() && size_of(c.w) >= 8192) {
      const size_t single = b_packs([&] { const mv::Array again = f(x1, w1); }).first;
      EXPECT_GT(single, 0u) << what;
      EXPECT_EQ(shared, single) << what << ": w packed on every device";
      EXPECT_EQ(on_others, 0u) << what;
    }
  }
}

TEST(ReplicaSplit, ReplicatedTakesRunOncePerAdapter) {
  // A take from a replicated array with replicated indices: the first device takes, the others
  // copy; every piece the bits of one device's take. Slices of whole vec4s and not, one index and
  // several, indices out of bounds in each mode, on 8 devices and on odd counts.
  const mv::Sharding one = mv::SingleDeviceSharding(0);
  struct Case {
    mv::Shape x;
    std::vector<int32_t> indices;
    int axis;
    mv::TakeMode mode;
  };
  for (const std::vector<int>& ids : std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}, {1, 4, 6}, {2, 7}}) {
    const mv::Mesh mesh = mv::make_mesh({static_cast<int>(ids.size())}, {"x"}, {}, ids);
    const mv::Sharding replicated = mv::NamedSharding(mesh, P());
    for (const Case& c : std::vector<Case>{{{3, 128, 64}, {2}, 0, mv::TakeMode::fill},
                                           {{5, 7, 3}, {4, 0, -1}, 0, mv::TakeMode::fill},
                                           {{6, 33, 5}, {1, 9, 40}, 1, mv::TakeMode::clip},
                                           {{2, 1001}, {-3, 1000, 7}, 1, mv::TakeMode::wrap},
                                           {{4, 12}, {7}, 0, mv::TakeMode::fill}}) {
      const auto vx = random_values(size_of(c.x), 51);
      const mv::Shape ishape{static_cast<int64_t>(c.indices.size())};
      const auto f = [&](const mv::Array& x, const mv::Array& i) { return mv::take(x, i, c.axis, c.mode); };
      const std::string what = std::to_string(ids.size()) + " devices, " + mv::shape_to_string(c.x) + " axis " +
                               std::to_string(c.axis);
      const mv::Array i8 = mv::device_put(std::span<const int32_t>(c.indices), ishape, replicated);
      const mv::Array i1 = mv::device_put(std::span<const int32_t>(c.indices), ishape, one);
      const mv::Array want = f(on(vx, c.x, one), i1);
      const mv::Array x8 = on(vx, c.x, replicated);
      uint64_t before = dispatches();
      const mv::Array got = f(x8, i8);
      const uint64_t shared = dispatches() - before;
      expect_pieces_equal(got, want, what);
      if (splits()) {
        EXPECT_EQ(shared, 1u) << what << ": the take ran on more than one device";
      }
      const auto jf = mv::jit(f);
      for (int call = 0; call < 2; ++call)
        expect_pieces_equal(jf(x8, i8), want, what + ", jit call " + std::to_string(call));
    }
  }
}

TEST(ReplicaSplit, ScanSlicesOfReplicatedStacksAreTakenOnce) {
  // A scan over replicated stacked weights (a transformer's layers in data parallelism): each
  // iteration's slice is taken once per adapter. The result and the gradient as on one device,
  // and the projection counts each device's own take.
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const int64_t layers = 3, d = 36;
  const auto vw = random_values(layers * d * d, 61), vh = random_values(8 * 4 * d, 62);
  std::vector<float> scaled = vw;
  for (float& v : scaled) v *= 0.1f;
  const auto loss = [](const mv::Array& w, const mv::Array& h0) {
    auto [last, ys] = mv::lax::scan(
        [](const mv::Array& h, const mv::Array& wl) {
          const mv::Array next = mv::tanh(mv::matmul(h, wl));
          return std::make_pair(next, next);
        },
        h0, w);
    return mv::sum(last * last) + mv::mean(ys);
  };
  const auto step = mv::jit([&](const mv::Array& w, const mv::Array& h0) {
    auto [value, g] = mv::value_and_grad(loss)(w, h0);
    return std::vector<mv::Array>{value, g};
  });
  const mv::Array w8 = on(scaled, {layers, d, d}, mv::NamedSharding(mesh, P()));
  const mv::Array h8 = on(vh, {8 * 4, d}, mv::NamedSharding(mesh, P("x")));
  const mv::Array w1 = on(scaled, {layers, d, d}, mv::SingleDeviceSharding(0));
  const mv::Array h1 = on(vh, {8 * 4, d}, mv::SingleDeviceSharding(0));
  const auto want = step(w1, h1);
  for (int call = 0; call < 2; ++call) {
    const auto got = step(w8, h8);
    EXPECT_NEAR(got[0].to_host<float>()[0], want[0].to_host<float>()[0], 1e-4f) << "call " << call;
    const std::vector<float> g = got[1].to_host<float>(), gw = want[1].to_host<float>();
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], gw[i], 1e-4f * (1.0f + std::abs(gw[i]))) << "call " << call << ", element " << i;
    expect_pieces_equal(got[1], mv::device_put(got[1], mv::SingleDeviceSharding(0)), "every device's gradient");
  }
  // Every device counts the same work, its own takes included.
  const mv::ProgramGraph& g = step.lower(w8, h8).graph();
  std::map<int, uint64_t> bytes;
  for (const auto& n : g.nodes)
    for (const uint32_t w : n.work) bytes[n.device] += g.work[w].bytes;
  ASSERT_EQ(bytes.size(), 8u);
  for (const auto& [device, count] : bytes) EXPECT_EQ(count, bytes.begin()->second) << "device " << device;
}

TEST(ReplicaSplit, ACopyingDeviceStillWaitsForItsOwnInputsInTheProjection) {
  // A replicated update after the gradient's all-reduce: on every device the projected update
  // starts after that device's all-reduce ends, whichever device computed it (found by review:
  // the copies waited only on the first device, so the others' updates were projected first).
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const int64_t d = 256;  // 65,536 elements: computed once for the adapter
  const auto loss = [](const mv::Array& w, const mv::Array& x) { return mv::sum(mv::tanh(mv::matmul(x, w))); };
  const auto step = mv::jit([&](const mv::Array& w, const mv::Array& x) {
    const mv::Array g = mv::grad(loss)(w, x);
    return w - 0.01f * mv::tanh(g) * mv::exp(g * 0.001f);
  });
  const mv::Array w = mv::device_put(mv::ones({d, d}) * 0.01f, mv::NamedSharding(mesh, P()));
  const mv::Array x = mv::device_put(mv::ones({64, d}), mv::NamedSharding(mesh, P("x")));
  const mv::Estimate e = step.lower(w, x).estimate(mv::load_hardware("tpu_v5e"));
  for (int device = 0; device < 8; ++device) {
    double collectives_end = 0, last_elementwise = -1;
    for (const auto& s : e.timeline) {
      if (s.device != device) continue;
      if (s.name.find("all-reduce") != std::string::npos) collectives_end = std::max(collectives_end, s.end);
      if (s.name == "elementwise") last_elementwise = std::max(last_elementwise, s.start);
    }
    EXPECT_GT(collectives_end, 0) << "device " << device;
    EXPECT_GE(last_elementwise, collectives_end) << "device " << device << ": the update before the all-reduce";
  }
}

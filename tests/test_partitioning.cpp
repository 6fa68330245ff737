// Sharding propagation: each rule checked on the partitioned program (which collectives appear
// and which do not), cache hits, and random programs over random shardings against one device.
#include <gtest/gtest.h>

#include <random>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

Array put(const std::vector<float>& v, mv::Shape s, const mv::Sharding& sharding) {
  return mv::device_put(std::span<const float>(v), s, sharding);
}

int count(const mv::Lowered& l, const std::string& kind) {
  const auto& c = l.collective_counts();
  return c.count(kind) ? c.at(kind).count : 0;
}

}  // namespace

TEST(Partitioning, RulesShowInTheProgram) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  auto sh = [&](mv::PartitionSpec s) { return mv::NamedSharding(mesh, s); };
  const auto x = put(random_floats(64 * 32, 1), {64, 32}, sh(P("a", mv::None)));
  const auto y = put(random_floats(32 * 16, 2), {32, 16}, sh(P(mv::None, "b")));
  const auto xk = put(random_floats(64 * 32, 3), {64, 32}, sh(P(mv::None, "b")));
  const auto yk = put(random_floats(32 * 16, 4), {32, 16}, sh(P("b", mv::None)));
  const auto mm = mv::jit([](const Array& a, const Array& b) { return mv::matmul(a, b); });
  // P('a', None) @ P(None, 'b') -> P('a', 'b') with no communication.
  const auto l1 = mm.lower(x, y);
  EXPECT_TRUE(l1.collective_counts().empty()) << l1.as_text();
  EXPECT_EQ(mm(x, y).sharding(), mv::Sharding(sh(P("a", "b"))));
  // A contracting dimension split on both sides: a local matmul and one all-reduce.
  const auto l2 = mm.lower(xk, yk);
  EXPECT_EQ(count(l2, "all-reduce"), 1) << l2.as_text();
  EXPECT_EQ(count(l2, "reshard"), 0) << l2.as_text();
  EXPECT_NE(l2.as_text().find("replica_groups={{0,1},{2,3},{4,5},{6,7}}"), std::string::npos) << l2.as_text();
  // Elementwise chains follow their operands: nothing moves.
  const auto ew = mv::jit([](const Array& a) { return mv::tanh(a) * 2 + a; });
  EXPECT_TRUE(ew.lower(x).collective_counts().empty());
  // A reduction over a split dimension all-reduces; over an unsplit one it does not.
  const auto sum0 = mv::jit([](const Array& a) { return mv::sum(a, {0}); });
  const auto sum1 = mv::jit([](const Array& a) { return mv::sum(a, {1}); });
  EXPECT_EQ(count(sum0.lower(x), "all-reduce"), 1);
  EXPECT_TRUE(sum1.lower(x).collective_counts().empty());
  // A constraint to another layout moves data; to the same one it does not.
  const auto constrained = mv::jit([&](const Array& a) { return mv::with_sharding_constraint(a + 1, sh(P("b", "a"))); });
  EXPECT_EQ(count(constrained.lower(x), "reshard"), 1);
  const auto same = mv::jit([&](const Array& a) { return mv::with_sharding_constraint(a + 1, sh(P("a"))); });
  EXPECT_TRUE(same.lower(x).collective_counts().empty());
  // Collectives written in shard_map appear under HLO's names.
  const auto sm = mv::jit([&](const Array& a) {
    return mv::shard_map(
        [](const Array& v) {
          return mv::ppermute(mv::all_gather(mv::psum(v, "b"), "a", 0, true), "b", {{0, 1}, {1, 0}});
        },
        mesh, {P("a", "b")}, P(mv::None, "b"))(a);
  });
  const auto l3 = sm.lower(put(random_floats(64 * 32, 5), {64, 32}, sh(P("a", "b"))));
  EXPECT_EQ(count(l3, "all-reduce"), 1) << l3.as_text();
  EXPECT_EQ(count(l3, "all-gather"), 1) << l3.as_text();
  EXPECT_EQ(count(l3, "collective-permute"), 1) << l3.as_text();
  EXPECT_GT(l3.collective_counts().at("all-gather").bytes, 0u);
}

TEST(Partitioning, ContractionWantedShardedIsAReduceScatter) {
  // A[B X, D Y] @ W[D Y, F] wanted as [B X, F Y]: local products reduce-scattered over 'Y'.
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const auto va = random_floats(16 * 64, 7), vw = random_floats(64 * 32, 8);
  const auto a = put(va, {16, 64}, mv::NamedSharding(mesh, P("X", "Y")));
  const auto w = put(vw, {64, 32}, mv::NamedSharding(mesh, P("Y", mv::None)));
  const auto f = mv::jit([&](const Array& a, const Array& w) { return mv::matmul(a, w, mv::NamedSharding(mesh, P("X", "Y"))); });
  const auto lowered = f.lower(a, w);
  EXPECT_EQ(count(lowered, "reduce-scatter"), 1) << lowered.as_text();
  EXPECT_EQ(count(lowered, "all-reduce"), 0) << lowered.as_text();
  EXPECT_EQ(count(lowered, "reshard"), 0) << lowered.as_text();
  const auto r = f(a, w);
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("X", "Y"))));
  const auto want = mv::matmul(put(va, {16, 64}, mv::SingleDeviceSharding(0, mesh.platform())),
                               put(vw, {64, 32}, mv::SingleDeviceSharding(0, mesh.platform()))).to_host<float>();
  const auto got = r.to_host<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f);
}

TEST(Partitioning, ConflictsMoveTheSmallerOperand) {
  // A large operand split on 'a' meets a small one split on 'b' along the same dimension: the
  // small one moves and the result keeps the large one's layout.
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto small = put(random_floats(64, 9), {64, 1}, mv::NamedSharding(mesh, P("b")));
  const auto large = put(random_floats(64 * 64, 10), {64, 64}, mv::NamedSharding(mesh, P("a")));
  const auto f = mv::jit([](const Array& s, const Array& l) { return s + l; });
  const auto r = f(small, large);
  EXPECT_TRUE(r.sharding().is_equivalent_to(mv::NamedSharding(mesh, P("a")), 2)) << r.sharding().to_string();
  const auto counts = f.lower(small, large).collective_counts();
  ASSERT_EQ(counts.count("reshard"), 1u);
  EXPECT_LE(counts.at("reshard").bytes, 64u * 4 * 8);  // only the small operand's bytes moved
}

TEST(Partitioning, CacheHitsNeitherRetraceNorRerecord) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto f = mv::jit([](const Array& a) { return mv::sum(mv::exp(a) * 3, {0}); });
  const auto x = put(random_floats(64 * 8, 6), {64, 8}, mv::NamedSharding(mesh, P("x")));
  f(x);
  auto& state = *test_runtime().state();
  const uint64_t recorded = state.dispatches.load();
  for (int i = 0; i < 5; ++i) f(x);
  EXPECT_EQ(state.dispatches.load(), recorded);  // replays record nothing
  EXPECT_EQ(f.function().traces(), 1u);
  EXPECT_EQ(f.function().cache_size(), 1u);
}

TEST(Partitioning, RandomProgramsOverRandomShardingsMatchOneDevice) {
  std::mt19937 rng(2024);
  const std::vector<std::pair<std::vector<int>, std::vector<std::string>>> meshes = {
      {{8}, {"a"}}, {{4, 2}, {"a", "b"}}, {{2, 4}, {"a", "b"}}, {{2, 2, 2}, {"a", "b", "c"}}};
  for (int trial = 0; trial < 10; ++trial) {
    const auto& [shape, names] = meshes[rng() % meshes.size()];
    const auto mesh = mv::make_mesh(shape, names);
    auto random_spec = [&]() {
      std::vector<mv::SpecEntry> e(2);
      for (const auto& n : names) {
        const int where = static_cast<int>(rng() % 3);
        if (where < 2) e[where].axes.push_back(n);
      }
      return mv::PartitionSpec(e);
    };
    const auto va = random_floats(16 * 16, rng()), vb = random_floats(16 * 16, rng());
    const auto a1 = put(va, {16, 16}, mv::SingleDeviceSharding(0, mesh.platform()));
    const auto b1 = put(vb, {16, 16}, mv::SingleDeviceSharding(0, mesh.platform()));
    const auto a = put(va, {16, 16}, mv::NamedSharding(mesh, random_spec()));
    const auto b = put(vb, {16, 16}, mv::NamedSharding(mesh, random_spec()));
    const int program = static_cast<int>(rng() % 4);
    auto f = [program](const Array& x, const Array& y) -> Array {
      switch (program) {
        case 0: return mv::sum(mv::sin(x) * y + 1, {1});
        case 1: return mv::matmul(mv::transpose(x), y) - x;
        case 2: return mv::reshape(mv::tanh(mv::matmul(x, y)), {8, 32}) * 0.5f;
        default: return mv::mean(mv::maximum(x, y), {0}, true) + mv::broadcast_to(mv::sum(y, {0}), {1, 16});
      }
    };
    const auto want = f(a1, b1).to_host<float>();
    const auto eager = f(a, b).to_host<float>();
    const auto jitted = mv::jit(f)(a, b).to_host<float>();
    ASSERT_EQ(eager.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(eager[i], want[i], 1e-4f) << "trial " << trial << " program " << program << " " << a.sharding().to_string();
      ASSERT_NEAR(jitted[i], want[i], 1e-4f) << "trial " << trial << " program " << program;
    }
  }
}

TEST(Partitioning, BadInput) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto other = mv::make_mesh({2, 4}, {"p", "q"});
  const auto f = mv::jit([](const Array& a) { return a + 1; }, {.in_shardings = {mv::NamedSharding(mesh, P("x")), mv::NamedSharding(mesh, P())}});
  EXPECT_THROW(f(mv::arange(8.f)), mv::Error);  // two in_shardings for one argument
  const auto two = mv::jit([](const Array& a, const Array& b) { return a + b; });
  // The wrong number of arguments does not compile through the template; the type-erased call checks it.
  EXPECT_THROW(two.function().call({mv::arange(8.f)}), mv::Error);
  EXPECT_THROW(mv::jit([&](const Array& a) { return mv::with_sharding_constraint(a, mv::NamedSharding(mesh, P("z"))); })(mv::arange(8.f)),
               mv::Error);  // an axis the mesh lacks
  const auto g = mv::jit([](const Array& a) { return a * 2; }, {.out_shardings = {mv::NamedSharding(other, P("q"))}});
  const auto r = g(mv::arange(8.f));  // another mesh than the data's: moved there, as asked
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(other, P("q"))));
  // A failed trace leaves no cache entry.
  const auto bad = mv::jit([](const Array& a) { return a + mv::zeros({3}); });
  EXPECT_THROW(bad(mv::arange(8.f)), mv::Error);
  EXPECT_EQ(bad.function().cache_size(), 0u);
}

TEST(Partitioning, ShapeOpsAlongUnsplitDimensionsKeepTheShardingAndMoveNothing) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const mv::NamedSharding sharded(mesh, P("a", mv::None, "b"));
  const auto xs = random_floats(16 * 12 * 10, 21), ys = random_floats(16 * 5 * 10, 22);
  const Array x = put(xs, {16, 12, 10}, sharded), y = put(ys, {16, 5, 10}, sharded);
  const Array x1 = host_array(xs, {16, 12, 10}), y1 = host_array(ys, {16, 5, 10});  // one device
  const std::vector<int32_t> picks{3, 0, 11, 3, 7, 20, -4};  // out of range clamps (mode clip)
  const Array idx = mv::device_put(mv::array(std::span<const int32_t>(picks), mv::Shape{7}),
                                   mv::NamedSharding(mesh, P()));

  using Op = std::function<Array(const Array&, const Array&)>;
  const std::vector<std::pair<const char*, Op>> ops{
      {"slice",
       [](const Array& a, const Array&) {
         return mv::slice(a, {0, 2, 0}, {16, 11, 10}, {1, 3, 1});
       }},
      {"pad",
       [](const Array& a, const Array&) {
         return mv::pad(a, {{0, 0}, {1, 2}, {0, 0}}, -7.f);
       }},
      {"roll", [](const Array& a, const Array&) { return mv::roll(a, 5, 1); }},
      {"concatenate",
       [](const Array& a, const Array& b) {
         return mv::concatenate({a, b, a}, 1);
       }},
      {"take",
       [&](const Array& a, const Array&) { return mv::take(a, idx, 1, mv::TakeMode::clip); }},
      {"argsort", [](const Array& a,
                     const Array&) { return mv::astype(mv::argsort(a, 1), mv::DType::float32); }},
  };
  for (const auto& [name, op] : ops) {
    const auto want = op(x1, y1).to_host<float>();
    const Array got = op(x, y);
    EXPECT_EQ(got.sharding(), mv::Sharding(sharded)) << name;
    EXPECT_EQ(got.to_host<float>(), want) << name;
    const auto lowered = mv::jit(op).lower(x, y);
    EXPECT_TRUE(lowered.collective_counts().empty()) << name << "\n" << lowered.as_text();
    EXPECT_EQ(mv::jit(op)(x, y).to_host<float>(), want) << name;
  }
  // Along a split dimension the ops still give the unsharded values (gathering first).
  EXPECT_EQ(mv::slice(x, {3, 0, 0}, {13, 12, 10}, {2, 1, 1}).to_host<float>(),
            mv::slice(x1, {3, 0, 0}, {13, 12, 10}, {2, 1, 1}).to_host<float>());
  EXPECT_EQ(mv::roll(x, -3, 2).to_host<float>(), mv::roll(x1, -3, 2).to_host<float>());
  EXPECT_EQ(mv::take(x, idx, 0, mv::TakeMode::clip).to_host<float>(),
            mv::take(x1, idx, 0, mv::TakeMode::clip).to_host<float>());
  EXPECT_EQ(mv::argsort(x, 0).to_host<int32_t>(), mv::argsort(x1, 0).to_host<int32_t>());
  // take and argsort gather only the axis they work along; the other dimensions stay split.
  const mv::Sharding b_only = mv::NamedSharding(mesh, P(mv::None, mv::None, "b"));
  EXPECT_EQ(mv::take(x, idx, 0, mv::TakeMode::clip).sharding(), b_only);
  EXPECT_EQ(mv::argsort(x, 0).sharding(), b_only);
}

// An embedding lookup: a replicated table and token ids split by batch (or by position). Each
// device takes its own ids from its copy of the table, so the result is split as the ids and
// nothing moves; the ids used to be gathered, leaving every device the whole batch after it.
TEST(Partitioning, TakeFromAReplicatedTableKeepsTheIndicesLayout) {
  const auto mesh = mv::make_mesh({2, 4}, {"a", "b"});
  const auto table_values = random_floats(16 * 6, 41);
  const Array table = put(table_values, {16, 6}, mv::NamedSharding(mesh, P()));
  const Array table1 = host_array(table_values, {16, 6});
  std::vector<int32_t> id_values;
  for (int i = 0; i < 8 * 4; ++i) id_values.push_back((i * 7 + 3) % 19 - 2);  // some out of range
  const Array ids1 = mv::array(std::span<const int32_t>(id_values), mv::Shape{8, 4});
  for (const mv::PartitionSpec& spec : {P("b", "a"), P(mv::None, "b"), P({"a", "b"})}) {
    const Array ids = mv::device_put(ids1, mv::NamedSharding(mesh, spec));
    for (const mv::TakeMode mode : {mv::TakeMode::clip, mv::TakeMode::fill, mv::TakeMode::wrap}) {
      const auto f =
          mv::jit([mode](const Array& t, const Array& i) { return mv::take(t, i, 0, mode); });
      const Array got = f(table, ids);
      EXPECT_TRUE(got.sharding().is_equivalent_to(mv::NamedSharding(mesh, spec), 3))
          << spec.to_string() << " gave " << got.sharding().to_string();
      EXPECT_TRUE(f.lower(table, ids).collective_counts().empty()) << f.lower(table, ids).as_text();
      const auto want = mv::take(table1, ids1, 0, mode).to_host<float>();
      const auto values = got.to_host<float>();
      ASSERT_EQ(values.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k)  // NaN where filled
        EXPECT_TRUE(values[k] == want[k] || (std::isnan(values[k]) && std::isnan(want[k]))) << k;
    }
    // Along axis 1 the ids' layout lands after the table's first axis.
    const Array t2 = mv::device_put(mv::transpose(table1), mv::NamedSharding(mesh, P()));
    const Array along1 = mv::take(t2, ids, 1, mv::TakeMode::clip);
    EXPECT_TRUE(along1.sharding().is_equivalent_to(
        mv::NamedSharding(mesh, P(mv::None, spec[0], spec[1])), 3))
        << along1.sharding().to_string();
    EXPECT_EQ(along1.to_host<float>(),
              mv::take(mv::transpose(table1), ids1, 1, mv::TakeMode::clip).to_host<float>());
    // x[ids] and its gradient (a scatter-add) against one device.
    const auto loss = [](const Array& t, const Array& i) {
      return mv::sum(mv::square(mv::gather(t, i)));
    };
    const std::vector<Array> vg = mv::jit([&](const Array& t, const Array& i) {
      auto [value, grad] = mv::value_and_grad(loss)(t, i);
      return std::vector<Array>{value, grad};
    })(table, ids);
    const Array& v = vg[0];
    const Array& g = vg[1];
    const auto [v1, g1] = mv::value_and_grad(loss)(table1, ids1);
    EXPECT_NEAR(v.to_host<float>()[0], v1.to_host<float>()[0],
                1e-5f * std::fabs(v1.to_host<float>()[0]));
    EXPECT_LE(
        mv::max(mv::abs(mv::device_put(g, mv::SingleDeviceSharding(0)) - g1)).to_host<float>()[0],
        1e-6f);
  }
}

// Sequence parallelism's linear layer: [batch, seq, d] split by seq times a replicated weight.
// einsum merges (batch, seq) into one matrix dimension; with the split label put first each
// device multiplies its own piece, where the merge used to gather the activation whole. The
// weight's gradient contracts over (batch, seq): a local product and one all-reduce.
TEST(Partitioning, EinsumKeepsASplitMiddleDimension) {
  const auto mesh = mv::make_mesh({8}, {"s"});
  const auto xv = random_floats(4 * 16 * 12, 51), wv = random_floats(10 * 12, 52);
  const Array x1 = host_array(xv, {4, 16, 12}), w1 = host_array(wv, {10, 12});
  const Array x = put(xv, {4, 16, 12}, mv::NamedSharding(mesh, P(mv::None, "s")));
  const Array w = put(wv, {10, 12}, mv::NamedSharding(mesh, P()));
  const auto f =
      mv::jit([](const Array& a, const Array& b) { return mv::einsum("bsi,oi->bso", a, b); });
  const Array y = f(x, w);
  EXPECT_TRUE(y.sharding().is_equivalent_to(mv::NamedSharding(mesh, P(mv::None, "s")), 3))
      << y.sharding().to_string();
  const auto lowered = f.lower(x, w);
  EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
  EXPECT_EQ(y.to_host<float>(), mv::einsum("bsi,oi->bso", x1, w1).to_host<float>());  // bit for bit
  const auto dw =
      mv::jit([](const Array& g, const Array& a) { return mv::einsum("bso,bsi->oi", g, a); });
  const auto dl = dw.lower(y, x);
  EXPECT_EQ(count(dl, "all-reduce"), 1) << dl.as_text();
  EXPECT_EQ(count(dl, "reshard"), 0) << dl.as_text();
  const auto got = dw(y, x).to_host<float>();
  const auto want =
      mv::einsum("bso,bsi->oi", mv::einsum("bsi,oi->bso", x1, w1), x1).to_host<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5f) << k;
}

TEST(Partitioning, ReshapesThatKeepEveryPieceMoveNothing) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const mv::NamedSharding sharded(mesh, P("a", mv::None, "b"));
  const auto xs = random_floats(16 * 6 * 10, 31);
  const Array x = put(xs, {16, 6, 10}, sharded);
  const Array x1 = host_array(xs, {16, 6, 10});
  struct Case {
    mv::Shape shape;
    std::optional<mv::PartitionSpec> kept;  // the sharding when nothing moves
    mv::PartitionSpec partly = P();         // otherwise: what stays split after gathering the rest
  };
  const std::vector<Case> cases{
      {{96, 10}, P("a", "b")},                           // merge a split leading dimension
      {{4, 4, 6, 10}, P("a", mv::None, mv::None, "b")},  // split it
      {{16, 1, 6, 1, 10}, P("a", mv::None, mv::None, mv::None, "b")},
      {{2, 8, 3, 2, 10}, std::nullopt, P(mv::None, mv::None, mv::None, mv::None, "b")},  // 2 does not split 4 ways
      {{16, 60}, std::nullopt, P("a")},  // 'b' is not the leading dimension of the merge
      {{960}, std::nullopt, P("a")},
  };
  for (const Case& c : cases) {
    const auto f = [&](const Array& a) { return a.reshape(c.shape); };
    const Array got = f(x);
    EXPECT_EQ(got.to_host<float>(), xs) << mv::shape_to_string(c.shape);
    EXPECT_EQ(got.shape(), c.shape);
    const auto lowered = mv::jit(f).lower(x);
    if (c.kept) {
      EXPECT_EQ(got.sharding(), mv::Sharding(mv::NamedSharding(mesh, *c.kept)))
          << mv::shape_to_string(c.shape);
      EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
    } else {
      // Only the dimensions the reshape cannot keep are gathered.
      EXPECT_TRUE(got.sharding().is_equivalent_to(mv::NamedSharding(mesh, c.partly), c.shape.size()))
          << mv::shape_to_string(c.shape) << ": " << got.sharding().to_string();
    }
    // Reshaping back gives the original layout's values either way.
    EXPECT_EQ(f(x).reshape({16, 6, 10}).to_host<float>(), x1.to_host<float>());
  }
}

TEST(Partitioning, SlicesAcrossSplitDimensionsGatherOnlyWhatEachPieceNeeds) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const mv::NamedSharding sharded(mesh, P("a", mv::None, "b"));
  const auto xs = random_floats(16 * 12 * 10, 41);
  const Array x = put(xs, {16, 12, 10}, sharded);
  const Array x1 = host_array(xs, {16, 12, 10});
  struct Case {
    std::vector<int64_t> start, stop, step;
    mv::PartitionSpec spec;  // of the result
  };
  const std::vector<Case> cases{
      {{4, 0, 0}, {12, 12, 10}, {1, 1, 1}, P("a", mv::None, "b")},  // 8 rows still split 4 ways
      {{3, 0, 0},
       {13, 12, 10},
       {2, 1, 1},
       P(mv::None, mv::None, "b")},                                // 5 rows: whole on each device
      {{0, 2, 1}, {16, 10, 9}, {4, 3, 1}, P("a", mv::None, "b")},  // strided in every dimension
      {{0, 0, 3}, {16, 12, 4}, {1, 1, 1}, P("a")},                 // one column: whole
  };
  for (const Case& c : cases) {
    const auto f = [&](const Array& a) { return mv::slice(a, c.start, c.stop, c.step); };
    const auto want = f(x1).to_host<float>();
    const Array got = f(x);
    EXPECT_EQ(got.to_host<float>(), want);
    EXPECT_EQ(got.sharding(), mv::Sharding(mv::NamedSharding(mesh, c.spec)))
        << got.sharding().to_string();
    EXPECT_EQ(mv::jit(f)(x).to_host<float>(), want);
    // Less than gathering the whole array onto every device (7/8 of it moved to each of 8).
    const auto counts = mv::jit(f).lower(x).collective_counts();
    const uint64_t moved = counts.count("reshard") ? counts.at("reshard").bytes : 0;
    EXPECT_LT(moved, 7u * 16 * 12 * 10 * 4 / 2) << mv::jit(f).lower(x).as_text();
  }
}

TEST(Partitioning, PadRollConcatenateAcrossSplitDimensionsKeepTheLayout) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const mv::NamedSharding sharded(mesh, P("a", mv::None, "b"));
  const auto xs = random_floats(16 * 12 * 10, 51), ys = random_floats(8 * 12 * 10, 52);
  const Array x = put(xs, {16, 12, 10}, sharded);
  const Array y =
      put(ys, {8, 12, 10}, mv::NamedSharding(mesh, P(mv::None, "a", "b")));  // laid out otherwise
  const Array x1 = host_array(xs, {16, 12, 10}), y1 = host_array(ys, {8, 12, 10});
  using Op = std::function<Array(const Array&, const Array&)>;
  struct Case {
    const char* name;
    Op op;
    mv::PartitionSpec spec;
  };
  const std::vector<Case> cases{
      {"pad, divides",
       [](const Array& a, const Array&) {
         return mv::pad(a, {{3, 5}, {0, 0}, {1, 1}}, 2.5f);
       },
       P("a", mv::None, "b")},
      {"pad, does not divide",
       [](const Array& a, const Array&) {
         return mv::pad(a, {{1, 0}, {0, 0}, {0, 0}}, -1.f);
       },
       P(mv::None, mv::None, "b")},
      {"roll", [](const Array& a, const Array&) { return mv::roll(a, 5, 0); },
       P("a", mv::None, "b")},
      {"roll back", [](const Array& a, const Array&) { return mv::roll(a, -7, 2); },
       P("a", mv::None, "b")},
      {"concatenate",
       [](const Array& a, const Array& b) {
         return mv::concatenate({a, b, a}, 0);
       },
       P("a", mv::None, "b")},
      {"concatenate, does not divide",
       [](const Array& a, const Array& b) {
         return mv::concatenate({b, mv::slice(a, {0, 0, 0}, {2, 12, 10})}, 0);
       },
       P(mv::None, "a", "b")},
  };
  for (const Case& c : cases) {
    const auto want = c.op(x1, y1).to_host<float>();
    const Array got = c.op(x, y);
    EXPECT_EQ(got.to_host<float>(), want) << c.name;
    EXPECT_EQ(got.sharding(), mv::Sharding(mv::NamedSharding(mesh, c.spec)))
        << c.name << ": " << got.sharding().to_string();
    EXPECT_EQ(mv::jit(c.op)(x, y).to_host<float>(), want) << c.name;
  }
}

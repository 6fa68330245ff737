// Where every collective comes from: each collective and reshard of a program names the rule
// that inserted it and the user's source line (Lowered::collectives(), the ends of as_text()'s
// lines), in the forward pass and in the backward pass (the forward op's line).
#include <gtest/gtest.h>

#include <string>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

const auto put = placed_array;

std::string basename(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

}  // namespace

TEST(Provenance, ContractionNamesItsRuleAndLine) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto x = put(random_floats(8 * 16, 1), {8, 16}, mv::NamedSharding(mesh, P("data", "model")));
  const auto w = put(random_floats(16 * 4, 2), {16, 4}, mv::NamedSharding(mesh, P("model")));
  uint32_t matmul_line = 0;
  const auto f = mv::jit([&matmul_line](const Array& a, const Array& b) {
    matmul_line = __LINE__ + 1;
    return mv::matmul(a, b);
  });
  const mv::Lowered lowered = f.lower(x, w);
  ASSERT_EQ(lowered.collectives().size(), 1u) << lowered.as_text();
  const mv::CollectiveRecord& r = lowered.collectives().front();
  EXPECT_EQ(r.kind, "all-reduce");
  EXPECT_EQ(r.axes, std::vector<std::string>{"model"});
  EXPECT_EQ(r.bytes, 4u * 4 * 4);  // a [4, 4] piece of float32 per device
  EXPECT_EQ(r.rule, "dot_general contracts dim 1 sharded on 'model'");
  EXPECT_EQ(basename(r.file), "test_collective_provenance.cpp");
  EXPECT_EQ(r.line, matmul_line);
  EXPECT_FALSE(r.backward);
  const std::string where = "test_collective_provenance.cpp:" + std::to_string(matmul_line);
  EXPECT_NE(lowered.as_text().find("# dot_general contracts dim 1 sharded on 'model' - " + where), std::string::npos)
      << lowered.as_text();
}

TEST(Provenance, ReshardsNameTheirRule) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto x = put(random_floats(8 * 8, 3), {8, 8}, mv::NamedSharding(mesh, P("data", "model")));
  const auto y = put(random_floats(8 * 8, 4), {8, 8}, mv::NamedSharding(mesh, P("model", "data")));
  uint32_t sum_line = 0, constraint_line = 0;
  const uint32_t jit_line = __LINE__ + 1;
  const auto f = mv::jit(
      [&](const Array& a, const Array& b) {
        const Array c = mv::matmul(a + b, mv::ones({8, 8}));  // a + b: operands laid out alike first
        constraint_line = __LINE__ + 1;
        const Array d = mv::with_sharding_constraint(c, mv::NamedSharding(mesh, P(mv::None, "data")));
        sum_line = __LINE__ + 1;
        return mv::sum(d, {1});
      },
      {.out_shardings = {mv::NamedSharding(mesh, P("model"))}});
  const mv::Lowered lowered = f.lower(x, y);
  const auto& records = lowered.collectives();
  ASSERT_FALSE(records.empty()) << lowered.as_text();
  bool add_seen = false, constraint_seen = false, sum_seen = false, out_seen = false;
  for (const auto& r : records) {
    SCOPED_TRACE(r.kind + ": " + r.rule + " line " + std::to_string(r.line));
    EXPECT_FALSE(r.rule.empty());
    if (r.rule.rfind("add: operands with different shardings", 0) == 0) {
      add_seen = true;
      // An operator takes no source_location, and a + b runs before matmul is entered: jit's line.
      EXPECT_EQ(r.line, jit_line);
    }
    if (r.rule == "with_sharding_constraint") {
      constraint_seen = true;
      EXPECT_EQ(r.line, constraint_line);
    }
    if (r.rule == "sum over a dimension sharded on ('data',)") {
      sum_seen = true;
      EXPECT_EQ(r.kind, "all-reduce");
      EXPECT_EQ(r.line, sum_line);
    }
  }
  EXPECT_TRUE(add_seen && constraint_seen && sum_seen) << lowered.as_text();
  // out_shardings that gather the result: jit places it after the function returned (jit's line).
  const uint32_t gathered_line = __LINE__ + 1;
  const auto gathered = mv::jit([](const Array& a) { return a * 2.f; }, {.out_shardings = {mv::NamedSharding(mesh, P())}});
  const mv::Lowered placed = gathered.lower(x);
  for (const auto& r : placed.collectives()) {
    out_seen = out_seen || r.rule == "out_shardings[0]";
    EXPECT_EQ(r.line, gathered_line);
    EXPECT_EQ(r.axes, (std::vector<std::string>{"data", "model"}));
  }
  EXPECT_TRUE(out_seen) << placed.as_text();
}

// The backward pass's collectives name the forward op they differentiate.
TEST(Provenance, BackwardPassNamesTheForwardLine) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto x = put(random_floats(8 * 16, 5), {8, 16}, mv::NamedSharding(mesh, P("data")));
  const auto w = put(random_floats(16 * 4, 6), {16, 4}, mv::NamedSharding(mesh, P()));
  uint32_t matmul_line = 0;
  const auto loss = [&matmul_line](const Array& wt, const Array& xs) {
    matmul_line = __LINE__ + 1;
    const Array y = mv::matmul(xs, wt);
    return mv::sum(y * y);
  };
  const auto step = mv::jit([&](const Array& wt, const Array& xs) { return mv::grad(loss)(wt, xs); });
  const mv::Lowered lowered = step.lower(w, x);
  bool backward_seen = false;
  for (const auto& r : lowered.collectives())
    if (r.backward) {
      backward_seen = true;
      EXPECT_EQ(r.line, matmul_line) << r.kind << ": " << r.rule;
      EXPECT_EQ(r.axes, std::vector<std::string>{"data"});
    }
  EXPECT_TRUE(backward_seen) << lowered.as_text();
  EXPECT_NE(lowered.as_text().find("[backward]"), std::string::npos) << lowered.as_text();
}

// psum in shard_map is explicit: its rule says so, with the user's line.
TEST(Provenance, ExplicitCollectivesInShardMap) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = put(random_floats(64, 7), {64}, mv::NamedSharding(mesh, P("x")));
  uint32_t psum_line = 0;
  const auto f = mv::jit([&](const Array& a) {
    return mv::shard_map(
        [&](const Array& local) {
          psum_line = __LINE__ + 1;
          return mv::psum(mv::sum(local), "x");
        },
        mesh, {P("x")}, P())(a);
  });
  const mv::Lowered lowered = f.lower(x);
  ASSERT_EQ(lowered.collectives().size(), 1u) << lowered.as_text();
  EXPECT_EQ(lowered.collectives().front().rule, "psum (explicit, in shard_map)");
  EXPECT_EQ(lowered.collectives().front().line, psum_line);
}

// An einsum contracting a split dimension, plus a bias and a residual (added to the partial sum
// before the one all-reduce), names the contraction and its line, also inside a scan's body.
TEST(Provenance, EinsumPlusResidualInsideAScanNamesTheContraction) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto x = put(random_floats(4 * 3 * 8, 5), {4, 3, 8}, mv::NamedSharding(mesh, P("data")));
  const auto w = put(random_floats(2 * 8 * 8, 6), {2, 8, 8}, mv::NamedSharding(mesh, P(mv::None, mv::None, "model")));
  uint32_t line = 0;
  const auto layer = [&line](const Array& h, const Array& wl) {
    line = __LINE__ + 1;
    return h + (mv::einsum("bsi,oi->bso", mv::tanh(h), wl) + 1.0f);
  };
  const auto plain = mv::jit([&](const Array& a, const Array& b) { return layer(a, b[0]); });
  const mv::Lowered pl = plain.lower(x, w);
  ASSERT_EQ(pl.collectives().size(), 1u) << pl.as_text();
  EXPECT_EQ(pl.collectives().front().rule.rfind("dot_general contracts", 0), 0u) << pl.as_text();
  EXPECT_EQ(pl.collectives().front().line, line) << pl.as_text();
  const auto scanned = mv::jit([&](const Array& a, const Array& b) {
    return mv::lax::scan([&](const Array& h, const Array& wl) { return std::make_pair(layer(h, wl), std::nullopt); }, a, b).first;
  });
  const mv::Lowered sl = scanned.lower(x, w);
  ASSERT_EQ(sl.collectives().size(), 1u) << sl.as_text();
  EXPECT_EQ(sl.collectives().front().rule.rfind("dot_general contracts", 0), 0u) << sl.as_text();
  EXPECT_EQ(sl.collectives().front().line, line) << sl.as_text();
}

// A collective that no call with a line of its own inserted (an operator's layout, an
// out_shardings move) names the line of the jit() call.
TEST(Provenance, OperatorsAndOutShardingsNameTheJitLine) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto a = put(random_floats(8 * 16, 7), {8, 16}, mv::NamedSharding(mesh, P("x")));
  const auto b = put(random_floats(8 * 16, 8), {8, 16}, mv::NamedSharding(mesh, P(mv::None, "x")));
  const uint32_t jit_line = __LINE__ + 1;
  const auto f = mv::jit([](const Array& u, const Array& v) { return u + v; },
                         {.out_shardings = {mv::NamedSharding(mesh, P(mv::None, "x"))}});
  const mv::Lowered lowered = f.lower(a, b);
  ASSERT_GE(lowered.collectives().size(), 1u) << lowered.as_text();
  for (const mv::CollectiveRecord& r : lowered.collectives()) {
    EXPECT_EQ(basename(r.file), "test_collective_provenance.cpp") << lowered.as_text();
    EXPECT_EQ(r.line, jit_line) << lowered.as_text();
    EXPECT_FALSE(r.rule.empty()) << lowered.as_text();
  }
  // A line given by an API call inside still wins over jit's.
  uint32_t sum_line = 0;
  const auto g = mv::jit([&sum_line](const Array& u) {
    sum_line = __LINE__ + 1;
    return mv::sum(u, {0});
  });
  const mv::Lowered gl = g.lower(a);
  ASSERT_EQ(gl.collectives().size(), 1u) << gl.as_text();
  EXPECT_EQ(gl.collectives().front().line, sum_line) << gl.as_text();
}

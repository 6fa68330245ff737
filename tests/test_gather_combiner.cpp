// device_put and with_sharding_constraint of a pytree gather the leaves that each move by exactly
// an all-gather together, packed into one all-gather per (axes, dtype) (XLA's all-gather
// combiner, FSDP's flat parameter), and their gradients go back as reduce-scatters packed where
// they are read together. Values against the host; split dimensions 0, 1 and 2, a vector, a
// bfloat16 leaf (a group of its own), a leaf already whole, 8 and 3 devices, eager, jit, grad and
// a scan whose body gathers its layer.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

int count(const mv::Lowered& l, const std::string& kind) {
  const auto& c = l.collective_counts();
  return c.count(kind) ? c.at(kind).count : 0;
}

int lines_with(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

mv::Mesh line_mesh(int devices, const std::string& axis) {
  std::vector<int> ids;
  for (int i = 0; i < devices; ++i) ids.push_back(i);
  return mv::make_mesh({devices}, {axis}, {}, ids);
}

struct TreeParams {
  mv::Params host, placed;
};

TreeParams make_params(const mv::Mesh& mesh, int64_t n) {
  const std::map<std::string, std::pair<mv::Shape, mv::PartitionSpec>> layout = {
      {"a", {{2 * n, 3}, P("f")}},
      {"b", {{5, n}, P(mv::None, "f")}},
      {"c", {{2, 3, 2 * n}, P(mv::None, mv::None, "f")}},
      {"d", {{n}, P("f")}},
      {"e", {{4}, P()}}};  // already whole: no move
  TreeParams s;
  uint32_t seed = 80;
  for (const auto& [name, l] : layout) {
    const auto v = random_floats(static_cast<size_t>(mv::shape_size(l.first)), seed++);
    s.host.emplace(name, host_array(v, l.first));
    s.placed.emplace(name, placed_array(v, l.first, mv::NamedSharding(mesh, l.second)));
  }
  return s;
}

Array loss_of(const mv::Params& p, const Array& xa, const Array& xb, const Array& xc) {
  const Array c = mv::reshape(p.at("c"), {6, -1});
  return mv::sum(mv::tanh(mv::matmul(xa, p.at("a")))) +
         mv::sum(mv::tanh(mv::matmul(xb, p.at("b"))) * p.at("d")) +
         mv::sum(mv::square(mv::matmul(xc, c))) + mv::sum(p.at("e") * p.at("e"));
}

}  // namespace

TEST(GatherCombiner, ATreeIsGatheredInOneAllGatherPerDtype) {
  for (const int devices : {8, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    const mv::Mesh mesh = line_mesh(devices, "f");
    const int64_t n = devices;
    TreeParams s = make_params(mesh, n);
    const auto vh = random_floats(static_cast<size_t>(2 * n * 4), 90);
    const Array h16 = mv::astype(placed_array(vh, {2 * n, 4}, mv::NamedSharding(mesh, P("f"))),
                                 mv::DType::bfloat16);
    s.placed.emplace("h16", h16);
    s.host.emplace("h16", mv::astype(host_array(vh, {2 * n, 4}), mv::DType::bfloat16));
    const mv::NamedSharding whole(mesh, P());
    const auto gather = [whole](const mv::Params& p) {
      return mv::with_sharding_constraint(p, mv::ShardingTree(whole));
    };
    const auto jitted = mv::jit(gather);
    for (const mv::Params& got : {gather(s.placed), jitted(s.placed), jitted(s.placed),
                                  mv::device_put(s.placed, mv::ShardingTree(whole))})
      for (const auto& [name, g] : got) {
        SCOPED_TRACE(name);
        EXPECT_TRUE(g.sharding().is_fully_replicated());
        EXPECT_EQ(g.shape(), s.host.at(name).shape());
        expect_close(mv::astype(g, mv::DType::float32),
                     mv::astype(s.host.at(name), mv::DType::float32).template to_host<float>(),
                     0.f);
      }
    const auto lowered = jitted.lower(s.placed);
    EXPECT_EQ(count(lowered, "all-gather"), 2) << lowered.as_text();  // float32 and bfloat16
    EXPECT_EQ(count(lowered, "reshard"), 0) << lowered.as_text();
    EXPECT_EQ(lines_with(lowered.as_text(), "all-gather combiner: 4 values over ('f',)"), 1)
        << lowered.as_text();
  }
}

// Under grad: the gradients go back split, as one packed reduce-scatter where jit's results are
// taken; eager, the same values.
TEST(GatherCombiner, GradientsOfATreeConstraint) {
  for (const int devices : {8, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    const mv::Mesh mesh = line_mesh(devices, "f");
    const int64_t n = devices, batch = 2 * n;
    const TreeParams s = make_params(mesh, n);
    const mv::NamedSharding whole(mesh, P());
    const auto loss = [whole](const mv::Params& p, const Array& xa, const Array& xb,
                              const Array& xc) {
      return loss_of(mv::with_sharding_constraint(p, mv::ShardingTree(whole)), xa, xb, xc);
    };
    const auto va = random_floats(static_cast<size_t>(batch * 2 * n), 91),
               vb = random_floats(static_cast<size_t>(batch * 5), 92),
               vc = random_floats(static_cast<size_t>(batch * 6), 93);
    const mv::Params want =
        mv::grad([](const mv::Params& p, const Array& a, const Array& b, const Array& c) {
          return loss_of(p, a, b, c);
        })(s.host, host_array(va, {batch, 2 * n}), host_array(vb, {batch, 5}),
           host_array(vc, {batch, 6}));
    const mv::NamedSharding rows(mesh, P("f"));
    const Array xa = placed_array(va, {batch, 2 * n}, rows),
                xb = placed_array(vb, {batch, 5}, rows), xc = placed_array(vc, {batch, 6}, rows);
    const auto step = mv::jit(mv::grad(loss));
    for (const mv::Params& got : {mv::grad(loss)(s.placed, xa, xb, xc), step(s.placed, xa, xb, xc),
                                  step(s.placed, xa, xb, xc)})
      for (const auto& [name, g] : got) {
        SCOPED_TRACE(name);
        EXPECT_EQ(g.sharding(), s.placed.at(name).sharding());
        expect_close(g, want.at(name).to_host<float>(), 1e-4f);
      }
    const auto lowered = step.lower(s.placed, xa, xb, xc);
    EXPECT_EQ(count(lowered, "all-gather"), 1) << lowered.as_text();
    EXPECT_EQ(count(lowered, "reduce-scatter"), 1) << lowered.as_text();
  }
}

// A scan whose body gathers its layer's weights together (FSDP with the layers in a loop): one
// all-gather per iteration, none again in the backward pass (the forward pass's result is handed
// back), one reduce-scatter per backward iteration; the unrolled loop's gradients.
TEST(GatherCombiner, ScanBodyGathersItsLayerOnce) {
  const mv::Mesh mesh = line_mesh(8, "f");
  const int64_t layers = 3, d = 8, batch = 16;
  const mv::NamedSharding whole(mesh, P());
  const auto layer = [whole](const Array& h, const mv::Params& w) {
    const mv::Params g = mv::with_sharding_constraint(w, mv::ShardingTree(whole));
    return mv::tanh(mv::matmul(h, g.at("w1")) + g.at("b")) + mv::matmul(h, g.at("w2"));
  };
  const auto scanned = [layer](const mv::Params& stacks, const Array& h0) {
    auto [last, ys] = mv::lax::scan(
        [layer](const Array& h, const mv::Params& w) {
          return std::make_pair(layer(h, w), std::nullopt);
        },
        h0, stacks);
    return mv::sum(last * last);
  };
  const auto unrolled = [layer](const mv::Params& stacks, const Array& h0) {
    Array h = h0;
    for (int64_t i = 0; i < layers; ++i) {
      mv::Params w;
      for (const auto& [name, s] : stacks) w.emplace(name, s[i]);
      h = layer(h, w);
    }
    return mv::sum(h * h);
  };
  const std::map<std::string, mv::Shape> shapes = {
      {"w1", {layers, d, d}}, {"w2", {layers, d, d}}, {"b", {layers, d}}};
  mv::Params stacks;
  uint32_t seed = 100;
  for (const auto& [name, shape] : shapes)
    stacks.emplace(name, placed_array(random_floats(static_cast<size_t>(mv::shape_size(shape)),
                                                    seed++, -0.4f, 0.4f),
                                      shape, mv::NamedSharding(mesh, P(mv::None, "f"))));
  const Array h0 = placed_array(random_floats(static_cast<size_t>(batch * d), 7), {batch, d},
                                mv::NamedSharding(mesh, P("f")));
  const mv::Params want = mv::grad(unrolled)(stacks, h0);
  const auto step = mv::jit(mv::grad(scanned));
  for (const mv::Params& got : {mv::grad(scanned)(stacks, h0), step(stacks, h0)})
    for (const auto& [name, g] : got) {
      SCOPED_TRACE(name);
      EXPECT_EQ(g.sharding(), stacks.at(name).sharding());
      expect_close(g, want.at(name).to_host<float>(), 1e-4f);
    }
  const auto lowered = step.lower(stacks, h0);
  const mv::CostAnalysis cost = lowered.cost_analysis();
  uint64_t gathers = 0, scatters = 0;
  for (const mv::Communication& c : cost.communication) {
    if (c.kind == "all-gather") gathers += c.count;
    if (c.kind == "reduce-scatter") scatters += c.count;
  }
  EXPECT_EQ(gathers, static_cast<uint64_t>(layers)) << lowered.as_text();
  EXPECT_EQ(scatters, static_cast<uint64_t>(layers)) << lowered.as_text();
}

// A sharding tree that does not fit the value is an Error naming the constraint, and the runtime
// goes on: the same tree then gathers.
TEST(GatherCombiner, ATreeThatDoesNotFitIsAnError) {
  const mv::Mesh mesh = line_mesh(3, "f");
  const TreeParams s = make_params(mesh, 3);
  const mv::NamedSharding whole(mesh, P());
  try {
    (void)mv::with_sharding_constraint(s.placed,
                                       mv::ShardingTree::dict({{"a", whole}, {"zz", whole}}));
    ADD_FAILURE() << "no error";
  } catch (const mv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("with_sharding_constraint"), std::string::npos)
        << e.what();
  }
  const mv::Params got = mv::with_sharding_constraint(s.placed, mv::ShardingTree(whole));
  for (const auto& [name, g] : got) expect_close(g, s.host.at(name).to_host<float>(), 0.f);
}

// Leaves past the 25 MiB bucket go in further all-gathers: three of 10 MiB are one packed gather
// of two and one of their own, with every value intact.
TEST(GatherCombiner, LargeTreesGoInBucketsOf25MiB) {
  const mv::Mesh mesh = line_mesh(3, "f");
  const int64_t rows = 3 * 1024, cols = 853;  // 3072 x 853 floats: 10.0 MiB
  mv::Params placed;
  std::map<std::string, std::vector<float>> host;
  for (const std::string name : {"x", "y", "z"}) {
    host[name] = random_floats(static_cast<size_t>(rows * cols), static_cast<uint32_t>(name[0]));
    placed.emplace(name, placed_array(host[name], {rows, cols}, mv::NamedSharding(mesh, P("f"))));
  }
  const mv::NamedSharding whole(mesh, P());
  const auto gather = mv::jit([whole](const mv::Params& p) {
    return mv::with_sharding_constraint(p, mv::ShardingTree(whole));
  });
  const mv::Params got = gather(placed);
  for (const auto& [name, g] : got) expect_close(g, host.at(name), 0.f);
  const auto lowered = gather.lower(placed);
  EXPECT_EQ(count(lowered, "all-gather"), 2) << lowered.as_text();
  EXPECT_EQ(lines_with(lowered.as_text(), "all-gather combiner: 2 values"), 1) << lowered.as_text();
}

// An empty leaf beside the others moves on its own; a tree of one leaf is a plain device_put.
TEST(GatherCombiner, EmptyAndSingleLeaves) {
  const mv::Mesh mesh = line_mesh(3, "f");
  const mv::NamedSharding whole(mesh, P());
  const auto va = random_floats(6 * 5, 3), vb = random_floats(3 * 2, 4);
  mv::Params p;
  p.emplace("a", placed_array(va, {6, 5}, mv::NamedSharding(mesh, P("f"))));
  p.emplace("b", placed_array(vb, {3, 2}, mv::NamedSharding(mesh, P("f"))));
  p.emplace("empty", placed_array({}, {0, 4}, mv::NamedSharding(mesh, P("f"))));
  for (const mv::Params& got : {mv::with_sharding_constraint(p, mv::ShardingTree(whole)),
                                mv::jit([whole](const mv::Params& q) {
                                  return mv::with_sharding_constraint(q, mv::ShardingTree(whole));
                                })(p)}) {
    expect_close(got.at("a"), va, 0.f);
    expect_close(got.at("b"), vb, 0.f);
    EXPECT_EQ(got.at("empty").shape(), (mv::Shape{0, 4}));
    EXPECT_TRUE(got.at("empty").sharding().is_fully_replicated());
  }
  mv::Params one;
  one.emplace("b", p.at("b"));
  expect_close(mv::with_sharding_constraint(one, mv::ShardingTree(whole)).at("b"), vb, 0.f);
}

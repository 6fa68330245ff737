// shard_map's in_specs and out_specs as trees of PartitionSpecs (JAX's pytree-prefix rule): a
// tree per argument and for the result give the same values and layouts as the same Arrays passed
// one by one with their own specs; prefixes apply one spec to a whole subtree; gradients flow
// through (under jit too); mismatched trees are Errors naming where and what the value is there.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;
using mv::SpecTree;

struct Block {
  Array w, b;
  int tag = 0;  // static
};
MESHVK_REGISTER_PYTREE(Block, &Block::w, &Block::b);

namespace {

using Tree = std::pair<Array, std::vector<Array>>;

mv::Sharding named(const mv::Mesh& mesh, const mv::PartitionSpec& spec) {
  return mv::Sharding(mv::NamedSharding(mesh, spec));
}

// Odd sizes that the specs still divide: 6 rows over x (2), 5 replicated, 8 rows over y (4).
Tree make_tree() {
  return {host_array(random_floats(24, 1), {6, 4}),
          {host_array(random_floats(5, 2)), host_array(random_floats(24, 3), {8, 3})}};
}

// Per device: each piece offset by where the device sits, so a wrong split changes the values.
Array mark(const Array& piece, const char* axis) {
  return piece * 2.f + mv::astype(mv::axis_index(axis), mv::DType::float32);
}

void expect_same(const Array& got, const Array& want) {
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_EQ(got.to_host<float>(), want.to_host<float>());
}

}  // namespace

// JAX's (P('x'), [P(), P('y')]) for an argument (Array, [Array, Array]): the same as passing the
// three Arrays with those specs, values and result layouts alike.
TEST(ShardMapSpecTrees, FullTreeEqualsPerLeafSpecs) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Tree t = make_tree();
  const SpecTree spec = {P("x"), {P(), P("y")}};
  const auto tree_fn = mv::shard_map(
      [](const Tree& local) {
        EXPECT_EQ(local.first.shape(), (mv::Shape{3, 4}));
        EXPECT_EQ(local.second[0].shape(), (mv::Shape{5}));
        EXPECT_EQ(local.second[1].shape(), (mv::Shape{2, 3}));
        return Tree{mark(local.first, "x"), {local.second[0] + 1.f, mark(local.second[1], "y")}};
      },
      mesh, {spec}, spec);
  const auto leaf_fn = mv::shard_map(
      [](const Array& a, const Array& v0, const Array& v1) {
        return std::make_tuple(mark(a, "x"), v0 + 1.f, mark(v1, "y"));
      },
      mesh, {P("x"), P(), P("y")}, {P("x"), P(), P("y")});
  const Tree got = tree_fn(t);
  const auto [a, v0, v1] = leaf_fn(t.first, t.second[0], t.second[1]);
  expect_same(got.first, a);
  ASSERT_EQ(got.second.size(), 2u);
  expect_same(got.second[0], v0);
  expect_same(got.second[1], v1);
  EXPECT_EQ(got.first.sharding(), named(mesh, P("x")));
  EXPECT_EQ(got.second[1].sharding(), named(mesh, P("y")));
  // By hand: the second block of 4 rows of v1 (rows 2-3) is on y = 1.
  const auto host = got.second[1].to_host<float>(), in = t.second[1].to_host<float>();
  for (size_t i = 0; i < host.size(); ++i)
    EXPECT_FLOAT_EQ(host[i], in[i] * 2.f + static_cast<float>(i / 6)) << i;

  // The same tree under jit.
  const Tree jitted = mv::jit([&](const Tree& x) { return tree_fn(x); })(t);
  expect_same(jitted.second[1], v1);
  expect_same(jitted.first, a);
}

// A spec where the argument has a subtree applies to all of it (the prefix rule), at any depth,
// and the old forms (one spec per argument, a list of specs for a sequence result) still work.
TEST(ShardMapSpecTrees, PrefixesApplyToSubtrees) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Tree t{host_array(random_floats(16, 4), {8, 2}),
               {host_array(random_floats(4, 5)), host_array(random_floats(12, 6), {4, 3})}};
  // (P('x'), P('y')): the whole vector by 'y'.
  const auto f = mv::shard_map(
      [](const Tree& local) {
        EXPECT_EQ(local.first.shape(), (mv::Shape{4, 2}));
        EXPECT_EQ(local.second[0].shape(), (mv::Shape{1}));
        EXPECT_EQ(local.second[1].shape(), (mv::Shape{1, 3}));
        return std::make_pair(mv::psum(local.first.sum(), "x"), local.second);
      },
      mesh, {{P("x"), P("y")}}, {P(), P("y")});
  const auto [total, same] = f(t);
  EXPECT_NEAR(total.to_host<float>()[0], t.first.sum().to_host<float>()[0], 1e-5f);
  expect_same(same[0], t.second[0]);
  expect_same(same[1], t.second[1]);
  EXPECT_EQ(same[1].sharding(), named(mesh, P("y")));

  // A registered struct field by field, Params by name, and a named std::vector of specs.
  const Block blk{host_array(random_floats(8, 7), {4, 2}), host_array(random_floats(2, 8)), 3};
  const mv::Params params{{"u", host_array(random_floats(8, 9))},
                          {"v", host_array(random_floats(3, 10))}};
  const std::vector<mv::PartitionSpec> in{P(), P()};
  const auto g = mv::shard_map(
      [](const Block& b, const mv::Params& p) {
        EXPECT_EQ(b.w.shape(), (mv::Shape{1, 2}));
        EXPECT_EQ(b.b.shape(), (mv::Shape{2}));
        EXPECT_EQ(p.at("u").shape(), (mv::Shape{4}));
        EXPECT_EQ(p.at("v").shape(), (mv::Shape{3}));
        Block r = b;
        r.w = b.w * 3.f;
        return std::make_pair(r, p);
      },
      mesh, {{P("y"), P()}, SpecTree::dict({{"u", P("x")}, {"v", P()}})},
      {{P("y"), P()}, SpecTree::dict({{"v", P()}, {"u", P("x")}})});
  const auto [rb, rp] = g(blk, params);
  EXPECT_EQ(rb.tag, 3);
  expect_same(rb.w, blk.w * 3.f);
  expect_same(rb.b, blk.b);
  EXPECT_EQ(rb.w.sharding(), named(mesh, P("y")));
  expect_same(rp.at("u"), params.at("u"));
  EXPECT_EQ(rp.at("u").sharding(), named(mesh, P("x")));
  const auto h = mv::shard_map([](const Array& a, const Array& b) { return a + b; }, mesh, in, P());
  expect_same(h(params.at("v"), params.at("v")), params.at("v") * 2.f);
}

// d/dtree of sum(shard_map(...)): the same gradients as the per-leaf version, eager and under jit.
TEST(ShardMapSpecTrees, GradientsThroughSpecTrees) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Tree t = make_tree();
  const auto tree_fn = mv::shard_map(
      [](const Tree& local) {
        return mv::psum(
                   mv::psum((local.first * local.first).sum() + (local.second[1] * 3.f).sum(), "x"),
                   "y") +
               mv::sin(local.second[0]).sum();
      },
      mesh, {{P("x"), {P(), P("y")}}}, P());
  const auto leaf_fn = mv::shard_map(
      [](const Array& a, const Array& v0, const Array& v1) {
        return mv::psum(mv::psum((a * a).sum() + (v1 * 3.f).sum(), "x"), "y") + mv::sin(v0).sum();
      },
      mesh, {P("x"), P(), P("y")}, P());
  const Tree g = mv::grad([&](const Tree& x) { return tree_fn(x); })(t);
  const auto leaf_grads =
      mv::grad([&](const Array& a, const Array& v0, const Array& v1) { return leaf_fn(a, v0, v1); },
               std::vector<int>{0, 1, 2})(t.first, t.second[0], t.second[1]);
  const Array &ga = leaf_grads.at(0), &gv0 = leaf_grads.at(1), &gv1 = leaf_grads.at(2);
  expect_same(g.first, ga);
  expect_same(g.second[0], gv0);
  expect_same(g.second[1], gv1);
  // By hand: 2a, cos(v0), 3.
  const auto a = t.first.to_host<float>(), got = g.first.to_host<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(got[i], 2.f * a[i]);
  EXPECT_EQ(g.second[1].to_host<float>(), std::vector<float>(24, 3.f));
  // Through a tree result laid out by an out_specs tree: d/dx sum(2x + c) = 2 wherever x is.
  const auto mapped = mv::shard_map(
      [](const Tree& local) {
        return Tree{mark(local.first, "x"),
                    {local.second[0] * local.second[0], mark(local.second[1], "y")}};
      },
      mesh, {{P("x"), {P(), P("y")}}}, {P("x"), {P(), P("y")}});
  const Tree gm = mv::jit(mv::grad([&](const Tree& x) {
    const Tree r = mapped(x);
    return r.first.sum() + r.second[0].sum() + r.second[1].sum();
  }))(t);
  EXPECT_EQ(gm.first.to_host<float>(), std::vector<float>(24, 2.f));
  EXPECT_EQ(gm.second[1].to_host<float>(), std::vector<float>(24, 2.f));
  const auto v0 = t.second[0].to_host<float>(), gv0m = gm.second[0].to_host<float>();
  for (size_t i = 0; i < v0.size(); ++i) EXPECT_FLOAT_EQ(gv0m[i], 2.f * v0[i]) << i;
  const Tree gj = mv::jit(mv::grad([&](const Tree& x) { return tree_fn(x); }))(t);
  expect_same(gj.first, ga);
  expect_same(gj.second[1], gv1);
}

// Trees that do not fit the value name the place and what the value is there.
TEST(ShardMapSpecTrees, MismatchedTreesAreErrors) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Tree t = make_tree();
  const auto id = [](const Tree& x) { return x; };
  // Three entries for a pair.
  expect_error(
      [&] {
        mv::shard_map(id, mesh, {{P("x"), P(), P()}}, P())(t);
      },
      "shard_map: in_specs for argument 0 is a list of 3 entries but the argument there is a "
      "std::pair; give a PartitionSpec for all of it, or SpecTree::list with one entry per "
      "element");
  // A list where the value is an Array.
  expect_error(
      [&] {
        mv::shard_map(id, mesh, {{{P(), P()}, P()}}, P())(t);
      },
      "in_specs for argument 0[0] is a list of 2 entries but the argument there is an Array; give "
      "a "
      "PartitionSpec");
  // A vector of 2 given 3 specs.
  expect_error(
      [&] {
        mv::shard_map(id, mesh, {{P("x"), {P(), P(), P()}}}, P())(t);
      },
      "in_specs for argument 0[1] is a list of 3 entries but the argument there is a std::vector "
      "of 2");
  // Params: a missing name, an extra one.
  const mv::Params params{{"u", mv::arange(8.f)}, {"v", mv::arange(3.f)}};
  const auto pid = [](const mv::Params& p) { return p; };
  expect_error(
      [&] {
        mv::shard_map(pid, mesh, {SpecTree::dict({{"u", P("x")}})}, P())(params);
      },
      "shard_map: in_specs for argument 0 (Params) has no entry 'v'; SpecTree::dict needs one "
      "entry "
      "for every name of the argument, or give one PartitionSpec for all of it");
  expect_error(
      [&] {
        mv::shard_map(pid, mesh, {SpecTree::dict({{"u", P("x")}, {"v", P()}, {"w", P()}})},
                      P())(params);
      },
      "names 'w', which the argument lacks; its names are 'u', 'v'");
  // The result's tree.
  const std::string out_tree = message_of([&] {
    mv::shard_map(id, mesh, {P()}, {P(), {P(), {P(), P()}}})(t);
  });
  EXPECT_NE(out_tree.find("shard_map: out_specs for the result[1][1] is a list of 2 entries but "
                          "the result there is "
                          "an Array; give a PartitionSpec"),
            std::string::npos)
      << out_tree;
  EXPECT_EQ(out_tree.find("the arguments are flattened"), std::string::npos)
      << out_tree;  // not the arguments
  expect_error(
      [&] {
        mv::shard_map(id, mesh, {P()}, {P(), P(), P()})(t);
      },
      "3 out_specs for a result that is a sequence of 2 elements");
  // A spec that does not divide its leaf names the argument and the Array.
  const Tree odd{mv::arange(6.f), {mv::arange(5.f), mv::arange(6.f)}};
  expect_error(
      [&] {
        mv::shard_map(id, mesh, {{P("x"), {P(), P("y")}}}, P())(odd);
      },
      "argument 0: Arrays 0-2");
  // One spec per argument still counts the arguments.
  expect_error(
      [&] {
        mv::shard_map(id, mesh, {P(), {P(), P()}}, P())(t);
      },
      "2 in_specs for 1 arguments");
  expect_runtime_usable();
}

// optax's transformations over pytrees other than Params (a registered struct, a tuple of an
// Array and a std::vector, Params nested in a pair): the same bits as the same Arrays given as
// Params keyed by their paths; updates shaped like the params; masks by path or one bool per
// Array; a jitted step with the state as argument, traced once, on a 2x4 mesh with sharded leaves
// whose state keeps their shardings; mismatched trees are Errors naming both structures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace optax = meshvk::optax;
using mv::Array;
using mv::P;

struct Mlp {
  Array w1, b1, w2, b2;
  int hidden = 3;  // static
};
MESHVK_REGISTER_PYTREE(Mlp, &Mlp::w1, &Mlp::b1, &Mlp::w2, &Mlp::b2);

namespace {

using Nested = std::tuple<Array, std::vector<Array>>;

Mlp make_mlp(uint32_t seed) {
  return {host_array(random_floats(12, seed), {4, 3}), host_array(random_floats(3, seed + 1)),
          host_array(random_floats(6, seed + 2), {3, 2}), host_array(random_floats(2, seed + 3)),
          3};
}

Nested make_nested(uint32_t seed) {
  return {host_array(random_floats(6, seed), {2, 3}),
          {host_array(random_floats(5, seed + 1)), host_array(random_floats(4, seed + 2), {2, 2})}};
}

template <class T>
std::vector<Array> leaves_of(const T& tree) {
  std::vector<Array> leaves;
  mv::detail::Tree<T>::flatten(tree, leaves);
  return leaves;
}

// The tree's Arrays as Params named by their paths: what the Params path computes on.
template <class T>
mv::Params as_named(const T& tree) {
  const std::vector<std::string> paths = optax::leaf_paths(tree);
  const std::vector<Array> leaves = leaves_of(tree);
  mv::Params p;
  for (size_t i = 0; i < paths.size(); ++i) p.emplace(paths[i], leaves[i]);
  return p;
}

void expect_bits(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.to_host<float>(), want.to_host<float>()) << what;
}

// Every Array of the tree against the Params entry of its path, bit for bit.
template <class T>
void expect_bits_by_path(const T& tree, const mv::Params& named, const std::string& what) {
  const std::vector<std::string> paths = optax::leaf_paths(tree);
  const std::vector<Array> leaves = leaves_of(tree);
  ASSERT_EQ(paths.size(), named.size()) << what;
  for (size_t i = 0; i < paths.size(); ++i)
    expect_bits(leaves[i], named.at(paths[i]), what + " " + paths[i]);
}

// Two states alike: the same kinds, trees (by name and path) and scalars, bit for bit.
void expect_same_state(const optax::OptState& a, const optax::OptState& b) {
  EXPECT_EQ(a.kind, b.kind);
  ASSERT_EQ(a.trees.size(), b.trees.size());
  for (const auto& [name, tree] : a.trees) {
    ASSERT_EQ(tree.size(), b.tree(name).size()) << name;
    for (const auto& [path, x] : tree)
      expect_bits(x, b.tree(name).at(path), a.kind + " " + name + path);
  }
  for (const auto& [name, x] : a.scalars)
    EXPECT_EQ(x.to_host<int32_t>(), b.scalar(name).to_host<int32_t>());
  ASSERT_EQ(a.inner.size(), b.inner.size());
  for (size_t i = 0; i < a.inner.size(); ++i) expect_same_state(a.inner[i], b.inner[i]);
}

// Runs `steps` steps of opt on the tree and on its Params, each step's gradients g(step, params),
// checking updates, params and states bit for bit after every step.
template <class T>
void expect_tree_matches_params(const optax::GradientTransformation& opt, T params,
                                const std::function<T(int, const T&)>& grads, int steps,
                                const std::string& what) {
  mv::Params named = as_named(params);
  optax::OptState s = opt.init(params), sn = opt.init(named);
  expect_same_state(s, sn);
  for (int k = 0; k < steps; ++k) {
    const T g = grads(k, params);
    auto [u, next] = opt.update(g, s, params);
    auto [un, next_n] = opt.update(as_named(g), sn, named);
    expect_bits_by_path(u, un, what + " updates, step " + std::to_string(k));
    params = optax::apply_updates(params, u);
    named = optax::apply_updates(named, un);
    expect_bits_by_path(params, named, what + " params, step " + std::to_string(k));
    expect_same_state(next, next_n);
    s = next;
    sn = next_n;
  }
}

Mlp mlp_grads(int k, const Mlp& p) {
  Mlp g = p;
  g.w1 = p.w1 * 0.5f + static_cast<float>(k);
  g.b1 = mv::sin(p.b1) - 0.25f;
  g.w2 = p.w2 * p.w2;
  g.b2 = p.b2 * -3.f + 1.f;
  return g;
}

Nested nested_grads(int k, const Nested& p) {
  return {std::get<0>(p) * 2.f - static_cast<float>(k),
          {mv::cos(std::get<1>(p)[0]), std::get<1>(p)[1] * 0.1f + 0.5f}};
}

}  // namespace

TEST(OptaxTrees, PathsNameEveryArray) {
  EXPECT_EQ(optax::leaf_paths(make_mlp(1)), (std::vector<std::string>{".w1", ".b1", ".w2", ".b2"}));
  EXPECT_EQ(optax::leaf_paths(make_nested(1)),
            (std::vector<std::string>{"[0]", "[1][0]", "[1][1]"}));
  const std::pair<mv::Params, Array> with_params{{{"w", mv::ones({2})}, {"b", mv::ones({1})}},
                                                 mv::ones({3})};
  EXPECT_EQ(optax::leaf_paths(with_params),
            (std::vector<std::string>{"[0]['b']", "[0]['w']", "[1]"}));
  // init keeps the moments by path, shaped (and laid out) as each Array.
  const optax::OptState s = optax::adam(0.1f).init(make_mlp(1));
  const mv::Params& mu = s.inner.at(0).tree("mu");
  ASSERT_EQ(mu.size(), 4u);
  EXPECT_EQ(mu.at(".w1").shape(), (mv::Shape{4, 3}));
  EXPECT_EQ(mu.at(".b2").shape(), (mv::Shape{2}));
}

// Each transformation on a tree gives the bits it gives on the same Arrays as Params.
TEST(OptaxTrees, EveryTransformationMatchesParamsBitForBit) {
  const std::vector<std::pair<std::string, optax::GradientTransformation>> optimizers{
      {"adam", optax::adam(0.01f)},
      {"nadam", optax::adam(0.01f, 0.9f, 0.99f, 1e-6f, 1e-8f, true)},
      {"adamw", optax::adamw(0.02f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f)},
      {"sgd", optax::sgd(0.1f)},
      {"nesterov sgd with a schedule",
       optax::sgd(optax::exponential_decay(0.1f, 1, 0.5f), 0.9f, true)},
      {"clip + adamw with warmup-cosine",
       optax::chain(optax::clip_by_global_norm(0.5f),
                    optax::adamw(optax::warmup_cosine_decay_schedule(0.0f, 0.05f, 2, 10)))},
      {"trace + scale + identity",
       optax::chain(optax::trace(0.5f), optax::scale(-0.3f), optax::identity())},
      {"add_decayed_weights + schedule",
       optax::chain(optax::add_decayed_weights(0.5f),
                    optax::scale_by_schedule(optax::linear_schedule(1.f, 0.f, 4)))},
  };
  for (const auto& [what, opt] : optimizers) {
    expect_tree_matches_params<Mlp>(opt, make_mlp(10), mlp_grads, 2,
                                    what + " on a registered struct");
    expect_tree_matches_params<Nested>(opt, make_nested(20), nested_grads, 2, what + " on a tuple");
  }
  // Params nested in a pair, and a lone Array.
  using WithParams = std::pair<mv::Params, Array>;
  const WithParams wp{
      {{"w", host_array(random_floats(4, 30))}, {"b", host_array(random_floats(2, 31))}},
      host_array(random_floats(3, 32))};
  expect_tree_matches_params<WithParams>(
      optax::adamw(0.05f), wp,
      [](int k, const WithParams& p) {
        return WithParams{
            {{"w", p.first.at("w") + 1.f}, {"b", p.first.at("b") * static_cast<float>(k)}},
            p.second * p.second};
      },
      3, "adamw on nested Params");
  expect_tree_matches_params<Array>(
      optax::adam(0.1f), host_array(random_floats(5, 33)),
      [](int, const Array& p) { return p * 2.f; }, 2, "adam on an Array");
}

// By hand, one adam step on a struct: -lr * sign(g) (m_hat / sqrt(v_hat) = g / |g| at step 1),
// the static member kept; and global_norm / apply_updates on trees.
TEST(OptaxTrees, ValuesAreOptaxs) {
  const Mlp p = make_mlp(40);
  const Mlp g = mlp_grads(0, p);
  const auto opt = optax::adam(0.1f, 0.9f, 0.999f, 0.0f);
  auto [u, s] = opt.update(g, opt.init(p), p);
  EXPECT_EQ(u.hidden, 3);
  const std::vector<Array> gl = leaves_of(g), ul = leaves_of(u);
  for (size_t i = 0; i < gl.size(); ++i) {
    const auto gh = gl[i].to_host<float>(), uh = ul[i].to_host<float>();
    for (size_t j = 0; j < gh.size(); ++j)
      EXPECT_NEAR(uh[j], gh[j] > 0 ? -0.1f : 0.1f, 1e-6f) << i << " " << j;
  }
  EXPECT_EQ(s.count().to_host<int32_t>(), std::vector<int32_t>{1});
  double squares = 0;
  for (const Array& x : gl)
    for (const float v : x.to_host<float>()) squares += static_cast<double>(v) * v;
  EXPECT_NEAR(optax::global_norm(g).to_host<float>()[0], std::sqrt(squares), 1e-5);
  const Mlp q = optax::apply_updates(p, u);
  expect_bits(q.w2, p.w2 + u.w2, "apply_updates .w2");
  EXPECT_EQ(q.hidden, 3);
}

// adamw's mask on a tree: a function of the path and the Array, or one bool per Array in
// flatten's order; both as the Params path with a mask by name.
TEST(OptaxTrees, MasksByPathOrPerArray) {
  const auto decay_matrices = [](const std::string& path, const Array& x) {
    return x.ndim() > 1 && path.starts_with(".w");
  };
  const optax::Mask by_function(decay_matrices);
  const optax::Mask per_leaf(make_mlp(50), {true, false, true, false});
  const optax::Mask by_name(
      std::map<std::string, bool>{{".w1", true}, {".b1", false}, {".w2", true}, {".b2", false}});
  const auto adamw = [](optax::Mask m) {
    return optax::adamw(0.05f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.5f, std::move(m));
  };
  Mlp results[3];
  int i = 0;
  for (const optax::Mask& m : {by_function, per_leaf, by_name}) {
    expect_tree_matches_params<Mlp>(adamw(m), make_mlp(50), mlp_grads, 2,
                                    "adamw masked " + std::to_string(i));
    const Mlp p = make_mlp(50);
    const auto opt = adamw(m);
    results[i++] = opt.update(mlp_grads(0, p), opt.init(p), p).first;
  }
  for (int k = 1; k < 3; ++k) {
    expect_bits(results[k].w1, results[0].w1, "mask .w1");
    expect_bits(results[k].b1, results[0].b1, "mask .b1");
  }
  // The masked-out biases got adam's update alone; the matrices the decay too.
  const Mlp p = make_mlp(50);
  const auto plain = optax::adam(0.05f);
  const Mlp adam_only = plain.update(mlp_grads(0, p), plain.init(p), p).first;
  expect_bits(results[0].b1, adam_only.b1, "unmasked .b1 is adam's");
  const auto decayed = results[0].w1.to_host<float>(), a = adam_only.w1.to_host<float>(),
             w = p.w1.to_host<float>();
  for (size_t j = 0; j < w.size(); ++j)
    EXPECT_NEAR(decayed[j], a[j] - 0.05f * 0.5f * w[j], 1e-6f) << j;
  expect_error(
      [&] {
        optax::Mask(make_mlp(50), {true, false});
      },
      "optax mask: 2 bools for a tree of 4 Arrays ('.w1', '.b1', '.w2', '.b2')");
}

// A jitted step on a 2x4 mesh takes the state and returns the next one: traced once, the
// sharded leaves' moments laid out as the leaves, the same values as eager steps.
TEST(OptaxTrees, AJittedStepOnAMeshWithShardedLeaves) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding w1s(mesh, P("x", "y")), b1s(mesh, P("y")), w2s(mesh, P("y")),
      rep(mesh, P());
  const Mlp p0{mv::device_put(mv::normal(mv::random_key(0), {8, 4}), w1s),
               mv::device_put(mv::zeros({4}), b1s),
               mv::device_put(mv::normal(mv::random_key(1), {4, 2}), w2s),
               mv::device_put(mv::zeros({2}), rep), 4};
  const Array x =
      mv::device_put(mv::normal(mv::random_key(2), {16, 8}), mv::NamedSharding(mesh, P("x")));
  const auto loss = [](const Mlp& m, const Array& in) {
    const Array h = mv::tanh(mv::matmul(in, m.w1) + m.b1);
    return mv::mean(mv::square(mv::matmul(h, m.w2) + m.b2 - 1.f));
  };
  const auto opt = optax::chain(
      optax::clip_by_global_norm(1.0f),
      optax::adamw(optax::warmup_cosine_decay_schedule(0.0f, 0.05f, 2, 10), 0.9f, 0.999f, 1e-8f,
                   0.0f, 0.01f,
                   [](const std::string& path, const Array&) { return path[1] == 'w'; }));
  const auto step = mv::jit([&opt, &loss](const Mlp& p, const optax::OptState& s, const Array& in) {
    auto lg = mv::value_and_grad(loss)(p, in);
    auto un = opt.update(lg.second, s, p);
    return std::make_tuple(lg.first, optax::apply_updates(p, un.first), un.second);
  });
  const auto laid_out_as_params = [&](const optax::OptState& s) {
    const mv::Params by_path = as_named(p0);
    int checked = 0;
    std::function<void(const optax::OptState&)> walk = [&](const optax::OptState& st) {
      for (const auto& [tree, values] : st.trees)
        for (const auto& [path, v] : values) {
          EXPECT_EQ(v.sharding(), by_path.at(path).sharding()) << tree << path;
          ++checked;
        }
      for (const auto& in : st.inner) walk(in);
    };
    walk(s);
    return checked;
  };
  Mlp p = p0, ep = p0;
  optax::OptState s = opt.init(p0), es = opt.init(p0);
  EXPECT_EQ(laid_out_as_params(s), 8);  // mu and nu of 4 Arrays
  EXPECT_EQ(s.count().sharding(), mv::Sharding(rep));
  std::vector<float> losses;
  for (int k = 0; k < 4; ++k) {
    auto [l, next_p, next_s] = step(p, s, x);
    p = next_p;
    s = next_s;
    losses.push_back(l.to_host<float>()[0]);
    auto [u, next_e] = opt.update(mv::grad(loss)(ep, x), es, ep);
    ep = optax::apply_updates(ep, u);
    es = next_e;
    EXPECT_EQ(s.count().to_host<int32_t>(), std::vector<int32_t>{k + 1});
  }
  EXPECT_EQ(step.traces(), 1u);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_EQ(laid_out_as_params(s), 8);
  EXPECT_EQ(p.hidden, 4);
  const std::vector<Array> jl = leaves_of(p), el = leaves_of(ep), pl = leaves_of(p0);
  for (size_t i = 0; i < jl.size(); ++i) {
    EXPECT_EQ(jl[i].sharding(), pl[i].sharding()) << i;
    const auto a = jl[i].to_host<float>(), b = el[i].to_host<float>();
    for (size_t j = 0; j < a.size(); ++j)
      ASSERT_NEAR(a[j], b[j], 1e-6f * std::max(1.f, std::fabs(b[j]))) << i;
  }
}

// out_shardings for a tree's state: state_shardings takes the tree and its shardings (a tree
// shaped like it) and lays each moment out as its Array.
TEST(OptaxTrees, OutShardingsLayATreesStateOut) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding w1s(mesh, P("x", "y")), w2s(mesh, P("y")), rep(mesh, P());
  const Mlp host = make_mlp(70);
  const mv::ShardingTree layout = mv::ShardingTree::list({w1s, rep, w2s, rep});
  const Mlp p = mv::device_put(
      Mlp{mv::ones({4, 4}), mv::ones({3}), mv::ones({4, 2}), mv::ones({2}), 3}, layout);
  const auto opt = optax::adam(0.1f);
  const optax::OptState s0 = opt.init(host);  // uncommitted
  const auto step = mv::jit(
      [&](const Mlp& q, const optax::OptState& s) {
        auto un = opt.update(q, s, q);
        return std::make_pair(optax::apply_updates(q, un.first), un.second);
      },
      {.out_shardings = {layout, optax::state_shardings(s0, p, layout, rep)}});
  const auto [q, s] = step(p, opt.init(p));
  const mv::Params& mu = s.inner.at(0).tree("mu");
  EXPECT_EQ(mu.at(".w1").sharding(), mv::Sharding(w1s));
  EXPECT_EQ(mu.at(".w2").sharding(), mv::Sharding(w2s));
  EXPECT_EQ(s.inner.at(0).tree("nu").at(".b1").sharding(), mv::Sharding(rep));
  EXPECT_EQ(s.count().sharding(), mv::Sharding(rep));
  EXPECT_EQ(q.w1.sharding(), mv::Sharding(w1s));
  expect_error([&] { (void)optax::state_shardings(s0, p, mv::ShardingTree::list({w1s})); },
               "optax.state_shardings: the shardings for the params is a list of 1 entry but the "
               "params there "
               "is a registered struct of 4 fields");
}

// Trees that differ are Errors naming both structures' paths; a state made for another tree
// names the paths it lacks.
TEST(OptaxTrees, MismatchedTreesAreErrors) {
  const Nested p = make_nested(60);
  const auto opt = optax::adamw(1e-3f);
  const optax::OptState s = opt.init(p);
  const Nested shorter{std::get<0>(p), {std::get<1>(p)[0]}};
  expect_error([&] { (void)opt.update(shorter, s, p); },
               "optax.adamw: the updates and the params are different trees: the params have 3 "
               "Arrays ('[0]', "
               "'[1][0]', '[1][1]'), the updates have 2 Arrays ('[0]', '[1][0]')");
  expect_error([&] { (void)optax::apply_updates(p, shorter); },
               "optax.apply_updates: the updates and the params are different trees");
  // Params left out ({}: optax's None) are fine where no transformation reads them, and an Error
  // naming update()'s third argument where adamw's decay does.
  const auto adam = optax::adam(0.1f);
  const Nested u_none = adam.update(p, adam.init(p), {}).first;
  expect_bits(std::get<1>(u_none)[1], std::get<1>(adam.update(p, adam.init(p), p).first)[1],
              "params left out");
  expect_error([&] { (void)opt.update(p, s, {}); }, "needs the params");
  expect_error([&] { (void)opt.update(make_mlp(1), opt.init(make_mlp(1)), Mlp{}); },
               "needs the params");
  // Without params, the state tells: its moments were made for three Arrays.
  expect_error([&] { (void)optax::adam(0.1f).update(shorter, optax::adam(0.1f).init(p)); },
               "lack '[1][1]'");
  // The same paths, another structure (an empty vector where there was none).
  using Lists = std::vector<std::vector<Array>>;
  const Lists a{{mv::ones({2})}, {}}, b{{mv::ones({2})}};
  expect_error([&] { (void)optax::apply_updates(a, b); },
               "the paths agree but the structures differ");
  // Shapes by path.
  const Nested wide{std::get<0>(p), {std::get<1>(p)[0], mv::ones({3, 3})}};
  expect_error([&] { (void)opt.update(wide, s, p); }, "the updates['[1][1]'] is float32[3,3]");
  // A Params state for a struct.
  const Mlp m = make_mlp(61);
  expect_error([&] { (void)opt.update(m, s, m); }, "optax.scale_by_adam: the updates lack");
  expect_runtime_usable();
}

// optax's optimizers as pure functions: each transformation's updates over several steps against
// optax's formulas computed here on the host (in double), and sgd / adam / adamw against
// torch.optim (tests/data/optax_torch_expected.inc, from optax_torch_reference.py); schedules'
// values; clipping; chain; a training step under jit on a 2x4 mesh with sharded params (traced
// once, its state laid out as the params, the count advancing on every replay); errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numbers>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

#include "data/optax_torch_expected.inc"

namespace mv = meshvk;
namespace optax = meshvk::optax;
using mv::Array;
using mv::P;

namespace {

constexpr int kSteps = 5;
const std::map<std::string, mv::Shape> kShapes{{"b", {3}}, {"w", {2, 3}}};

using HostTree = std::map<std::string, std::vector<double>>;

// The values of optax_torch_reference.py's initial() and grad().
std::vector<float> initial(const std::string& name) {
  const int n = name == "b" ? 3 : 6;
  const float start = name == "b" ? 0.5f : -1.0f, step = name == "b" ? -0.25f : 0.0625f;
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(start + step * static_cast<float>(i));
  return v;
}

std::vector<float> step_grad(const std::string& name, int k) {
  const int n = name == "b" ? 3 : 6;
  const double scale = name == "b" ? 0.01 : 1.0;
  std::vector<float> g;
  for (int i = 0; i < n; ++i)
    g.push_back(static_cast<float>(scale * (0.5 + 0.1 * ((i * 7 + k * 3) % 11)) *
                                   ((i + k) % 3 ? 1.0 : -1.0)));
  return g;
}

mv::Params initial_params() {
  mv::Params p;
  for (const auto& [name, shape] : kShapes) p.emplace(name, mv::array(initial(name), shape));
  return p;
}

mv::Params grads_at(int k) {
  mv::Params g;
  for (const auto& [name, shape] : kShapes) g.emplace(name, mv::array(step_grad(name, k), shape));
  return g;
}

HostTree to_host(const mv::Params& p) {
  HostTree h;
  for (const auto& [name, x] : p) {
    const std::vector<float> v = x.to_host<float>();
    h.emplace(name, std::vector<double>(v.begin(), v.end()));
  }
  return h;
}

// optax's formulas on the host, in double from the same float32 hyperparameters.
struct HostConfig {
  enum class Kind { sgd, adam } kind = Kind::sgd;
  std::function<double(int)> lr;  // of the count before the step (0 on the first)
  double momentum = 0;
  bool nesterov = false;
  double b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, eps_root = 0;
  double weight_decay = 0;
  std::set<std::string> decayed{"b", "w"};  // adamw's mask
  double max_norm = 0;                      // clip_by_global_norm first when > 0
};

std::vector<HostTree> host_run(const HostConfig& c, int steps) {
  HostTree p, mu, nu, tr;
  for (const auto& [name, shape] : kShapes) {
    const std::vector<float> v = initial(name);
    p[name].assign(v.begin(), v.end());
    mu[name] = nu[name] = tr[name] = std::vector<double>(v.size(), 0.0);
  }
  std::vector<HostTree> out;
  for (int k = 0; k < steps; ++k) {
    HostTree g;
    for (const auto& [name, shape] : kShapes) {
      const std::vector<float> v = step_grad(name, k);
      g[name].assign(v.begin(), v.end());
    }
    if (c.max_norm > 0) {
      double sq = 0;
      for (const auto& [name, v] : g)
        for (double x : v) sq += x * x;
      const double norm = std::sqrt(sq);
      if (!(norm < c.max_norm))
        for (auto& [name, v] : g)
          for (double& x : v) x = x / norm * c.max_norm;
    }
    const double t = k + 1;
    for (auto& [name, pv] : p) {
      for (size_t i = 0; i < pv.size(); ++i) {
        const double gi = g[name][i];
        double u = gi;
        if (c.kind == HostConfig::Kind::sgd) {
          if (c.momentum != 0) {
            tr[name][i] = gi + c.momentum * tr[name][i];
            u = c.nesterov ? gi + c.momentum * tr[name][i] : tr[name][i];
          }
        } else {
          double& m = mu[name][i];
          double& v = nu[name][i];
          m = (1 - c.b1) * gi + c.b1 * m;
          v = (1 - c.b2) * gi * gi + c.b2 * v;
          const double m_hat = c.nesterov ? c.b1 * m / (1 - std::pow(c.b1, t + 1)) +
                                                (1 - c.b1) * gi / (1 - std::pow(c.b1, t))
                                          : m / (1 - std::pow(c.b1, t));
          const double v_hat = v / (1 - std::pow(c.b2, t));
          u = m_hat / (std::sqrt(v_hat + c.eps_root) + c.eps);
          if (c.weight_decay != 0 && c.decayed.count(name)) u += c.weight_decay * pv[i];
        }
        pv[i] += -c.lr(k) * u;
      }
    }
    out.push_back(p);
  }
  return out;
}

// The params after each of `steps` eager steps of `opt` from initial_params().
std::vector<HostTree> device_run(const optax::GradientTransformation& opt, int steps) {
  mv::Params p = initial_params();
  optax::OptState state = opt.init(p);
  std::vector<HostTree> out;
  for (int k = 0; k < steps; ++k) {
    auto [updates, next] = opt.update(grads_at(k), state, p);
    p = optax::apply_updates(p, updates);
    state = std::move(next);
    out.push_back(to_host(p));
  }
  return out;
}

void expect_close(const std::vector<HostTree>& got, const std::vector<HostTree>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k)
    for (const auto& [name, v] : want.at(k)) {
      const std::vector<double>& g = got[k].at(name);
      ASSERT_EQ(g.size(), v.size());
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_NEAR(g[i], v[i], rel * std::max(1.0, std::fabs(v[i])))
            << what << ": step " << k + 1 << ", " << name << "[" << i << "]";
    }
}

// torch's values for a case: b then w, per step.
std::vector<HostTree> torch_run(const std::string& name) {
  std::vector<HostTree> out;
  for (const std::vector<float>& v : kTorchExpected.at(name)) {
    HostTree h;
    h["b"].assign(v.begin(), v.begin() + 3);
    h["w"].assign(v.begin() + 3, v.end());
    out.push_back(std::move(h));
  }
  return out;
}

std::function<double(int)> constant_lr(float lr) {
  return [lr](int) { return static_cast<double>(lr); };
}

float schedule_at(const optax::Schedule& s, int count) {
  const Array v = s(mv::scalar(int32_t{count}));
  EXPECT_EQ(v.dtype(), mv::DType::float32);
  EXPECT_EQ(v.ndim(), 0);
  return v.to_host<float>()[0];
}

::testing::AssertionResult same_sharding(const mv::Sharding& got, const mv::Sharding& want) {
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got.to_string() << " is not " << want.to_string();
}

// Every tree of the state (depth first) is laid out as the params; returns how many it checked.
int expect_laid_out_as(const optax::OptState& s, const mv::Params& params) {
  int checked = 0;
  for (const auto& [tree, values] : s.trees)
    for (const auto& [name, x] : values) {
      EXPECT_TRUE(same_sharding(x.sharding(), params.at(name).sharding())) << tree << " " << name;
      ++checked;
    }
  for (const optax::OptState& i : s.inner) checked += expect_laid_out_as(i, params);
  return checked;
}

}  // namespace

// ---- Optimizers against optax's formulas (host) and torch.optim.

TEST(Optax, SgdMatchesOptaxAndTorch) {
  HostConfig c;
  c.lr = constant_lr(0.1f);
  const auto plain = device_run(optax::sgd(0.1f), kSteps);
  expect_close(plain, host_run(c, kSteps), 1e-6, "sgd vs host");
  expect_close(plain, torch_run("sgd"), 1e-6, "sgd vs torch");

  c.momentum = 0.9f;
  const auto momentum = device_run(optax::sgd(0.1f, 0.9f), kSteps);
  expect_close(momentum, host_run(c, kSteps), 1e-6, "sgd momentum vs host");
  expect_close(momentum, torch_run("sgd_momentum"), 1e-6, "sgd momentum vs torch");

  c.nesterov = true;
  const auto nesterov = device_run(optax::sgd(0.1f, 0.9f, true), kSteps);
  expect_close(nesterov, host_run(c, kSteps), 1e-6, "sgd nesterov vs host");
  expect_close(nesterov, torch_run("sgd_nesterov"), 1e-6, "sgd nesterov vs torch");
}

TEST(Optax, AdamMatchesOptaxAndTorch) {
  HostConfig c;
  c.kind = HostConfig::Kind::adam;
  c.lr = constant_lr(0.01f);
  const auto adam = device_run(optax::adam(0.01f), kSteps);
  expect_close(adam, host_run(c, kSteps), 1e-6, "adam vs host");
  expect_close(adam, torch_run("adam"), 1e-6, "adam vs torch");

  // eps_root inside the square root, eps outside (both large against 'b''s gradients of about
  // 0.01, and a learning rate of 1, so that either misplaced would show); Nadam's nesterov form.
  c.lr = constant_lr(1.0f);
  c.eps = 1e-2f;
  c.eps_root = 1e-1f;
  c.b1 = 0.8f;
  c.b2 = 0.99f;
  expect_close(device_run(optax::adam(1.0f, 0.8f, 0.99f, 1e-2f, 1e-1f), kSteps),
               host_run(c, kSteps), 2e-6, "adam eps_root vs host");
  c.nesterov = true;
  expect_close(device_run(optax::adam(1.0f, 0.8f, 0.99f, 1e-2f, 1e-1f, true), kSteps),
               host_run(c, kSteps), 2e-6, "nadam vs host");
}

TEST(Optax, AdamwDecaysAsOptaxAndTorch) {
  HostConfig c;
  c.kind = HostConfig::Kind::adam;
  c.lr = constant_lr(0.01f);
  c.weight_decay = 0.1f;
  const auto adamw = device_run(optax::adamw(0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f), kSteps);
  expect_close(adamw, host_run(c, kSteps), 1e-6, "adamw vs host");
  // torch.optim.AdamW multiplies the param by 1 - lr * wd before its adam step: the same values.
  expect_close(adamw, torch_run("adamw"), 1e-6, "adamw vs torch");

  // A mask (function or map): only 'w' decays; 'b' follows adam.
  c.decayed = {"w"};
  const auto want = host_run(c, kSteps);
  const optax::Mask by_fn([](const std::string& name, const Array&) { return name == "w"; });
  const optax::Mask by_map(std::map<std::string, bool>{{"b", false}, {"w", true}});
  expect_close(device_run(optax::adamw(0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f,
                                       [](const std::string& name, const Array&) {
                                         return name == "w";  // a lambda converts to a Mask
                                       }),
                          kSteps),
               want, 1e-6, "adamw masked by a lambda vs host");
  for (const optax::Mask& mask : {by_fn, by_map})
    expect_close(device_run(optax::adamw(0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, mask), kSteps),
                 want, 1e-6, "masked adamw vs host");
}

TEST(Optax, NnAdamAndSgdAgreeWithOptax) {
  mv::Params p = initial_params(), q = p, r = p;
  mv::nn::AdamState s = mv::nn::adam_init(p);
  const auto opt = optax::adam(0.01f);
  optax::OptState os = opt.init(q);
  for (int k = 0; k < 3; ++k) {
    p = mv::nn::adam(p, grads_at(k), s, 0.01f);
    auto [u, next] = opt.update(grads_at(k), os, q);
    q = optax::apply_updates(q, u);
    os = next;
    r = mv::nn::sgd(r, grads_at(k), 0.1f);
  }
  expect_close({to_host(q)}, {to_host(p)}, 1e-6, "optax.adam vs nn::adam");
  EXPECT_EQ(os.count().to_host<int32_t>(), s.count.to_host<int32_t>());
  expect_close({to_host(r)}, {device_run(optax::sgd(0.1f), 3).back()}, 1e-6, "nn::sgd");
}

// ---- Schedules: optax's values at several steps, and as a learning rate (count before the step).

TEST(Optax, SchedulesGiveOptaxsValues) {
  const double pi = std::numbers::pi;
  const auto expect_schedule = [](const optax::Schedule& s, const std::function<double(int)>& f,
                                  const std::string& what) {
    for (int k : {0, 1, 2, 3, 4, 5, 7, 10, 12, 13, 15, 30, 100}) {
      const double want = f(k);
      EXPECT_NEAR(schedule_at(s, k), want, 2e-6 * std::max(1.0, std::fabs(want)))
          << what << " at step " << k;
    }
  };
  expect_schedule(
      optax::constant_schedule(0.3f), [](int) { return double(0.3f); }, "constant");
  expect_schedule(
      optax::linear_schedule(1.0f, 0.1f, 10, 2),
      [](int k) { return 1.0 + std::clamp(k - 2, 0, 10) / 10.0 * (double(0.1f) - 1.0); }, "linear");
  expect_schedule(
      optax::linear_schedule(1.0f, 0.1f, 0), [](int) { return 1.0; }, "linear with no steps");
  expect_schedule(
      optax::polynomial_schedule(1.0f, 0.01f, 2.0f, 100, 5),
      [](int k) {
        const double frac = 1.0 - std::clamp(k - 5, 0, 100) / 100.0;
        return (1.0 - double(0.01f)) * frac * frac + double(0.01f);
      },
      "polynomial");
  expect_schedule(
      optax::exponential_decay(2.0f, 3, 0.5f, 2),
      [](int k) { return k - 2 <= 0 ? 2.0 : 2.0 * std::pow(0.5, (k - 2) / 3.0); },
      "exponential_decay");
  expect_schedule(
      optax::exponential_decay(2.0f, 3, 0.5f, 2, true, 0.3f),
      [](int k) {
        const double v = k - 2 <= 0 ? 2.0 : 2.0 * std::pow(0.5, std::floor((k - 2) / 3.0));
        return std::max(v, double(0.3f));
      },
      "exponential_decay staircase, end_value");
  expect_schedule(
      optax::exponential_decay(1.0f, 4, 2.0f, 0, false, 3.0f),
      [](int k) { return std::min(std::pow(2.0, k / 4.0), 3.0); }, "exponential growth");
  expect_schedule(
      optax::cosine_decay_schedule(1.0f, 10, 0.1f),
      [pi](int k) {
        const double c = 0.5 * (1 + std::cos(pi * std::min(k, 10) / 10.0));
        return (1 - double(0.1f)) * c + double(0.1f);
      },
      "cosine_decay");
  expect_schedule(
      optax::cosine_decay_schedule(2.0f, 10, 0.0f, 2.0f),
      [pi](int k) {
        const double c = 0.5 * (1 + std::cos(pi * std::min(k, 10) / 10.0));
        return 2.0 * c * c;
      },
      "cosine_decay exponent 2");
  expect_schedule(
      optax::warmup_cosine_decay_schedule(0.0f, 1.0f, 4, 14, 0.1f),
      [pi](int k) {
        if (k < 4) return k / 4.0;
        const double c = 0.5 * (1 + std::cos(pi * std::min(k - 4, 10) / 10.0));
        return (1 - double(0.1f)) * c + double(0.1f);
      },
      "warmup_cosine_decay");
}

TEST(Optax, AScheduledLearningRateFollowsTheCount) {
  const auto sched = optax::exponential_decay(0.1f, 2, 0.5f);
  HostConfig c;
  c.lr = [](int k) { return double(0.1f) * std::pow(double(0.5f), k / 2.0); };
  c.momentum = 0.9f;
  expect_close(device_run(optax::sgd(sched, 0.9f), kSteps), host_run(c, kSteps), 1e-6,
               "sgd with a schedule");
  c.kind = HostConfig::Kind::adam;
  c.weight_decay = 0.01f;
  expect_close(device_run(optax::adamw(sched, 0.9f, 0.999f, 1e-8f, 0.0f, 0.01f), kSteps),
               host_run(c, kSteps), 1e-6, "adamw with a schedule");
  // The schedule's own count (scale_by_schedule) and adam's both advance.
  const auto opt = optax::adam(sched);
  mv::Params p = initial_params();
  optax::OptState s = opt.init(p);
  for (int k = 0; k < 3; ++k) s = opt.update(grads_at(k), s, p).second;
  ASSERT_EQ(s.inner.size(), 2u);
  EXPECT_EQ(s.inner[0].scalar("count").to_host<int32_t>(), std::vector<int32_t>{3});
  EXPECT_EQ(s.inner[1].kind, "scale_by_schedule");
  EXPECT_EQ(s.inner[1].scalar("count").to_host<int32_t>(), std::vector<int32_t>{3});
}

// ---- clip_by_global_norm and chain.

TEST(Optax, ClipByGlobalNormScalesOnlyAboveTheNorm) {
  const mv::Params g{{"a", mv::array({3.0f, 0.0f}, {2})}, {"b", mv::array({4.0f}, {1})}};  // 5
  EXPECT_FLOAT_EQ(optax::global_norm(g).to_host<float>()[0], 5.0f);
  const auto clip = optax::clip_by_global_norm(1.0f);
  const auto [clipped, state] = clip.update(g, clip.init(g));
  EXPECT_EQ(state.kind, "clip_by_global_norm");
  EXPECT_TRUE(state.trees.empty() && state.scalars.empty());
  EXPECT_EQ(clipped.at("a").to_host<float>(), (std::vector<float>{0.6f, 0.0f}));
  EXPECT_EQ(clipped.at("b").to_host<float>(), (std::vector<float>{0.8f}));
  const auto loose = optax::clip_by_global_norm(10.0f);
  const auto unclipped = loose.update(g, loose.init(g)).first;
  EXPECT_EQ(unclipped.at("a").to_host<float>(), (std::vector<float>{3.0f, 0.0f}));
  EXPECT_EQ(unclipped.at("b").to_host<float>(), (std::vector<float>{4.0f}));

  // In a chain before adam, against the host (the gradients' norm is about 2-3: clipped to 1).
  HostConfig c;
  c.kind = HostConfig::Kind::adam;
  c.lr = constant_lr(0.01f);
  c.max_norm = 1.0;
  expect_close(
      device_run(optax::chain(optax::clip_by_global_norm(1.0f), optax::adam(0.01f)), kSteps),
      host_run(c, kSteps), 1e-6, "clip then adam");
}

TEST(Optax, ChainComposesInOrder) {
  // clip, momentum, then -lr: sgd with momentum on clipped gradients.
  const auto opt =
      optax::chain(optax::clip_by_global_norm(1.5f), optax::trace(0.5f), optax::scale(-0.1f));
  HostConfig c;
  c.lr = constant_lr(0.1f);
  c.momentum = 0.5f;
  c.max_norm = double(1.5f);
  expect_close(device_run(opt, kSteps), host_run(c, kSteps), 1e-6, "chain vs host");
  const auto as_vector = optax::chain(std::vector<optax::GradientTransformation>{
      optax::clip_by_global_norm(1.5f), optax::trace(0.5f), optax::scale(-0.1f)});
  expect_close(device_run(as_vector, kSteps), device_run(opt, kSteps), 0.0, "chain of a vector");

  const optax::OptState s = opt.init(initial_params());
  EXPECT_EQ(s.kind, "chain");
  ASSERT_EQ(s.inner.size(), 3u);
  EXPECT_EQ(s.inner[0].kind, "clip_by_global_norm");
  EXPECT_EQ(s.inner[1].kind, "trace");
  EXPECT_EQ(s.inner[1].tree("trace").size(), 2u);
  EXPECT_EQ(s.inner[2].kind, "scale");
  // A chain in a chain keeps its states nested, as optax's tuples.
  const auto nested = optax::chain(optax::clip_by_global_norm(1.0f), optax::adamw(1e-3f));
  const optax::OptState n = nested.init(initial_params());
  ASSERT_EQ(n.inner.size(), 2u);
  EXPECT_EQ(n.inner[1].inner[0].kind, "scale_by_adam");
  EXPECT_EQ(n.count().to_host<int32_t>(), std::vector<int32_t>{0});
  expect_error([&] { (void)s.count(); }, "holds no step count");
}

// ---- A training step under jit on a 2x4 mesh.

TEST(Optax, AJittedTrainingStepOnAMeshMatchesEager) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding w_sharding(mesh, P("x", "y")), b_sharding(mesh, P("y"));
  const mv::Params p0{{"w", mv::device_put(mv::normal(mv::random_key(0), {8, 4}), w_sharding)},
                      {"b", mv::device_put(mv::zeros({4}), b_sharding)}};
  const Array x =
      mv::device_put(mv::normal(mv::random_key(1), {16, 8}), mv::NamedSharding(mesh, P("x")));
  const auto loss = [](const mv::Params& q, const Array& in) {
    return mv::mean(mv::square(mv::matmul(in, q.at("w")) + q.at("b") - 1.f));
  };
  const std::vector<std::pair<std::string, optax::GradientTransformation>> optimizers{
      {"clip + adamw with warmup-cosine",
       optax::chain(optax::clip_by_global_norm(1.0f),
                    optax::adamw(optax::warmup_cosine_decay_schedule(0.0f, 0.05f, 2, 10), 0.9f,
                                 0.999f, 1e-8f, 0.0f, 0.01f))},
      {"nesterov sgd with exponential decay",
       optax::sgd(optax::exponential_decay(0.05f, 1, 0.8f), 0.9f, true)}};
  for (const auto& entry : optimizers) {
    // Not structured bindings: the lambdas below capture them (clang 14 cannot).
    const std::string& what = entry.first;
    const optax::GradientTransformation& opt = entry.second;
    const auto step =
        mv::jit([&opt, &loss](const mv::Params& p, const optax::OptState& s, const Array& in) {
          auto lg = mv::value_and_grad(loss)(p, in);
          auto un = opt.update(lg.second, s, p);
          return std::make_tuple(lg.first, optax::apply_updates(p, un.first), un.second);
        });
    mv::Params p = p0, ep = p0;
    optax::OptState state = opt.init(p0), eager = opt.init(p0);
    EXPECT_EQ(expect_laid_out_as(state, p0) > 0, true) << what;
    if (what.starts_with("clip")) {
      EXPECT_TRUE(same_sharding(state.count().sharding(), mv::NamedSharding(mesh, P()))) << what;
    }
    std::vector<float> losses;
    for (int k = 0; k < kSteps; ++k) {
      auto [l, next_p, next_s] = step(p, state, x);
      p = next_p;
      state = next_s;
      losses.push_back(l.to_host<float>()[0]);
      auto [u, next_e] = opt.update(mv::grad(loss)(ep, x), eager, ep);
      ep = optax::apply_updates(ep, u);
      eager = next_e;
      // Every count of the state advances on each replay.
      std::function<void(const optax::OptState&)> counts = [&](const optax::OptState& s) {
        for (const auto& [name, c] : s.scalars)
          EXPECT_EQ(c.to_host<int32_t>(), std::vector<int32_t>{k + 1}) << what << " " << s.kind;
        for (const optax::OptState& i : s.inner) counts(i);
      };
      counts(state);
    }
    EXPECT_EQ(step.traces(), 1u) << what;
    EXPECT_LT(losses.back(), losses.front()) << what;
    expect_laid_out_as(state, p0);
    for (const char* name : {"w", "b"}) {
      EXPECT_TRUE(same_sharding(p.at(name).sharding(), p0.at(name).sharding())) << name;
      expect_close({to_host({{name, p.at(name)}})}, {to_host({{name, ep.at(name)}})}, 1e-6,
                   what + ": jit vs eager");
    }
    // The states agree leaf by leaf.
    std::vector<Array> jl, el;
    mv::detail::Tree<optax::OptState>::flatten(state, jl);
    mv::detail::Tree<optax::OptState>::flatten(eager, el);
    ASSERT_EQ(jl.size(), el.size());
    for (size_t i = 0; i < jl.size(); ++i) {
      if (jl[i].dtype() == mv::DType::int32) {
        EXPECT_EQ(jl[i].to_host<int32_t>(), el[i].to_host<int32_t>());
        continue;
      }
      const std::vector<float> a = jl[i].to_host<float>(), b = el[i].to_host<float>();
      for (size_t j = 0; j < a.size(); ++j)
        ASSERT_NEAR(a[j], b[j], 1e-6 * std::max(1.0f, std::fabs(b[j]))) << what << " leaf " << i;
    }
  }
}

TEST(Optax, OutShardingsLayTheStateOut) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding w_sharding(mesh, P("x", "y")), replicated(mesh, P());
  const mv::Params p{{"w", mv::device_put(mv::ones({8, 4}), w_sharding)}};
  const auto opt = optax::adam(0.1f);
  const optax::OptState s0 = opt.init(mv::Params{{"w", mv::ones({8, 4})}});  // uncommitted
  const mv::ShardingTree params_tree = mv::ShardingTree::dict({{"w", w_sharding}});
  const auto step = mv::jit(
      [&](const mv::Params& q, const optax::OptState& s) {
        auto un = opt.update(q, s, q);
        return std::make_pair(optax::apply_updates(q, un.first), un.second);
      },
      {.out_shardings = {params_tree, optax::state_shardings(s0, params_tree, replicated)}});
  const auto [q, s] = step(p, s0);
  EXPECT_EQ(expect_laid_out_as(s, p), 2);  // mu and nu
  EXPECT_TRUE(same_sharding(s.count().sharding(), replicated));
  EXPECT_EQ(s.count().to_host<int32_t>(), std::vector<int32_t>{1});
  // A list of the wrong length names the state's parts.
  const auto bad = mv::jit([&](const mv::Params& q2) { return opt.init(q2); },
                           {.out_shardings = {mv::ShardingTree::list({replicated})}});
  expect_error([&] { (void)bad(p); }, "optax::OptState of chain");
}

// ---- Errors.

TEST(Optax, MismatchedNamesAndStatesAreErrors) {
  const mv::Params p = initial_params();  // 'b', 'w'
  const auto opt = optax::adamw(1e-3f);
  const optax::OptState s = opt.init(p);
  const mv::Params g{{"w", mv::ones({2, 3})}, {"x", mv::ones({3})}};
  expect_error([&] { (void)opt.update(g, s, p); }, "optax.adamw: the updates lack 'b'");
  expect_error([&] { (void)opt.update(g, s, p); }, "have 'x' that the params lack");
  // Without the params, the state's moments name them.
  const auto adam = optax::adam(1e-3f);
  expect_error([&] { (void)adam.update(g, adam.init(p)); }, "the state's mu");
  expect_error([&] { (void)opt.update(grads_at(0), s); }, "needs the params");
  const mv::Params wrong_shape{{"b", mv::ones({3})}, {"w", mv::ones({3, 2})}};
  expect_error([&] { (void)opt.update(wrong_shape, s, p); }, "updates['w'] is float32[3,2]");
  expect_error([&] { (void)optax::apply_updates(p, g); }, "optax.apply_updates");
  // Another optimizer's state.
  const auto sgd = optax::sgd(0.1f, 0.9f);
  expect_error([&] { (void)adam.update(grads_at(0), sgd.init(p), p); }, "optax.trace's init");
  expect_error([&] { (void)adam.update(grads_at(0), optax::OptState{}, p); }, "an empty OptState");
  optax::OptState bad = adam.init(p);
  bad.inner[0].scalars["count"] = mv::scalar(1.0f);
  expect_error([&] { (void)adam.update(grads_at(0), bad, p); }, "count is float32[]");
  expect_error(
      [&] {
        (void)optax::Mask(std::map<std::string, bool>{{"w", true}})("b", p.at("b"));
      },
      "no entry for the parameter 'b'");
  // Hyperparameters.
  expect_error([] { (void)optax::adam(1e-3f, 1.0f); }, "b1 = 1");
  expect_error([] { (void)optax::adam(1e-3f, 0.9f, 0.999f, -1.0f); }, "eps = -1");
  expect_error([] { (void)optax::clip_by_global_norm(0.0f); }, "max_norm > 0");
  expect_error([] { (void)optax::cosine_decay_schedule(1.0f, 0); }, "positive decay_steps");
  expect_error([] { (void)optax::warmup_cosine_decay_schedule(0.0f, 1.0f, 10, 10); },
               "must exceed warmup_steps");
  expect_error([] { (void)optax::join_schedules({optax::constant_schedule(1.0f)}, {3}); },
               "one schedule more than boundaries");
  expect_runtime_usable();
}

// float64 params: the bias corrections 1 - b^t in float64 (in float32, 1 - 0.999^t lost 1e-5 to
// cancellation, 4.6e-7 relative in the parameters after a few steps; found by an outside review).
TEST(Optax, AdamBiasCorrectionsInFloat64ForFloat64Params) {
  const std::vector<double> p0{0.5, -1.25, 2.0}, g0{0.1, -0.2, 0.3};
  mv::Params params{{"w", mv::array(std::span<const double>(p0))}};
  const mv::Params grads{{"w", mv::array(std::span<const double>(g0))}};
  const auto opt = optax::adam(0.01f);
  optax::OptState state = opt.init(params);
  // optax's formulas in double, with the float32 hyperparameters meshvk holds.
  const double b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 0.01f;
  std::vector<double> p = p0, m(3, 0.0), v(3, 0.0);
  for (int t = 1; t <= 4; ++t) {
    auto [updates, next] = opt.update(grads, state, params);
    params = optax::apply_updates(params, updates);
    state = next;
    for (size_t i = 0; i < 3; ++i) {
      m[i] = (1 - b1) * g0[i] + b1 * m[i];
      v[i] = (1 - b2) * g0[i] * g0[i] + b2 * v[i];
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  const std::vector<double> got = params.at("w").to_host<double>();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-12 * std::fabs(p[i])) << i;
}

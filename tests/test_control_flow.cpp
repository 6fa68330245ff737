// lax.scan, fori_loop, while_loop and cond: values against host loops, gradients against the
// same loop unrolled (which the tape differentiates op by op) and finite differences, the body
// recorded once whatever the trip count, sharded carries under jit, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "gradient_check.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

#define EXPECT_THROW_MSG(stmt, text)                              \
  do {                                                            \
    const std::string message_ = message_of([&] { (void)(stmt); }); \
    EXPECT_NE(message_.find(text), std::string::npos) << message_;  \
  } while (0)

namespace {

// h' = tanh(h @ W + x), y = h' * 2: a recurrent cell, as scan's body and unrolled.
std::pair<Array, Array> cell(const Array& h, const Array& x, const Array& w) {
  const Array next = mv::tanh(mv::matmul(h, w) + x);
  return {next, next * 2.f};
}

}  // namespace

TEST(Scan, CarriesAndStacksLikeAHostLoop) {
  const int64_t n = 7;
  const Array xs = host_array(patterned_values(n * 3, 0.5f), {n, 3});
  auto [total, partial] = mv::lax::scan(
      [](const Array& c, const Array& x) { return std::make_pair(c + x, (c + x) * 10.f); }, mv::zeros({3}), xs);
  std::vector<float> want_total(3, 0.f), want_partial;
  const auto host = patterned_values(n * 3, 0.5f);
  for (int64_t k = 0; k < n; ++k) {
    for (int j = 0; j < 3; ++j) want_total[j] += host[k * 3 + j];
    for (int j = 0; j < 3; ++j) want_partial.push_back(want_total[j] * 10.f);
  }
  expect_close(total, want_total);
  EXPECT_EQ(partial.shape(), (mv::Shape{n, 3}));
  expect_close(partial, want_partial);
}

TEST(Scan, ReverseRunsFromTheLastSliceAndKeepsYsInPlace) {
  const int64_t n = 5;
  const Array xs = host_array(patterned_values(n, 1.f), {n});
  auto [c, ys] = mv::lax::scan(
      [](const Array& acc, const Array& x) { return std::make_pair(acc * 2.f + x, acc); }, mv::scalar(0.f), xs,
      std::nullopt, /*reverse=*/true);
  const auto host = patterned_values(n, 1.f);
  float acc = 0.f;
  std::vector<float> want_ys(n);
  for (int64_t k = n - 1; k >= 0; --k) {
    want_ys[k] = acc;
    acc = acc * 2.f + host[k];
  }
  expect_close(c, {acc});
  expect_close(ys, want_ys);
}

TEST(Scan, PytreeCarryWithoutXsAndNoneYs) {
  using C = std::pair<Array, std::vector<Array>>;
  auto [c, none] = mv::lax::scan(
      [](const C& c, std::nullopt_t) {
        return std::make_pair(C(c.first + 1.f, {c.second[0] * 2.f, c.second[1] - c.first}), std::nullopt);
      },
      C(mv::scalar(1.f), {mv::scalar(1.f), mv::scalar(0.f)}), std::nullopt, 4);
  (void)none;
  // first: 1,2,3,4 -> 5; second[0]: 16; second[1]: -(1+2+3+4) = -10
  expect_close(c.first, {5.f});
  expect_close(c.second[0], {16.f});
  expect_close(c.second[1], {-10.f});
}

TEST(Scan, TheBodyIsRecordedOnceWhateverTheTripCount) {
  auto& state = *mv::Runtime::current().state();
  auto recorded_for = [&](int64_t n) {
    auto f = mv::jit([n](const Array& h, const Array& w) {
      return mv::lax::fori_loop(0, n, [&](const Array&, const Array& c) { return mv::tanh(mv::matmul(c, w)); }, h);
    });
    const Array h = host_array(patterned_values(4 * 8, 0.1f), {4, 8});
    const Array w = host_array(patterned_values(8 * 8, 0.05f), {8, 8});
    const uint64_t before = state.dispatches.load();
    const Array out = f(h, w);
    const uint64_t traced = state.dispatches.load() - before;
    // And the replay gives what the trace gave.
    const auto first = out.to_host<float>();
    const Array again = f(h, w);
    EXPECT_EQ(again.to_host<float>(), first);
    return std::make_pair(traced, first);
  };
  const auto [four, four_values] = recorded_for(4);
  const auto [many, many_values] = recorded_for(48);
  EXPECT_EQ(four, many) << "dispatches recorded while tracing 4 and 48 iterations";
  // The values against the same loop run op by op.
  Array h = host_array(patterned_values(4 * 8, 0.1f), {4, 8});
  const Array w = host_array(patterned_values(8 * 8, 0.05f), {8, 8});
  for (int i = 0; i < 48; ++i) h = mv::tanh(mv::matmul(h, w));
  const auto want = h.to_host<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(many_values[i], want[i]);
}

TEST(Scan, GradientsMatchTheUnrolledLoop) {
  const int64_t n = 6, b = 2, d = 5;
  const Array h0 = host_array(patterned_values(b * d, 0.2f), {b, d});
  const Array xs = host_array(patterned_values(n * b * d, 0.1f, 0.05f), {n, b, d});
  const Array w = host_array(patterned_values(d * d, 0.15f), {d, d});
  auto scanned = [&](const Array& h, const Array& x, const Array& weights) {
    auto [last, ys] = mv::lax::scan([&](const Array& c, const Array& xk) { return cell(c, xk, weights); }, h, x);
    return (last * last).sum() + (ys * ys).mean();
  };
  auto unrolled = [&](const Array& h, const Array& x, const Array& weights) {
    Array c = h;
    std::vector<Array> ys;
    for (int64_t k = 0; k < n; ++k) {
      auto [next, y] = cell(c, mv::reshape(mv::dynamic_slice(x, {k, 0, 0}, {1, b, d}), {b, d}), weights);
      c = next;
      ys.push_back(y);
    }
    return (c * c).sum() + (mv::stack(ys) * mv::stack(ys)).mean();
  };
  auto [v1, g1] = mv::value_and_grad(scanned, std::vector<int>{0, 1, 2})(h0, xs, w);
  auto [v2, g2] = mv::value_and_grad(unrolled, std::vector<int>{0, 1, 2})(h0, xs, w);
  expect_close(v1, v2.to_host<float>());
  for (int i = 0; i < 3; ++i) expect_close(g1[i], g2[i].to_host<float>(), 1e-5f);
  // The closed-over weights get their gradient too.
  const Array gw = mv::grad([&](const Array& weights) { return scanned(h0, xs, weights); })(w);
  expect_close(gw, g2[2].to_host<float>(), 1e-5f);
}

TEST(Scan, GradientsMatchFiniteDifferences) {
  const Array w = host_array(patterned_values(9, 0.2f), {3, 3});
  // Through the carry, the xs and a closed-over array at once.
  expect_gradient(
      [&](const Array& v) {
        const Array xs = mv::reshape(v, {4, 1, 3});
        auto [last, ys] = mv::lax::scan([&](const Array& c, const Array& xk) { return cell(c, xk * v.sum(), w); },
                                        mv::reshape(v.sum() * 0.1f, {1, 1}) + mv::zeros({1, 3}), xs);
        return mv::concatenate({mv::reshape(last, {3}), mv::reshape(ys, {12})});
      },
      patterned_values(12, 0.1f, 0.02f), "scan");
}

TEST(Scan, GradientUnderJitMatchesEager) {
  const int64_t n = 5, d = 4;
  const Array h0 = host_array(patterned_values(d, 0.2f), {1, d});
  const Array xs = host_array(patterned_values(n * d, 0.1f), {n, 1, d});
  const Array w = host_array(patterned_values(d * d, 0.2f), {d, d});
  auto loss = [&](const Array& weights, const Array& h) {
    auto [last, ys] = mv::lax::scan([&](const Array& c, const Array& xk) { return cell(c, xk, weights); }, h, xs);
    return (last * ys.sum(0)).sum();
  };
  const Array eager = mv::grad(loss)(w, h0);
  auto step = mv::jit([&](const Array& weights, const Array& h) { return mv::grad(loss)(weights, h); });
  expect_close(step(w, h0), eager.to_host<float>());
  expect_close(step(w, h0), eager.to_host<float>());  // the replay
  EXPECT_EQ(step.traces(), 1u);
}

TEST(Scan, ShardedCarryUnderJit) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const Array h = mv::device_put(host_array(patterned_values(8 * 8, 0.1f), {8, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const Array w = mv::device_put(host_array(patterned_values(8 * 8, 0.05f), {8, 8}), mv::NamedSharding(mesh, P("y")));
  auto f = mv::jit([&](const Array& c0, const Array& weights) {
    return mv::lax::fori_loop(0, 3, [&](const Array& i, const Array& c) { return mv::tanh(mv::matmul(c, weights)) + i.astype(mv::DType::float32); }, c0);
  });
  const Array out = f(h, w);
  EXPECT_TRUE(out.sharding().is_equivalent_to(h.sharding(), 2)) << out.sharding().to_string();
  Array c = host_array(patterned_values(8 * 8, 0.1f), {8, 8});
  const Array wh = host_array(patterned_values(8 * 8, 0.05f), {8, 8});
  for (int i = 0; i < 3; ++i) c = mv::tanh(mv::matmul(c, wh)) + static_cast<float>(i);
  expect_close(out, c.to_host<float>(), 1e-6f);
}

// Stacked layers on a mesh, as the gpt sample scans them (the layer axis whole, the rest split):
// the gradient under jit matches the unrolled loop's and keeps the stack's layout.
TEST(Scan, ShardedStackedXsGradientUnderJit) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const int64_t n = 3;
  const Array ws = mv::device_put(host_array(patterned_values(n * 8 * 8, 0.05f), {n, 8, 8}), mv::NamedSharding(mesh, P(mv::None, "y")));
  const Array h = mv::device_put(host_array(patterned_values(8 * 8, 0.1f), {8, 8}), mv::NamedSharding(mesh, P("x")));
  auto scanned = [&](const Array& stack) {
    auto [last, none] = mv::lax::scan([](const Array& c, const Array& w) { return std::make_pair(mv::tanh(mv::matmul(c, w)), std::nullopt); }, h, stack);
    return last.sum();
  };
  auto unrolled = [&](const Array& stack) {
    Array c = h;
    for (int64_t i = 0; i < n; ++i) c = mv::tanh(mv::matmul(c, stack[i]));
    return c.sum();
  };
  auto f = mv::jit([&](const Array& stack) { return mv::grad(scanned)(stack); });
  const Array g = f(ws);
  expect_close(g, mv::grad(unrolled)(ws).to_host<float>(), 1e-6f);
  EXPECT_TRUE(g.sharding().is_equivalent_to(ws.sharding(), 3)) << g.sharding().to_string();
  expect_close(f(ws), g.to_host<float>(), 0.0f);  // the replay
}

// The backward loop is traced during the forward pass on zero cotangents; the jit program's
// replays leave that iteration out (Capture::Submission::trace_only) and start the loop from the
// real cotangents: each replay, on new values, gives the unrolled loop's gradients.
TEST(Scan, GradientReplaysOnNewValuesMatchTheUnrolledLoop) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const int64_t n = 3;
  auto scanned = [](const Array& stack, const Array& h) {
    auto [last, ys] = mv::lax::scan(
        [](const Array& c, const Array& w) {
          const Array next = mv::tanh(mv::matmul(c, w));
          return std::make_pair(next, next.sum(1));
        },
        h, stack);
    return last.sum() + (ys * ys).sum();
  };
  auto unrolled = [n](const Array& stack, const Array& h) {
    Array c = h, total = mv::zeros({});
    for (int64_t i = 0; i < n; ++i) {
      c = mv::tanh(mv::matmul(c, stack[i]));
      total = total + (c.sum(1) * c.sum(1)).sum();
    }
    return c.sum() + total;
  };
  auto f = mv::jit([&](const Array& stack, const Array& h) { return mv::grad(scanned, std::vector<int>{0, 1})(stack, h); });
  for (int call = 0; call < 3; ++call) {
    const float scale = 0.05f + 0.02f * static_cast<float>(call);
    const Array ws = mv::device_put(host_array(patterned_values(n * 8 * 8, scale, 0.01f), {n, 8, 8}),
                                    mv::NamedSharding(mesh, P(mv::None, "y")));
    const Array h = mv::device_put(host_array(patterned_values(6 * 8, 0.1f + scale), {6, 8}), mv::NamedSharding(mesh, P("x")));
    const std::vector<Array> g = f(ws, h);
    const std::vector<Array> want = mv::grad(unrolled, std::vector<int>{0, 1})(ws, h);
    expect_close(g[0], want[0].to_host<float>(), 1e-5f);
    expect_close(g[1], want[1].to_host<float>(), 1e-5f);
  }
  EXPECT_EQ(f.traces(), 1u);
}

// A scan in a scan's body: the inner backward loop is traced inside the outer backward loop's
// trace, and both replays (the outer loop's iterations and the jit program's) leave its traced
// iteration out.
TEST(Scan, NestedScanGradientUnderJitOnNewValues) {
  auto inner_scan = [](const Array& start, const Array& row) {
    return mv::lax::scan(
        [](const Array& c, const Array& e) {
          const Array next = mv::tanh(c * 0.9f + e);
          return std::make_pair(next, next * c);
        },
        start, row);
  };
  auto scanned = [&](const Array& x) {  // x: [3, 4]
    auto [c, ys] = mv::lax::scan(
        [&](const Array& outer, const Array& row) {
          auto [last, zs] = inner_scan(outer, row);
          return std::make_pair(outer * 0.5f + last, zs.sum());
        },
        mv::scalar(0.3f), x);
    return c + (ys * ys).sum();
  };
  auto unrolled = [](const Array& x) {
    Array outer = mv::scalar(0.3f), total = mv::zeros({});
    for (int64_t r = 0; r < 3; ++r) {
      Array c = outer, zs = mv::zeros({});
      for (int64_t e = 0; e < 4; ++e) {
        const Array next = mv::tanh(c * 0.9f + x[r][e]);
        zs = zs + next * c;
        c = next;
      }
      outer = outer * 0.5f + c;
      total = total + zs * zs;
    }
    return outer + total;
  };
  auto f = mv::jit([&](const Array& x) { return mv::grad(scanned)(x); });
  for (int call = 0; call < 2; ++call) {
    const Array x = host_array(patterned_values(12, 0.2f + 0.1f * static_cast<float>(call), 0.03f), {3, 4});
    expect_close(f(x), mv::grad(unrolled)(x).to_host<float>(), 1e-5f);
  }
  EXPECT_EQ(f.traces(), 1u);
}

TEST(WhileLoop, RunsUntilThePredicateFailsEagerAndUnderJit) {
  using C = std::pair<Array, Array>;
  auto collatz = [](const Array& start) {
    return mv::lax::while_loop([](const C& c) { return c.first != 1; },
                               [](const C& c) {
                                 const Array odd = (c.first % 2) == 1;
                                 return C(mv::where(odd, c.first * 3 + 1, mv::floor_divide(c.first, 2)), c.second + 1);
                               },
                               C(start, mv::scalar(int32_t{0})));
  };
  EXPECT_EQ(collatz(mv::scalar(int32_t{27})).second.to_host<int32_t>().at(0), 111);
  auto f = mv::jit([&](const Array& s) { return collatz(s).second; });
  EXPECT_EQ(f(mv::scalar(int32_t{6})).to_host<int32_t>().at(0), 8);
  EXPECT_EQ(f(mv::scalar(int32_t{7})).to_host<int32_t>().at(0), 16);  // traced again: the trip count is data
  EXPECT_EQ(f.traces(), 2u);
  EXPECT_EQ(collatz(mv::scalar(int32_t{1})).second.to_host<int32_t>().at(0), 0);  // no iteration
}

TEST(WhileLoop, RefusesReverseModeDifferentiation) {
  auto f = [](const Array& x) {
    return mv::lax::while_loop([](const Array& c) { return c.sum() < 10.f; }, [](const Array& c) { return c * 2.f; }, x).sum();
  };
  EXPECT_THROW_MSG(mv::grad(f)(mv::ones({2})), "reverse-mode differentiation of a while_loop");
}

TEST(Cond, OneBranchEagerBothSelectedUnderJitAndGradients) {
  auto f = [](const Array& p, const Array& x) {
    return mv::lax::cond(p, [](const Array& v) { return v * 3.f; }, [](const Array& v) { return mv::sin(v); }, x);
  };
  const Array x = host_array(std::vector<float>{0.5f, -1.f}, {2});
  expect_close(f(mv::scalar(true), x), {1.5f, -3.f});
  expect_close(f(mv::scalar(false), x), {std::sin(0.5f), std::sin(-1.f)});
  auto jf = mv::jit(f);
  expect_close(jf(mv::scalar(true), x), {1.5f, -3.f});
  expect_close(jf(mv::scalar(false), x), {std::sin(0.5f), std::sin(-1.f)});
  EXPECT_EQ(jf.traces(), 1u);
  const Array g = mv::grad([&](const Array& v) { return f(mv::scalar(false), v).sum(); })(x);
  expect_close(g, {std::cos(0.5f), std::cos(-1.f)});
  auto jg = mv::jit([&](const Array& p, const Array& v) { return mv::grad([&](const Array& u) { return f(p, u).sum(); })(v); });
  expect_close(jg(mv::scalar(true), x), {3.f, 3.f});
  expect_close(jg(mv::scalar(false), x), {std::cos(0.5f), std::cos(-1.f)});
}

// Under jit both branches run; the untaken one's gradient must not leak into the result: log's
// 1/x at x = 0 times a zero cotangent is NaN, and a sum of both branches' gradients was NaN where
// JAX (which runs only the taken branch) gives the taken one's. Also a branch reading a closed-over
// array and a cond inside a scan.
TEST(Cond, UntakenBranchGradientStaysOutUnderJit) {
  const Array x = host_array(std::vector<float>{-0.3f, 0.f}, {2});
  const auto loss = [](const Array& p, const Array& v) {
    return mv::lax::cond(p, [](const Array& u) { return mv::log(u).sum(); }, [](const Array& u) { return (u * 2.f).sum(); }, v);
  };
  const auto g = mv::jit([&](const Array& p, const Array& v) { return mv::grad([&](const Array& u) { return loss(p, u); })(v); });
  expect_close(g(mv::scalar(false), x), {2.f, 2.f});
  const Array y = host_array(std::vector<float>{2.f, 4.f}, {2});
  expect_close(g(mv::scalar(true), y), {0.5f, 0.25f});
  // Closed over: w read by the true branch only.
  const Array w = host_array(std::vector<float>{0.f, 3.f}, {2});
  const auto gw = mv::jit([&](const Array& p) {
    return mv::grad([&](const Array& ww) {
      return mv::lax::cond(p, [&] { return mv::sqrt(ww).sum(); }, [&] { return (ww * 5.f).sum(); });
    })(w);
  });
  expect_close(gw(mv::scalar(false)), {5.f, 5.f});
  // Inside a scan's body: a carry that reaches 0 in the untaken branch's log.
  const auto scanned = mv::jit([](const Array& v) {
    return mv::grad([](const Array& u) {
      auto [c, ys] = mv::lax::scan(
          [](const Array& c, const Array& xi) {
            const Array next = mv::lax::cond(xi > 0.f, [&] { return c * xi; }, [&] { return mv::log(c * 0.f) + c; });
            return std::make_pair(next, next);
          },
          u, host_array(std::vector<float>{2.f, 3.f}, {2}));
      return c.sum();
    })(v);
  });
  expect_close(scanned(host_array(std::vector<float>{1.f}, {1})), {6.f});
}

// A branch returning an operand unchanged beside an op on it: its cotangent reaches the operand
// once (the selection and the branch's backward pass both passed it on), and a gradient of a
// gradient under jit is the eager one.
TEST(Cond, OperandsReturnedAsTheyAreAndSecondOrderUnderJit) {
  const Array v = host_array(std::vector<float>{0.5f, 2.f}, {2});
  const auto loss = [](const Array& p, const Array& x) {
    auto r = mv::lax::cond(p, [](const Array& a) { return std::make_pair(a * a, a); },
                           [](const Array& a) { return std::make_pair(a * 3.f, a * 0.f); }, x);
    return (r.first + r.second).sum();
  };
  const auto g = [&](const Array& p) {
    return mv::jit([&, p](const Array& x) { return mv::grad([&](const Array& u) { return loss(p, u); })(x); });
  };
  expect_close(g(mv::scalar(true))(v), {2.f, 5.f});
  expect_close(g(mv::scalar(false))(v), {3.f, 3.f});
  const auto second = mv::jit([](const Array& x) {
    return mv::grad([](const Array& u) {
      return mv::grad([](const Array& w) {
        return mv::lax::cond(mv::scalar(true), [&] { return mv::exp(w).sum(); }, [&] { return (w * 2.f).sum(); });
      })(u).sum();
    })(x);
  });
  expect_close(second(v), {std::exp(0.5f), std::exp(2.f)}, 1e-5f);
}

TEST(ControlFlowErrors, NameWhatWasWrong) {
  EXPECT_THROW_MSG(mv::lax::scan([](const Array& c, const Array& x) { return std::make_pair(mv::concatenate({c, x}), x); },
                                 mv::zeros({2}), mv::zeros({3, 2})),
                   "carry must keep its shape and dtype");
  EXPECT_THROW_MSG(mv::lax::scan([](const Array& c, const Array& x) { return std::make_pair(c, x); }, mv::zeros({2}),
                                 mv::zeros({3, 2}), 4),
                   "length is 4");
  EXPECT_THROW_MSG(mv::lax::scan([](const Array& c, std::nullopt_t) { return std::make_pair(c, std::nullopt); },
                                 mv::zeros({2}), std::nullopt),
                   "no xs and no length");
  EXPECT_THROW_MSG(mv::lax::cond(mv::zeros({2}), [] { return mv::zeros({1}); }, [] { return mv::ones({1}); }),
                   "predicate must be a scalar");
  // The runtime stays usable.
  auto [c, ys] = mv::lax::scan([](const Array& c, const Array& x) { return std::make_pair(c + x, c); }, mv::zeros({2}),
                               mv::ones({3, 2}));
  expect_close(c, {3.f, 3.f});
}

TEST(Scan, ZeroLengthGivesInitAndEmptyYs) {
  auto [c, ys] = mv::lax::scan([](const Array& c, const Array& x) { return std::make_pair(c + x, x * 2.f); },
                               mv::ones({3}), mv::zeros({0, 3}));
  expect_close(c, {1.f, 1.f, 1.f});
  EXPECT_EQ(ys.shape(), (mv::Shape{0, 3}));
}

TEST(ControlFlowErrors, ABodyThatThrowsLeavesTheRuntimeAndTheOuterProgramUsable) {
  auto bad = [](const Array& c, const Array& x) -> std::pair<Array, Array> {
    const Array y = mv::tanh(c + x);
    if (x.shape().size() == 1) throw mv::Error("the body gave up");
    return {y, y};
  };
  EXPECT_THROW_MSG(mv::lax::scan(bad, mv::zeros({2}), mv::ones({3, 2})), "the body gave up");
  // Inside jit, caught there: the program the trace records still runs (and replays) right.
  auto f = mv::jit([&](const Array& x) {
    try {
      (void)mv::lax::scan(bad, mv::zeros({2}), x);
    } catch (const mv::Error&) {
    }
    auto [c, ys] = mv::lax::scan([](const Array& c, const Array& xk) { return std::make_pair(c + xk, c); }, mv::zeros({2}), x);
    return c;
  });
  expect_close(f(mv::ones({3, 2})), {3.f, 3.f});
  expect_close(f(mv::ones({3, 2}) * 2.f), {6.f, 6.f});
  expect_runtime_usable();
}

// A gradient through a scan whose body multiplies matrices stays uncommitted when its inputs are,
// so a jitted step fed its own result does not trace again (the saved product came back
// committed; found by an outside review).
TEST(ControlFlow, ScanGradientThroughAMatmulStaysUncommitted) {
  const Array x = mv::array({1.f, 2.f, 3.f});
  const Array ws = mv::array({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const auto body = [](const Array& c, const Array& w) {
    return std::make_pair(mv::matmul(c.reshape({1, 3}), w.reshape({3, 1})).reshape({1}) * c, std::nullopt);
  };
  const auto step = mv::jit([=](const Array& v) {
    return mv::grad([=](const Array& u) { return mv::lax::scan(body, u, ws).first.sum(); })(v);
  });
  const Array g = step(x);
  EXPECT_FALSE(g.committed());
  (void)step(g);
  EXPECT_EQ(step.traces(), 1u);
}

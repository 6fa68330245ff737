// Differentiating scan's gradient: jvp (the transpose of the vjp, so it differentiates the
// backward pass in the cotangents) and gradients of gradients (in the primals: Hessian-vector
// products), against the same loop unrolled, which the tape differentiates op by op. Carries of
// several leaves, an int counter in the carry, a closed-over weight, reverse scans, a scan in a
// scan, sharded values under jit.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "graph/array_impl.hpp"
#include "meshvk/meshvk.hpp"
#include "adversarial_checks.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;
using adversarial::scalar_of;

namespace {

// h' = tanh(h @ w + x) * s, s' = s * 0.9 + sum(h') / 8, k' = k + 1 (int): the cell scanned and
// unrolled.
struct Carry {
  Array h, s, k;
};
Carry cell(const Carry& c, const Array& x, const Array& w) {
  const Array h = mv::tanh(mv::matmul(c.h, w) + x) * c.s;
  return {h, c.s * 0.9f + h.sum() / 8.f, c.k + 1};
}

// The loss of a scan over the rows of xs (reversed with `reverse`), w closed over.
Array scanned_loss(const Array& w, const Array& h0, const Array& xs, bool reverse) {
  auto [last, ys] = mv::lax::scan(
      [&w](const std::vector<Array>& c, const Array& x) {
        const Carry next = cell({c[0], c[1], c[2]}, x, w);
        return std::make_pair(std::vector<Array>{next.h, next.s, next.k}, next.h.sum(1) * next.s);
      },
      std::vector<Array>{h0, mv::scalar(1.f), mv::scalar(int32_t{0})}, xs, std::nullopt, reverse);
  return (last[0] * last[0]).sum() + (ys * ys).sum() + last[1] * last[2].astype(mv::DType::float32);
}

Array unrolled_loss(const Array& w, const Array& h0, const Array& xs, bool reverse) {
  const int64_t n = xs.shape()[0];
  Carry c{h0, mv::scalar(1.f), mv::scalar(int32_t{0})};
  std::vector<Array> ys(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t i = reverse ? n - 1 - t : t;
    c = cell(c, xs[i], w);
    ys[static_cast<size_t>(i)] = c.h.sum(1) * c.s;
  }
  const Array y = mv::stack(ys, 0);
  return (c.h * c.h).sum() + (y * y).sum() + c.s * c.k.astype(mv::DType::float32);
}

}  // namespace

// jvp in w, h0 and xs at once, for both directions of the scan.
TEST(ScanHigherOrder, JvpMatchesTheUnrolledLoop) {
  const Array w = host_array(patterned_values(5 * 5, 0.3f, 0.02f), {5, 5});
  const Array h0 = host_array(patterned_values(3 * 5, 0.5f), {3, 5});
  const Array xs = host_array(patterned_values(7 * 3 * 5, 0.4f, 0.03f), {7, 3, 5});
  const Array tw = host_array(patterned_values(5 * 5, 1.f, 0.1f), {5, 5});
  const Array th = host_array(patterned_values(3 * 5, 0.7f), {3, 5});
  const Array tx = host_array(patterned_values(7 * 3 * 5, 0.9f, 0.05f), {7, 3, 5});
  for (const bool reverse : {false, true}) {
    const auto primals = std::make_tuple(w, h0, xs);
    const auto tangents = std::make_tuple(tw, th, tx);
    auto [out, tan] = mv::jvp(
        [reverse](const Array& a, const Array& b, const Array& c) { return scanned_loss(a, b, c, reverse); },
        primals, tangents);
    auto [want_out, want_tan] = mv::jvp(
        [reverse](const Array& a, const Array& b, const Array& c) { return unrolled_loss(a, b, c, reverse); },
        primals, tangents);
    expect_close(out, want_out.to_host<float>(), 1e-5f);
    expect_close(tan, want_tan.to_host<float>(), 1e-4f);
    // Against finite differences too (the unrolled loop's jvp is the transpose of its vjp as well).
    const float eps = 1e-3f;
    const float up = scalar_of(unrolled_loss(w + tw * eps, h0 + th * eps, xs + tx * eps, reverse));
    const float down = scalar_of(unrolled_loss(w - tw * eps, h0 - th * eps, xs - tx * eps, reverse));
    EXPECT_NEAR(scalar_of(tan), (up - down) / (2 * eps), 2e-2f * std::max(1.f, std::fabs(scalar_of(tan))));
  }
}

// A Hessian-vector product: the gradient of <grad_w loss, v> in w. The first gradient runs
// scan's backward pass under the outer tape, which must see it (before, the outer gradient
// silently missed the loop's second-order terms).
TEST(ScanHigherOrder, HessianVectorProductMatchesTheUnrolledLoop) {
  const Array w = host_array(patterned_values(5 * 5, 0.3f, 0.02f), {5, 5});
  const Array h0 = host_array(patterned_values(3 * 5, 0.5f), {3, 5});
  const Array xs = host_array(patterned_values(4 * 3 * 5, 0.4f, 0.03f), {4, 3, 5});
  const Array v = host_array(patterned_values(5 * 5, 1.f, 0.1f), {5, 5});
  for (const bool reverse : {false, true}) {
    auto hvp = [&](auto loss) {
      return mv::grad([&](const Array& wv) { return (mv::grad([&](const Array& u) { return loss(u, h0, xs, reverse); })(wv) * v).sum(); })(w);
    };
    const Array got = hvp(scanned_loss);
    const Array want = hvp(unrolled_loss);
    expect_close(got, want.to_host<float>(), 1e-4f);
    // Second order in the scanned inputs too: d/dxs <grad_h0 loss, 1>.
    auto mixed = [&](auto loss) {
      return mv::grad([&](const Array& x) { return mv::grad([&](const Array& h) { return loss(w, h, x, reverse); })(h0).sum(); })(xs);
    };
    expect_close(mixed(scanned_loss), mixed(unrolled_loss).to_host<float>(), 1e-4f);
  }
}

// fori_loop (a scan without xs) differentiated three times: d^3/dx^3 of x^8 (three squarings).
TEST(ScanHigherOrder, ThirdDerivativeOfAForiLoop) {
  auto f = [](const Array& x) {
    return mv::lax::fori_loop(0, 3, [](const Array&, const Array& c) { return c * c; }, x).sum();
  };
  auto d1 = [&](const Array& x) { return mv::grad(f)(x).sum(); };
  auto d2 = [&](const Array& x) { return mv::grad(d1)(x).sum(); };
  const Array x = host_array({0.9f, -1.1f, 0.5f});
  const Array d3 = mv::grad(d2)(x);
  std::vector<float> want;
  for (float e : {0.9f, -1.1f, 0.5f}) want.push_back(8.f * 7.f * 6.f * e * e * e * e * e);
  expect_close(d3, want, 1e-4f);
}

// A scan in a scan's body, differentiated twice, against the unrolled double loop.
TEST(ScanHigherOrder, NestedScanHessianVectorProduct) {
  auto inner = [](const Array& c, const Array& row, const Array& a) {
    return mv::lax::scan([&a](const Array& h, const Array& e) { return std::make_pair(mv::sin(h * a + e), h); }, c, row).first;
  };
  auto scanned = [&](const Array& a, const Array& m) {
    return mv::lax::scan([&](const Array& c, const Array& row) { return std::make_pair(inner(c, row, a) * 0.8f, c); },
                         mv::zeros({2}) + 0.3f, m)
        .first.sum();
  };
  auto unrolled = [](const Array& a, const Array& m) {
    Array c = mv::zeros({2}) + 0.3f;
    for (int64_t i = 0; i < m.shape()[0]; ++i) {
      Array h = c;
      for (int64_t j = 0; j < m.shape()[1]; ++j) h = mv::sin(h * a + m[i][j]);
      c = h * 0.8f;
    }
    return c.sum();
  };
  const Array a = host_array({0.7f, -0.4f});
  const Array m = host_array(patterned_values(3 * 4 * 2, 0.5f, 0.05f), {3, 4, 2});
  auto hvp = [&](auto loss) {
    return mv::grad([&](const Array& av) { return (mv::grad([&](const Array& u) { return loss(u, m); })(av) * a).sum(); })(a);
  };
  expect_close(hvp(scanned), hvp(unrolled).to_host<float>(), 1e-4f);
}

// Sharded values under jit: a jitted jvp and a jitted Hessian-vector product, called on new
// values, traced once each.
TEST(ScanHigherOrder, ShardedUnderJitOnNewValues) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  auto loss = [](const Array& stack, const Array& h, bool unroll) {
    if (unroll) {
      Array c = h;
      for (int64_t i = 0; i < stack.shape()[0]; ++i) c = mv::tanh(mv::matmul(c, stack[i]));
      return (c * c).sum();
    }
    return (mv::lax::scan([](const Array& c, const Array& w) { return std::make_pair(mv::tanh(mv::matmul(c, w)), c); }, h, stack)
                .first *
            mv::lax::scan([](const Array& c, const Array& w) { return std::make_pair(mv::tanh(mv::matmul(c, w)), c); }, h, stack)
                .first)
        .sum();
  };
  auto jvp_of = [&](bool unroll) {
    return [&loss, unroll](const Array& stack, const Array& h, const Array& t) {
      return mv::jvp([&](const Array& s) { return loss(s, h, unroll); }, stack, t).second;
    };
  };
  auto hvp_of = [&](bool unroll) {
    return [&loss, unroll](const Array& stack, const Array& h, const Array& t) {
      return mv::grad([&](const Array& s) { return (mv::grad([&](const Array& u) { return loss(u, h, unroll); })(s) * t).sum(); })(stack);
    };
  };
  auto jitted_jvp = mv::jit(jvp_of(false));
  auto jitted_hvp = mv::jit(hvp_of(false));
  for (int call = 0; call < 2; ++call) {
    const float scale = 0.1f + 0.05f * static_cast<float>(call);
    const Array ws = mv::device_put(host_array(patterned_values(3 * 8 * 8, scale, 0.01f), {3, 8, 8}),
                                    mv::NamedSharding(mesh, P(mv::None, "y")));
    const Array h = mv::device_put(host_array(patterned_values(6 * 8, 0.2f + scale), {6, 8}), mv::NamedSharding(mesh, P("x")));
    const Array t = mv::device_put(host_array(patterned_values(3 * 8 * 8, 1.f, 0.1f), {3, 8, 8}),
                                   mv::NamedSharding(mesh, P(mv::None, "y")));
    expect_close(jitted_jvp(ws, h, t), jvp_of(true)(ws, h, t).to_host<float>(), 1e-4f);
    expect_close(jitted_hvp(ws, h, t), hvp_of(true)(ws, h, t).to_host<float>(), 1e-4f);
  }
  EXPECT_EQ(jitted_jvp.traces(), 1u);
  EXPECT_EQ(jitted_hvp.traces(), 1u);
}

// The function a vjp returned, differentiated under grad: the scan ran under one gradient, so
// its traced backward loop cannot be differentiated; an Error says what to do instead, and the
// runtime stays usable.
TEST(ScanHigherOrder, DifferentiatingAVjpFunctionThroughAScanSaysSo) {
  auto f = [](const Array& x) {
    return mv::lax::fori_loop(0, 2, [](const Array&, const Array& c) { return mv::sin(c); }, x);
  };
  const Array x = host_array({0.3f, -0.2f});
  auto [y, back] = mv::vjp(f, x);
  const std::string m = message_of([&] {
    (void)mv::grad([&](const Array& u) { return std::get<0>(back(u)).sum(); })(mv::ones({2}));
  });
  EXPECT_NE(m.find("apply that transform to the function that runs the scan"), std::string::npos) << m;
  // The same second derivative taken as the message says: grad of a function calling vjp.
  const Array g = mv::grad([&](const Array& v) {
                    auto [out, b] = mv::vjp(f, v);
                    return std::get<0>(b(mv::ones({2}))).sum();
                  })(x);
  std::vector<float> want;
  for (float e : {0.3f, -0.2f}) {
    const float s1 = std::sin(e);
    // d/dx [cos(sin x) cos x] = -sin(sin x) cos^2 x - cos(sin x) sin x
    want.push_back(-std::sin(s1) * std::cos(e) * std::cos(e) - std::cos(s1) * std::sin(e));
  }
  expect_close(g, want, 1e-5f);
}

// First-order gradients keep the loops: a scan in a scan's body, differentiated once, records
// the same dispatches while tracing whatever the inner trip count (the outer backward loop's
// trace differentiates its body once; its inner scan must not run unrolled there).
TEST(ScanHigherOrder, NestedScanFirstOrderGradientStaysALoop) {
  auto& state = *mv::Runtime::current().state();
  auto traced_for = [&](int64_t inner) {
    auto f = mv::jit([](const Array& m, const Array& a) {
      return mv::grad([&](const Array& av) {
        return mv::lax::scan(
                   [&av](const Array& c, const Array& row) {
                     const Array h = mv::lax::scan(
                                         [&av](const Array& x, const Array& e) { return std::make_pair(mv::sin(x * av + e), x); },
                                         c, row)
                                         .first;
                     return std::make_pair(h * 0.8f, c);
                   },
                   mv::zeros({2}) + 0.3f, m)
            .first.sum();
      })(a);
    });
    const Array m = host_array(patterned_values(3 * inner * 2, 0.5f, 0.05f), {3, inner, 2});
    const uint64_t before = state.dispatches.load();
    (void)f(m, host_array({0.7f, -0.4f})).to_host<float>();
    return state.dispatches.load() - before;
  };
  EXPECT_EQ(traced_for(3), traced_for(12)) << "dispatches recorded while tracing inner lengths 3 and 12";
}

// Edges: a scan of length 0 under jvp (the carry passes through: its tangent is the input's),
// and a jvp of a scan over values sharded on a mesh of 3 devices with a length-5 axis, which
// divides neither evenly nor by 4.
TEST(ScanHigherOrder, EmptyScanAndAnOddMesh) {
  auto [out, tan] = mv::jvp(
      [](const Array& v) {
        return mv::lax::scan([](const Array& c, const Array& e) { return std::make_pair(c * e, c); }, v,
                             mv::zeros({0, 3}))
            .first;
      },
      host_array({1.f, 2.f, 3.f}), host_array({0.5f, -1.f, 2.f}));
  expect_close(out, {1.f, 2.f, 3.f});
  expect_close(tan, {0.5f, -1.f, 2.f});
  const auto mesh = mv::make_mesh({3}, {"x"}, {}, std::vector<int>{0, 1, 2});
  const Array xs = mv::device_put(host_array(patterned_values(5 * 6, 0.3f, 0.02f), {5, 6}), mv::NamedSharding(mesh, P(mv::None, "x")));
  const Array t = mv::device_put(host_array(patterned_values(5 * 6, 1.f, 0.1f), {5, 6}), mv::NamedSharding(mesh, P(mv::None, "x")));
  auto scanned = [](const Array& v) {
    return mv::lax::scan([](const Array& c, const Array& e) { return std::make_pair(mv::sin(c + e), c * e); }, mv::zeros({6}), v)
        .first;
  };
  auto unrolled = [](const Array& v) {
    Array c = mv::zeros({6});
    for (int64_t i = 0; i < 5; ++i) c = mv::sin(c + v[i]);
    return c;
  };
  expect_close(mv::jvp(scanned, xs, t).second, mv::jvp(unrolled, xs, t).second.to_host<float>(), 1e-5f);
}

// An outside tester's attempts to break scan's saved matmul products (graph/linalg_ops.cpp,
// graph/saved_collectives.cpp): gradients through scans of matmuls against the unrolled loop and
// analytic references, sharded, jitted and replayed, higher order, nested.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "fast_paths_checks.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

using namespace fast_paths;  // NOLINT: the shared host references, mv, Array, P, Shape

namespace {
Array body_step(const Array& h, const Array& w) {
  // Products depending on the carry through both operands and transposes.
  const Array a = mv::matmul(h, w);                               // (b,d)x(d,d)
  const Array b = mv::matmul(mv::transpose(w), mv::transpose(h));  // (d,b)
  const Array c = mv::einsum("bd,de->be", mv::tanh(a), w);
  return mv::tanh(c + mv::transpose(b) * 0.5f + h);
}

Array scan_loss(const Array& h0, const Array& ws, bool reverse) {
  auto [last, ys] = mv::lax::scan(
      [](const Array& h, const Array& w) {
        const Array n = body_step(h, w);
        return std::make_pair(n, mv::matmul(n, mv::transpose(n)));
      },
      h0, ws, std::nullopt, reverse);
  return mv::sum(last * last) + mv::sum(ys) * 0.1f;
}

Array unrolled_loss(const Array& h0, const Array& ws, bool reverse) {
  Array h = h0;
  std::vector<Array> ys;
  const int64_t n = ws.shape()[0];
  for (int64_t t = 0; t < n; ++t) {
    h = body_step(h, ws[reverse ? n - 1 - t : t]);
    ys.push_back(mv::matmul(h, mv::transpose(h)));
  }
  return mv::sum(h * h) + mv::sum(mv::stack(ys, 0)) * 0.1f;
}

void expect_same(const std::vector<Array>& got, const std::vector<Array>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(what + ", gradient " + std::to_string(i));
    EXPECT_EQ(got[i].shape(), want[i].shape());
    expect_close(got[i], want[i].to_host<float>(), 1e-5f);
  }
}
}  // namespace

TEST(FastPathsAdversarial, ScanMatmulGradientsMatchUnrolled) {
  for (const bool reverse : {false, true}) {
    const int64_t layers = 3, b = 5, d = 6;
    const auto f_scan = [reverse](const Array& h, const Array& w) { return scan_loss(h, w, reverse); };
    const auto f_unr = [reverse](const Array& h, const Array& w) { return unrolled_loss(h, w, reverse); };
    const auto gs = mv::grad(f_scan, std::vector<int>{0, 1});
    const auto gu = mv::grad(f_unr, std::vector<int>{0, 1});
    const auto jgs = mv::jit(gs);
    for (int call = 0; call < 3; ++call) {
      const Array h0 = host_array(random_floats(b * d, 60 + call), {b, d});
      const Array ws = host_array(random_floats(layers * d * d, 70 + call, -0.5f, 0.5f), {layers, d, d});
      const auto want = gu(h0, ws);
      const std::string what = std::string(reverse ? "reverse" : "forward") + " call " + std::to_string(call);
      expect_same(gs(h0, ws), want, what + " eager");
      expect_same(jgs(h0, ws), want, what + " jit");
      // value_and_grad agrees too.
      const auto [val, g] = mv::value_and_grad(f_scan, std::vector<int>{0, 1})(h0, ws);
      EXPECT_NEAR(val.to_host<float>()[0], f_unr(h0, ws).to_host<float>()[0], 1e-4f) << what;
      expect_same(g, want, what + " value_and_grad");
    }
  }
}

TEST(FastPathsAdversarial, ScanBatchedMatmulGradientsAndAnalytic) {
  // Batched matmul in the body; the carry is the right operand in one product and the left in
  // another.
  const auto body = [](const Array& c, const Array& w) {
    const Array left = mv::matmul(w, c);                       // (2,3,3)x(2,3,4)
    const Array right = mv::matmul(c, mv::transpose(c, {0, 2, 1}));  // (2,3,3)
    return mv::tanh(left + mv::matmul(right, c) * 0.1f);
  };
  const auto f_scan = [body](const Array& c0, const Array& ws) {
    auto [last, ys] = mv::lax::scan([body](const Array& c, const Array& w) {
      const Array n = body(c, w);
      return std::make_pair(n, mv::sum(n));
    }, c0, ws);
    return mv::sum(last) + mv::sum(ys);
  };
  const auto f_unr = [body](const Array& c0, const Array& ws) {
    Array c = c0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < ws.shape()[0]; ++t) {
      c = body(c, ws[t]);
      acc = acc + mv::sum(c);
    }
    return mv::sum(c) + acc;
  };
  const Array c0 = host_array(random_floats(24, 80), {2, 3, 4});
  const Array ws = host_array(random_floats(4 * 18, 81, -0.5f, 0.5f), {4, 2, 3, 3});
  const auto want = mv::grad(f_unr, std::vector<int>{0, 1})(c0, ws);
  expect_same(mv::grad(f_scan, std::vector<int>{0, 1})(c0, ws), want, "batched eager");
  expect_same(mv::jit(mv::grad(f_scan, std::vector<int>{0, 1}))(c0, ws), want, "batched jit");
  // Analytic: a linear scan c <- W c over n steps, loss sum(c_n): dL/dc0 = (W^T)^n 1.
  const int64_t d = 4, n = 3;
  const auto vw = random_floats(d * d, 82, -0.5f, 0.5f);
  const auto lin = [n](const Array& c0, const Array& w) {
    auto [last, none] = mv::lax::scan([w](const Array& c, std::nullopt_t) {
      return std::make_pair(mv::matmul(w, c), std::nullopt);
    }, c0, std::nullopt, n);
    return mv::sum(last);
  };
  std::vector<double> g(d, 1.0);
  for (int s = 0; s < n; ++s) {
    std::vector<double> ng(d, 0.0);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) ng[j] += vw[i * d + j] * g[i];
    g = ng;
  }
  std::vector<float> gf(g.begin(), g.end());
  const auto got = mv::grad(lin, 0)(host_array(random_floats(d, 83)), host_array(vw, {d, d}));
  expect_close(got, gf, 1e-5f);
}

TEST(FastPathsAdversarial, ScanMatmulGradientsSharded) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const int64_t layers = 3, b = 4, d = 8;
  const Array h0 = placed_array(random_floats(b * d, 90), {b, d}, mv::NamedSharding(mesh, P("data")));
  const Array ws = placed_array(random_floats(layers * d * d, 91, -0.4f, 0.4f), {layers, d, d},
                                mv::NamedSharding(mesh, P(mv::None, mv::None, "model")));
  const auto f_scan = [](const Array& h, const Array& w) { return scan_loss(h, w, false); };
  const auto f_unr = [](const Array& h, const Array& w) { return unrolled_loss(h, w, false); };
  const auto want = mv::grad(f_unr, std::vector<int>{0, 1})(h0, ws);
  expect_same(mv::grad(f_scan, std::vector<int>{0, 1})(h0, ws), want, "sharded eager");
  const auto j = mv::jit(mv::grad(f_scan, std::vector<int>{0, 1}));
  expect_same(j(h0, ws), want, "sharded jit");
  const Array h1 = placed_array(random_floats(b * d, 92), {b, d}, mv::NamedSharding(mesh, P("data")));
  expect_same(j(h1, ws), mv::grad(f_unr, std::vector<int>{0, 1})(h1, ws), "sharded jit replay");
}

namespace {
// A body whose carry IS a raw matmul product (no elementwise op after it), returned as y too,
// with closure-captured weights (not xs).
Array raw_product_loss(const Array& h0, const Array& w, const Array& ws, int64_t steps) {
  auto [last, ys] = mv::lax::scan(
      [w](const Array& h, const Array& v) {
        const Array p = mv::matmul(h, w);           // carry-dependent, closure weight
        const Array q = mv::matmul(p, v) * 0.5f;    // product of a product
        return std::make_pair(q, p);
      },
      h0, ws);
  (void)steps;
  return mv::sum(last * last) + mv::sum(ys * ys) * 0.25f;
}
Array raw_product_unrolled(const Array& h0, const Array& w, const Array& ws, int64_t steps) {
  Array h = h0;
  std::vector<Array> ys;
  for (int64_t t = 0; t < steps; ++t) {
    const Array p = mv::matmul(h, w);
    h = mv::matmul(p, ws[t]) * 0.5f;
    ys.push_back(p);
  }
  return mv::sum(h * h) + mv::sum(mv::stack(ys, 0) * mv::stack(ys, 0)) * 0.25f;
}
}  // namespace

TEST(FastPathsAdversarial, ScanRawProductCarryClosureWeightsAndRepeatedPullbacks) {
  const int64_t steps = 4, b = 3, d = 4;
  const Array h0 = host_array(random_floats(b * d, 600), {b, d});
  const Array w = host_array(random_floats(d * d, 601, -0.6f, 0.6f), {d, d});
  const Array ws = host_array(random_floats(steps * d * d, 602, -0.6f, 0.6f), {steps, d, d});
  const auto fs = [steps](const Array& h, const Array& w, const Array& ws) { return raw_product_loss(h, w, ws, steps); };
  const auto fu = [steps](const Array& h, const Array& w, const Array& ws) { return raw_product_unrolled(h, w, ws, steps); };
  const auto want = mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w, ws);
  const auto gs = mv::grad(fs, std::vector<int>{0, 1, 2});
  expect_same(gs(h0, w, ws), want, "raw product eager");
  const auto j = mv::jit(gs);
  expect_same(j(h0, w, ws), want, "raw product jit");
  // The products are handed back (else this test would not reach the fast path).
  EXPECT_NE(j.lower(h0, w, ws).as_text().find("(nothing computed)"), std::string::npos);
  // Replayed with other weights: the saved products must be this call's.
  const Array w2 = host_array(random_floats(d * d, 603, -0.6f, 0.6f), {d, d});
  expect_same(j(h0, w2, ws), mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w2, ws), "raw product jit, other w");
  // vjp's pullback called twice (and with another cotangent): the saved products handed back
  // on each call.
  auto [y, pull] = mv::vjp(fs, h0, w, ws);
  EXPECT_NEAR(y.to_host<float>()[0], fu(h0, w, ws).to_host<float>()[0], 1e-4f);
  const auto g1 = pull(mv::scalar(1.0f));
  const auto g2 = pull(mv::scalar(2.0f));
  const auto g3 = pull(mv::scalar(1.0f));
  expect_same({std::get<0>(g1), std::get<1>(g1), std::get<2>(g1)}, want, "pullback first");
  std::vector<Array> twice;
  for (const auto& a : want) twice.push_back(a * 2.f);
  expect_same({std::get<0>(g2), std::get<1>(g2), std::get<2>(g2)}, twice, "pullback second, cotangent 2");
  expect_same({std::get<0>(g3), std::get<1>(g3), std::get<2>(g3)}, want, "pullback third");
}

TEST(FastPathsAdversarial, ScanProductsUnderCondAndTwoProductsOnOneLine) {
  // The body picks one of two matmuls per iteration (cond on xs data), and one helper line makes
  // two products of equal shapes from different operands.
  const auto two = [](const Array& h, const Array& a, const Array& b) {
    const auto mm = [](const Array& x, const Array& y) { return mv::matmul(x, y); };
    return mm(h, a) - mm(h, b);  // the same source line in mm, twice
  };
  const auto body = [two](const Array& h, const std::vector<Array>& x) {
    const Array flip = x[2];
    const Array n = mv::lax::cond(
        flip > 0.f, [two](const Array& h, const Array& a, const Array& b) { return mv::tanh(two(h, a, b)); },
        [](const Array& h, const Array& a, const Array&) { return mv::tanh(mv::matmul(h, mv::transpose(a)) + h); },
        h, x[0], x[1]);
    return n;
  };
  const auto fs = [body](const Array& h0, const Array& as, const Array& bs, const Array& flips) {
    auto [last, ys] = mv::lax::scan(
        [body](const Array& h, const std::vector<Array>& x) {
          const Array n = body(h, x);
          return std::make_pair(n, mv::sum(n * n));
        },
        h0, std::vector<Array>{as, bs, flips});
    return mv::sum(last) + mv::sum(ys);
  };
  const auto fu = [body](const Array& h0, const Array& as, const Array& bs, const Array& flips) {
    Array h = h0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < as.shape()[0]; ++t) {
      h = body(h, {as[t], bs[t], flips[t]});
      acc = acc + mv::sum(h * h);
    }
    return mv::sum(h) + acc;
  };
  const int64_t steps = 5, b = 2, d = 4;
  const Array h0 = host_array(random_floats(b * d, 700), {b, d});
  const Array as = host_array(random_floats(steps * d * d, 701, -0.7f, 0.7f), {steps, d, d});
  const Array bs = host_array(random_floats(steps * d * d, 702, -0.7f, 0.7f), {steps, d, d});
  const Array flips = host_array({1.f, -1.f, 1.f, 1.f, -1.f}, {steps});
  const auto want = mv::grad(fu, std::vector<int>{0, 1, 2})(h0, as, bs, flips);
  expect_same(mv::grad(fs, std::vector<int>{0, 1, 2})(h0, as, bs, flips), want, "cond eager");
  const auto j = mv::jit(mv::grad(fs, std::vector<int>{0, 1, 2}));
  expect_same(j(h0, as, bs, flips), want, "cond jit");
  EXPECT_NE(j.lower(h0, as, bs, flips).as_text().find("(nothing computed)"), std::string::npos);
  const Array flips2 = host_array({-1.f, 1.f, -1.f, -1.f, 1.f}, {steps});
  expect_same(j(h0, as, bs, flips2), mv::grad(fu, std::vector<int>{0, 1, 2})(h0, as, bs, flips2), "cond jit, other branches");
}

TEST(FastPathsAdversarial, ScanProductsEinsumTransposedOperandsReverseAndBf16) {
  // einsum with operands transposed by the subscripts, and a reverse scan with a fori_loop-like
  // length only (no xs): the carry multiplies a closure weight.
  const int64_t d = 4, b = 3;
  const Array w = host_array(random_floats(d * d, 800, -0.5f, 0.5f), {d, d});
  const Array h0 = host_array(random_floats(b * d, 801), {b, d});
  const auto step = [](const Array& h, const Array& w) {
    const Array a = mv::einsum("bi,ji->bj", h, w);  // h @ w.T
    const Array g = mv::einsum("bi,bj->ij", h, a);  // h.T @ a (outer products summed)
    return mv::tanh(a + mv::einsum("bi,ij->bj", h, g) * 0.1f);
  };
  const auto fs = [step](const Array& h0, const Array& w) {
    auto [last, none] = mv::lax::scan([step, w](const Array& h, std::nullopt_t) { return std::make_pair(step(h, w), std::nullopt); },
                                      h0, std::nullopt, 3, /*reverse=*/true);
    return mv::sum(last * last);
  };
  const auto fu = [step](const Array& h0, const Array& w) {
    Array h = h0;
    for (int t = 0; t < 3; ++t) h = step(h, w);
    return mv::sum(h * h);
  };
  const auto want = mv::grad(fu, std::vector<int>{0, 1})(h0, w);
  expect_same(mv::grad(fs, std::vector<int>{0, 1})(h0, w), want, "einsum reverse eager");
  expect_same(mv::jit(mv::grad(fs, std::vector<int>{0, 1}))(h0, w), want, "einsum reverse jit");
  // value_and_grad under jit, replayed with another h0.
  const auto vg = mv::jit([fs](const Array& h, const Array& w) {
    auto [v, g] = mv::value_and_grad(fs, std::vector<int>{0, 1})(h, w);
    return std::vector<Array>{v, g[0], g[1]};
  });
  for (int call = 0; call < 3; ++call) {
    const Array h = host_array(random_floats(b * d, 810 + call), {b, d});
    const auto out = vg(h, w);
    const auto wg = mv::grad(fu, std::vector<int>{0, 1})(h, w);
    EXPECT_NEAR(out[0].to_host<float>()[0], fu(h, w).to_host<float>()[0], 1e-4f);
    expect_same({out[1], out[2]}, wg, "value_and_grad jit call " + std::to_string(call));
  }
  // bfloat16 products in the body (rounded to bfloat16 the same way in both loops).
  const auto step16 = [](const Array& h, const Array& w) {
    const Array p = mv::matmul(mv::astype(h, mv::DType::bfloat16), mv::astype(w, mv::DType::bfloat16));
    return mv::tanh(mv::astype(p, mv::DType::float32) + h);
  };
  const auto fs16 = [step16](const Array& h0, const Array& ws) {
    auto [last, ys] = mv::lax::scan([step16](const Array& h, const Array& w) {
      const Array n = step16(h, w);
      return std::make_pair(n, n);
    }, h0, ws);
    return mv::sum(last) + mv::sum(ys * ys);
  };
  const auto fu16 = [step16](const Array& h0, const Array& ws) {
    Array h = h0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < ws.shape()[0]; ++t) {
      h = step16(h, ws[t]);
      acc = acc + mv::sum(h * h);
    }
    return mv::sum(h) + acc;
  };
  const Array ws = host_array(random_floats(3 * d * d, 820, -0.5f, 0.5f), {3, d, d});
  const auto want16 = mv::grad(fu16, std::vector<int>{0, 1})(h0, ws);
  expect_same(mv::grad(fs16, std::vector<int>{0, 1})(h0, ws), want16, "bf16 eager");
  expect_same(mv::jit(mv::grad(fs16, std::vector<int>{0, 1}))(h0, ws), want16, "bf16 jit");
}

namespace {
// One helper (one source line per product) used by two scans of equal shapes in one loss.
Array layer_scan(const Array& h0, const Array& ws) {
  auto [last, ys] = mv::lax::scan(
      [](const Array& h, const Array& w) {
        const Array n = mv::tanh(mv::matmul(h, w));
        return std::make_pair(n, mv::matmul(n, w));
      },
      h0, ws);
  return last + mv::sum(ys, 0) * 0.1f;
}
Array layer_unrolled(const Array& h0, const Array& ws) {
  Array h = h0;
  Array acc = mv::zeros_like(h0);
  for (int64_t t = 0; t < ws.shape()[0]; ++t) {
    h = mv::tanh(mv::matmul(h, ws[t]));
    acc = acc + mv::matmul(h, ws[t]);
  }
  return h + acc * 0.1f;
}
}  // namespace

TEST(FastPathsAdversarial, TwoScansOfOneHelperCheckpointAndShortLengths) {
  const int64_t b = 2, d = 4;
  const Array h0 = host_array(random_floats(b * d, 900), {b, d});
  for (const int64_t steps : {int64_t{1}, int64_t{3}}) {
    const Array w1 = host_array(random_floats(steps * d * d, 901, -0.8f, 0.8f), {steps, d, d});
    const Array w2 = host_array(random_floats(steps * d * d, 902, -0.8f, 0.8f), {steps, d, d});
    const auto fs = [](const Array& h, const Array& a, const Array& c) {
      return mv::sum(mv::square(layer_scan(layer_scan(h, a), c)));
    };
    const auto fu = [](const Array& h, const Array& a, const Array& c) {
      return mv::sum(mv::square(layer_unrolled(layer_unrolled(h, a), c)));
    };
    // The same weights in both scans, then different ones (a mixed-up hand-back shows only then).
    const auto want = mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w1, w2);
    const std::string s = " steps " + std::to_string(steps);
    expect_same(mv::grad(fs, std::vector<int>{0, 1, 2})(h0, w1, w2), want, "two scans eager" + s);
    const auto j = mv::jit(mv::grad(fs, std::vector<int>{0, 1, 2}));
    expect_same(j(h0, w1, w2), want, "two scans jit" + s);
    expect_same(j(h0, w2, w1), mv::grad(fu, std::vector<int>{0, 1, 2})(h0, w2, w1), "two scans jit swapped" + s);
    // The whole thing checkpointed: its backward pass runs both scans' forward passes again.
    const auto fc = mv::checkpoint([fs](const Array& h, const Array& a, const Array& c) { return fs(h, a, c); });
    expect_same(mv::grad(fc, std::vector<int>{0, 1, 2})(h0, w1, w2), want, "checkpointed" + s);
  }
}

// A Hessian-vector product through a scan whose body multiplies (the scan's backward pass
// differentiated again), against the unrolled loop.
TEST(FastPathsAdversarial, HessianVectorProductThroughAScanOfMatmuls) {
  const int64_t b = 2, d = 3, steps = 3;
  const Array h0 = host_array(random_floats(b * d, 1600), {b, d});
  const Array w = host_array(random_floats(d * d, 1601, -0.7f, 0.7f), {d, d});
  const Array v = host_array(random_floats(d * d, 1602), {d, d});
  const auto fs = [h0, steps](const Array& w) {
    auto [last, ys] = mv::lax::scan([w](const Array& h, std::nullopt_t) {
      const Array n = mv::tanh(mv::matmul(h, w));
      return std::make_pair(n, mv::matmul(n, mv::transpose(w)));
    }, h0, std::nullopt, steps);
    return mv::sum(last * last) + mv::sum(ys);
  };
  const auto fu = [h0, steps](const Array& w) {
    Array h = h0, acc = mv::scalar(0.f);
    for (int64_t t = 0; t < steps; ++t) {
      h = mv::tanh(mv::matmul(h, w));
      acc = acc + mv::sum(mv::matmul(h, mv::transpose(w)));
    }
    return mv::sum(h * h) + acc;
  };
  const auto hvp = [v](const std::function<Array(const Array&)>& f) {
    return mv::grad([f, v](const Array& w) { return mv::sum(mv::grad(f)(w) * v); });
  };
  const Array want = hvp(fu)(w);
  expect_close(hvp(fs)(w), want.to_host<float>(), 1e-5f);
  expect_close(mv::jit(hvp(fs))(w), want.to_host<float>(), 1e-5f);
}

// The gradient of a jitted scan (grad outside jit), called again with other inputs.
TEST(FastPathsAdversarial, GradOfJittedScan) {
  const int64_t layers = 3, b = 2, d = 4;
  const auto f_scan = [](const Array& h, const Array& w) { return scan_loss(h, w, false); };
  const auto f_unr = [](const Array& h, const Array& w) { return unrolled_loss(h, w, false); };
  const auto g_outer = mv::grad(mv::jit(f_scan), std::vector<int>{0, 1});
  for (int call = 0; call < 2; ++call) {
    const Array h0 = host_array(random_floats(b * d, 1800 + call), {b, d});
    const Array ws = host_array(random_floats(layers * d * d, 1810 + call, -0.5f, 0.5f), {layers, d, d});
    const auto want = mv::grad(f_unr, std::vector<int>{0, 1})(h0, ws);
    expect_same(g_outer(h0, ws), want, "grad(jit(scan)) call " + std::to_string(call));
  }
}

namespace {
// A scan whose loss uses its final carry nonlinearly (sum of squares): its output cotangent
// depends on the forward values.
Array inner_scan_loss(const Array& h0, const Array& ws, bool square) {
  auto [last, ys] = mv::lax::scan([](const Array& h, const Array& w) {
    const Array n = mv::tanh(h * w);
    return std::make_pair(n, n);
  }, h0, ws);
  return (square ? mv::sum(last * last) : mv::sum(last)) + mv::sum(ys);
}
}  // namespace

// The gradient of a scan whose body runs another scan and uses that inner scan's result
// nonlinearly (here sum(last * last)), and grad(vmap(f)) of such an f (vmap is a scan over the
// mapped axis): a plain first-order gradient, equal to the unrolled loop's. Until 2026-11-27 it
// threw "scan: its backward pass is being differentiated ... by a transform that was not active
// when the scan ran": the inner scan's cotangent (2 * last * ct) was tracked by the outer
// scan's TapeIsolation probe, which only notes what an isolated body reads, and the check took
// the probe for a transform (graph/autodiff.cpp, tracked_by_a_transform).
TEST(FastPathsAdversarial, GradOfNestedScanUsingTheInnerResultNonlinearly) {
  const Array hs = host_array(random_floats(12, 1900), {3, 4});
  const Array ws = host_array(random_floats(8, 1901), {2, 4});
  for (const bool square : {false, true}) {
    SCOPED_TRACE(square ? "sum(last * last)" : "sum(last)");
    const auto outer = [square](const Array& hs, const Array& ws) {
      auto [c, ys] = mv::lax::scan([ws, square](const Array& c, const Array& h) {
        return std::make_pair(c, inner_scan_loss(h, ws, square));
      }, mv::scalar(0.f), hs);
      return mv::sum(ys);
    };
    const auto via_vmap = [square](const Array& hs, const Array& ws) {
      return mv::sum(mv::vmap([ws, square](const Array& h) { return inner_scan_loss(h, ws, square); })(hs));
    };
    const auto unrolled = [square](const Array& hs, const Array& ws) {
      return inner_scan_loss(hs[0], ws, square) + inner_scan_loss(hs[1], ws, square) + inner_scan_loss(hs[2], ws, square);
    };
    const std::vector<Array> want = mv::grad(unrolled, std::vector<int>{0, 1})(hs, ws);
    for (const bool use_vmap : {false, true}) {
      SCOPED_TRACE(use_vmap ? "grad(vmap(scan))" : "grad(scan(scan))");
      try {
        const std::vector<Array> got = use_vmap ? mv::grad(via_vmap, std::vector<int>{0, 1})(hs, ws)
                                                : mv::grad(outer, std::vector<int>{0, 1})(hs, ws);
        expect_same(got, want, "nested");
      } catch (const mv::Error& e) {
        ADD_FAILURE() << e.what();
      }
    }
  }
}

// Partial sums (engine/src/graph/partial_sum.hpp): a contraction or sum over a split dimension
// leaves summands on the devices, linear ops keep them, and the sum is taken where needed (one
// all-reduce, a reduce-scatter into a split layout, or several packed into one). Values against
// references computed on the host as numpy does (float sums in double, int32 wrapping), eagerly
// and under jit, with grad; and the collectives each program holds.
#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

Array put(const std::vector<float>& v, mv::Shape s, const mv::Mesh& mesh, mv::PartitionSpec spec) {
  return mv::device_put(std::span<const float>(v), s, mv::NamedSharding(mesh, spec));
}

int count(const mv::Lowered& l, const std::string& kind) {
  const auto& c = l.collective_counts();
  return c.count(kind) ? c.at(kind).count : 0;
}

uint64_t bytes(const mv::Lowered& l, const std::string& kind) {
  const auto& c = l.collective_counts();
  return c.count(kind) ? c.at(kind).bytes : 0;
}

int lines_with(const std::string& text, const std::string& a, const std::string& b = "") {
  int n = 0;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) ++n;
    start = end + 1;
  }
  return n;
}

// numpy's a @ b for row-major a [m, k] and b [k, n], summed in double.
std::vector<float> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<float> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += double(a[static_cast<size_t>(i * k + p)]) * double(b[static_cast<size_t>(p * n + j)]);
      c[static_cast<size_t>(i * n + j)] = static_cast<float>(s);
    }
  return c;
}

std::vector<int> first_devices(int n) {
  std::vector<int> d(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) d[static_cast<size_t>(i)] = i;
  return d;
}

}  // namespace

// k split over one mesh axis and over two, on meshes of 8, 3, 6 and 2x3 devices, with sizes that
// are not multiples of 4: the same values eagerly and under jit, one all-reduce in the program.
TEST(PartialSums, MatmulWithSplitContraction) {
  struct Case {
    std::vector<int> sizes;
    std::vector<std::string> names;
    mv::PartitionSpec a_spec, b_spec;
    int64_t m, k, n;
  };
  const std::vector<Case> cases = {
      {{2, 4}, {"a", "b"}, P(mv::None, "b"), P("b", mv::None), 5, 12, 7},
      {{2, 4}, {"a", "b"}, P(mv::None, {"a", "b"}), P({"a", "b"}, mv::None), 3, 16, 5},
      {{3}, {"x"}, P(mv::None, "x"), P("x", mv::None), 5, 9, 7},
      {{6}, {"x"}, P(mv::None, "x"), P("x", mv::None), 7, 18, 3},
      {{2, 3}, {"a", "b"}, P("a", "b"), P("b", mv::None), 6, 15, 5},
      {{2, 3}, {"a", "b"}, P(mv::None, {"a", "b"}), P({"a", "b"}, mv::None), 1, 6, 1},
  };
  for (const Case& c : cases) {
    int devices = 1;
    for (int s : c.sizes) devices *= s;
    const auto mesh = mv::make_mesh(c.sizes, c.names, {}, first_devices(devices));
    const auto va = random_floats(static_cast<size_t>(c.m * c.k), 11), vb = random_floats(static_cast<size_t>(c.k * c.n), 12);
    const auto want = host_matmul(va, vb, c.m, c.k, c.n);
    const Array a = put(va, {c.m, c.k}, mesh, c.a_spec), b = put(vb, {c.k, c.n}, mesh, c.b_spec);
    SCOPED_TRACE(c.a_spec.to_string() + " @ " + c.b_spec.to_string() + " on " + std::to_string(devices) + " devices");
    expect_close(mv::matmul(a, b), want);
    const auto mm = mv::jit([](const Array& x, const Array& y) { return mv::matmul(x, y); });
    expect_close(mm(a, b), want);
    const auto lowered = mm.lower(a, b);
    EXPECT_EQ(count(lowered, "all-reduce"), 1) << lowered.as_text();
    // einsum goes through the same contraction.
    expect_close(mv::einsum("ik,kj->ij", a, b), want);
  }
}

// Linear ops keep the value partial; the sum is taken once, where a consumer needs it.
TEST(PartialSums, LinearOpsThenOneAllReduce) {
  const auto mesh = mv::make_mesh({2, 4}, {"a", "b"});
  const int64_t m = 6, k = 8, n = 10;
  const auto va = random_floats(static_cast<size_t>(m * k), 1), vb = random_floats(static_cast<size_t>(k * n), 2);
  const auto vc = random_floats(static_cast<size_t>(m * k), 3), vd = random_floats(static_cast<size_t>(k * n), 4);
  const auto vs = random_floats(static_cast<size_t>(n), 5);
  const Array a = put(va, {m, k}, mesh, P(mv::None, "b")), b = put(vb, {k, n}, mesh, P("b"));
  const Array c = put(vc, {m, k}, mesh, P(mv::None, "b")), d = put(vd, {k, n}, mesh, P("b"));
  const Array scale = put(vs, {n}, mesh, P());
  const auto ab = host_matmul(va, vb, m, k, n), cd = host_matmul(vc, vd, m, k, n);
  // (a @ b - c @ d) * scale / 2, reshaped, transposed, negated.
  std::vector<float> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) want[static_cast<size_t>(j * m + i)] = -((ab[static_cast<size_t>(i * n + j)] - cd[static_cast<size_t>(i * n + j)]) * vs[static_cast<size_t>(j)] / 2);
  const auto f = [](const Array& a, const Array& b, const Array& c, const Array& d, const Array& s) {
    const Array lin = (mv::matmul(a, b) - mv::matmul(c, d)) * s / 2.0f;
    return -mv::transpose(mv::reshape(mv::reshape(lin, {3, 2, 10}), {6, 10}));
  };
  expect_close(f(a, b, c, d, scale), want);
  const auto jf = mv::jit(f);
  expect_close(jf(a, b, c, d, scale), want);
  const auto lowered = jf.lower(a, b, c, d, scale);
  EXPECT_EQ(count(lowered, "all-reduce"), 1) << lowered.as_text();
  EXPECT_EQ(count(lowered, "reshard"), 0) << lowered.as_text();
  // A non-linear consumer takes the sum first: tanh of the sum, not the sum of tanh.
  std::vector<float> want_tanh(ab.size());
  for (size_t i = 0; i < ab.size(); ++i) want_tanh[i] = std::tanh(ab[i]) + 1;
  expect_close(mv::tanh(mv::matmul(a, b)) + 1.0f, want_tanh);
  // Adding a value that is not partial: it is added once the sum is taken, not to every summand
  // (x + 1 is not the sum of summands + 1), with the bits of the sum taken first.
  std::vector<float> want_plus(ab.size());
  for (size_t i = 0; i < ab.size(); ++i) want_plus[i] = ab[i] + 1;
  expect_close(mv::jit([](const Array& x, const Array& y) { return mv::matmul(x, y) + 1.0f; })(a, b), want_plus);
  // A product of two partial values is not linear: both are summed first.
  std::vector<float> want_sq(ab.size());
  for (size_t i = 0; i < ab.size(); ++i) want_sq[i] = ab[i] * cd[i];
  expect_close(mv::matmul(a, b) * mv::matmul(c, d), want_sq);
}

// Sums over a split axis: float and int32 (which wraps as numpy's does), the local sums that
// follow it, max (not partial), and the same bits on every run.
TEST(PartialSums, SumsOverSplitAxes) {
  const auto mesh3 = mv::make_mesh({3}, {"x"}, {}, first_devices(3));
  const int64_t rows = 9, cols = 5;
  std::vector<int32_t> vi(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < vi.size(); ++i) vi[i] = (i % 2 ? INT32_MAX - int32_t(i) : INT32_MIN + int32_t(3 * i));
  const Array xi = mv::device_put(std::span<const int32_t>(vi), {rows, cols}, mv::NamedSharding(mesh3, P("x")));
  std::vector<int32_t> want_i(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) {
    uint32_t s = 0;
    for (int64_t i = 0; i < rows; ++i) s += static_cast<uint32_t>(vi[static_cast<size_t>(i * cols + j)]);
    want_i[static_cast<size_t>(j)] = static_cast<int32_t>(s);
  }
  EXPECT_EQ(mv::sum(xi, {0}).to_host<int32_t>(), want_i);
  const auto jsum = mv::jit([](const Array& x) { return mv::sum(x, {0}) * 3 - mv::sum(x, {0}); });
  std::vector<int32_t> want_i2(want_i.size());
  for (size_t j = 0; j < want_i.size(); ++j) want_i2[j] = static_cast<int32_t>(static_cast<uint32_t>(want_i[j]) * 2u);
  EXPECT_EQ(jsum(xi).to_host<int32_t>(), want_i2);

  const auto vf = random_floats(static_cast<size_t>(rows * cols), 7, -3, 3);
  const Array xf = put(vf, {rows, cols}, mesh3, P("x"));
  std::vector<float> col(static_cast<size_t>(cols)), total(1), mx(static_cast<size_t>(cols), -1e30f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      col[static_cast<size_t>(j)] += vf[static_cast<size_t>(i * cols + j)];
      mx[static_cast<size_t>(j)] = std::max(mx[static_cast<size_t>(j)], vf[static_cast<size_t>(i * cols + j)]);
    }
  for (float v : col) total[0] += v;
  expect_close(mv::sum(xf, {0}), col);
  expect_close(mv::sum(mv::sum(xf, {0})), total);  // a partial sum summed again
  expect_close(mv::mean(xf, {0}) * float(rows), col);
  expect_close(mv::max(xf, {0}), mx);
  const auto jf = mv::jit([](const Array& x) { return mv::sum(mv::sum(x, {0}) * 2.0f); });
  const auto first = jf(xf).to_host<float>(), second = jf(xf).to_host<float>();
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * 4), 0) << "not bit-identical run to run";
  expect_close(jf(xf), {2 * total[0]});

  // Empty dimensions: nothing to sum, the right shapes.
  const auto mesh6 = mv::make_mesh({6}, {"x"}, {}, first_devices(6));
  const Array e = put({}, {6, 0}, mesh6, P("x"));
  EXPECT_EQ(mv::sum(e, {0}).shape(), mv::Shape({0}));
  const Array ea = put({}, {0, 6}, mesh6, P(mv::None, "x")), eb = put(random_floats(12, 3), {6, 2}, mesh6, P("x"));
  EXPECT_EQ(mv::matmul(ea, eb).to_host<float>().size(), 0u);
  EXPECT_EQ(mv::jit([](const Array& x, const Array& y) { return mv::matmul(x, y); })(ea, eb).shape(), mv::Shape({0, 2}));
}

// Wanted split along a partial axis: a reduce-scatter instead of an all-reduce and a slice.
TEST(PartialSums, ResolvedIntoASplitLayoutIsAReduceScatter) {
  const auto mesh = mv::make_mesh({2, 3}, {"a", "b"}, {}, first_devices(6));
  const int64_t m = 6, k = 12, n = 9;
  const auto va = random_floats(static_cast<size_t>(m * k), 21), vb = random_floats(static_cast<size_t>(k * n), 22);
  const Array a = put(va, {m, k}, mesh, P(mv::None, "b")), b = put(vb, {k, n}, mesh, P("b"));
  const auto want = host_matmul(va, vb, m, k, n);
  const mv::NamedSharding split(mesh, P(mv::None, "b"));
  const auto f = mv::jit([&](const Array& x, const Array& y) { return mv::with_sharding_constraint(mv::matmul(x, y), split); });
  const Array r = f(a, b);
  EXPECT_EQ(r.sharding(), mv::Sharding(split));
  expect_close(r, want);
  const auto lowered = f.lower(a, b);
  EXPECT_EQ(count(lowered, "reduce-scatter"), 1) << lowered.as_text();
  EXPECT_EQ(count(lowered, "all-reduce"), 0) << lowered.as_text();
  // Eagerly too, and back to replicated: an all-reduce.
  const Array eager = mv::device_put(mv::matmul(a, b), split);
  EXPECT_EQ(eager.sharding(), mv::Sharding(split));
  expect_close(eager, want);
  expect_close(mv::device_put(mv::matmul(a, b), mv::NamedSharding(mesh, P())), want);
  // Split over both axes while partial over one: a reduce-scatter, then a local slice.
  const mv::NamedSharding both(mesh, P("a", "b"));
  const auto g = mv::jit([&](const Array& x, const Array& y) { return mv::with_sharding_constraint(mv::matmul(x, y), both); });
  expect_close(g(a, b), want);
  EXPECT_EQ(count(g.lower(a, b), "all-reduce"), 0) << g.lower(a, b).as_text();
}

// Three matmuls sharing an input, their weights split by column over 'model' (q, k and v in
// Megatron's layout): the input's gradient is the sum of three partial products, all-reduced once.
TEST(PartialSums, QkvInputGradientIsOneAllReduce) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const int64_t b = 8, d = 12, h = 16;
  const auto vh = random_floats(static_cast<size_t>(b * d), 31);
  const auto vq = random_floats(static_cast<size_t>(d * h), 32), vk = random_floats(static_cast<size_t>(d * h), 33), vv = random_floats(static_cast<size_t>(d * h), 34);
  const auto loss = [](const Array& x, const Array& wq, const Array& wk, const Array& wv) {
    return mv::sum(mv::tanh(mv::matmul(x, wq)) * mv::tanh(mv::matmul(x, wk)) + mv::square(mv::matmul(x, wv)));
  };
  const auto grad_x = [&](const Array& x, const Array& wq, const Array& wk, const Array& wv) {
    return mv::grad([&](const Array& xx) { return loss(xx, wq, wk, wv); })(x);
  };
  const Array want = grad_x(host_array(vh, {b, d}), host_array(vq, {d, h}), host_array(vk, {d, h}), host_array(vv, {d, h}));
  const Array x = put(vh, {b, d}, mesh, P("data"));
  const Array wq = put(vq, {d, h}, mesh, P(mv::None, "model")), wk = put(vk, {d, h}, mesh, P(mv::None, "model")),
              wv = put(vv, {d, h}, mesh, P(mv::None, "model"));
  const auto jg = mv::jit(grad_x);
  expect_close(jg(x, wq, wk, wv), want.to_host<float>());
  expect_close(grad_x(x, wq, wk, wv), want.to_host<float>());  // eagerly
  const auto lowered = jg.lower(x, wq, wk, wv);
  // dx is [8, 12] split over 'data': 4 x 12 floats per device.
  EXPECT_EQ(lines_with(lowered.as_text(), "all-reduce(sum) over ('model',)", "192 B per device"), 1) << lowered.as_text();
}

// FSDP: a weight split over 'fsdp' gathered where it is used; its gradient, partial over the
// batch's axis, goes back to the split layout as a reduce-scatter, and the gather is an all-gather.
TEST(PartialSums, FsdpGradientIsAReduceScatter) {
  const auto mesh = mv::make_mesh({8}, {"fsdp"});
  const int64_t batch = 16, d = 8, n = 6;
  const auto vx = random_floats(static_cast<size_t>(batch * d), 41), vw = random_floats(static_cast<size_t>(d * n), 42);
  const Array x = put(vx, {batch, d}, mesh, P("fsdp")), w = put(vw, {d, n}, mesh, P("fsdp"));
  const mv::NamedSharding whole(mesh, P());
  const auto step = mv::jit([&](const Array& w, const Array& x) {
    return mv::grad([&](const Array& ww) { return mv::sum(mv::matmul(x, mv::with_sharding_constraint(ww, whole))); })(w);
  });
  const Array g = step(w, x);
  EXPECT_EQ(g.sharding(), w.sharding());
  std::vector<float> want(static_cast<size_t>(d * n));
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t r = 0; r < batch; ++r) want[static_cast<size_t>(i * n + j)] += vx[static_cast<size_t>(r * d + i)];
  expect_close(g, want);
  const auto lowered = step.lower(w, x);
  EXPECT_EQ(count(lowered, "reduce-scatter"), 1) << lowered.as_text();
  EXPECT_EQ(count(lowered, "all-reduce"), 0) << lowered.as_text();
  EXPECT_EQ(count(lowered, "all-gather"), 1) << lowered.as_text();
  EXPECT_EQ(count(lowered, "reshard"), 0) << lowered.as_text();
}

// A batch sum of a P('data') activation (a position embedding's gradient): the local sum first,
// then an all-reduce of the small result; nothing gathered.
TEST(PartialSums, BatchSumIsLocalThenAllReduce) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const int64_t batch = 8, seq = 6, d = 4;
  const auto va = random_floats(static_cast<size_t>(batch * seq * d), 51);
  const Array act = put(va, {batch, seq, d}, mesh, P("data"));
  std::vector<float> want(static_cast<size_t>(seq * d));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq * d; ++i) want[static_cast<size_t>(i)] += 2 * va[static_cast<size_t>(b * seq * d + i)];
  const auto f = mv::jit([](const Array& a) { return mv::sum(a * 2.0f, {0}); });
  expect_close(f(act), want);
  const auto lowered = f.lower(act);
  EXPECT_EQ(count(lowered, "all-reduce"), 1) << lowered.as_text();
  EXPECT_EQ(bytes(lowered, "all-reduce"), uint64_t(seq * d * 4)) << lowered.as_text();
  EXPECT_EQ(count(lowered, "all-gather") + count(lowered, "reshard"), 0) << lowered.as_text();
  // Its gradient through unbroadcast: an embedding added to every batch row.
  const Array pos = put(random_floats(static_cast<size_t>(seq * d), 52), {seq, d}, mesh, P());
  const auto g = mv::jit([&](const Array& p, const Array& a) {
    return mv::grad([&](const Array& pp) { return mv::sum(mv::square(a + pp)); })(p);
  });
  const auto glowered = g.lower(pos, act);
  EXPECT_EQ(count(glowered, "all-gather") + count(glowered, "reshard"), 0) << glowered.as_text();
  EXPECT_EQ(count(glowered, "all-reduce"), 1) << glowered.as_text();
}

// Several partial results of one program: packed into one all-reduce (the combiner).
TEST(PartialSums, PartialResultsAreCombined) {
  const auto mesh = mv::make_mesh({8}, {"data"});
  const auto va = random_floats(64 * 5, 61);
  const Array a = put(va, {64, 5}, mesh, P("data"));
  const auto f = mv::jit([](const Array& x) {
    return std::vector<Array>{mv::sum(x, {0}), mv::sum(x * x, {0}), mv::sum(mv::transpose(x), {1}) * 3.0f};
  });
  const auto r = f(a);
  std::vector<float> s(5), s2(5);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      s[static_cast<size_t>(j)] += va[static_cast<size_t>(i * 5 + j)];
      s2[static_cast<size_t>(j)] += va[static_cast<size_t>(i * 5 + j)] * va[static_cast<size_t>(i * 5 + j)];
    }
  std::vector<float> s3(5);
  for (size_t j = 0; j < 5; ++j) s3[j] = 3 * s[j];
  expect_close(r[0], s);
  expect_close(r[1], s2);
  expect_close(r[2], s3);
  const auto lowered = f.lower(a);
  EXPECT_EQ(count(lowered, "all-reduce"), 1) << lowered.as_text();
  EXPECT_EQ(bytes(lowered, "all-reduce"), uint64_t(15 * 4)) << lowered.as_text();
}

// Under grad: a matmul whose contraction is split, its weight's gradient partial over the batch's
// axis, summed before the update reads it; values as on one device.
TEST(PartialSums, GradientsThroughPartialValues) {
  const auto mesh = mv::make_mesh({2, 3}, {"data", "model"}, {}, first_devices(6));
  const int64_t b = 6, d = 9, h = 5;
  const auto vx = random_floats(static_cast<size_t>(b * d), 71), vw = random_floats(static_cast<size_t>(d * h), 72);
  const auto loss = [](const Array& w, const Array& x) { return mv::mean(mv::tanh(mv::matmul(x, w))); };
  const auto [l0, g0] = mv::value_and_grad(loss)(host_array(vw, {d, h}), host_array(vx, {b, d}));
  const Array x = put(vx, {b, d}, mesh, P("data", "model")), w = put(vw, {d, h}, mesh, P("model"));
  const auto [l1, g1] = mv::value_and_grad(loss)(w, x);
  expect_close(l1, l0.to_host<float>());
  expect_close(g1, g0.to_host<float>());
  const auto jitted = mv::jit([&](const Array& w, const Array& x) {
    const auto [l, g] = mv::value_and_grad(loss)(w, x);
    return std::vector<Array>{l, w - g * 0.1f};
  });
  const auto r = jitted(w, x);
  expect_close(r[0], l0.to_host<float>());
  std::vector<float> want = vw;
  const auto gv = g0.to_host<float>();
  for (size_t i = 0; i < want.size(); ++i) want[i] -= gv[i] * 0.1f;
  expect_close(r[1], want);
}

// x + p1 + p2 with p1, p2 partial and x not (the residual gradient beside two partial input
// gradients): x is kept aside and added once the sum is taken, so one all-reduce takes the whole
// sum, as XLA's reassociation gives. Infinite and NaN x, subtraction on either side, int32
// wrapping, meshes of 3 and 2x3 devices, sizes that are not multiples of 4, and the gradient.
TEST(PartialSums, ResidualAddedToPartialSumsIsOneAllReduce) {
  struct Case {
    std::vector<int> sizes;
    std::vector<std::string> names;
    mv::PartitionSpec a_spec, b_spec, x_spec;
    int64_t m, k, n;
  };
  const std::vector<Case> cases = {
      {{2, 4}, {"data", "model"}, P("data", "model"), P("model"), P("data"), 6, 12, 7},
      {{3}, {"x"}, P(mv::None, "x"), P("x"), P(), 5, 9, 3},
      {{2, 3}, {"a", "b"}, P("a", "b"), P("b"), P("a"), 4, 15, 5},
  };
  for (const Case& c : cases) {
    int devices = 1;
    for (int s : c.sizes) devices *= s;
    const auto mesh = mv::make_mesh(c.sizes, c.names, {}, first_devices(devices));
    SCOPED_TRACE(std::to_string(devices) + " devices");
    const auto va = random_floats(static_cast<size_t>(c.m * c.k), 41), vb = random_floats(static_cast<size_t>(c.k * c.n), 42);
    const auto vc = random_floats(static_cast<size_t>(c.m * c.k), 43);
    auto vx = random_floats(static_cast<size_t>(c.m * c.n), 44);
    vx[1] = std::numeric_limits<float>::infinity();
    vx[2] = std::numeric_limits<float>::quiet_NaN();
    const auto ab = host_matmul(va, vb, c.m, c.k, c.n), cb = host_matmul(vc, vb, c.m, c.k, c.n);
    std::vector<float> want(ab.size()), want_sub(ab.size());
    for (size_t i = 0; i < ab.size(); ++i) {
      want[i] = static_cast<float>(double(vx[i]) + ab[i] + 0.5 + cb[i]);
      want_sub[i] = static_cast<float>(double(vx[i]) - ab[i] - cb[i]);
    }
    const Array a = put(va, {c.m, c.k}, mesh, c.a_spec), b = put(vb, {c.k, c.n}, mesh, c.b_spec);
    const Array cc = put(vc, {c.m, c.k}, mesh, c.a_spec), x = put(vx, {c.m, c.n}, mesh, c.x_spec);
    const auto f = mv::jit([](const Array& x, const Array& a, const Array& b, const Array& c) {
      return (x + mv::matmul(a, b) + 0.5f) + mv::matmul(c, b);
    });
    const auto g = mv::jit([](const Array& x, const Array& a, const Array& b, const Array& c) {
      return x - mv::matmul(a, b) - mv::matmul(c, b);
    });
    const auto got = f(x, a, b, cc).to_host<float>(), got_sub = g(x, a, b, cc).to_host<float>();
    EXPECT_TRUE(std::isinf(got[1]) && got[1] > 0 && std::isinf(got_sub[1]));
    EXPECT_TRUE(std::isnan(got[2]) && std::isnan(got_sub[2]));
    for (size_t i = 3; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << i;
      EXPECT_NEAR(got_sub[i], want_sub[i], 1e-4f * (1 + std::abs(want_sub[i]))) << i;
    }
    EXPECT_EQ(count(f.lower(x, a, b, cc), "all-reduce"), 1) << f.lower(x, a, b, cc).as_text();
    EXPECT_EQ(count(g.lower(x, a, b, cc), "all-reduce"), 1) << g.lower(x, a, b, cc).as_text();
    // Eagerly, the same values.
    const auto eager = ((x + mv::matmul(a, b) + 0.5f) + mv::matmul(cc, b)).to_host<float>();
    for (size_t i = 3; i < want.size(); ++i) EXPECT_NEAR(eager[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << i;
  }
  // int32: x + p wraps as numpy does, in any order.
  const auto mesh = mv::make_mesh({4}, {"x"}, {}, first_devices(4));
  const Array ia = mv::device_put(mv::array({2147483647, 1, 2, 3, 5, 6, 7, 9}, mv::Shape{1, 8}), mv::NamedSharding(mesh, P(mv::None, "x")));
  const Array ib = mv::device_put(mv::full({8, 3}, 1), mv::NamedSharding(mesh, P("x")));
  const Array ix = mv::device_put(mv::array({10, -20, 2147483647}, mv::Shape{1, 3}), mv::NamedSharding(mesh, P()));
  const auto fi = mv::jit([](const Array& x, const Array& a, const Array& b) { return x + mv::matmul(a, b); });
  const int32_t s = static_cast<int32_t>(uint32_t{2147483647} + 33u);
  EXPECT_EQ(fi(ix, ia, ib).to_host<int32_t>(),
            (std::vector<int32_t>{static_cast<int32_t>(uint32_t(s) + 10u), static_cast<int32_t>(uint32_t(s) - 20u),
                                  static_cast<int32_t>(uint32_t(s) + 2147483647u)}));
  // A partial value broadcast up to a bigger x is summed first (its own, smaller all-reduce).
  const auto mesh2 = mv::make_mesh({2, 4}, {"data", "model"});
  const Array row = put(random_floats(12, 45), {1, 12}, mesh2, P(mv::None, "model"));
  const Array w = put(random_floats(12 * 5, 46), {12, 5}, mesh2, P("model"));
  const Array big = put(random_floats(16 * 5, 47), {16, 5}, mesh2, P("data"));
  const auto fb = mv::jit([](const Array& x, const Array& r, const Array& w) { return x + mv::matmul(r, w); });
  const auto lb = fb.lower(big, row, w);
  EXPECT_EQ(lines_with(lb.as_text(), "all-reduce(sum) over ('model',)", "20 B per device"), 1) << lb.as_text();
  // The gradient through x + p1 + p2.
  const auto vx = random_floats(6 * 7, 48), va = random_floats(6 * 12, 49), vb = random_floats(12 * 7, 50);
  const auto loss = [](const Array& x, const Array& a, const Array& b) {
    return mv::sum(mv::tanh(x + mv::matmul(a, b) + mv::matmul(mv::tanh(a), b)));
  };
  const Array want_g = mv::grad(loss, 1)(host_array(vx, {6, 7}), host_array(va, {6, 12}), host_array(vb, {12, 7}));
  const Array gx = put(vx, {6, 7}, mesh2, P("data")), ga = put(va, {6, 12}, mesh2, P("data", "model")),
              gb = put(vb, {12, 7}, mesh2, P("model"));
  expect_close(mv::jit([&](const Array& x, const Array& a, const Array& b) { return mv::grad(loss, 1)(x, a, b); })(gx, ga, gb),
               want_g.to_host<float>());
}

// FSDP's gradients, each wanted split along a different dimension (0, 1, 2, a vector), on 8 and
// on 3 devices: their reduce-scatters are deferred to where the jit's results are taken and go as
// one packed reduce-scatter (XLA's reduce-scatter combiner), with each device's pieces and the
// values of the unsharded gradients.
TEST(PartialSums, FsdpGradientsGoAsOnePackedReduceScatter) {
  for (const int devices : {8, 3}) {
    std::vector<int> ids;
    for (int i = 0; i < devices; ++i) ids.push_back(i);
    const mv::Mesh mesh = mv::make_mesh({devices}, {"fsdp"}, {}, ids);
    const int64_t n = devices, batch = 2 * n;
    const std::map<std::string, std::pair<mv::Shape, mv::PartitionSpec>> layout = {
        {"a", {{2 * n, 3}, P("fsdp")}},
        {"b", {{5, n}, P(mv::None, "fsdp")}},
        {"c", {{2, 3, 2 * n}, P(mv::None, mv::None, "fsdp")}},
        {"d", {{n}, P("fsdp")}}};
    const mv::NamedSharding whole(mesh, P());
    const auto loss = [whole](const mv::Params& p, const Array& xa, const Array& xb, const Array& xc) {
      const auto use = [&](const std::string& name) { return mv::with_sharding_constraint(p.at(name), whole); };
      const Array c = mv::reshape(use("c"), {6, -1});
      return mv::sum(mv::tanh(mv::matmul(xa, use("a")))) + mv::sum(mv::tanh(mv::matmul(xb, use("b"))) * use("d")) +
             mv::sum(mv::square(mv::matmul(xc, c)));
    };
    mv::Params host, placed;
    uint32_t seed = 60;
    for (const auto& [name, l] : layout) {
      const auto v = random_floats(static_cast<size_t>(mv::shape_size(l.first)), seed++);
      host.emplace(name, host_array(v, l.first));
      placed.emplace(name, put(v, l.first, mesh, l.second));
    }
    const auto va = random_floats(static_cast<size_t>(batch * 2 * n), 70), vb = random_floats(static_cast<size_t>(batch * 5), 71),
               vc = random_floats(static_cast<size_t>(batch * 6), 72);
    const mv::Params want = mv::grad(loss)(host, host_array(va, {batch, 2 * n}), host_array(vb, {batch, 5}),
                                           host_array(vc, {batch, 6}));
    const Array xa = put(va, {batch, 2 * n}, mesh, P("fsdp")), xb = put(vb, {batch, 5}, mesh, P("fsdp")),
                xc = put(vc, {batch, 6}, mesh, P("fsdp"));
    const auto step = mv::jit(mv::grad(loss));
    for (int call = 0; call < 2; ++call) {  // traced, then replayed
      const mv::Params got = step(placed, xa, xb, xc);
      for (const auto& [name, g] : got) {
        SCOPED_TRACE(name + " on " + std::to_string(devices) + " devices");
        EXPECT_EQ(g.sharding(), placed.at(name).sharding());
        expect_close(g, want.at(name).to_host<float>(), 1e-4f);
      }
    }
    const auto lowered = step.lower(placed, xa, xb, xc);
    EXPECT_EQ(count(lowered, "reduce-scatter"), 1) << lowered.as_text();
    EXPECT_EQ(count(lowered, "all-reduce"), 0) << lowered.as_text();
    EXPECT_EQ(lines_with(lowered.as_text(), "reduce-scatter", "and 3 more values, combined"), 1) << lowered.as_text();
    // Eagerly each gradient is taken where it is read: the same values.
    const mv::Params eager = mv::grad(loss)(placed, xa, xb, xc);
    for (const auto& [name, g] : eager) expect_close(g, want.at(name).to_host<float>(), 1e-4f);
  }
}

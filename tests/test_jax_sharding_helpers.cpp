// Issue 29: jnp.cumprod, jax.debug.inspect_array_sharding, lax.ragged_all_to_all, shard_map's
// axis_names (manual over some mesh axes, automatic over the rest) and
// jax.sharding.auto_axes / explicit_axes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

std::vector<float> host_cumprod(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  float p = 1.0f;
  for (size_t i = 0; i < v.size(); ++i) out[i] = p = p * v[i];
  return out;
}

}  // namespace

// ---- jnp.cumprod

TEST(Cumprod, ValuesWithZerosAndSigns) {
  const std::vector<float> v = {2.f, -1.5f, 0.5f, 3.f, 0.f, 4.f, -2.f, 1.25f, 0.75f};
  const auto got = mv::cumprod(host_array(v), 0).to_host<float>();
  const auto want = host_cumprod(v);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
  EXPECT_EQ(got[4], 0.f);
  EXPECT_EQ(got[8], 0.f);  // exactly zero after a zero, as numpy
}

TEST(Cumprod, AxesIntsBoolsAndSharded) {
  // (2, 4) along axis 1 and along axis -2.
  const auto x = mv::array({1, 2, 3, 4, -1, 0, 5, 6}, mv::Shape{2, 4});
  EXPECT_EQ(mv::cumprod(x, 1).to_host<int32_t>(), (std::vector<int32_t>{1, 2, 6, 24, -1, 0, 0, 0}));
  EXPECT_EQ(mv::cumprod(x, -2).to_host<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, -1, 0, 15, 24}));
  EXPECT_EQ(mv::cumprod(x, 1).dtype(), mv::DType::int32);
  const auto b = mv::cumprod(x > 0, 1);
  EXPECT_EQ(b.dtype(), mv::DType::int32);
  EXPECT_EQ(b.to_host<int32_t>(), (std::vector<int32_t>{1, 1, 1, 1, 0, 0, 0, 0}));
  // Split along the scanned axis: the same values.
  const auto v = random_floats(32, 7, 0.5f, 1.5f);
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto xs = mv::device_put(host_array(v), mv::NamedSharding(mesh, P("x")));
  const auto got = mv::cumprod(xs, 0).to_host<float>();
  const auto ref = mv::cumprod(host_array(v), 0).to_host<float>();
  EXPECT_EQ(got, ref);
  const auto want = host_cumprod(v);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * std::abs(want[i])) << i;
  // Under jit.
  const auto f = mv::jit([](const Array& a) { return mv::cumprod(a, 0); });
  EXPECT_EQ(f(xs).to_host<float>(), got);
}

TEST(Cumprod, GradientExactWithZeros) {
  const std::vector<float> v = {2.f, 0.f, 3.f, -1.f, 0.5f};
  const auto g = mv::grad([](const Array& x) { return mv::sum(mv::cumprod(x, 0)); })(host_array(v)).to_host<float>();
  // d/dx_j sum_i prod_{k<=i} x_k = sum_{i>=j} prod_{k<=i, k!=j} x_k.
  for (size_t j = 0; j < v.size(); ++j) {
    float want = 0.f;
    for (size_t i = j; i < v.size(); ++i) {
      float p = 1.f;
      for (size_t k = 0; k <= i; ++k)
        if (k != j) p *= v[k];
      want += p;
    }
    EXPECT_FLOAT_EQ(g[j], want) << j;
  }
}

TEST(Cumprod, Errors) {
  expect_error([] { mv::cumprod(mv::arange(4.f), 1); }, "cumprod");
  expect_error([] { mv::cumprod(mv::astype(mv::arange(4), mv::DType::uint32), 0); }, "astype");
  expect_runtime_usable();
}

// ---- jax.debug.inspect_array_sharding

TEST(InspectArraySharding, OutsideJitAtOnce) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto x = mv::device_put(mv::arange(32.f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  int calls = 0;
  mv::debug::inspect_array_sharding(x, [&](const mv::Sharding& s) {
    ++calls;
    ASSERT_NE(s.named(), nullptr);
    EXPECT_EQ(s.named()->spec(), P("x", "y"));
    EXPECT_EQ(s, x.sharding());
  });
  EXPECT_EQ(calls, 1);
  mv::inspect_array_sharding(mv::arange(4.f), [&](const mv::Sharding& s) {
    ++calls;
    EXPECT_NE(s.single(), nullptr);
  });
  EXPECT_EQ(calls, 2);
}

TEST(InspectArraySharding, InsideJitAtTraceTime) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  std::vector<mv::Sharding> seen;
  const auto f = mv::jit([&](const Array& a, const Array& b) {
    const Array c = mv::matmul(a, b);  // P('x', None) @ P(None, 'y') -> P('x', 'y')
    mv::inspect_array_sharding(c, [&](const mv::Sharding& s) { seen.push_back(s); });
    return c * 2.f;
  });
  const auto a = mv::device_put(host_array(random_floats(8 * 16, 1), {8, 16}), mv::NamedSharding(mesh, P("x", mv::None)));
  const auto b = mv::device_put(host_array(random_floats(16 * 8, 2), {16, 8}), mv::NamedSharding(mesh, P(mv::None, "y")));
  const auto r1 = f(a, b);
  const auto r2 = f(a, b);  // a replay: nothing is traced, nothing called
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_NE(seen[0].named(), nullptr);
  EXPECT_EQ(seen[0].named()->spec(), P("x", "y"));
  EXPECT_EQ(r1.to_host<float>(), r2.to_host<float>());
}

TEST(InspectArraySharding, InsideShardMap) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  int calls = 0;
  const auto f = mv::shard_map(
      [&](const Array& x) {
        mv::inspect_array_sharding(x, [&](const mv::Sharding& s) {
          ++calls;
          ASSERT_NE(s.named(), nullptr);
          EXPECT_TRUE(s.is_fully_replicated());  // a per-device value
          EXPECT_EQ(s.named()->mesh().axis_type("x"), mv::AxisType::Manual);
        });
        return x + 1;
      },
      mesh, {P("x")}, P("x"));
  f(mv::arange(16.f));
  EXPECT_EQ(calls, 1);
  expect_error([] { mv::inspect_array_sharding(mv::arange(4.f), nullptr); }, "callback is empty");
  expect_error([] { mv::inspect_array_sharding(Array(), [](const mv::Sharding&) {}); }, "empty");
}

// ---- lax.ragged_all_to_all

namespace {

struct RaggedCase {
  int n = 0, spd = 0;  // devices, slices per destination (K = n * spd)
  int64_t rows = 0, out_rows = 0, width = 3;
  std::vector<float> operand, output;  // global: device d's piece at rows d * rows ...
  std::vector<int32_t> in_off, send, out_off, recv;  // global: device d's K at d * K
  std::vector<float> want;
};

// Random uneven sizes (zeros included), with padding between the slices sent, each receiver
// packing what it gets in source order after a gap; the expected result by simulation.
RaggedCase make_case(int n, int spd, uint32_t seed) {
  std::mt19937 rng(seed);
  RaggedCase c;
  c.n = n;
  c.spd = spd;
  const int k = n * spd;
  const int max_size = 3;
  std::vector<std::vector<int>> size(n, std::vector<int>(k));
  for (auto& row : size)
    for (auto& s : row) s = static_cast<int>(rng() % (max_size + 1));  // 0..3
  size[0][0] = 0;  // certainly some zeros
  c.rows = k * (max_size + 1);
  c.out_rows = k * max_size + 2;
  c.operand.resize(static_cast<size_t>(n * c.rows * c.width));
  for (size_t i = 0; i < c.operand.size(); ++i) c.operand[i] = static_cast<float>(i) + 0.5f;
  c.output.assign(static_cast<size_t>(n * c.out_rows * c.width), -1.f);
  c.in_off.resize(static_cast<size_t>(n * k));
  c.send.resize(static_cast<size_t>(n * k));
  c.out_off.resize(static_cast<size_t>(n * k));
  c.recv.resize(static_cast<size_t>(n * k));
  for (int s = 0; s < n; ++s) {
    int pos = 0;
    for (int i = 0; i < k; ++i) {
      pos += static_cast<int>(rng() % 2);  // padding
      c.in_off[s * k + i] = pos;
      c.send[s * k + i] = size[s][i];
      pos += size[s][i];
    }
  }
  // Receiver d: slot j = src * spd + q holds what src sent as its slice d * spd + q.
  for (int d = 0; d < n; ++d) {
    int pos = 1;  // a gap first
    for (int src = 0; src < n; ++src)
      for (int q = 0; q < spd; ++q) {
        const int i = d * spd + q;
        c.recv[d * k + src * spd + q] = size[src][i];
        c.out_off[src * k + i] = pos;
        pos += size[src][i];
      }
  }
  c.want = c.output;
  for (int src = 0; src < n; ++src)
    for (int i = 0; i < k; ++i) {
      const int d = i / spd;
      for (int r = 0; r < c.send[src * k + i]; ++r)
        for (int w = 0; w < c.width; ++w)
          c.want[static_cast<size_t>((d * c.out_rows + c.out_off[src * k + i] + r) * c.width + w)] =
              c.operand[static_cast<size_t>((src * c.rows + c.in_off[src * k + i] + r) * c.width + w)];
    }
  return c;
}

mv::Mesh first_devices(int n) {
  std::vector<int> devices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) devices[static_cast<size_t>(i)] = i;
  return mv::make_mesh({n}, {"x"}, {}, devices);
}

std::vector<float> run_ragged(const RaggedCase& c, bool jitted) {
  const auto mesh = first_devices(c.n);
  const mv::NamedSharding split(mesh, P("x"));
  const int64_t k = c.n * c.spd;
  const auto put_f = [&](const std::vector<float>& v, int64_t rows) {
    return mv::device_put(host_array(v, {c.n * rows, c.width}), split);
  };
  const auto put_i = [&](const std::vector<int32_t>& v) {
    return mv::device_put(mv::array(std::span<const int32_t>(v), mv::Shape{c.n * k}), split);
  };
  const auto body = mv::shard_map(
      [](const Array& op, const Array& out, const Array& io, const Array& ss, const Array& oo, const Array& rs) {
        return mv::lax::ragged_all_to_all(op, out, io, ss, oo, rs, "x");
      },
      mesh, {P("x"), P("x"), P("x"), P("x"), P("x"), P("x")}, P("x"));
  const Array args[] = {put_f(c.operand, c.rows), put_f(c.output, c.out_rows), put_i(c.in_off),
                        put_i(c.send),            put_i(c.out_off),           put_i(c.recv)};
  if (!jitted) return body(args[0], args[1], args[2], args[3], args[4], args[5]).to_host<float>();
  const auto f = mv::jit([&](const Array& a, const Array& b, const Array& c2, const Array& d, const Array& e, const Array& g) {
    return body(a, b, c2, d, e, g);
  });
  return f(args[0], args[1], args[2], args[3], args[4], args[5]).to_host<float>();
}

}  // namespace

TEST(RaggedAllToAll, JaxDocExample) {
  // The example of jax.lax.ragged_all_to_all's documentation, over an axis of size 2.
  const auto mesh = first_devices(2);
  const mv::NamedSharding split(mesh, P("x"));
  const auto i32 = [&](std::vector<int32_t> v) {
    return mv::device_put(mv::array(std::span<const int32_t>(v), mv::Shape{static_cast<int64_t>(v.size())}), split);
  };
  const auto operand = mv::device_put(mv::array({1.f, 2.f, 2.f, 3.f, 4.f, 0.f}, mv::Shape{6}), split);
  const auto output = mv::device_put(mv::zeros({8}), split);
  const auto f = mv::shard_map(
      [](const Array& op, const Array& out, const Array& io, const Array& ss, const Array& oo, const Array& rs) {
        return mv::ragged_all_to_all(op, out, io, ss, oo, rs, "x");
      },
      mesh, {P("x"), P("x"), P("x"), P("x"), P("x"), P("x")}, P("x"));
  const auto r = f(operand, output, i32({0, 1, 0, 1}), i32({1, 2, 1, 1}), i32({0, 0, 1, 2}), i32({1, 1, 2, 1}));
  EXPECT_EQ(r.to_host<float>(), (std::vector<float>{1, 3, 0, 0, 2, 2, 4, 0}));
}

TEST(RaggedAllToAll, UnevenSizesAgainstSimulation) {
  for (const int n : {2, 3, 4, 8})
    for (const int spd : {1, 2}) {
      const RaggedCase c = make_case(n, spd, static_cast<uint32_t>(100 * n + spd));
      EXPECT_EQ(run_ragged(c, false), c.want) << "n=" << n << " slices per device=" << spd;
    }
}

TEST(RaggedAllToAll, UnderJitReplaysNewSizes) {
  // One trace, then a replay with other sizes and offsets (device values, not constants).
  const RaggedCase a = make_case(4, 1, 7), b = make_case(4, 1, 8);
  ASSERT_EQ(a.rows, b.rows);
  const auto mesh = first_devices(4);
  const mv::NamedSharding split(mesh, P("x"));
  const auto body = mv::shard_map(
      [](const Array& op, const Array& out, const Array& io, const Array& ss, const Array& oo, const Array& rs) {
        return mv::lax::ragged_all_to_all(op, out, io, ss, oo, rs, "x");
      },
      mesh, {P("x"), P("x"), P("x"), P("x"), P("x"), P("x")}, P("x"));
  const auto f = mv::jit([&](const Array& a1, const Array& a2, const Array& a3, const Array& a4, const Array& a5, const Array& a6) {
    return body(a1, a2, a3, a4, a5, a6);
  });
  for (const RaggedCase* c : {&a, &b}) {
    const int64_t k = c->n * c->spd;
    const auto pf = [&](const std::vector<float>& v, int64_t rows) { return mv::device_put(host_array(v, {c->n * rows, c->width}), split); };
    const auto pi = [&](const std::vector<int32_t>& v) {
      return mv::device_put(mv::array(std::span<const int32_t>(v), mv::Shape{c->n * k}), split);
    };
    EXPECT_EQ(f(pf(c->operand, c->rows), pf(c->output, c->out_rows), pi(c->in_off), pi(c->send), pi(c->out_off), pi(c->recv))
                  .to_host<float>(),
              c->want);
  }
  EXPECT_EQ(f.traces(), 1u);
  EXPECT_EQ(run_ragged(make_case(3, 2, 11), true), make_case(3, 2, 11).want);
}

TEST(RaggedAllToAll, GradientFlowsBackToTheSender) {
  // d/d operand of sum(result * w): each row sent gets w at the row it lands on; rows not sent
  // get zero. Checked against the transpose computed on the host.
  const RaggedCase c = make_case(2, 1, 5);
  const auto mesh = first_devices(2);
  const mv::NamedSharding split(mesh, P("x"));
  const int64_t k = 2;
  const auto pi = [&](const std::vector<int32_t>& v) {
    return mv::device_put(mv::array(std::span<const int32_t>(v), mv::Shape{2 * k}), split);
  };
  const auto io = pi(c.in_off), ss = pi(c.send), oo = pi(c.out_off), rs = pi(c.recv);
  const auto out = mv::device_put(host_array(c.output, {2 * c.out_rows, c.width}), split);
  std::vector<float> w(c.output.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) + 1.f;
  const auto wa = mv::device_put(host_array(w, {2 * c.out_rows, c.width}), split);
  const auto body = mv::shard_map(
      [](const Array& op, const Array& o, const Array& a, const Array& b, const Array& d, const Array& e) {
        return mv::ragged_all_to_all(op, o, a, b, d, e, "x");
      },
      mesh, {P("x"), P("x"), P("x"), P("x"), P("x"), P("x")}, P("x"));
  const auto g = mv::grad([&](const Array& op) { return mv::sum(body(op, out, io, ss, oo, rs) * wa); })(
                     mv::device_put(host_array(c.operand, {2 * c.rows, c.width}), split))
                     .to_host<float>();
  std::vector<float> want(c.operand.size(), 0.f);
  for (int src = 0; src < 2; ++src)
    for (int i = 0; i < k; ++i)
      for (int r = 0; r < c.send[src * k + i]; ++r)
        for (int q = 0; q < c.width; ++q)
          want[static_cast<size_t>((src * c.rows + c.in_off[src * k + i] + r) * c.width + q)] +=
              w[static_cast<size_t>((i * c.out_rows + c.out_off[src * k + i] + r) * c.width + q)];
  EXPECT_EQ(g, want);
}

TEST(RaggedAllToAll, Errors) {
  const auto mesh = first_devices(2);
  const auto i4 = mv::device_put(mv::zeros({4}, mv::DType::int32), mv::NamedSharding(mesh, P("x")));
  const auto f4 = mv::device_put(mv::zeros({4}), mv::NamedSharding(mesh, P("x")));
  const auto data = mv::device_put(mv::zeros({8, 2}), mv::NamedSharding(mesh, P("x")));
  expect_error([&] { mv::ragged_all_to_all(mv::zeros({4}), mv::zeros({4}), mv::zeros({2}, mv::DType::int32), mv::zeros({2}, mv::DType::int32), mv::zeros({2}, mv::DType::int32), mv::zeros({2}, mv::DType::int32), "x"); },
               "not bound");
  const auto call = [&](const Array& offsets, const Array& operand) {
    return mv::shard_map(
        [](const Array& op, const Array& o) { return mv::ragged_all_to_all(op, op, o, o, o, o, "x"); }, mesh,
        {P("x"), P("x")}, P("x"))(operand, offsets);
  };
  expect_error([&] { call(f4, data); }, "int32");
  expect_error([&] { call(mv::device_put(mv::zeros({6}, mv::DType::int32), mv::NamedSharding(mesh, P("x"))), data); },
               "multiple of 2");
  EXPECT_EQ(call(i4, mv::device_put(mv::arange(8.f), mv::NamedSharding(mesh, P("x")))).to_host<float>(),
            mv::arange(8.f).to_host<float>());  // nothing sent: output unchanged
  expect_runtime_usable();
}

// ---- shard_map with axis_names: manual over 'x', automatic over 'y'

namespace {

struct PartialFixture {
  mv::Mesh mesh = mv::make_mesh({2, 4}, {"x", "y"});
  std::vector<float> vx = random_floats(8 * 16, 21), vw = random_floats(16 * 32, 22);
  Array x_host = host_array(vx, {8, 16}), w_host = host_array(vw, {16, 32});
};

}  // namespace

TEST(ShardMapAxisNames, ManualOverDataAutomaticOverModel) {
  PartialFixture t;
  // x split over data ('x'); w split over model ('y') along its columns.
  const auto x = mv::device_put(t.x_host, mv::NamedSharding(t.mesh, P("x")));
  const auto w = mv::device_put(t.w_host, mv::NamedSharding(t.mesh, P(mv::None, "y")));
  mv::Shape x_local, w_local;
  std::optional<mv::Sharding> w_inside, h_inside;
  const auto f = mv::shard_map(
      [&](const Array& xl, const Array& wl) {
        x_local = xl.shape();
        w_local = wl.shape();
        w_inside = wl.sharding();
        const Array h = mv::matmul(xl, wl);  // (4, 32), split over 'y' along its columns
        mv::inspect_array_sharding(h, [&](const mv::Sharding& s) { h_inside = s; });
        return mv::tanh(h);
      },
      t.mesh, {P("x"), P()}, P("x"), {"x"});
  const Array y = f(x, w);
  EXPECT_EQ(x_local, (mv::Shape{4, 16}));  // a piece along 'x' ...
  EXPECT_EQ(w_local, (mv::Shape{16, 32}));  // ... global along 'y'
  ASSERT_TRUE(w_inside && h_inside);
  EXPECT_EQ(w_inside->named()->spec(), P(mv::None, "y"));
  EXPECT_EQ(w_inside->named()->mesh().axis_type("x"), mv::AxisType::Manual);
  EXPECT_EQ(w_inside->named()->mesh().axis_type("y"), mv::AxisType::Auto);
  EXPECT_EQ(h_inside->named()->spec(), P(mv::None, "y"));
  // The result keeps the body's layout along 'y' under the out_spec's 'x'.
  EXPECT_EQ(y.shape(), (mv::Shape{8, 32}));
  EXPECT_EQ(y.sharding().named()->spec(), P("x", "y"));
  // Against the fully automatic program and the fully manual one.
  const auto automatic = mv::jit([](const Array& a, const Array& b) { return mv::tanh(mv::matmul(a, b)); })(x, w);
  const auto manual = mv::shard_map([](const Array& a, const Array& b) { return mv::tanh(mv::matmul(a, b)); }, t.mesh,
                                    {P("x"), P(mv::None, "y")}, P("x", "y"))(x, w);
  const auto got = y.to_host<float>();
  EXPECT_EQ(got, manual.to_host<float>());
  const auto want = automatic.to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << i;
}

TEST(ShardMapAxisNames, ContractionAndReshardStayWithinManualGroups) {
  PartialFixture t;
  // x split over 'x' (rows) and 'y' (columns); w split over 'y' along the contracted rows: the
  // body's matmul contracts over 'y' (an all-reduce among the devices of one 'x' coordinate).
  const auto x = mv::device_put(t.x_host, mv::NamedSharding(t.mesh, P("x", "y")));
  const auto w = mv::device_put(t.w_host, mv::NamedSharding(t.mesh, P("y", mv::None)));
  const auto f = mv::shard_map(
      [&](const Array& xl, const Array& wl) {
        EXPECT_EQ(xl.sharding().named()->spec(), P(mv::None, "y"));
        Array h = mv::matmul(xl, wl);                         // (4, 32), all-reduced over 'y'
        h = mv::with_sharding_constraint(h, P("y", mv::None));  // rows over 'y': data moves
        const Array s = mv::psum(mv::sum(h, 1, true), "x");    // a manual collective
        return h + s;  // (4, 32) + (4, 1)
      },
      t.mesh, {P("x"), P()}, P("x"), {"x"});
  const Array y = f(x, w);
  EXPECT_EQ(y.sharding().named()->spec(), P({"x", "y"}));  // rows over 'x', then 'y' within
  const auto manual = mv::shard_map(
      [](const Array& xl, const Array& wl) {
        const Array h = mv::matmul(xl, wl);
        return h + mv::psum(mv::sum(h, 1, true), "x");
      },
      t.mesh, {P("x"), P()}, P("x"))(mv::device_put(t.x_host, mv::NamedSharding(t.mesh, P("x"))), t.w_host);
  const auto got = y.to_host<float>(), want = manual.to_host<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5f) << i;
}

TEST(ShardMapAxisNames, GatherAlongAutomaticAxisReadsOwnManualGroup) {
  // Every device gathers its 'x' group's row block whole from the pieces split over 'y': the
  // devices of the other 'x' coordinate hold the same boxes of different data and must not be read.
  PartialFixture t;
  const auto x = mv::device_put(t.x_host, mv::NamedSharding(t.mesh, P("x", "y")));
  const auto f = mv::shard_map(
      [](const Array& xl) {
        EXPECT_EQ(xl.sharding().named()->spec(), P(mv::None, "y"));
        const Array whole = mv::with_sharding_constraint(xl, P());
        return mv::with_sharding_constraint(whole * 1.f, P("y"));
      },
      t.mesh, {P("x")}, P("x"), {"x"});
  EXPECT_EQ(f(x).to_host<float>(), t.vx);
}

TEST(ShardMapAxisNames, GradientMatchesTheAutomaticOne) {
  PartialFixture t;
  const auto x = mv::device_put(t.x_host, mv::NamedSharding(t.mesh, P("x")));
  const auto w = mv::device_put(t.w_host, mv::NamedSharding(t.mesh, P(mv::None, "y")));
  const auto body = mv::shard_map([](const Array& xl, const Array& wl) { return mv::tanh(mv::matmul(xl, wl)); }, t.mesh,
                                  {P("x"), P()}, P("x"), {"x"});
  const auto g_partial = mv::grad([&](const Array& wv) { return mv::sum(mv::square(body(x, wv))); })(w).to_host<float>();
  const auto g_auto =
      mv::grad([&](const Array& wv) { return mv::sum(mv::square(mv::tanh(mv::matmul(x, wv)))); })(w).to_host<float>();
  ASSERT_EQ(g_partial.size(), g_auto.size());
  for (size_t i = 0; i < g_auto.size(); ++i) EXPECT_NEAR(g_partial[i], g_auto[i], 1e-4f) << i;
  // Under jit, the same.
  const auto jitted = mv::jit([&](const Array& a, const Array& b) { return body(a, b); });
  const auto r = jitted(x, w).to_host<float>();
  EXPECT_EQ(r, body(x, w).to_host<float>());
}

TEST(ShardMapAxisNames, Errors) {
  PartialFixture t;
  const auto x = mv::device_put(t.x_host, mv::NamedSharding(t.mesh, P("x")));
  // A collective over the automatic axis.
  expect_error([&] { mv::shard_map([](const Array& a) { return mv::psum(a, "y"); }, t.mesh, {P("x")}, P("x"), {"x"})(x); },
               "axis 'y' is automatic");
  expect_error([&] { mv::shard_map([](const Array& a) { return a * mv::axis_index("y"); }, t.mesh, {P("x")}, P("x"), {"x"})(x); },
               "axis 'y' is automatic");
  // Specs naming an automatic axis.
  expect_error([&] { mv::shard_map([](const Array& a) { return a; }, t.mesh, {P("x", "y")}, P("x"), {"x"})(x); },
               "names mesh axis 'y', which is automatic");
  expect_error([&] { mv::shard_map([](const Array& a) { return a; }, t.mesh, {P("x")}, P("x", "y"), {"x"})(x); },
               "out_specs[0]");
  // A sharding inside the body naming the manual axis.
  expect_error([&] { mv::shard_map([](const Array& a) { return mv::with_sharding_constraint(a, P("x")); }, t.mesh, {P("x")}, P("x"), {"x"})(x); },
               "manual in this shard_map body");
  expect_error([&] { mv::shard_map([](const Array& a) { return a; }, t.mesh, {P("x")}, P("x"), {"z"})(x); }, "'z'");
  // The replication claim is checked over the manual axes.
  expect_error([&] { mv::shard_map([](const Array& a) { return a; }, t.mesh, {P("x")}, P(), {"x"})(x); },
               "varies along 'x'");
  expect_runtime_usable();
}

// ---- auto_axes / explicit_axes

TEST(AutoAxes, AutomaticInsideExplicitOutside) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const mv::use_mesh guard(mesh);
  const auto a = mv::device_put(host_array(random_floats(8 * 16, 31), {8, 16}), P(mv::None, "Y"));
  const auto b = mv::device_put(host_array(random_floats(16 * 4, 32), {16, 4}), P("Y", mv::None));
  // In explicit mode a contraction over 'Y' on both sides needs an out_sharding ...
  expect_error([&] { mv::matmul(a, b); }, "out_sharding");
  // ... and in an automatic region it does not: jit's propagation decides, and the result gets
  // the out_sharding in its type.
  std::string inside_type, mesh_types;
  const auto f = mv::auto_axes(
      [&](const Array& p, const Array& q) {
        inside_type = mv::type_of(p);
        mesh_types = mv::get_abstract_mesh()->to_string();
        return mv::matmul(p, q);
      },
      P("X", mv::None));
  const Array c = f(a, b);
  EXPECT_EQ(inside_type, "float32[8,16]");
  EXPECT_NE(mesh_types.find("Auto, Auto"), std::string::npos) << mesh_types;
  EXPECT_EQ(mv::type_of(c), "float32[8@X,4]");
  EXPECT_EQ(c.sharding().named()->mesh().axis_type("X"), mv::AxisType::Explicit);
  const auto want = mv::matmul(a, b, mv::Sharding(mv::NamedSharding(mesh, P("X", mv::None)))).to_host<float>();
  const auto got = c.to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << i;
  // Only 'Y' automatic: 'X' stays in the types inside.
  const auto g = mv::auto_axes([&](const Array& p) { inside_type = mv::type_of(p); return p * 2.f; }, P("X"), {"Y"});
  const auto ab = mv::device_put(host_array(random_floats(8 * 16, 33), {8, 16}), P("X", "Y"));
  EXPECT_EQ(mv::type_of(g(ab)), "float32[8@X,16]");
  EXPECT_EQ(inside_type, "float32[8@X,16]");
  // Under jit.
  const auto jf = mv::jit([&](const Array& p, const Array& q) { return f(p, q); });
  EXPECT_EQ(jf(a, b).to_host<float>(), got);
}

TEST(ExplicitAxes, ExplicitInsideAutomaticOutside) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const mv::use_mesh guard(mesh);
  const auto x = mv::device_put(host_array(random_floats(8 * 4, 41), {8, 4}), P());
  std::string inside;
  const auto f = mv::explicit_axes(
      [&](const Array& p) {
        inside = mv::type_of(p);
        return mv::sin(p) + 1.f;
      },
      P("X", mv::None));
  const Array y = f(x);
  EXPECT_EQ(inside, "float32[8@X,4]");
  EXPECT_EQ(mv::type_of(y), "float32[8,4]");  // automatic again
  EXPECT_EQ(y.sharding().named()->spec(), P("X"));
  EXPECT_EQ(y.sharding().named()->mesh().axis_type("X"), mv::AxisType::Auto);
  EXPECT_EQ(y.to_host<float>(), (mv::sin(x) + 1.f).to_host<float>());
  // Explicit mode's rules apply inside.
  const auto b = mv::device_put(host_array(random_floats(4 * 4, 42), {4, 4}), P());
  expect_error([&] {
    mv::explicit_axes([](const Array& p, const Array& q) { return mv::matmul(p, q); }, {P(mv::None, "X"), P("X", mv::None)})(x, b);
  }, "out_sharding");
}

TEST(AutoAxes, Errors) {
  expect_error([] { mv::auto_axes([](const Array& p) { return p; }, P())(mv::arange(4.f)); }, "no mesh");
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const mv::use_mesh guard(mesh);
  expect_error([] { mv::auto_axes([](const Array& p) { return p; }, P(), {"Z"})(mv::arange(4.f)); }, "'Z'");
  expect_error([] { mv::explicit_axes([](const Array& p, const Array& q) { return p + q; }, std::vector<mv::ShardingArg>{P(), P(), P()})(mv::arange(4.f), mv::arange(4.f)); },
               "3 in_sharding for 2 arguments");
  expect_runtime_usable();
}

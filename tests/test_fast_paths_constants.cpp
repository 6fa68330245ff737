// An outside tester's attempts to break jit constants made only when traced (trace_only:
// runtime/submission.cpp, exec/sharded_value.cpp): data-dependent writes, loop carries and
// bodies, constants fed back, retraced, nested, sharded; every replay against plain host loops.
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

TEST(FastPathsAdversarial, ConstantsWrittenByDataDependentUpdatesAcrossReplays) {
  // dynamic_update_slice into zeros with a start that changes between replays: every replay must
  // start from zeros (a write into the constant's own buffer would leave the earlier row behind).
  const auto dus = mv::jit([](const Array& row, const Array& i) {
    return mv::dynamic_update_slice(mv::zeros({6, 4}), mv::reshape(row, {1, 4}), {i, mv::scalar(0)});
  });
  const auto aset = mv::jit([](const Array& ids, const Array& v) { return mv::at_set(mv::zeros({7, 4}), ids, v); });
  const auto arange_set = mv::jit([](const Array& ids) { return mv::at_set(mv::arange(8.0f), ids, 100.f); });
  for (int call = 0; call < 4; ++call) {
    const int32_t at = (call * 5 + 1) % 6;
    const std::vector<float> row = {float(call + 1), float(call + 2), float(call + 3), float(call + 4)};
    const Array got = dus(host_array(row), mv::scalar(at));
    std::vector<float> want(24, 0.f);
    for (int k = 0; k < 4; ++k) want[at * 4 + k] = row[k];
    expect_exact<float>(mv::reshape(got, {24}), want, "dynamic_update_slice call " + std::to_string(call));

    const std::vector<int32_t> ids = {call % 7, (call + 3) % 7};
    const Array got2 = aset(mv::array(std::span<const int32_t>(ids), Shape{2}), mv::scalar(float(call + 10)));
    std::vector<float> want2(28, 0.f);
    for (int32_t id : ids)
      for (int k = 0; k < 4; ++k) want2[id * 4 + k] = float(call + 10);
    expect_exact<float>(mv::reshape(got2, {28}), want2, "at_set call " + std::to_string(call));

    const std::vector<int32_t> one = {call};
    std::vector<float> want3(8);
    for (int k = 0; k < 8; ++k) want3[k] = k == call ? 100.f : float(k);
    expect_exact<float>(arange_set(mv::array(std::span<const int32_t>(one), Shape{1})), want3,
                        "at_set arange call " + std::to_string(call));
  }
}

TEST(FastPathsAdversarial, ConstantsAsLoopCarriesAndXsAcrossReplays) {
  // fori_loop / scan / while_loop with constant init carries: a loop that writes its carry in
  // place into the constant's buffer would start the next replay from the last result.
  const auto fori = mv::jit([](const Array& x) {
    return mv::lax::fori_loop(0, 3, [&x](const Array&, const Array& c) { return c + x; }, mv::zeros({5}));
  });
  const auto scanned = mv::jit([](const Array& x) {
    auto [c, ys] = mv::lax::scan([](const Array& c, const Array& t) {
      const Array n = c * 2.f + t;
      return std::make_pair(n, n);
    }, mv::ones({4}) * x, mv::reshape(mv::arange(12.0f), {3, 4}));
    return std::vector<Array>{c, ys};
  });
  const auto inner_const = mv::jit([](const Array& x) {
    auto [c, ys] = mv::lax::scan([](const Array& c, std::nullopt_t) {
      const Array n = c + mv::full({4}, 2.0f) + mv::astype(mv::arange(4), mv::DType::float32);
      return std::make_pair(n, std::nullopt);
    }, x, std::nullopt, 3);
    return c;
  });
  for (int call = 0; call < 4; ++call) {
    const float s = float(call + 1);
    std::vector<float> vx = {s, -s, 2 * s, 0.5f, 3.f};
    std::vector<float> want(5);
    for (int k = 0; k < 5; ++k) want[k] = 3 * vx[k];
    expect_exact<float>(fori(host_array(vx)), want, "fori call " + std::to_string(call));

    const auto out = scanned(mv::scalar(s));
    std::vector<float> c(4, s), ys;
    for (int t = 0; t < 3; ++t) {
      for (int k = 0; k < 4; ++k) c[k] = c[k] * 2.f + float(t * 4 + k);
      ys.insert(ys.end(), c.begin(), c.end());
    }
    expect_exact<float>(out[0], c, "scan carry call " + std::to_string(call));
    expect_exact<float>(mv::reshape(out[1], {12}), ys, "scan ys call " + std::to_string(call));

    std::vector<float> x4 = {s, 0.f, -s, 1.f}, w4(4);
    for (int k = 0; k < 4; ++k) w4[k] = x4[k] + 3.f * (2.f + float(k));
    expect_exact<float>(inner_const(host_array(x4)), w4, "constants in body call " + std::to_string(call));
  }
}

TEST(FastPathsAdversarial, ConstantsReturnedFedBackRetracedAndNested) {
  // A jit returning a constant the caller feeds back in as the next input.
  const auto step = mv::jit([](const Array& x) { return std::vector<Array>{mv::zeros({4}), x + mv::ones({4})}; });
  Array z = mv::ones({4}) * 5.f;
  for (int call = 0; call < 4; ++call) {
    const auto out = step(z);
    expect_exact<float>(out[0], std::vector<float>(4, 0.f), "zeros out call " + std::to_string(call));
    const float expect_x = call == 0 ? 6.f : 1.f;
    expect_exact<float>(out[1], std::vector<float>(4, expect_x), "x+1 call " + std::to_string(call));
    z = out[0];  // the returned constant comes back as the input
    // The earlier output stays untouched by the later replays.
    expect_exact<float>(out[0], std::vector<float>(4, 0.f), "zeros out kept call " + std::to_string(call));
  }
  // Returned constants held across replays, and the caller computing from them eagerly.
  const auto mk = mv::jit([](const Array& x) { return std::vector<Array>{mv::eye(4) * 1.f, mv::tril(mv::ones({4, 4})) + x}; });
  const auto a = mk(mv::scalar(1.f));
  const auto b = mk(mv::scalar(2.f));
  const Array a_mod = mv::at_set(a[0], mv::array({1}, Shape{1}), 9.f);
  std::vector<float> eye(16, 0.f), tr1(16), tr2(16), eye_mod(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      eye[i * 4 + j] = i == j ? 1.f : 0.f;
      tr1[i * 4 + j] = (j <= i ? 1.f : 0.f) + 1.f;
      tr2[i * 4 + j] = (j <= i ? 1.f : 0.f) + 2.f;
      eye_mod[i * 4 + j] = i == 1 ? 9.f : eye[i * 4 + j];
    }
  expect_exact<float>(mv::reshape(a_mod, {16}), eye_mod, "modified eye");
  expect_exact<float>(mv::reshape(a[0], {16}), eye, "first eye");
  expect_exact<float>(mv::reshape(b[0], {16}), eye, "second eye");
  expect_exact<float>(mv::reshape(a[1], {16}), tr1, "first tril");
  expect_exact<float>(mv::reshape(b[1], {16}), tr2, "second tril");
  expect_exact<float>(mv::reshape(mk(mv::scalar(1.f))[0], {16}), eye, "third eye after modifying");
  // Retrace: the same jit at different shapes, then back to the first shape.
  const auto shaped = mv::jit([](const Array& x) { return x + mv::astype(mv::arange(static_cast<int32_t>(x.shape()[0])), mv::DType::float32); });
  for (const int64_t n : {3, 8, 3, 5, 8}) {
    const auto v = small_ints(n, static_cast<uint32_t>(n * 7 + 1));
    std::vector<float> want(n);
    for (int64_t k = 0; k < n; ++k) want[k] = v[k] + float(k);
    expect_exact<float>(shaped(host_array(v)), want, "retrace n=" + std::to_string(n));
  }
  // Nested jit: an inner jit making constants, called from an outer jit, replayed.
  const auto inner = mv::jit([](const Array& x) { return x * mv::full({4}, 3.0f) + mv::arange(4.0f); });
  const auto outer = mv::jit([&inner](const Array& x) { return inner(x) + inner(x * 2.f) + mv::zeros({4}); });
  for (int call = 0; call < 3; ++call) {
    const std::vector<float> v = {float(call), 1.f, -2.f, 0.5f};
    std::vector<float> want(4);
    for (int k = 0; k < 4; ++k) want[k] = (v[k] * 3.f + k) + (v[k] * 2.f * 3.f + k);
    expect_exact<float>(outer(host_array(v)), want, "nested call " + std::to_string(call));
  }
}

TEST(FastPathsAdversarial, ConstantsUnderShardMapAndSharded) {
  for (const int n : {2, 4, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const auto sm = mv::shard_map([](const Array& x) { return x + mv::arange(4.0f) + mv::ones({4}); }, mesh,
                                  {P("x")}, P("x"));
    const auto j = mv::jit([sm](const Array& x) { return sm(x); });
    for (int call = 0; call < 3; ++call) {
      const auto v = small_ints(4 * n, 50 + call);
      std::vector<float> want(4 * n);
      for (int k = 0; k < 4 * n; ++k) want[k] = v[k] + float(k % 4) + 1.f;
      expect_exact<float>(j(placed_array(v, {4 * n}, mv::NamedSharding(mesh, P("x")))), want,
                          "shard_map n=" + std::to_string(n) + " call " + std::to_string(call));
    }
    // A sharded zeros updated with data-dependent indices under jit.
    const auto sz = mv::jit([mesh, n](const Array& ids) {
      return mv::at_set(mv::zeros({2 * n, 4}, mv::DType::float32, mv::NamedSharding(mesh, P("x"))), ids, 1.f);
    });
    for (int call = 0; call < 3; ++call) {
      const std::vector<int32_t> ids = {call % (2 * n)};
      std::vector<float> want(8 * n, 0.f);
      for (int k = 0; k < 4; ++k) want[ids[0] * 4 + k] = 1.f;
      expect_exact<float>(mv::reshape(sz(mv::array(std::span<const int32_t>(ids), Shape{1})), {8 * n}), want,
                          "sharded zeros n=" + std::to_string(n) + " call " + std::to_string(call));
    }
  }
}

// Constants inside loop bodies written at the loop's (per-iteration) index: the body is replayed
// once per iteration, so a write into the body's constant would leak into the next iteration.
TEST(FastPathsAdversarial, ConstantsInLoopBodiesWrittenAtTheIterationIndex) {
  const int64_t n = 6;
  const auto run = [n](const Array& x) {
    // Each iteration: a fresh zeros(n) with x's i-th value at i, added to the carry.
    return mv::lax::fori_loop(0, n, [&x, n](const Array& i, const Array& c) {
      const Array one = mv::dynamic_slice(x, {i}, {1});
      return c + mv::dynamic_update_slice(mv::zeros({n}), one, {i}) * (mv::astype(i, mv::DType::float32) + 1.f);
    }, mv::zeros({n}));
  };
  const auto dus_carry = [n](const Array& x) {
    // The carry starts as a constant and is updated in place-able fashion at i.
    return mv::lax::fori_loop(0, n, [&x](const Array& i, const Array& c) {
      return mv::dynamic_update_slice(c, mv::dynamic_slice(x, {i}, {1}) * 2.f, {i});
    }, mv::full({n}, -1.0f));
  };
  const auto j = mv::jit(run);
  const auto jd = mv::jit(dus_carry);
  for (int call = 0; call < 3; ++call) {
    const auto v = small_ints(n, 100 + call);
    std::vector<float> want(n), want_d(n);
    for (int64_t k = 0; k < n; ++k) {
      want[k] = v[k] * float(k + 1);
      want_d[k] = v[k] * 2.f;
    }
    const std::string c = " call " + std::to_string(call);
    expect_exact<float>(run(host_array(v)), want, "eager body constants" + c);
    expect_exact<float>(j(host_array(v)), want, "jit body constants" + c);
    expect_exact<float>(dus_carry(host_array(v)), want_d, "eager dus carry" + c);
    expect_exact<float>(jd(host_array(v)), want_d, "jit dus carry" + c);
  }
  // A scan whose y is a constant updated at the iteration's index, and whose xs is an arange.
  const auto ys_const = mv::jit([](const Array& s) {
    auto [c, ys] = mv::lax::scan([](const Array& c, const Array& t) {
      const Array ti = mv::astype(t, mv::DType::int32);
      const Array y = mv::dynamic_update_slice(mv::zeros({4}), mv::reshape(c, {1}), {ti});
      return std::make_pair(c + 1.f, y);
    }, s, mv::arange(4.0f));
    return ys;
  });
  for (int call = 0; call < 3; ++call) {
    const float s = float(10 * call + 1);
    std::vector<float> want(16, 0.f);
    for (int t = 0; t < 4; ++t) want[t * 4 + t] = s + float(t);
    expect_exact<float>(mv::reshape(ys_const(mv::scalar(s)), {16}), want, "scan y constant call " + std::to_string(call));
  }
}

// Constants made on one device and moved to a sharded layout, or made sharded and reduced
// across devices, in jit replays.
TEST(FastPathsAdversarial, ConstantsMovedAcrossDevicesInReplays) {
  for (const int n : {3, 8}) {
    const mv::Mesh mesh = mesh_of(n);
    const mv::NamedSharding split(mesh, P("x"));
    const int64_t len = 4 * n;
    const auto f = mv::jit([split, len](const Array& x) {
      const Array r = mv::with_sharding_constraint(mv::arange(static_cast<float>(len)), split);
      const Array o = mv::full({len}, 2.0f, split);
      return std::vector<Array>{x * o + r, mv::sum(mv::ones({len}) * x)};
    });
    for (int call = 0; call < 3; ++call) {
      const auto v = small_ints(len, 200 + call);
      std::vector<float> want(len);
      float total = 0;
      for (int64_t k = 0; k < len; ++k) {
        want[k] = v[k] * 2.f + float(k);
        total += v[k];
      }
      const auto out = f(placed_array(v, {len}, split));
      expect_exact<float>(out[0], want, "n=" + std::to_string(n) + " call " + std::to_string(call));
      EXPECT_EQ(out[1].to_host<float>()[0], total) << "sum, n=" << n << " call " << call;
    }
    // psum of a constant inside shard_map, jitted.
    const auto sm = mv::shard_map([](const Array& x) { return x + mv::psum(mv::ones({4}), "x"); }, mesh, {P("x")}, P("x"));
    const auto js = mv::jit([sm](const Array& x) { return sm(x); });
    for (int call = 0; call < 2; ++call) {
      const auto v = small_ints(len, 300 + call);
      std::vector<float> want(len);
      for (int64_t k = 0; k < len; ++k) want[k] = v[k] + float(n);
      expect_exact<float>(js(placed_array(v, {len}, split)), want, "psum of ones n=" + std::to_string(n));
    }
  }
}

// A jit that makes constants, first traced inside a loop body (itself inside a jit), then called
// by every iteration and replay with other indices; and a while_loop (traced again each call)
// whose body writes into a fresh zeros at its counter.
TEST(FastPathsAdversarial, NestedJitConstantsInsideLoopBodiesAndWhileLoops) {
  const int64_t n = 5;
  const auto onehot_row = mv::jit([n](const Array& i, const Array& v) {
    return mv::dynamic_update_slice(mv::zeros({n}), mv::reshape(v, {1}), {i}) + mv::astype(mv::arange(static_cast<int32_t>(n)), mv::DType::float32) * 0.f;
  });
  const auto outer = mv::jit([&onehot_row, n](const Array& x, const Array& shift) {
    return mv::lax::fori_loop(0, n, [&](const Array& i, const Array& c) {
      const Array at = mv::remainder(i + shift, static_cast<int32_t>(n));
      return c + onehot_row(at, mv::reshape(mv::dynamic_slice(x, {i}, {1}), {}));
    }, mv::zeros({n}));
  });
  for (int call = 0; call < 4; ++call) {
    const auto v = small_ints(n, 1300 + call);
    const int32_t shift = call * 2 + 1;
    std::vector<float> want(n, 0.f);
    for (int64_t i = 0; i < n; ++i) want[(i + shift) % n] += v[i];
    expect_exact<float>(outer(host_array(v), mv::scalar(shift)), want, "nested jit in loop, call " + std::to_string(call));
  }
  // while_loop: count up to a data-dependent bound, each step adding a one-hot made from zeros.
  const auto wl = mv::jit([n](const Array& bound) {
    const auto out = mv::lax::while_loop(
        [bound](const std::vector<Array>& s) { return s[0] < bound; },
        [n](const std::vector<Array>& s) {
          const Array one = mv::dynamic_update_slice(mv::zeros({n}), mv::ones({1}), {s[0]});
          return std::vector<Array>{s[0] + 1, s[1] + one};
        },
        std::vector<Array>{mv::scalar(0), mv::zeros({n})});
    return out[1];
  });
  for (const int32_t bound : {3, 5, 1, 4}) {
    std::vector<float> want(n, 0.f);
    for (int32_t i = 0; i < bound; ++i) want[i] = 1.f;
    expect_exact<float>(wl(mv::scalar(bound)), want, "while_loop bound " + std::to_string(bound));
  }
}

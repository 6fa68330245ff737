// Adversarial tests of multi-output fusion (graph/multi_output_fusion.cpp) and of reduction fusion
// in transformed and sharded programs, as an outside tester would write them: a jit's pending
// results that read the same arrays computed by one kernel, claimed equal bit for bit to
// computing each alone (detail::materialized first), and checked against host references.
#include "fusion_checks.hpp"

// ---------------------------------------------------------------------------------------------
// 5. Multi-output fusion.

namespace {

using Fn3 = std::function<std::vector<mv::Array>(const mv::Array&, const mv::Array&, const mv::Array&)>;

// f jitted, called with several different values, against f eager with each result computed
// alone (materialized one at a time before the next is built).
void expect_jit_equals_eager(const Fn3& f, const std::function<std::vector<mv::Array>(uint32_t)>& args,
                             const std::string& what, int calls = 3) {
  const auto jitted = mv::jit([&](const mv::Array& a, const mv::Array& b, const mv::Array& c) { return f(a, b, c); });
  for (int call = 0; call < calls; ++call) {
    const auto in = args(static_cast<uint32_t>(call));
    const auto got = jitted(in[0], in[1], in[2]);
    const auto eager = f(in[0], in[1], in[2]);
    for (const mv::Array& e : eager) mv::detail::materialized(e);
    ASSERT_EQ(got.size(), eager.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      expect_same_bits_any(got[i], eager[i], what + ", call " + std::to_string(call) + ", result " + std::to_string(i));
  }
}

}  // namespace

TEST(FusionAdversarial, MultiOutputOddShapesBroadcastsDtypesAndReplays) {
  for (const mv::Shape& shape : std::vector<mv::Shape>{{1}, {3}, {7}, {5, 3}, {4, 4}, {2, 3, 5}, {4099}}) {
    const mv::Shape row{shape.back()};
    const auto args = [&](uint32_t call) {
      return std::vector<mv::Array>{dev(random_values(size_of(shape), 2000 + call), shape),
                                    dev(random_values(size_of(shape), 2100 + call), shape),
                                    dev(random_values(size_of(row), 2200 + call), row)};
    };
    const Fn3 f = [](const mv::Array& a, const mv::Array& b, const mv::Array& c) {
      return std::vector<mv::Array>{
          a * b + c,                                    // a broadcast input (a strided kernel alone)
          a - b,                                        // no broadcast (a vector kernel alone)
          mv::astype(a > b, mv::DType::int32) * 3,      // int32
          a > b,                                        // bool (not 32-bit: alone)
          mv::exp(a) / (mv::abs(b) + 1.f),              // costly
          mv::where(a > 0.f, a, b * 2.f),               // select
          a * 2.f,                                      // reads a only
          a,                                            // an input unchanged
          a * b + c,                                    // the first result's program again
      };
    };
    expect_jit_equals_eager(f, args, "shape " + str(shape));
  }
}

TEST(FusionAdversarial, MultiOutputSameArrayTwiceAndInputsReturned) {
  const mv::Shape shape{6, 10};
  const auto args = [&](uint32_t call) {
    return std::vector<mv::Array>{dev(random_values(60, 2300 + call), shape), dev(random_values(60, 2400 + call), shape),
                                  dev(random_values(60, 2500 + call), shape)};
  };
  const Fn3 f = [](const mv::Array& a, const mv::Array& b, const mv::Array& c) {
    const mv::Array p = a * b, q = a + c;
    return std::vector<mv::Array>{p, q, p, b, q * 1.f, c, p};
  };
  expect_jit_equals_eager(f, args, "same array twice");
  // The results of one call stay as they were after the next call (a result returned twice and a
  // fused result are not overwritten by a replay).
  const auto jitted = mv::jit([&](const mv::Array& a, const mv::Array& b, const mv::Array& c) { return f(a, b, c); });
  const auto in0 = args(7), in1 = args(8);
  const auto first = jitted(in0[0], in0[1], in0[2]);
  std::vector<std::vector<float>> kept;
  for (const mv::Array& r : first) kept.push_back(r.to_host<float>());
  (void)jitted(in1[0], in1[1], in1[2]);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].to_host<float>(), kept[i]) << "result " << i << " after a replay";
}

TEST(FusionAdversarial, MultiOutputShardedAndMixedLayouts) {
  const mv::Mesh mesh = mv::make_mesh({2, 2, 2}, {"x", "y", "z"});
  const mv::Shape shape{8, 12};
  const auto args = [&](uint32_t call) {
    return std::vector<mv::Array>{
        mv::device_put(dev(random_values(96, 2600 + call), shape), mv::NamedSharding(mesh, P({"x", "y"}, "z"))),
        mv::device_put(dev(random_values(96, 2700 + call), shape), mv::NamedSharding(mesh, P("x"))),
        mv::device_put(dev(random_values(12, 2800 + call), {12}), mv::NamedSharding(mesh, P("z")))};
  };
  const Fn3 f = [](const mv::Array& a, const mv::Array& b, const mv::Array& c) {
    return std::vector<mv::Array>{a * c, a - c, b * c + 1.f, b + a, mv::astype(b < c, mv::DType::int32), a * 0.f,
                                  mv::sum(a * c, {1}), mv::max(b - c, {0})};
  };
  expect_jit_equals_eager(f, args, "sharded 2x2x2");
}

TEST(FusionAdversarial, MultiOutputManyInputsAndSixteenBitAndWideInputs) {
  std::vector<mv::Array> own;
  for (uint32_t i = 0; i < 19; ++i) own.push_back(dev(random_values(13, 2900 + i), {13}));
  std::vector<mv::bfloat16> bv;
  for (float v : random_values(13, 2950)) bv.emplace_back(v);
  const mv::Array half = mv::array(std::span<const mv::bfloat16>(bv), mv::Shape{13});
  const auto f = [&](const mv::Array& s) {
    std::vector<mv::Array> r;
    // One result reads 17 arrays (more than one kernel takes), others a few each.
    mv::Array wide = s;
    for (size_t i = 0; i < 16; ++i) wide = wide + own[i];
    r.push_back(wide);
    for (size_t i = 0; i < own.size(); ++i) r.push_back(s * own[i] - static_cast<float>(i));
    r.push_back(mv::astype(half, mv::DType::float32) * s);  // a bfloat16 input
    r.push_back(mv::astype(mv::astype(s, mv::DType::float64) * 2.0f, mv::DType::float32));  // through float64
    r.push_back(mv::astype(s * 3.f, mv::DType::bfloat16));  // a 16-bit result
    return r;
  };
  const auto jitted = mv::jit(f);
  for (uint32_t call = 0; call < 3; ++call) {
    const mv::Array s = dev(random_values(13, 3000 + call), {13});
    const auto got = jitted(s);
    const auto eager = f(s);
    ASSERT_EQ(got.size(), eager.size());
    for (size_t i = 0; i + 1 < got.size(); ++i) {
      mv::detail::materialized(eager[i]);
      expect_same_bits<float>(got[i], eager[i], "call " + std::to_string(call) + " result " + std::to_string(i));
    }
    EXPECT_EQ(mv::astype(got.back(), mv::DType::float32).to_host<float>(), mv::astype(eager.back(), mv::DType::float32).to_host<float>()) << "bfloat16 result";
  }
}

TEST(FusionAdversarial, AdamAndAdamwUnderJitEqualEagerWithChangingGradients) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  mv::Params params{{"w", mv::device_put(dev(random_values(8 * 6, 3100), {8, 6}), mv::NamedSharding(mesh, P("x", "y")))},
                    {"b", dev(random_values(7, 3101), {7})},
                    {"s", dev(random_values(1, 3102), {})}};
  for (const bool decoupled : {false, true}) {
    const optax::GradientTransformation opt = decoupled ? optax::adamw(0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.01f) : optax::adam(0.02f);
    const auto step = [&](const mv::Params& p, const optax::OptState& s, const mv::Array& k) {
      mv::Params grads;
      for (const auto& [name, v] : p) grads.emplace(name, mv::sin(v * k) * 0.5f + k);
      auto [updates, state] = opt.update(grads, s, p);
      return std::make_pair(optax::apply_updates(p, updates), state);
    };
    optax::OptState eager_state = opt.init(params), jit_state = eager_state;
    mv::Params eager_params = params, jit_params = params;
    const auto jitted = mv::jit(step);
    for (int i = 0; i < 4; ++i) {
      const mv::Array k = dev(std::vector<float>{0.5f + 0.25f * static_cast<float>(i)}, {});
      std::tie(eager_params, eager_state) = step(eager_params, eager_state, k);
      for (const auto& [name, v] : eager_params) mv::detail::materialized(v);
      std::tie(jit_params, jit_state) = jitted(jit_params, jit_state, k);
      for (const auto& [name, v] : eager_params)
        expect_same_bits<float>(jit_params.at(name), v,
                                std::string(decoupled ? "adamw " : "adam ") + name + " after step " + std::to_string(i + 1));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 6. More layouts and dtypes: replicated inputs read at an offset, uint32 / int8 inputs,
// shard_map bodies, partial inputs shared by results, captured pending arrays, a training step.

TEST(FusionAdversarial, ReplicatedInputsReadAtAnOffsetOfAShardedResult) {
  // x replicated, y split over columns: each device's piece of x * y starts at an offset of x
  // (a multiple of 4 or not), the rows a multiple of 4 or not.
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  uint32_t seed = 3300;
  for (const int64_t cols : {16, 24, 40, 20, 32, 56}) {
    for (const auto& [sname, spec] : std::vector<std::pair<std::string, mv::PartitionSpec>>{
             {"cols y", P(mv::None, "y")}, {"cols x", P(mv::None, "x")}, {"cols (x,y)", P(mv::None, {"x", "y"})}}) {
      const int64_t shards = sname == "cols y" ? 2 : sname == "cols x" ? 4 : 8;
      if (cols % shards) continue;
      const mv::Shape shape{6, cols};
      const auto xv = random_values(size_of(shape), seed++), yv = random_values(size_of(shape), seed++);
      const mv::Array x = dev(xv, shape);  // one device: laid out for the result when read
      const mv::Array xr = mv::device_put(dev(xv, shape), mv::NamedSharding(mesh, P()));
      const mv::Array y = mv::device_put(dev(yv, shape), mv::NamedSharding(mesh, spec));
      const Host hx = host_of(xv, shape), hy = host_of(yv, shape);
      const Host hp = host_eval({hx, hy}, [](const std::vector<double>& a) { return a[0] * a[1] + a[0]; });
      const std::string where = std::to_string(cols) + " " + sname;
      for (const Op op : kAllOps) {
        check_reduction([&] { return xr * y + xr; }, hp, op, {1}, false, where + " replicated x");
        check_reduction([&] { return y * xr + xr; }, host_eval({hy, hx}, [](const std::vector<double>& a) { return a[0] * a[1] + a[1]; }),
                        op, {-1}, true, where + " replicated x second");
      }
      check_reduction([&] { return x * y + x; }, hp, Op::sum, {1}, false, where + " uncommitted x");
    }
  }
}

TEST(FusionAdversarial, Uint32Int8AndWideInputs) {
  const mv::Shape shape{3, 12};
  std::vector<uint32_t> uv(36);
  std::vector<int8_t> iv(36);
  std::vector<double> dv(36);
  for (size_t i = 0; i < 36; ++i) {
    uv[i] = static_cast<uint32_t>(i * 2654435761u);
    iv[i] = static_cast<int8_t>(static_cast<int>(i * 37 % 256) - 128);
    dv[i] = std::ldexp(static_cast<double>(i) - 17.5, static_cast<int>(i % 7) - 3);
  }
  const mv::Array u = mv::array(std::span<const uint32_t>(uv), shape);
  const mv::Array i8 = mv::array(std::span<const int8_t>(iv), shape);
  const mv::Array d = mv::array(std::span<const double>(dv), shape);
  const mv::Array f = dev(random_values(36, 3400), shape);
  const std::vector<std::pair<std::string, Program>> programs = {
      {"astype(u32, f32) * f", [&] { return mv::astype(u, mv::DType::float32) * f; }},
      {"astype(u32, i32) * 3", [&] { return mv::astype(u, mv::DType::int32) * 3; }},
      {"astype(i8, f32) + f", [&] { return mv::astype(i8, mv::DType::float32) + f; }},
      {"i8 * 2", [&] { return i8 * 2; }},
      {"astype(f64 * 3, f32)", [&] { return mv::astype(d * 3.0f, mv::DType::float32); }},
      {"f64 - 1", [&] { return d - 1.0f; }},
  };
  for (const auto& [name, program] : programs)
    for (const Op op : {Op::sum, Op::max, Op::min}) {
      const mv::Array unfused = program();
      mv::detail::materialized(unfused);
      const mv::Array want = apply(op, unfused, {1}, false);
      const mv::Array got = apply(op, program(), {1}, false);
      ASSERT_EQ(got.dtype(), want.dtype()) << name;
      const std::string what = name + " " + name_of(op);
      switch (got.dtype()) {
        case mv::DType::float32: expect_same_bits<float>(got, want, what); break;
        case mv::DType::int32: expect_same_bits<int32_t>(got, want, what); break;
        case mv::DType::int8: expect_same_bits<int8_t>(got, want, what); break;
        case mv::DType::float64: expect_same_bits<double>(got, want, what); break;
        default: EXPECT_EQ(mv::astype(got, mv::DType::float32).to_host<float>(), mv::astype(want, mv::DType::float32).to_host<float>()) << what;
      }
    }
}

TEST(FusionAdversarial, ShardMapBodiesWithFusedReductions) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Shape shape{16, 12};
  const auto xv = random_values(size_of(shape), 3500);
  const auto bv = random_values(12, 3501);
  const mv::Array x = mv::device_put(dev(xv, shape), mv::NamedSharding(mesh, P("x")));
  const mv::Array b = dev(bv, {12});
  const auto body = [](const mv::Array& a, const mv::Array& c) {
    return std::vector<mv::Array>{mv::sum(a * c + 1.f, {1}), mv::psum(mv::sum(mv::exp(a * 0.5f) * c, {0}), "x"),
                                  mv::psum(mv::max(a - c, {0, 1}, true), "x")};
  };
  const auto body_unfused = [](const mv::Array& a, const mv::Array& c) {
    auto m = [](mv::Array p) {
      mv::detail::materialized(p);
      return p;
    };
    return std::vector<mv::Array>{mv::sum(m(a * c + 1.f), {1}), mv::psum(mv::sum(m(mv::exp(a * 0.5f) * c), {0}), "x"),
                                  mv::psum(mv::max(m(a - c), {0, 1}, true), "x")};
  };
  const std::vector<mv::SpecTree> in_specs = {P("x"), P()};
  const mv::SpecTree out_specs = std::vector<mv::PartitionSpec>{P("x"), P(), P()};
  const auto got = mv::shard_map(body, mesh, in_specs, out_specs)(x, b);
  const auto want = mv::shard_map(body_unfused, mesh, in_specs, out_specs)(x, b);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_same_bits<float>(got[i], want[i], "shard_map result " + std::to_string(i));
  const auto jitted = mv::jit([&](const mv::Array& a, const mv::Array& c) { return mv::shard_map(body, mesh, in_specs, out_specs)(a, c); });
  for (uint32_t call = 0; call < 2; ++call) {
    const mv::Array xc = mv::device_put(dev(random_values(size_of(shape), 3600 + call), shape), mv::NamedSharding(mesh, P("x")));
    const auto j = jitted(xc, b);
    const auto w = mv::shard_map(body_unfused, mesh, in_specs, out_specs)(xc, b);
    for (size_t i = 0; i < j.size(); ++i) expect_same_bits<float>(j[i], w[i], "jit(shard_map) call " + std::to_string(call) + " result " + std::to_string(i));
  }
  // Host: the first result.
  const auto s = got[0].to_host<float>();
  for (int r = 0; r < 16; ++r) {
    double w = 0, mag = 0;
    for (int c = 0; c < 12; ++c) {
      const double t = static_cast<double>(xv[static_cast<size_t>(r * 12 + c)]) * bv[static_cast<size_t>(c)] + 1;
      w += t;
      mag += std::abs(t);
    }
    EXPECT_NEAR(s[static_cast<size_t>(r)], w, 1e-6 * mag) << r;
  }
}

TEST(FusionAdversarial, MultiOutputResultsReadingAPartialSum) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const mv::Shape shape{16, 12};
  const auto args = [&](uint32_t call) {
    return std::vector<mv::Array>{
        mv::device_put(dev(random_values(size_of(shape), 3700 + call), shape), mv::NamedSharding(mesh, P("x", "y"))),
        mv::device_put(dev(random_values(12, 3800 + call), {12}), mv::NamedSharding(mesh, P("y"))),
        dev(random_values(12, 3900 + call), {12})};
  };
  const Fn3 f = [](const mv::Array& a, const mv::Array& b, const mv::Array& c) {
    const mv::Array s = mv::sum(a * 2.f, {0});  // partial over 'x'
    return std::vector<mv::Array>{s * b, s + 1.f, s * s - b, mv::sum(a, {0}) * c, s};
  };
  expect_jit_equals_eager(f, args, "partial sums");
}

TEST(FusionAdversarial, CapturedPendingArraysKeepTheirValuesAcrossReplays) {
  const mv::Array a = dev(random_values(24, 4000), {4, 6});
  const mv::Array k = a * 2.f + 1.f;  // pending, made outside the trace
  const mv::Array e = mv::exp(a * 0.5f);  // pending and costly
  const std::vector<float> k_want = [&] {
    const mv::Array t = a * 2.f + 1.f;
    return t.to_host<float>();
  }();
  const auto jitted = mv::jit([&](const mv::Array& x) {
    return std::vector<mv::Array>{k, x * a, k + x, mv::sum(e * x, {1}), e};
  });
  std::vector<float> e_first;
  for (uint32_t call = 0; call < 3; ++call) {
    const mv::Array x = dev(random_values(24, 4100 + call), {4, 6});
    const auto got = jitted(x);
    const mv::Array kx = [&] {
      const mv::Array t = a * 2.f + 1.f;
      mv::detail::materialized(t);
      return t + x;
    }();
    expect_same_bits<float>(got[2], kx, "k + x, call " + std::to_string(call));
    EXPECT_EQ(got[0].to_host<float>(), k_want) << "k returned, call " << call;
    EXPECT_EQ(k.to_host<float>(), k_want) << "k itself after call " << call;
    if (call == 0) e_first = e.to_host<float>();
    EXPECT_EQ(e.to_host<float>(), e_first) << "e itself after call " << call;
    const mv::Array ex = [&] {
      const mv::Array t = mv::exp(a * 0.5f) * x;
      mv::detail::materialized(t);
      return mv::sum(t, {1});
    }();
    expect_same_bits<float>(got[3], ex, "sum(e * x), call " + std::to_string(call));
  }
}

TEST(FusionAdversarial, ShardedTrainingStepUnderJitEqualsEager) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"data", "model"});
  mv::Params params{{"w", mv::device_put(dev(random_values(12 * 8, 4200, -3, 0), {12, 8}), mv::NamedSharding(mesh, P(mv::None, "model")))},
                    {"b", mv::device_put(dev(random_values(8, 4201, -3, 0), {8}), mv::NamedSharding(mesh, P("model")))}};
  const optax::GradientTransformation opt = optax::adam(0.05f);
  const auto loss = [](const mv::Params& p, const mv::Array& x, const mv::Array& y) {
    const mv::Array logits = mv::matmul(x, p.at("w")) + p.at("b");
    return mv::mean(mv::nn::logsumexp(logits, {1}) - mv::sum(logits * y, {1})) + mv::mean((logits - y) * (logits - y));
  };
  const auto step = [&](const mv::Params& p, const optax::OptState& s, const mv::Array& x, const mv::Array& y) {
    const mv::Params g = mv::grad(loss)(p, x, y);
    auto [updates, state] = opt.update(g, s, p);
    return std::make_pair(optax::apply_updates(p, updates), state);
  };
  optax::OptState eager_state = opt.init(params), jit_state = eager_state;
  mv::Params eager_params = params, jit_params = params;
  const auto jitted = mv::jit(step);
  for (uint32_t i = 0; i < 3; ++i) {
    const mv::Array x = mv::device_put(dev(random_values(16 * 12, 4300 + i, -2, 0), {16, 12}), mv::NamedSharding(mesh, P("data")));
    std::vector<float> yv(16 * 8, 0.f);
    for (size_t r = 0; r < 16; ++r) yv[r * 8 + (r * 5 + i) % 8] = 1.f;
    const mv::Array y = mv::device_put(dev(yv, {16, 8}), mv::NamedSharding(mesh, P("data")));
    std::tie(eager_params, eager_state) = step(eager_params, eager_state, x, y);
    for (const auto& [name, v] : eager_params) mv::detail::materialized(v);
    std::tie(jit_params, jit_state) = jitted(jit_params, jit_state, x, y);
    for (const auto& [name, v] : eager_params)
      expect_same_bits<float>(jit_params.at(name), v, name + " after step " + std::to_string(i + 1));
  }
  // The loss went down from the first parameters (the steps did something sensible).
  const mv::Array x = mv::device_put(dev(random_values(16 * 12, 4300, -2, 0), {16, 12}), mv::NamedSharding(mesh, P("data")));
  std::vector<float> yv(16 * 8, 0.f);
  for (size_t r = 0; r < 16; ++r) yv[r * 8 + (r * 5) % 8] = 1.f;
  const mv::Array y = dev(yv, {16, 8});
  EXPECT_LT(loss(jit_params, x, y).to_host<float>()[0], loss(params, x, y).to_host<float>()[0]);
}

// Every elementwise op, computed at width 1 by the fused kernel where the unfused one computes it
// in vec4s (rows not a multiple of 4, several reduced axes, a trailing axis of 1) and the other
// way round: the claim is that both give the same bits. The costly programs are also stored by
// the reduction, so their values are compared element by element.
TEST(FusionAdversarial, EveryOpScalarAndVectorGiveTheSameBits) {
  const float den = std::numeric_limits<float>::denorm_min();
  const std::vector<float> specials = {kNaN, kInf, -kInf, -0.f, 0.f, den, -den, 1e30f, -1e30f, 88.8f, -104.f, 1.f, -1.f, 0.5f};
  struct Layout {
    mv::Shape shape;
    std::vector<int> axes;
    mv::Shape other;  // the second operand's shape
  };
  const std::vector<Layout> layouts = {
      {{5, 7}, {1}, {5, 7}},           // rows of 7: scalar fused, vector unfused
      {{3, 8}, {1}, {3, 1}},           // rows of 8 with a column: vec4 both
      {{2, 3, 4}, {1, 2}, {2, 3, 4}},  // two axes: scalar elements in vec4 accumulators
  };
  using Bin = std::function<mv::Array(const mv::Array&, const mv::Array&)>;
  const std::vector<std::pair<std::string, Bin>> float_ops = {
      {"exp", [](auto& x, auto&) { return mv::exp(x); }},
      {"log", [](auto& x, auto&) { return mv::log(mv::abs(x)); }},
      {"sqrt", [](auto& x, auto&) { return mv::sqrt(x); }},
      {"rsqrt", [](auto& x, auto&) { return mv::rsqrt(mv::abs(x)); }},
      {"sin", [](auto& x, auto&) { return mv::sin(x); }},
      {"cos", [](auto& x, auto&) { return mv::cos(x); }},
      {"tan", [](auto& x, auto&) { return mv::tan(x); }},
      {"arcsin", [](auto& x, auto&) { return mv::arcsin(x * 0.25f); }},
      {"arccos", [](auto& x, auto&) { return mv::arccos(x * 0.25f); }},
      {"arctan", [](auto& x, auto&) { return mv::arctan(x); }},
      {"erf", [](auto& x, auto&) { return mv::erf(x); }},
      {"erfinv", [](auto& x, auto&) { return mv::erfinv(x * 0.25f); }},
      {"tanh", [](auto& x, auto&) { return mv::tanh(x); }},
      {"sigmoid", [](auto& x, auto&) { return mv::sigmoid(x); }},
      {"expm1", [](auto& x, auto&) { return mv::expm1(x); }},
      {"log1p", [](auto& x, auto&) { return mv::log1p(x); }},
      {"sinh", [](auto& x, auto&) { return mv::sinh(x); }},
      {"cosh", [](auto& x, auto&) { return mv::cosh(x); }},
      {"exp2", [](auto& x, auto&) { return mv::exp2(x); }},
      {"log2", [](auto& x, auto&) { return mv::log2(x); }},
      {"asinh", [](auto& x, auto&) { return mv::asinh(x); }},
      {"acosh", [](auto& x, auto&) { return mv::acosh(mv::abs(x) + 1.f); }},
      {"atanh", [](auto& x, auto&) { return mv::atanh(x * 0.25f); }},
      {"relu square reciprocal", [](auto& x, auto& y) { return mv::relu(x) + mv::square(y) - mv::reciprocal(x); }},
      {"divide", [](auto& x, auto& y) { return x / y; }},
      {"floor_divide", [](auto& x, auto& y) { return mv::floor_divide(x, y); }},
      {"remainder", [](auto& x, auto& y) { return mv::remainder(x, y); }},
      {"power", [](auto& x, auto& y) { return mv::power(x, y); }},
      {"power 3", [](auto& x, auto&) { return mv::power(x, 3.f); }},
      {"arctan2", [](auto& x, auto& y) { return mv::arctan2(x, y); }},
      {"max min sign abs", [](auto& x, auto& y) { return mv::maximum(x, y) * mv::sign(x) - mv::minimum(mv::abs(x), y); }},
      {"clip", [](auto& x, auto&) { return mv::clip(x, -1.5f, 2.5f); }},
      {"where compare", [](auto& x, auto& y) { return mv::where(x >= y, x - y, mv::where(x != x, 7.f, y * 0.25f)); }},
      {"x * y + x", [](auto& x, auto& y) { return x * y + x; }},
  };
  const std::vector<std::pair<std::string, Bin>> int_ops = {
      {"int floor_divide", [](auto& a, auto& b) { return mv::floor_divide(a, b); }},
      {"int remainder", [](auto& a, auto& b) { return mv::remainder(a, b); }},
      {"int power", [](auto& a, auto&) { return mv::power(a, 3); }},
      {"int bitwise", [](auto& a, auto& b) { return (a & b) ^ (a | 12) ^ mv::bitwise_not(b); }},
      {"int max min abs sign", [](auto& a, auto& b) { return mv::maximum(a, b) - mv::minimum(mv::abs(a), mv::sign(b)); }},
      {"int mul wrap", [](auto& a, auto& b) { return a * b * 65537; }},
      {"int to float", [](auto& a, auto& b) { return mv::astype(a, mv::DType::float32) / mv::astype(b, mv::DType::float32); }},
      {"float to int", [](auto& a, auto& b) { return mv::astype(mv::astype(a, mv::DType::float32) * 0.37f, mv::DType::int32) + b; }},
  };
  uint32_t seed = 5000;
  for (const Layout& l : layouts) {
    const Layout lay = l;
    auto xv = random_values(size_of(lay.shape), seed++, -3, 3);
    for (size_t i = 0; i < xv.size() && i < specials.size(); ++i) xv[(i * 7) % xv.size()] = specials[i];
    auto yv = random_values(size_of(lay.other), seed++, -3, 2);
    for (auto& v : yv) v = std::abs(v) + 0.125f;
    const mv::Array x = dev(xv, lay.shape), y = dev(yv, lay.other);
    auto av = random_ints(size_of(lay.shape), seed++, -100000, 100000);
    av[0] = INT32_MIN;
    av[1] = INT32_MAX;
    auto bv = random_ints(size_of(lay.other), seed++, -9, 9);
    for (auto& v : bv) v = v == 0 ? 3 : v;
    const mv::Array a = dev(av, lay.shape), b = dev(bv, lay.other);
    const std::string where = str(lay.shape) + " over " + str(lay.axes) + " with " + str(lay.other);
    for (const auto& [name, op] : float_ops)
      for (const Op r : {Op::sum}) {
        const Bin f = op;
        const mv::Array unfused = f(x, y);
        mv::detail::materialized(unfused);
        const mv::Array want = apply(r, unfused, lay.axes, false);
        const mv::Array in = f(x, y);
        const mv::Array got = apply(r, in, lay.axes, false);
        expect_same_bits<float>(got, want, where + " " + name + " " + name_of(r));
        expect_same_bits<float>(in, unfused, where + " " + name + " " + name_of(r) + " (values)");
      }
    for (const auto& [name, op] : int_ops)
      for (const Op r : {Op::min}) {
        const Bin f = op;
        const mv::Array unfused = f(a, b);
        mv::detail::materialized(unfused);
        const mv::Array want = apply(r, unfused, lay.axes, false);
        const mv::Array in = f(a, b);
        const mv::Array got = apply(r, in, lay.axes, false);
        expect_same_bits_any(got, want, where + " " + name + " " + name_of(r));
        expect_same_bits_any(in, unfused, where + " " + name + " " + name_of(r) + " (values)");
      }
  }
}

TEST(FusionAdversarial, MaterializedBoolMasksAsInputs) {
  for (const mv::Shape& shape : std::vector<mv::Shape>{{3, 8}, {3, 7}, {2, 4100}}) {
    const auto xv = random_values(size_of(shape), 5100 + static_cast<uint32_t>(shape.back()));
    const mv::Array x = dev(xv, shape);
    const mv::Array mask = x > 0.1f;
    mv::detail::materialized(mask);
    const mv::Array rowmask = dev(random_values(shape.back(), 5200), {shape.back()}) < 0.f;
    mv::detail::materialized(rowmask);
    const Host hx = host_of(xv, shape);
    const Host hp = host_eval({hx}, [](const std::vector<double>& a) { return a[0] > static_cast<double>(0.1f) ? a[0] * 2 : -1.0; });
    for (const Op op : kAllOps) {
      check_reduction([&] { return mv::where(mask, x * 2.f, -1.f); }, hp, op, {1}, false, "mask " + str(shape));
      const mv::Array unfused = mv::where(mask & rowmask, x, 0.f) + mv::astype(mask, mv::DType::float32);
      mv::detail::materialized(unfused);
      expect_same_bits<float>(apply(op, mv::where(mask & rowmask, x, 0.f) + mv::astype(mask, mv::DType::float32), {1}, false),
                              apply(op, unfused, {1}, false), "mask & rowmask " + str(shape));
    }
    expect_same_bits<int32_t>(mv::sum(mask & rowmask, {1}), [&] {
      const mv::Array m = mask & rowmask;
      mv::detail::materialized(m);
      return mv::sum(m, {1});
    }(), "count of mask & rowmask " + str(shape));
  }
}

TEST(FusionAdversarial, TransposesConstantsAndUploadsInPrograms) {
  for (const int64_t n : {8, 5}) {
    const mv::Shape shape{n, n};
    const auto xv = random_values(n * n, 5300 + static_cast<uint32_t>(n));
    const mv::Array x = dev(xv, shape);
    const Host hx = host_of(xv, shape);
    Host hp{{}, shape};
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) hp.v.push_back(hx.v[static_cast<size_t>(i * n + j)] + 2 * hx.v[static_cast<size_t>(j * n + i)]);
    for (const Op op : kAllOps) check_reduction([&] { return x + mv::transpose(x) * 2.f; }, hp, op, {1}, false, "x + 2 x^T n=" + std::to_string(n));
  }
  // Programs of constants alone (no input arrays), float and int, long rows.
  const Host hf{std::vector<double>(5 * 4099, static_cast<double>(0.1f) * 3), {5, 4099}};
  for (const Op op : kAllOps) check_reduction([] { return mv::full({5, 4099}, 0.1f) * 3.f; }, hf, op, {1}, false, "full * 3", 1e-6);
  const Host hi{std::vector<double>(3 * 13, 6.0), {3, 13}};
  for (const Op op : kAllOps) check_reduction([] { return mv::full({3, 13}, 2) * 3; }, hi, op, {-1}, true, "int full * 3");
  Host ha{{}, {4099}};
  for (int i = 0; i < 4099; ++i) ha.v.push_back(i * 0.5);
  for (const Op op : kAllOps) check_reduction([] { return mv::arange(4099.f) * 0.5f; }, ha, op, {0}, false, "arange * 0.5");
  // Sharded constants.
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto xv = random_values(16 * 8, 5400);
  const mv::Array xs = mv::device_put(dev(xv, {16, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const Host hs = host_eval({host_of(xv, {16, 8})}, [](const std::vector<double>& a) { return a[0] * 1.5; });
  for (const Op op : kAllOps)
    check_reduction([&] { return mv::full({16, 8}, 1.5f, mv::NamedSharding(mesh, P("x", "y"))) * xs; }, hs, op, {1}, false, "sharded full * x");
  // Under jit: host values uploaded by the trace (constants of the program), new inputs each call,
  // and calls with another shape in between (a second trace).
  const std::vector<float> cv = random_values(8, 5500);
  const auto jitted = mv::jit([&](const mv::Array& a) {
    const mv::Array c = dev(std::vector<float>(cv.begin(), cv.begin() + a.shape()[1]), {a.shape()[1]});
    return std::vector<mv::Array>{mv::sum(a * c, {1}), mv::max(mv::exp(a) * c, {1}), a * c, a - c};
  });
  for (uint32_t call = 0; call < 4; ++call) {
    const int64_t n = call == 2 ? 7 : 8;
    const mv::Array a = dev(random_values(3 * n, 5600 + call), {3, n});
    const mv::Array c = dev(std::vector<float>(cv.begin(), cv.begin() + n), {n});
    const auto got = jitted(a);
    const mv::Array p0 = a * c, p1 = mv::exp(a) * c;
    mv::detail::materialized(p0);
    mv::detail::materialized(p1);
    const std::string at = "jit call " + std::to_string(call);
    expect_same_bits<float>(got[0], mv::sum(p0, {1}), at + " sum");
    expect_same_bits<float>(got[1], mv::max(p1, {1}), at + " max");
    expect_same_bits<float>(got[2], p0, at + " a * c");
    const mv::Array d = a - c;
    mv::detail::materialized(d);
    expect_same_bits<float>(got[3], d, at + " a - c");
  }
}

TEST(FusionAdversarial, JitWithOutShardingsAndLoops) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const mv::Shape shape{8, 12};
  const Fn3 f = [](const mv::Array& a, const mv::Array& b, const mv::Array& c) {
    return std::vector<mv::Array>{a * b, a - b, a * c + b, mv::sum(a * b, {1}), mv::exp(a) - c};
  };
  const std::vector<mv::ShardingTree> outs = {mv::NamedSharding(mesh, P("x")), mv::NamedSharding(mesh, P()),
                                              mv::NamedSharding(mesh, P(mv::None, "y")), mv::NamedSharding(mesh, P("y")),
                                              mv::NamedSharding(mesh, P("x"))};
  const auto jitted = mv::jit([&](const mv::Array& a, const mv::Array& b, const mv::Array& c) { return f(a, b, c); },
                              {.out_shardings = outs});
  for (uint32_t call = 0; call < 3; ++call) {
    const mv::Array a = mv::device_put(dev(random_values(96, 6000 + call), shape), mv::NamedSharding(mesh, P("x", "y")));
    const mv::Array b = dev(random_values(96, 6100 + call), shape);
    const mv::Array c = dev(random_values(12, 6200 + call), {12});
    const auto got = jitted(a, b, c);
    const auto eager = f(a, b, c);
    for (size_t i = 0; i < got.size(); ++i) {
      mv::detail::materialized(eager[i]);
      expect_same_bits<float>(got[i], eager[i], "out_shardings call " + std::to_string(call) + " result " + std::to_string(i));
    }
    EXPECT_EQ(got[0].sharding(), mv::Sharding(mv::NamedSharding(mesh, P("x"))));
  }
  // fori_loop and while_loop bodies with fused reductions.
  const mv::Array x = dev(random_values(4 * 9, 6300, -2, 0), {4, 9});
  const auto body = [&](const mv::Array& i, const mv::Array& acc) {
    return acc + mv::sum(x * mv::astype(i, mv::DType::float32) + acc, {1}, true) * 0.125f;
  };
  const mv::Array fori = mv::lax::fori_loop(0, 5, body, mv::zeros({4, 1}));
  mv::Array want = mv::zeros({4, 1});
  for (int i = 0; i < 5; ++i) {
    const mv::Array p = x * static_cast<float>(i) + want;
    mv::detail::materialized(p);
    want = want + mv::sum(p, {1}, true) * 0.125f;
    mv::detail::materialized(want);
  }
  expect_same_bits<float>(fori, want, "fori_loop");
  const auto w = mv::lax::while_loop([](const std::vector<mv::Array>& c) { return mv::max(c[0] * 1.f) < 100.f; },
                                     [&](const std::vector<mv::Array>& c) {
                                       return std::vector<mv::Array>{c[0] + mv::max(mv::abs(x) + c[0], {1}, true)};
                                     },
                                     std::vector<mv::Array>{mv::zeros({4, 1})});
  EXPECT_GE(mv::max(w[0]).to_host<float>()[0], 100.f);
  const auto wh = w[0].to_host<float>();
  const auto xh = x.to_host<float>();
  // Host: iterate the same recurrence until the largest entry reaches 100.
  std::vector<double> c(4, 0.0);
  for (int it = 0; it < 1000 && *std::max_element(c.begin(), c.end()) < 100; ++it)
    for (int r = 0; r < 4; ++r) {
      double m = -1e300;
      for (int k = 0; k < 9; ++k) m = std::max(m, std::abs(static_cast<double>(xh[static_cast<size_t>(r * 9 + k)])) + c[static_cast<size_t>(r)]);
      c[static_cast<size_t>(r)] += m;
    }
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(wh[static_cast<size_t>(r)], c[static_cast<size_t>(r)], 1e-3 * (1 + std::abs(c[static_cast<size_t>(r)]))) << r;
}

TEST(FusionAdversarial, GradientOfMaxWithTiesThroughFusedPrograms) {
  // Ties share the cotangent equally: the backward pass compares the program's values with the
  // fused maximum, so both must be the same bits.
  const std::vector<float> xv = {1, 3, 3, 2, 5, 5, 5, 5, -1, -1, -2, -3, 0.1f, 0.3f, 0.3f, 0.2f, 7, 0, 7, 7};
  const mv::Array x = dev(xv, {4, 5});
  for (const bool costly : {false, true}) {
    const auto loss = [costly](const mv::Array& a) {
      const mv::Array p = costly ? mv::exp(a * 0.5f) : a * 3.f - 1.f;
      return mv::sum(mv::max(p, {1}));
    };
    const auto g = mv::grad(loss)(x).to_host<float>();
    for (int r = 0; r < 4; ++r) {
      float m = -INFINITY;
      int ties = 0;
      for (int c = 0; c < 5; ++c) m = std::max(m, xv[static_cast<size_t>(r * 5 + c)]);
      for (int c = 0; c < 5; ++c) ties += xv[static_cast<size_t>(r * 5 + c)] == m;
      for (int c = 0; c < 5; ++c) {
        const double xi = xv[static_cast<size_t>(r * 5 + c)];
        const double slope = costly ? 0.5 * std::exp(0.5 * xi) : 3.0;
        const double want = xi == m ? slope / ties : 0.0;
        EXPECT_NEAR(g[static_cast<size_t>(r * 5 + c)], want, 1e-5 * (1 + want)) << (costly ? "costly" : "cheap") << " " << r << "," << c;
      }
    }
  }
}

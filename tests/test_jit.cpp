// jit: trace once, replay with new inputs, propagation of shardings, constraints, program text.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

TEST(Jit, TracesOnceAndReplaysWithNewValues) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto sharding = mv::NamedSharding(mesh, P("x", "y"));
  const auto f = mv::jit([](const Array& x) { return 2 * mv::sin(x) + 1; });
  const auto a = mv::device_put(mv::arange(32.f).reshape({4, 8}), sharding);
  const auto r1 = f(a);
  EXPECT_EQ(r1.sharding(), a.sharding());  // computation follows data
  const auto b = mv::device_put(mv::arange(32.f, 64.f).reshape({4, 8}), sharding);
  const auto r2 = f(b);
  const auto v1 = r1.to_host<float>(), v2 = r2.to_host<float>();
  for (int i = 0; i < 32; ++i) {
    ASSERT_NEAR(v1[i], 2 * std::sin(float(i)) + 1, 1e-6f);
    ASSERT_NEAR(v2[i], 2 * std::sin(float(i + 32)) + 1, 1e-5f);
  }
  EXPECT_EQ(f.function().traces(), 1u);
  EXPECT_EQ(f.function().cache_size(), 1u);
  // A new sharding is a new program.
  f(mv::device_put(mv::arange(32.f).reshape({4, 8}), mv::NamedSharding(mesh, P("y"))));
  EXPECT_EQ(f.function().cache_size(), 2u);
  // Earlier results stay valid after later calls, and so do the arguments of earlier calls.
  EXPECT_EQ(r1.to_host<float>(), v1);
  std::vector<float> first(32);
  for (int i = 0; i < 32; ++i) first[i] = static_cast<float>(i);
  EXPECT_EQ(a.to_host<float>(), first)
      << "the replay wrote into the array the trace was called with";
}

TEST(Jit, AReplayWaitsForEveryReaderOfTheBuffersItRewrites) {
  // Results are the program's buffers until the next call: work that still reads them (here an
  // all-gather and a reshard, queued behind slow work) must finish before the replay rewrites them.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto sharding = mv::NamedSharding(mesh, P("x"));
  const auto f = mv::jit([](const Array& x) { return x * 3.f; });
  const Array a = mv::device_put(mv::arange(8.f * 4096), sharding);
  const Array b = mv::device_put(mv::arange(8.f * 4096) + 1.f, sharding);
  for (int round = 0; round < 3; ++round) {
    const Array y = f(round % 2 ? b : a);
    const Array slow =
        mv::matmul(mv::ones({512, 512}), mv::ones({512, 512}));  // queued first on device 0
    const Array gathered = mv::shard_map(
        [](const Array& v) { return mv::all_gather(v, "x", 0, true); }, mesh, {P("x")}, P())(y);
    const Array moved = mv::reshard(y, mv::NamedSharding(mesh, P()));
    (void)f(round % 2 ? a : b);  // rewrites the program's buffers
    const auto want = (y).to_host<float>();
    const auto got = gathered.to_host<float>();
    ASSERT_EQ(got.size(), 8u * 4096);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], 3.f * (static_cast<float>(i) + (round % 2 ? 1.f : 0.f)))
          << "round " << round << " i " << i;
    EXPECT_EQ(moved.to_host<float>(), want);
    (void)slow;
  }
}

TEST(Jit, ContractAndMultipleOutputs) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto xs = mv::device_put(mv::arange(32.f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto f_contract = mv::jit([](const Array& x) { return mv::sum(x, {0}); });
  for (int rep = 0; rep < 3; ++rep) {
    const auto r = f_contract(xs);
    EXPECT_EQ(r.to_host<float>(), (std::vector<float>{48, 52, 56, 60, 64, 68, 72, 76}));
    EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("y"))));
  }
  const auto two = mv::jit([](const Array& x, const Array& y) { return std::vector<Array>{x + y, x * y}; });
  const auto out = two(mv::arange(4.f), mv::full({4}, 2.f));
  EXPECT_EQ(out[0].to_host<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(out[1].to_host<float>(), (std::vector<float>{0, 2, 4, 6}));
  const auto again = two(mv::arange(4.f), mv::full({4}, 3.f));
  EXPECT_EQ(again[1].to_host<float>(), (std::vector<float>{0, 3, 6, 9}));
}

TEST(Jit, ShardMapNestedInsideJit) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto total = mv::jit([&](const Array& x) {
    return mv::shard_map([](const Array& v) { return mv::psum(mv::sum(v), "x"); }, mesh, {P("x")}, P())(x);
  });
  EXPECT_EQ(total(mv::arange(32)).to_host<int32_t>()[0], 496);
  EXPECT_EQ(total(mv::ones({32}, mv::DType::int32)).to_host<int32_t>()[0], 32);
}

TEST(Jit, ShardingsAndConstraintsAreHonoured) {
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto f = mv::jit([&](const Array& x) { return mv::with_sharding_constraint(x + 1, mv::NamedSharding(mesh, P("y", "x"))); });
  const auto x = mv::device_put(mv::zeros({64, 64}), mv::NamedSharding(mesh, P("x", "y")));
  const auto r = f(x);
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("y", "x"))));
  EXPECT_EQ(r.to_host<float>(), std::vector<float>(64 * 64, 1.f));
  const auto g = mv::jit([](const Array& x) { return x * 2; },
                         {.in_shardings = {mv::NamedSharding(mesh, P("x"))}, .out_shardings = {mv::NamedSharding(mesh, P())}});
  const auto y = g(mv::arange(8.f));
  EXPECT_TRUE(y.sharding().is_fully_replicated());
  EXPECT_EQ(y.to_host<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14}));
}

TEST(Jit, ErrorsLeaveTheRuntimeUsable) {
  const auto reads = mv::jit([](const Array& x) {
    x.to_host<float>();
    return x;
  });
  EXPECT_THROW(reads(mv::arange(4.f)), mv::Error);
  const auto bad = mv::jit([](const Array& x) { return x + mv::zeros({5}); });
  EXPECT_THROW(bad(mv::arange(4.f)), mv::Error);
  const auto m1 = mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3});
  const auto m2 = mv::make_mesh({4}, {"x"}, {}, {4, 5, 6, 7});
  const auto add = mv::jit([](const Array& x, const Array& y) { return x + y; });
  EXPECT_THROW(add(mv::device_put(mv::zeros({8}), mv::NamedSharding(m1, P("x"))),
                   mv::device_put(mv::zeros({8}), mv::NamedSharding(m2, P("x")))),
               mv::Error);
  const auto fine = mv::jit([](const Array& x) { return x + 1; });
  EXPECT_EQ(fine(mv::arange(3.f)).to_host<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(Jit, ProgramTextShowsLocalMatmulAndAllReduce) {
  // How To Scale Your Model: In (8, 2048) P('X','Y') times W (2048, 8192) P('Y', None) with
  // out_shardings P('X', None) is a local [4,1024] x [1024,8192] matmul and an all-reduce over 'Y'.
  const auto mesh = mv::make_mesh({2, 2}, {"X", "Y"}, {}, {0, 1, 2, 3});
  const auto in = mv::device_put(mv::ones({8, 2048}), mv::NamedSharding(mesh, P("X", "Y")));
  const auto w = mv::device_put(mv::full({2048, 8192}, 0.5f), mv::NamedSharding(mesh, P("Y", mv::None)));
  const auto f = mv::jit([](const Array& in, const Array& w) { return mv::einsum("bd,df->bf", mv::square(in), w); },
                         {.out_shardings = {mv::NamedSharding(mesh, P("X", mv::None))}});
  const std::string text = f.program_text(in, w);
  EXPECT_NE(text.find("dot_general: local float32(4, 1024) x (1024, 8192) -> (4, 8192)"), std::string::npos) << text;
  EXPECT_NE(text.find("all-reduce(sum) over ('Y',)"), std::string::npos) << text;
  EXPECT_EQ(text.find("reshard"), std::string::npos) << text;  // no data moved before the matmul
  const auto r = f(in, w);
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("X", mv::None))));
  EXPECT_EQ(r.to_host<float>()[0], 1024.f);
  // The contraction of the tutorial's f_contract: partial sums and an all-reduce over 'x'.
  const auto m24 = mv::make_mesh({2, 4}, {"x", "y"});
  const auto xs = mv::device_put(mv::arange(32.f).reshape({4, 8}), mv::NamedSharding(m24, P("x", "y")));
  const auto contract = mv::jit([](const Array& x) { return mv::sum(x, {0}); });
  const std::string ct = contract.program_text(xs);
  EXPECT_NE(ct.find("all-reduce(sum) over ('x',)"), std::string::npos) << ct;
}

TEST(Explicit, TypesPropagateAndAmbiguityIsAnError) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const auto arg0 = mv::device_put(mv::arange(4).reshape({4, 1}), mv::NamedSharding(mesh, P("X", mv::None)));
  const auto arg1 = mv::device_put(mv::arange(8).reshape({1, 8}), mv::NamedSharding(mesh, P(mv::None, "Y")));
  std::vector<std::string> seen;
  const auto add_arrays = mv::jit([&](const Array& x, const Array& y) {
    const auto ans = x + y;
    seen = {mv::type_of(x), mv::type_of(y), mv::type_of(ans)};
    return ans;
  });
  const auto r = add_arrays(arg0, arg1);
  EXPECT_EQ(seen, (std::vector<std::string>{"int32[4@X,1]", "int32[1,8@Y]", "int32[4@X,8@Y]"}));
  EXPECT_EQ(r.to_host<int32_t>()[9], 2);
  // Mismatched shardings of elementwise operands: an error naming the op and the types.
  const auto a = mv::device_put(mv::arange(8.f), mv::NamedSharding(mesh, P("X")));
  const auto b = mv::device_put(mv::arange(8.f), mv::NamedSharding(mesh, P("Y")));
  try {
    (void)(a + b);
    FAIL();
  } catch (const mv::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("float32[8@X]"), std::string::npos) << m;
    EXPECT_NE(m.find("float32[8@Y]"), std::string::npos) << m;
    EXPECT_NE(m.find("reshard"), std::string::npos) << m;
  }
  EXPECT_EQ((a + mv::reshard(b, P("X"))).to_host<float>()[7], 14.f);
  // A contracting dimension sharded the same way on both sides needs an out_sharding.
  const auto x = mv::device_put(mv::ones({4, 16}), mv::NamedSharding(mesh, P(mv::None, "X")));
  const auto w = mv::device_put(mv::ones({16, 8}), mv::NamedSharding(mesh, P("X", mv::None)));
  try {
    mv::matmul(x, w);
    FAIL();
  } catch (const mv::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dot_general"), std::string::npos) << m;
    EXPECT_NE(m.find("float32[4,16@X]"), std::string::npos) << m;
    EXPECT_NE(m.find("out_sharding"), std::string::npos) << m;
  }
  const auto y = mv::matmul(x, w, mv::NamedSharding(mesh, P()));
  EXPECT_EQ(mv::type_of(y), "float32[4,8]");
  EXPECT_EQ(y.to_host<float>()[0], 16.f);
}

TEST(Explicit, LayerInThreeModes) {
  const auto x = mv::load_npy(golden_dir() + "/layer/x.npy");
  const auto weights = mv::load_npy(golden_dir() + "/layer/weights.npy");
  const auto bias = mv::load_npy(golden_dir() + "/layer/bias.npy");
  const auto expected = mv::load_npy(golden_dir() + "/layer/expected.npy").to_host<float>();
  auto layer = [](const Array& x, const Array& w, const Array& b) { return mv::sigmoid(mv::matmul(x, w) + b); };
  auto check = [&](const Array& out) {
    const auto v = out.to_host<float>();
    ASSERT_EQ(v.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[i], expected[i], 1e-6f);
  };
  // jit with x P('x') and weights P().
  const auto mesh = mv::make_mesh({8}, {"x"});
  check(mv::jit(layer)(mv::device_put(x, mv::NamedSharding(mesh, P("x"))), mv::device_put(weights, mv::NamedSharding(mesh, P())), bias));
  // Explicit mode, with the types the tutorial prints.
  const auto explicit_mesh = mv::make_mesh({8}, {"X"}, {mv::AxisType::Explicit});
  std::vector<std::string> types;
  const auto layer_auto = mv::jit([&](const Array& x, const Array& w, const Array& b) {
    const auto out = layer(x, w, b);
    types = {mv::type_of(x), mv::type_of(w), mv::type_of(b), mv::type_of(out)};
    return out;
  });
  check(layer_auto(mv::device_put(x, mv::NamedSharding(explicit_mesh, P("X"))),
                   mv::device_put(weights, mv::NamedSharding(explicit_mesh, P())), bias));
  EXPECT_EQ(types, (std::vector<std::string>{"float32[32@X]", "float32[32,4]", "float32[4]", "float32[4]"}));
  // shard_map with psum(x @ w, 'x').
  const auto sm = mv::shard_map(
      [](const Array& x, const Array& w, const Array& b) { return mv::sigmoid(mv::psum(mv::matmul(x, w), "x") + b); }, mesh,
      {P("x"), P("x"), P()}, P());
  check(sm(x, weights, bias));
}

TEST(Jit, ReplaysCopyAnInputInOnlyWhenItChanged) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto sharding = mv::NamedSharding(mesh, P("x"));
  const auto f = mv::jit([](const Array& x) { return x * 2.f; });
  const auto g = mv::jit([](const Array& x) { return x + 1.f; });
  const Array a = mv::device_put(mv::arange(64.f), sharding);
  const Array b = mv::device_put(mv::arange(64.f) * -1.f, sharding);
  auto times = [](const Array& x, float k, float plus = 0) {
    auto v = x.to_host<float>();
    for (float& e : v) e = (e + plus) * k;
    return v;
  };
  // The same array again (its buffers hold what the program copied last) and others in turn.
  for (const Array* x : {&a, &a, &b, &b, &a, &b, &a, &a})
    EXPECT_EQ(f(*x).to_host<float>(), times(*x, 2));
  // Another program's results: its buffers are rewritten by its next call, so the same buffer
  // with new contents is copied in again.
  const Array ya = g(a);
  EXPECT_EQ(f(ya).to_host<float>(), times(a, 2, 1));
  const Array yb = g(b);
  EXPECT_EQ(f(yb).to_host<float>(), times(b, 2, 1));
  EXPECT_EQ(f(ya).to_host<float>(), times(a, 2, 1));
  EXPECT_EQ(f(g(a)).to_host<float>(), times(a, 2, 1));
}

TEST(Jit, NestedJitGradThroughJitAndOtherDevicesAreRightEveryCall) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto sharding = mv::NamedSharding(mesh, P("x"));
  const auto inner = mv::jit([](const Array& x) { return mv::sin(x) * 2.f; });
  const auto outer = mv::jit([&](const Array& x) { return inner(x) + inner(x * 3.f); });
  const Array a = mv::device_put(mv::arange(64.f) * 0.1f, sharding);
  (void)inner(a);  // cached before the outer trace, too
  std::vector<float> want(64);
  for (int i = 0; i < 64; ++i) want[i] = 2 * std::sin(0.1f * i) + 2 * std::sin(0.3f * i);
  for (int call = 0; call < 3; ++call) {  // the trace, then replays of the outer program
    const auto got = outer(a).to_host<float>();
    for (int i = 0; i < 64; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f) << "call " << call << " i " << i;
  }
  // Gradients flow through a jitted function (it runs on the tape, not as a replay).
  const auto g = mv::grad([&](const Array& x) { return mv::sum(inner(x)); })(a).to_host<float>();
  for (int i = 0; i < 64; ++i) ASSERT_NEAR(g[i], 2 * std::cos(0.1f * i), 1e-5f) << i;
  // The same shapes and spec on other devices are another program, run on those devices.
  const auto low = mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3});
  const auto high = mv::make_mesh({4}, {"x"}, {}, {4, 5, 6, 7});
  const auto f = mv::jit([](const Array& x) { return x + 1.f; });
  const Array on_low = mv::device_put(mv::arange(8.f), mv::NamedSharding(low, P("x")));
  const Array on_high = mv::device_put(mv::arange(8.f), mv::NamedSharding(high, P("x")));
  (void)f(on_low);
  const Array r = f(on_high);
  EXPECT_EQ(r.sharding().device_ids(), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(r.to_host<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(f.function().cache_size(), 2u);
}

// Issue 31.7.4: Lowered::collective_counts() returned a reference into the Lowered temporary,
// so `for (auto& kv : f.lower(a, w).collective_counts())` read freed memory (AddressSanitizer:
// heap-use-after-free). Accessors of the value classes return a copy when called on a temporary
// and a reference otherwise.
TEST(Jit, AccessorsOfTemporariesDoNotDangle) {
  using LoweredT = mv::Lowered;
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<LoweredT>().collective_counts())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<LoweredT>().as_text())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<const LoweredT>().as_text())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<Array>().shape())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<Array>().sharding())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<mv::Mesh>().axis_names())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<mv::NamedSharding>().spec())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<mv::NamedSharding>().mesh())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<mv::PartitionSpec>().entries())>);
  EXPECT_FALSE(std::is_reference_v<decltype(std::declval<mv::Sharding>().platform())>);
  // On an lvalue they stay references: no copy.
  EXPECT_TRUE(std::is_reference_v<decltype(std::declval<const LoweredT&>().collective_counts())>);
  EXPECT_TRUE(std::is_reference_v<decltype(std::declval<const Array&>().shape())>);
  EXPECT_TRUE(std::is_reference_v<decltype(std::declval<const mv::Mesh&>().axis_sizes())>);

  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto a =
      mv::device_put(mv::arange(64.f).reshape({8, 8}), mv::NamedSharding(mesh, P(mv::None, "a")));
  const auto w =
      mv::device_put(mv::arange(64.f).reshape({8, 8}), mv::NamedSharding(mesh, P("a", mv::None)));
  const auto f = mv::jit([](const Array& x, const Array& y) { return mv::matmul(x, y); });
  int collectives = 0;
  for (auto& kv : f.lower(a, w).collective_counts()) collectives += kv.second.count;
  EXPECT_EQ(collectives, [&] {
    const mv::Lowered lowered = f.lower(a, w);
    int n = 0;
    for (const auto& kv : lowered.collective_counts()) n += kv.second.count;
    return n;
  }());
  EXPECT_GT(collectives, 0);
  const auto& text = f.lower(a, w).as_text();  // lifetime-extended copy
  EXPECT_NE(text.find("all-reduce"), std::string::npos) << text;

  std::vector<int64_t> dims;
  for (const int64_t d : (a + 1.0f).shape()) dims.push_back(d);
  EXPECT_EQ(dims, (std::vector<int64_t>{8, 8}));
  std::vector<std::string> names;
  for (const std::string& n : mv::make_mesh({4, 2}, {"a", "b"}).axis_names()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
  size_t entries = 0;
  for (const auto& e : mv::NamedSharding(mesh, P("a", "b")).spec().entries())
    entries += e.axes.size();
  EXPECT_EQ(entries, 2u);
  const auto& platform = (a * 2.0f).sharding().platform();
  EXPECT_FALSE(platform.empty());
}

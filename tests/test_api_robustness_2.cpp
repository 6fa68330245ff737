// An outside tester's sweep of the public API (README, engine/include/meshvk): bad input gets a
// meshvk::Error naming what was wrong and what is valid, never a crash, hang or a silently wrong
// result, and the runtime answers the next valid call. Each test here failed before its fix:
// a segfault, a hang (a deadlock, an endless loop), a non-meshvk exception or a wrong value.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"
#include "meshvk/shard_map_watch.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

// Runs `body` on another thread; a body that has not returned within `seconds` hung (it holds
// the runtime's lock, so nothing after it could run): the test binary ends there, failed.
void within(int seconds, const char* what, const std::function<void()>& body) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::thread t([&] {
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(m);
    done = true;
    cv.notify_one();
  });
  std::unique_lock lock(m);
  if (!cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return done; })) {
    std::fprintf(stderr, "FAILED: %s did not return within %d s (a hang)\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  lock.unlock();
  t.join();
  if (error) std::rethrow_exception(error);
}

float scalar_value(const mv::Array& a) {
  return a.to_host<float>().at(0);
}

}  // namespace

// ShardMapWatch: an empty callback threw std::bad_function_call out of every later shard_map
// call of the thread; it is refused where it is given.
TEST(ApiRobustness2, ShardMapWatchEmptyCallback) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto total = [&] {
    return mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, mesh, {P("x")},
                         P())(mv::ones({8}));
  };
  expect_error(
      [&] {
        mv::ShardMapWatch watch(mv::ShardMapWatch::Callback{});
        total();
      },
      "callback is empty");
  EXPECT_EQ(total().to_host<float>(), std::vector<float>{8.0f});
  expect_runtime_usable();
}

// Watches destroyed outer first (two unique_ptrs): the outer's destructor reset the thread's
// watch to nothing (the inner one stopped hearing), and the inner's then to the destroyed outer
// one, which the next shard_map called: a use after free (segfault).
TEST(ApiRobustness2, ShardMapWatchesDestroyedInAnyOrder) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto run = [&] {
    mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, mesh, {P("x")},
                  P())(mv::ones({8}));
  };
  int outer_calls = 0, inner_calls = 0;
  auto outer = std::make_unique<mv::ShardMapWatch>([&](const std::string&) { ++outer_calls; });
  auto inner = std::make_unique<mv::ShardMapWatch>([&](const std::string&) { ++inner_calls; });
  run();
  EXPECT_EQ(inner_calls, 1);
  outer.reset();
  run();
  EXPECT_EQ(inner_calls, 2) << "the inner watch stopped hearing when the outer one ended";
  inner.reset();
  run();
  EXPECT_EQ(inner_calls, 2);
  EXPECT_EQ(outer_calls, 0);
  // A watch made now is the only one.
  int again = 0;
  {
    mv::ShardMapWatch watch([&](const std::string&) { ++again; });
    run();
  }
  run();
  EXPECT_EQ(again, 1);
  expect_runtime_usable();
}

// profile::Options::capacity past what a ring can hold: SIZE_MAX looped forever rounding up to
// a power of two, 2^62 events threw std::bad_alloc (the ring's byte count overflowed), and 0
// made a new ring on every start(). Now an Error, and the profiler is as it was.
TEST(ApiRobustness2, ProfileCapacityOutOfRange) {
  mv::profile::start({.capacity = 64});
  mv::sum(mv::ones({4})).to_host<float>();
  within(60, "profile::start with capacity SIZE_MAX", [] {
    expect_error([] { mv::profile::start({.capacity = std::numeric_limits<size_t>::max()}); },
                 "capacity");
  });
  expect_error([] { mv::profile::start({.capacity = size_t{1} << 62}); }, "give 1 to 2^32");
  expect_error([] { mv::profile::start({.capacity = (size_t{1} << 32) + 1}); }, "capacity");
  expect_error([] { mv::profile::start({.capacity = 0}); }, "capacity = 0");
  // Still running with what it had.
  EXPECT_TRUE(mv::profile::enabled());
  mv::profile::stop();
  EXPECT_GT(mv::profile::events().size(), 0u);
  mv::profile::clear();
  expect_runtime_usable();
}

// profile::summarize takes events a program made: a Span whose name or program is a null
// pointer was dereferenced (segfault); it reads as "".
TEST(ApiRobustness2, ProfileSummarizeNullNames) {
  mv::profile::Span s;
  s.kind = mv::profile::Kind::kernel;
  s.name = nullptr;
  s.op = nullptr;
  s.program = nullptr;
  s.start_ns = 0;
  s.end_ns = 1000;
  mv::profile::Span c = s;
  c.kind = mv::profile::Kind::collective;
  const mv::profile::Report r = mv::profile::summarize({s, c});
  EXPECT_EQ(r.overall.by_kind.at("kernel").count, 1u);
  EXPECT_EQ(r.overall.by_name.at("").count, 1u);
  EXPECT_EQ(r.overall.by_collective.at("").count, 1u);
  EXPECT_TRUE(r.programs.empty());
  EXPECT_FALSE(r.to_string().empty());
  expect_runtime_usable();
}

// copy_to_host into a null pointer wrote through it (segfault).
TEST(ApiRobustness2, CopyToHostNull) {
  expect_error([] { mv::arange(3).copy_to_host(nullptr, mv::DType::int32); }, "null pointer");
  mv::zeros({0, 3}).copy_to_host(nullptr, mv::DType::float32);  // nothing to write: fine
  expect_runtime_usable();
}

// A jit function calling itself while it is traced (recursion over shapes, as Python code under
// jax.jit may) deadlocked on the function's own mutex; asking traces() inside did too.
TEST(ApiRobustness2, JitRecursionDuringTrace) {
  std::function<mv::Array(const mv::Array&)> self;
  size_t traces_seen = 0;
  const auto f = mv::jit([&](const mv::Array& x) -> mv::Array {
    const int64_t n = x.shape()[0];
    if (n == 1) return x * 2.0f + 1.0f;
    return mv::concatenate({self(mv::slice(x, {0}, {n / 2})), self(mv::slice(x, {n / 2}, {n}))});
  });
  self = [&](const mv::Array& x) {
    traces_seen = f.traces();
    return f(x);
  };
  within(120, "a jit function calling itself in its trace", [&] {
    EXPECT_EQ(f(mv::arange(8.0f)).to_host<float>(),
              (std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15}));
    // The replay of that program, on new values.
    EXPECT_EQ(f(mv::arange(8.0f) + 1.0f).to_host<float>(),
              (std::vector<float>{3, 5, 7, 9, 11, 13, 15, 17}));
  });
  EXPECT_EQ(f.traces(), 1u);
  EXPECT_EQ(traces_seen, 0u);
  expect_runtime_usable();
}

// lax.slice with a step at least as long as the slice takes one element; a step near 2^63 made
// the length (stop - start + step - 1) / step overflow to 0 elements: a wrong result.
TEST(ApiRobustness2, SliceStepLongerThanTheSlice) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(mv::slice(mv::arange(4.0f), {0}, {4}, {huge}).to_host<float>(),
            std::vector<float>{0.0f});
  EXPECT_EQ(mv::slice(mv::arange(4.0f), {1}, {4}, {huge - 1}).to_host<float>(),
            std::vector<float>{1.0f});
  EXPECT_EQ(mv::slice(mv::arange(4.0f), {1}, {4}, {3}).to_host<float>(), std::vector<float>{1.0f});
  EXPECT_EQ(mv::slice(mv::arange(4.0f), {1}, {1}, {huge}).shape(), (mv::Shape{0}));
  // Split over 8 devices, and in two dimensions.
  const auto mesh = mv::make_mesh({8}, {"x"});
  const mv::Array x = mv::device_put(mv::arange(16.0f), mv::NamedSharding(mesh, P("x")));
  EXPECT_EQ(mv::slice(x, {3}, {16}, {huge}).to_host<float>(), std::vector<float>{3.0f});
  const mv::Array m = mv::arange(12.0f).reshape({3, 4});
  EXPECT_EQ(mv::slice(m, {0, 1}, {3, 4}, {2, huge}).to_host<float>(),
            (std::vector<float>{1.0f, 9.0f}));
  // The gradient puts the cotangent back at that element.
  const mv::Array g = mv::grad([&](const mv::Array& v) {
    return mv::sum(mv::slice(v, {2}, {4}, {huge}));
  })(mv::arange(4.0f));
  EXPECT_EQ(g.to_host<float>(), (std::vector<float>{0, 0, 1, 0}));
  expect_error([&] { mv::slice(mv::arange(4.0f), {0}, {4}, {0}); }, "must be positive");
  expect_runtime_usable();
}

// softmax_cross_entropy with a label outside [0, classes): its one_hot row was all zeros, so the
// example's label term was dropped and the loss looked fine. Now as optax's: negative labels
// count from the end, others outside [-classes, classes) give NaN; float labels are an Error.
TEST(ApiRobustness2, SoftmaxCrossEntropyLabels) {
  const mv::Array logits = mv::array({1.f, 2.f, 3.f, 1.f, 0.f, -1.f}, {2, 3});
  const float valid = scalar_value(mv::nn::softmax_cross_entropy(logits, mv::array({0, 2})));
  // By hand: mean of -log_softmax at the label.
  const auto lse = [](float a, float b, float c) {
    return std::log(std::exp(a) + std::exp(b) + std::exp(c));
  };
  EXPECT_NEAR(valid, ((lse(1, 2, 3) - 1) + (lse(1, 0, -1) + 1)) / 2, 1e-5);
  EXPECT_EQ(scalar_value(mv::nn::softmax_cross_entropy(logits, mv::array({-3, -1}))), valid);
  EXPECT_TRUE(std::isnan(scalar_value(mv::nn::softmax_cross_entropy(logits, mv::array({0, 3})))));
  EXPECT_TRUE(std::isnan(scalar_value(mv::nn::softmax_cross_entropy(logits, mv::array({-4, 0})))));
  EXPECT_TRUE(
      std::isnan(scalar_value(mv::nn::softmax_cross_entropy(logits, mv::array({INT32_MIN, 0})))));
  expect_error(
      [&] {
        mv::nn::softmax_cross_entropy(logits, mv::array({0.f, 1.f}));
      },
      "int32 class indices");
  // The gradient of valid labels is softmax - one_hot, over the batch.
  const mv::Array g = mv::grad([](const mv::Array& z) {
    return mv::nn::softmax_cross_entropy(z, mv::array({0, 2}));
  })(logits);
  const std::vector<float> gh = g.to_host<float>();
  const float e = std::exp(1.f) + std::exp(2.f) + std::exp(3.f);
  EXPECT_NEAR(gh[0], (std::exp(1.f) / e - 1) / 2, 1e-6);
  EXPECT_NEAR(gh[2], std::exp(3.f) / e / 2, 1e-6);
  // Under jit, sharded over the batch.
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::Array z = mv::device_put(mv::zeros({8, 4}), mv::NamedSharding(mesh, P("x")));
  const mv::Array labels =
      mv::device_put(mv::array({0, 1, 2, 3, 0, 1, 2, 4}), mv::NamedSharding(mesh, P("x")));
  const auto loss = mv::jit(
      [](const mv::Array& a, const mv::Array& l) { return mv::nn::softmax_cross_entropy(a, l); });
  EXPECT_TRUE(std::isnan(scalar_value(loss(z, labels))));
  EXPECT_NEAR(scalar_value(loss(z, mv::device_put(mv::array({0, 1, 2, 3, 0, 1, 2, 3}),
                                                  mv::NamedSharding(mesh, P("x"))))),
              std::log(4.0f), 1e-6);
  expect_runtime_usable();
}

// Masked classes (logit -inf) other than the label: optax's gather leaves them out and the loss
// stays finite; a one-hot product added -inf * 0 = NaN for every example. Eager, under jit and
// sharded, with the gradient (softmax - one_hot: 0 at the masked classes).
TEST(ApiRobustness2, SoftmaxCrossEntropyMaskedClasses) {
  const float inf = std::numeric_limits<float>::infinity();
  const mv::Array logits = mv::array({0.f, -inf, 1.f, 2.f, -inf, -inf, -inf, 3.f, 0.f, 1.f, 1.f, 1.f}, {4, 3});
  const mv::Array labels = mv::array({0, 0, 1, -1});
  const auto lse = [](std::vector<float> v) {
    double s = 0;
    for (const float x : v) s += std::exp(double(x));
    return std::log(s);
  };
  const double want = ((lse({0, 1}) - 0) + 0 + (lse({3, 0}) - 3) + (lse({1, 1, 1}) - 1)) / 4;
  EXPECT_NEAR(scalar_value(mv::nn::softmax_cross_entropy(logits, labels)), want, 1e-6);
  const auto loss = mv::jit(
      [](const mv::Array& a, const mv::Array& l) { return mv::nn::softmax_cross_entropy(a, l); });
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::Array sharded = mv::device_put(logits, mv::NamedSharding(mesh, P("x")));
  const mv::Array sharded_labels = mv::device_put(labels, mv::NamedSharding(mesh, P("x")));
  EXPECT_NEAR(scalar_value(loss(sharded, sharded_labels)), want, 1e-6);
  const std::vector<float> g = mv::grad([&](const mv::Array& z) {
                                 return mv::nn::softmax_cross_entropy(z, labels);
                               })(logits).to_host<float>();
  const double e = 1 + std::exp(1.0), e3 = 1 + std::exp(3.0);
  const std::vector<double> want_g = {(1 / e - 1) / 4, 0, std::exp(1.0) / e / 4, 0, 0, 0,
                                      0, -1 / e3 / 4, 1 / e3 / 4, 1.0 / 12, 1.0 / 12, (1.0 / 3 - 1) / 4};
  ASSERT_EQ(g.size(), want_g.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want_g[i], 1e-6) << "element " << i;
  // An example whose label itself is masked has an infinite loss, as optax's.
  EXPECT_EQ(scalar_value(mv::nn::softmax_cross_entropy(logits, mv::array({1, 0, 1, 0}))), inf);
}

// sgd / adam with gradients (or a state) shaped unlike the params broadcast them silently: a
// bias (2,) updated by a (3, 2) gradient came back (3, 2); a gradient for a name the params lack
// was ignored. adam with b1 = 1 (or a bad step count) gave NaN parameters.
TEST(ApiRobustness2, OptimizersCheckTheirInputs) {
  const mv::Params p{{"w", mv::ones({2, 2})}, {"b", mv::ones({2})}};
  expect_error(
      [&] {
        mv::nn::sgd(p, {{"w", mv::ones({2, 2})}, {"b", mv::ones({3, 2})}}, 0.1f);
      },
      "grads['b'] has shape (3, 2) but the parameter has (2,)");
  expect_error(
      [&] {
        mv::nn::sgd(p, {{"w", mv::ones({2})}, {"b", mv::ones({2})}}, 0.1f);
      },
      "grads['w']");
  expect_error(
      [&] {
        mv::nn::sgd(p, {{"w", mv::ones({2, 2})}, {"b", mv::ones({2})}, {"c", mv::ones({2})}}, 0.1f);
      },
      "'c' that the params lack");
  // Right: every parameter keeps its shape.
  const mv::Params q = mv::nn::sgd(p, p, 0.5f);
  EXPECT_EQ(q.at("b").to_host<float>(), (std::vector<float>{0.5f, 0.5f}));

  mv::nn::AdamState state = mv::nn::adam_init(p);
  expect_error(
      [&] {
        mv::nn::adam(p, {{"w", mv::ones({2})}, {"b", mv::ones({2})}}, state, 0.1f);
      },
      "grads['w']");
  mv::nn::AdamState other = mv::nn::adam_init({{"w", mv::ones({2})}, {"b", mv::ones({2})}});
  expect_error([&] { mv::nn::adam(p, p, other, 0.1f); }, "state's m");
  expect_error([&] { mv::nn::adam(p, p, state, 0.1f, 1.0f); }, "b1 and b2 in [0, 1)");
  expect_error([&] { mv::nn::adam(p, p, state, 0.1f, 0.9f, -0.5f); }, "b1 and b2 in [0, 1)");
  expect_error([&] { mv::nn::adam(p, p, state, 0.1f, 0.9f, 0.999f, std::nanf("")); }, "eps");
  // The step count is an int32 scalar on the device (so that jit carries it): anything else is
  // not adam_init's.
  mv::nn::AdamState bad = mv::nn::adam_init(p);
  bad.count = mv::scalar(0.f);
  expect_error([&] { mv::nn::adam(p, p, bad, 0.1f); }, "state.count is float32[]");
  bad.count = mv::Array();
  expect_error([&] { mv::nn::adam(p, p, bad, 0.1f); }, "state.count is empty");
  // The failed steps left the state alone; a good one runs from step 0 (optax's first update is
  // -lr * sign(g) at the defaults).
  EXPECT_EQ(state.count.to_host<int32_t>(), std::vector<int32_t>{0});
  const mv::Params r = mv::nn::adam(p, p, state, 0.1f);
  EXPECT_EQ(state.count.to_host<int32_t>(), std::vector<int32_t>{1});
  EXPECT_NEAR(r.at("b").to_host<float>()[0], 0.9f, 1e-6);
  expect_runtime_usable();
}

// init_mlp with a layer of size 0 was an Error from uniform about minval=-inf (the bound
// 1/sqrt(0)); mlp of params without layers gave x back, and stopped silently at a gap.
TEST(ApiRobustness2, MlpSizesAndLayers) {
  expect_error([] { mv::nn::init_mlp({0, 3}, 0); }, "sizes[0] = 0");
  expect_error([] { mv::nn::init_mlp({4, -2}, 0); }, "sizes[1] = -2");
  const mv::Array x = mv::ones({2, 3});
  expect_error([&] { mv::nn::mlp({}, x); }, "no layers.0.weight");
  expect_error([&] { mv::nn::mlp({{"weight", mv::ones({2, 3})}}, x); }, "no layers.0.weight");
  mv::Params gap = mv::nn::init_mlp({3, 4, 4, 2}, 0);
  gap.erase("layers.1.weight");
  gap.erase("layers.1.bias");
  expect_error([&] { mv::nn::mlp(gap, x); }, "layers.2.bias but the layers end at layers.0");
  EXPECT_EQ(mv::nn::mlp(mv::nn::init_mlp({3, 4, 2}, 0), x).shape(), (mv::Shape{2, 2}));
  expect_runtime_usable();
}

// make_array_from_process_local_data with a sharding over devices that do not exist said the
// sharding "places nothing on process 0's devices"; it names the device now, as device_put does.
// process_allgather inside shard_map read one device's piece as if it were the array.
TEST(ApiRobustness2, DistributedInputsOneProcess) {
  const std::vector<float> data(16, 1.0f);
  const mv::Mesh elsewhere({4}, {"x"}, {}, {100, 101, 102, 103});
  expect_error(
      [&] {
        mv::make_array_from_process_local_data(mv::NamedSharding(elsewhere, P("x")), data, {16},
                                               {16});
      },
      "uses device 100, but the runtime has devices 0..7");
  expect_error(
      [&] {
        mv::make_array_from_process_local_data(mv::SingleDeviceSharding(99), data, {16}, {16});
      },
      "uses device 99");
  const auto mesh = mv::make_mesh({8}, {"x"});
  expect_error(
      [&] {
        mv::shard_map(
            [](const mv::Array& v) {
              mv::multihost::process_allgather(v);
              return v;
            },
            mesh, {P("x")}, P("x"))(mv::ones({8}));
      },
      "per-device value inside shard_map");
  const mv::Array a =
      mv::make_array_from_process_local_data(mv::NamedSharding(mesh, P("x")), data, {16}, {16});
  EXPECT_EQ(mv::multihost::process_allgather(a), data);
  expect_runtime_usable();
}

// Mesh::coords outside the mesh returned some device's coordinates; make_mesh of sizes past the
// 2^20-device limit suggested starting a Runtime with that many devices.
TEST(ApiRobustness2, MeshPositionsAndLimits) {
  const mv::Mesh mesh({2, 4}, {"x", "y"});
  EXPECT_EQ(mesh.coords(7), (std::vector<int>{1, 3}));
  expect_error([&] { mesh.coords(8); }, "valid positions are 0..7");
  expect_error([&] { mesh.coords(-1); }, "position -1");
  try {
    mv::make_mesh({2, 4, 65536, 65536}, {"a", "b", "c", "d"});
    ADD_FAILURE() << "no error";
  } catch (const mv::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the most a mesh may have"), std::string::npos) << what;
    EXPECT_EQ(what.find("num_devices = 34359738368"), std::string::npos) << what;
  }
  expect_error([] { mv::make_mesh({0, 8}, {"a", "b"}); }, "at least 1");
  EXPECT_EQ(mv::make_mesh({2, 4}, {"a", "b"}).size(), 8);
  expect_runtime_usable();
}

// VisualizeOptions::min_width = 2^30 made every cell a GiB wide: the picture ran the machine out
// of memory. Widths are bounded as the CLI's --min-width / --max-width are (0 / 1 to 10000).
TEST(ApiRobustness2, VisualizeWidthsAreBounded) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::Sharding sharding = mv::NamedSharding(mesh, P("x", "y"));
  expect_error(
      [&] {
        mv::visualize_sharding({8, 8}, sharding, {.min_width = 10001});
      },
      "min_width 10001 is out of range; use 0 to 10000");
  expect_error(
      [&] {
        mv::visualize_sharding({8, 8}, sharding, {.max_width = 10001});
      },
      "max_width 10001 is out of range; use 1 to 10000");
  expect_error(
      [&] {
        mv::visualize_sharding({8, 8}, sharding, {.min_width = -1});
      },
      "min_width -1");
  const std::string wide =
      mv::visualize_sharding({8, 8}, sharding, {.use_color = false, .min_width = 20});
  EXPECT_NE(wide.find("CPU 7"), std::string::npos) << wide;
  expect_runtime_usable();
}

// An enum value cast from an integer: zeros(shape, DType(17)) made an array printed as
// "unknown", astype / one_hot to it failed with an internal kernel compile error, and
// take(..., TakeMode(9)) was taken as fill.
TEST(ApiRobustness2, EnumValuesAreChecked) {
  const auto bad = static_cast<mv::DType>(17);
  expect_error([&] { mv::zeros({2}, bad); }, "zeros: DType(17) is not a dtype");
  expect_error([&] { mv::ones({2}, bad); }, "ones: DType(17)");
  expect_error([&] { mv::zeros({8}, bad, mv::NamedSharding(mv::make_mesh({8}, {"x"}), P("x"))); },
               "DType(17)");
  expect_error([&] { mv::astype(mv::zeros({2}), bad); }, "astype: DType(17) is not a dtype");
  expect_error([&] { mv::arange(2.0f).astype(bad); }, "astype");
  expect_error([&] { mv::one_hot(mv::array({0, 1}), 2, bad); }, "one_hot: DType(17)");
  expect_error([&] { mv::take(mv::arange(4.0f), mv::array({9}), 0, static_cast<mv::TakeMode>(9)); },
               "TakeMode(9) is not a mode");
  EXPECT_EQ(mv::take(mv::arange(4.0f), mv::array({9}), 0, mv::TakeMode::clip).to_host<float>(),
            std::vector<float>{3.0f});
  expect_runtime_usable();
}

// x.sum(axis) with an axis wider than int (int64_t{1} << 32, or INT64_MAX) cast it to int:
// 2^32 became axis 0 and INT64_MAX axis -1, silently reducing another dimension.
TEST(ApiRobustness2, WideAxesAreNotWrapped) {
  const mv::Array x = mv::arange(6.0f).reshape({2, 3});
  const int64_t wraps_to_0 = int64_t{1} << 32;
  expect_error([&] { x.sum(wraps_to_0); },
               "sum: axis 4294967296 is out of range for an array of rank 2");
  expect_error([&] { mv::sum(x, std::numeric_limits<int64_t>::max()); },
               "axis 9223372036854775807");
  expect_error([&] { mv::max(x, std::numeric_limits<int64_t>::min(), true); },
               "max: axis -9223372036854775808");
  expect_error([&] { x.mean(size_t{1} << 32); }, "mean: axis 4294967296");
  expect_error([&] { x.transpose(int64_t{1}, wraps_to_0); }, "transpose: axis 4294967296");
  // In range, any integer type is fine.
  EXPECT_EQ(x.sum(int64_t{-1}).to_host<float>(), (std::vector<float>{3.0f, 12.0f}));
  EXPECT_EQ(mv::min(x, size_t{0}).to_host<float>(), (std::vector<float>{0.0f, 1.0f, 2.0f}));
  EXPECT_EQ(x.transpose(int64_t{1}, uint8_t{0}).shape(), (mv::Shape{3, 2}));
  expect_runtime_usable();
}

// jit of a function of 8 or more Array arguments threw "the function cannot be called with 8
// Array arguments" at the call (the type-erased path tries arities 0 to 7 only).
TEST(ApiRobustness2, JitOfManyArrayArguments) {
  const auto eight =
      mv::jit([](const mv::Array& a, const mv::Array& b, const mv::Array& c, const mv::Array& d,
                 const mv::Array& e, const mv::Array& f, const mv::Array& g, const mv::Array& h) {
        return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
      });
  const mv::Array one = mv::ones({2});
  EXPECT_EQ(eight(one, one, one, one, one, one, one, one).to_host<float>(),
            (std::vector<float>{36, 36}));
  EXPECT_EQ(eight(one, one, one, one, one, one, one, one + 1).to_host<float>(),
            (std::vector<float>{44, 44}));
  EXPECT_EQ(eight.traces(), 1u);
  EXPECT_NE(eight.program_text(one, one, one, one, one, one, one, one).find("in7"),
            std::string::npos);
  const auto many = mv::jit([](const mv::Array& x0, const auto&... xs) { return (x0 + ... + xs); });
  EXPECT_EQ(many(one, one, one).to_host<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(many(one, one, one, one, one, one, one, one, one, one, one, one, one, one, one, one,
                 one, one, one, one)
                .to_host<float>(),
            (std::vector<float>{20, 20}));
  expect_runtime_usable();
}

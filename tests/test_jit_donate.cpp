// jit's donate_argnums (as jax.jit's): a donated Array is deleted by the call, reading it raises an
// Error naming the donation, and a result passed back donated is not copied before the call
// overwrites it. Results are the bits of the same steps without donation, on one device and on
// eight, with plain and structured arguments.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "profile_checks.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

Array put(const std::vector<float>& v, const mv::Shape& shape, const mv::Sharding& s) {
  return mv::device_put(std::span<const float>(v), shape, s);
}

void expect_bits(const Array& got, const Array& want, const std::string& what) {
  const std::vector<float> g = got.to_host<float>(), w = want.to_host<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &w[i], 4) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << w[i];
      return;
    }
}

// Copies of lent results made before a replay (profile spans of op "copy" on a device).
size_t result_copies(const std::vector<mv::profile::Event>& events) {
  size_t n = 0;
  for (const auto& s : spans_of(events, test_runtime_id()))
    if (s.device >= 0 && s.kind == mv::profile::Kind::copy && std::string(s.op) == "copy") ++n;
  return n;
}

// A meshvk::Error from `body` whose message holds every one of `needles`.
template <class F>
void expect_error_with(F body, const std::vector<std::string>& needles) {
  const std::string message = message_of(body);
  for (const std::string& n : needles) EXPECT_NE(message.find(n), std::string::npos) << message;
}

// A momentum step: a parameter and its velocity in, both updated out.
std::vector<Array> momentum(const Array& p, const Array& v, const Array& g) {
  const Array v2 = 0.9f * v + g;
  return {p - 0.01f * v2, v2};
}

}  // namespace

TEST(JitDonate, TrainingLoopMatchesWithoutDonationAndCopiesNothing) {
  for (const bool eight : {false, true}) {
    const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
    const mv::Sharding layout = eight ? mv::Sharding(mv::NamedSharding(mesh, P("x"))) : mv::Sharding(mv::SingleDeviceSharding(0));
    const mv::Shape shape{8 * 37, 13};  // not a multiple of 4 per device
    const int64_t n = 8 * 37 * 13;
    const auto f = mv::jit(momentum);
    const auto donating = mv::jit(momentum, {.donate_argnums = {0, 1}});
    Array p = put(random_floats(static_cast<size_t>(n), 1), shape, layout), v = mv::zeros_like(p);
    Array pd = put(random_floats(static_cast<size_t>(n), 1), shape, layout), vd = mv::zeros_like(pd);
    size_t copies = 0, donated_copies = 0;
    for (int step = 0; step < 5; ++step) {
      const Array g = put(random_floats(static_cast<size_t>(n), 10 + step), shape, layout);
      const Array p_before = pd;
      Profiling on;
      auto out = f(p, v, g);
      mv::profile::flush();
      copies += result_copies(mv::profile::events());
      mv::profile::clear();
      auto out_d = donating(pd, vd, g);
      mv::profile::flush();
      donated_copies += result_copies(mv::profile::events());
      EXPECT_TRUE(p_before.is_deleted()) << "step " << step;
      EXPECT_TRUE(pd.is_deleted());
      EXPECT_FALSE(g.is_deleted());
      p = out[0], v = out[1], pd = out_d[0], vd = out_d[1];
      expect_bits(pd, p, std::string(eight ? "8 devices" : "1 device") + ", step " + std::to_string(step));
      expect_bits(vd, v, "velocity, step " + std::to_string(step));
    }
    // Without donation every step after the first copies the two results it is given back
    // (on every device holding a piece); with it, none.
    EXPECT_GT(copies, 0u);
    EXPECT_EQ(donated_copies, 0u) << (eight ? "8 devices" : "1 device");
  }
}

TEST(JitDonate, ADonatedArrayIsDeletedAndSaysSo) {
  const auto f = mv::jit([](const Array& a, const Array& b) { return a * 2.0f + b; },
                         {.name = "scale", .donate_argnums = {0}});
  const Array a = mv::arange(10.0f), b = mv::ones({10});
  const Array pending = a * 3.0f;  // not yet computed: it reads a when used
  const Array used = mv::copy(a * 5.0f);
  (void)used.to_host<float>();
  const Array r = f(a, b);
  EXPECT_TRUE(a.is_deleted());
  EXPECT_FALSE(b.is_deleted());
  EXPECT_FALSE(r.is_deleted());
  EXPECT_EQ(a.shape(), mv::Shape{10});  // its metadata stays
  EXPECT_EQ(r.to_host<float>()[3], 7.0f);
  EXPECT_EQ(used.to_host<float>()[2], 10.0f);
  expect_error_with([&] { (void)a.to_host<float>(); }, {"donated to jit(scale)", "donate_argnums", "deleted"});
  expect_error_with([&] { (void)(a + 1.0f).to_host<float>(); }, {"donated to jit(scale)"});
  expect_error_with([&] { (void)pending.to_host<float>(); }, {"donated to jit(scale)", "use such values before the call"});
  expect_error_with([&] { (void)f(a, b); }, {"argument 0 was donated to jit(scale) already"});
  // The runtime goes on.
  EXPECT_EQ(f(mv::arange(3.0f), mv::ones({3})).to_host<float>()[2], 5.0f);
}

TEST(JitDonate, BadDonationsAreErrors) {
  const auto two = [](const Array& a, const Array& b) { return a + b; };
  const Array x = mv::ones({4});
  expect_error_with([&] { (void)mv::jit(two, {.name = "g", .donate_argnums = {2}})(x, mv::ones({4})); },
               {"jit(g)", "donate_argnums has 2", "2 arguments", "0 to 1"});
  expect_error_with([&] { (void)mv::jit(two, {.name = "g", .donate_argnums = {0}})(x, x); },
               {"passed donated and again as Array 1", "pass a copy"});
  EXPECT_FALSE(x.is_deleted()) << "a refused call deletes nothing";
  const auto scaled = [](const Array& a, int k) { return a * static_cast<float>(k); };
  expect_error_with([&] { (void)mv::jit(scaled, {.name = "s", .static_argnums = {1}, .donate_argnums = {1}})(x, 3); },
               {"jit(s)", "donate_argnums has 1", "static value"});
  // Donated in both positions: deleted once.
  const Array y = mv::ones({4});
  EXPECT_EQ(mv::jit(two, {.donate_argnums = {0, 1}})(y, y).to_host<float>()[0], 2.0f);
  EXPECT_TRUE(y.is_deleted());
}

TEST(JitDonate, StructuredArgumentsDonateEveryArray) {
  const auto step = [](const mv::Params& params, const mv::Params& grads, float lr) {
    mv::Params out;
    for (const auto& [name, p] : params) out.emplace(name, p - lr * grads.at(name));
    return out;
  };
  const auto f = mv::jit(step, {.static_argnums = {2}, .donate_argnums = {0}});
  mv::Params params{{"w", mv::ones({3, 5})}, {"b", mv::zeros({5})}};
  const mv::Params grads{{"w", mv::ones({3, 5})}, {"b", mv::ones({5})}};
  for (int i = 0; i < 3; ++i) {
    const mv::Params before = params;
    params = f(params, grads, 0.5f);
    EXPECT_TRUE(before.at("w").is_deleted());
    EXPECT_TRUE(before.at("b").is_deleted());
    EXPECT_FALSE(grads.at("w").is_deleted());
  }
  EXPECT_EQ(params.at("w").to_host<float>()[0], 1.0f - 1.5f);
  EXPECT_EQ(params.at("b").to_host<float>()[4], -1.5f);
}

TEST(JitDonate, NestedCallsDonateNothing) {
  const auto inner = mv::jit([](const Array& a) { return a + 1.0f; }, {.donate_argnums = {0}});
  const auto outer = mv::jit([&](const Array& a) { return inner(a) * 2.0f + a; });
  const Array x = mv::arange(4.0f);
  const Array r = outer(x);
  EXPECT_FALSE(x.is_deleted());
  EXPECT_EQ(r.to_host<float>()[3], 11.0f);
  // Under grad the call runs inline too.
  const Array g = mv::grad([&](const Array& a) { return mv::sum(inner(a) * a); })(x);
  EXPECT_FALSE(x.is_deleted());
  EXPECT_EQ(g.to_host<float>()[1], 3.0f);  // d/da (a + 1) a = 2a + 1
}

TEST(JitDonate, ResultsReturnedUnchangedAndFedBackSwapped) {
  // f(x, y) = (y, x) and f(x, y) = (x + y, x): a result that is the program's own input, fed
  // back in another position. The replay's refresh copies one input buffer into another: found
  // by review to read an input it had already overwritten (with in_shardings even without
  // donation). Checked against the host.
  const auto swap = [](const Array& x, const Array& y) { return std::vector<Array>{y, x}; };
  const auto fold = [](const Array& x, const Array& y) { return std::vector<Array>{x + y, x}; };
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  const mv::Sharding split = mv::NamedSharding(mesh, P("x"));
  for (const bool donate : {false, true}) {
    mv::JitOptions options{.in_shardings = {split, split}};
    if (donate) options.donate_argnums = {0, 1};
    const auto f = mv::jit(swap, options);
    const auto g = mv::jit(fold, options);
    Array a = mv::device_put(mv::arange(16.0f), split), b = mv::device_put(mv::arange(16.0f) + 100.0f, split);
    Array p = mv::device_put(mv::ones({16}), split), q = mv::device_put(mv::ones({16}) * 2.0f, split);
    float fp = 1, fq = 2;
    for (int step = 0; step < 4; ++step) {
      auto r = f(a, b);
      a = r[0], b = r[1];
      auto s = g(p, q);
      p = s[0], q = s[1];
      const float np = fp + fq;
      fq = fp, fp = np;
      const bool swapped = step % 2 == 0;
      EXPECT_EQ(a.to_host<float>()[5], swapped ? 105.0f : 5.0f) << "donate " << donate << ", step " << step;
      EXPECT_EQ(b.to_host<float>()[5], swapped ? 5.0f : 105.0f) << "donate " << donate << ", step " << step;
      EXPECT_EQ(p.to_host<float>()[9], fp) << "donate " << donate << ", step " << step;
      EXPECT_EQ(q.to_host<float>()[9], fq) << "donate " << donate << ", step " << step;
    }
  }
}

TEST(JitDonate, LoweringAndFailedCallsDeleteNothingTheyShouldNot) {
  const auto f = mv::jit([](const Array& a, const Array& b) { return a * b; }, {.name = "lw", .donate_argnums = {0}});
  const Array x = mv::ones({5}), y = mv::ones({5});
  (void)f.program_text(x, y);
  (void)f.lower(x, y);
  EXPECT_FALSE(x.is_deleted()) << "lowering donates nothing, as in JAX";
  // A call that fails on another argument (deleted already) keeps its donated one.
  const auto g = mv::jit([](const Array& a) { return a; }, {.donate_argnums = {0}});
  const Array gone = mv::ones({5});
  (void)g(gone);
  ASSERT_TRUE(gone.is_deleted());
  expect_error_with([&] { (void)f(x, gone); }, {"donated to"});
  EXPECT_FALSE(x.is_deleted()) << "a failed call deleted its donated argument";
  EXPECT_EQ(f(x, y).to_host<float>()[0], 1.0f);
  EXPECT_TRUE(x.is_deleted());
}

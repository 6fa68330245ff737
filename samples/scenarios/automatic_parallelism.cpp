// The automatic and explicit parts of the tutorials: jit's sharding propagation ("computation
// follows data") from 000 and 001, sharding in types (explicit mode) from 000, the `layer`
// example in all three modes, the incompatible-device errors and uncommitted arrays of 001,
// with_sharding_constraint, and the partitioned matmul of 002 with its program text.
//
//   build/bin/automatic_parallelism [--size N] [--golden DIR] [--color | --no-color]
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include <meshvk/meshvk.hpp>

#include "scenario.hpp"
#include "tutorial_values.hpp"
#include <meshvk/profile.hpp>  // profile hook: --trace

namespace mv = meshvk;
namespace meshvk::scenarios {
using mv::Array;
using mv::P;

namespace {

// One run's output stream and failed checks.
struct Run {
  std::ostream& out;
  const ScenarioContext& ctx;
  int failures = 0;
  void check(const std::string& what, bool ok) {
    out << what << ": " << (ok ? "equal" : "NOT EQUAL") << "\n";
    if (!ok) ++failures;
  }
};

bool close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol * std::max(1.0f, std::fabs(b[i]))))
      return false;  // NaN fails
  return true;
}

void intro_000(Run& r, const mv::VisualizeOptions& viz) {
  r.out << "=== 000: automatic parallelism with jit ===\n\n";
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto arr_sharded = mv::device_put(mv::arange(32.0f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto f_elementwise = mv::jit([](const Array& x) { return 2 * mv::sin(x) + 1; });
  const auto result = f_elementwise(arr_sharded);
  r.out << ">>> result = f_elementwise(arr_sharded); print(\"shardings match:\", result.sharding == arr_sharded.sharding)\n"
            << "shardings match: " << (result.sharding() == arr_sharded.sharding() ? "True" : "False") << "\n\n";
  const auto f_contract = mv::jit([](const Array& x) { return mv::sum(x, {0}); });
  const auto contracted = f_contract(arr_sharded);
  r.out << ">>> result = f_contract(arr_sharded); jax.debug.visualize_array_sharding(result); print(result)\n"
            << mv::visualize_array_sharding(contracted, viz) << contracted << "\n";
  r.ctx.publish("arr_sharded", arr_sharded);
  r.ctx.publish("f_contract(arr_sharded)", contracted);
  r.ctx.publish_program("f_contract", f_contract.lower(arr_sharded));
  r.check("f_contract == [48 52 56 60 64 68 72 76]", contracted.to_host<float>() == std::vector<float>{48, 52, 56, 60, 64, 68, 72, 76});
  r.out << "program text of f_contract:\n" << f_contract.program_text(arr_sharded) << "\n";

  r.out << "=== 000: sharding in types (explicit mode) ===\n\n";
  const auto some_array = mv::arange(8);
  r.out << ">>> print(f\"JAX-level type of some_array: {jax.typeof(some_array)}\")\n"
            << "JAX-level type of some_array: " << mv::type_of(some_array) << "\n";
  std::string traced;
  const auto foo = mv::jit([&](const Array& x) {
    traced = mv::type_of(x);
    return x + x;
  });
  const auto doubled = foo(some_array);
  r.out << "JAX-level type of x during tracing: " << traced << "\n" << doubled << "\n\n";
  const auto explicit_mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const auto replicated_array = mv::arange(8).reshape({4, 2});
  const auto sharded_array = mv::device_put(replicated_array, mv::NamedSharding(explicit_mesh, P("X", mv::None)));
  r.out << "replicated_array type: " << mv::type_of(replicated_array) << "\n"
            << "sharded_array type: " << mv::type_of(sharded_array) << "\n\n";
  const auto arg0 = mv::device_put(mv::arange(4).reshape({4, 1}), mv::NamedSharding(explicit_mesh, P("X", mv::None)));
  const auto arg1 = mv::device_put(mv::arange(8).reshape({1, 8}), mv::NamedSharding(explicit_mesh, P(mv::None, "Y")));
  const auto add_arrays = mv::jit([&r](const Array& x, const Array& y) {
    const auto ans = x + y;
    r.out << "x sharding: " << mv::type_of(x) << "\ny sharding: " << mv::type_of(y) << "\nans sharding: " << mv::type_of(ans) << "\n";
    return ans;
  });
  r.out << ">>> with jax.sharding.use_mesh(mesh): add_arrays(arg0, arg1)\n";
  add_arrays(arg0, arg1);
  r.out << "\n";
}

void layer_three_modes(Run& r, const std::string& golden) {
  r.out << "=== 000: the layer example in three modes ===\n\n";
  if (!std::filesystem::exists(golden + "/layer/x.npy")) {
    r.out << "note: " << golden << "/layer/*.npy not found; pass --golden DIR to run this part\n\n";
    return;
  }
  const auto x = mv::load_npy(golden + "/layer/x.npy");
  const auto weights = mv::load_npy(golden + "/layer/weights.npy");
  const auto bias = mv::load_npy(golden + "/layer/bias.npy");
  const auto expected = mv::load_npy(golden + "/layer/expected.npy").to_host<float>();
  auto layer = [](const Array& x, const Array& w, const Array& b) { return mv::sigmoid(mv::matmul(x, w) + b); };
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto auto_out = mv::jit(layer)(mv::device_put(x, mv::NamedSharding(mesh, P("x"))),
                                       mv::device_put(weights, mv::NamedSharding(mesh, P())), bias);
  r.out << ">>> layer(x_sharded, weights_sharded, bias)  # jit, x P('x'), weights P()\n" << auto_out << "\n";
  const auto explicit_mesh = mv::make_mesh({8}, {"X"}, {mv::AxisType::Explicit});
  const auto layer_auto = mv::jit([&](const Array& x, const Array& w, const Array& b) {
    r.out << "x sharding: " << mv::type_of(x) << "\nweights sharding: " << mv::type_of(w) << "\nbias sharding: " << mv::type_of(b) << "\n";
    const auto out = layer(x, w, b);
    r.out << "out sharding: " << mv::type_of(out) << "\n";
    return out;
  });
  r.out << ">>> with jax.sharding.use_mesh(explicit_mesh): layer_auto(x_sharded, weights_sharded, bias)\n";
  const auto explicit_out = layer_auto(mv::device_put(x, mv::NamedSharding(explicit_mesh, P("X"))),
                                       mv::device_put(weights, mv::NamedSharding(explicit_mesh, P())), bias);
  r.out << explicit_out << "\n";
  const auto manual_out = mv::shard_map(
      [](const Array& x, const Array& w, const Array& b) { return mv::sigmoid(mv::psum(mv::matmul(x, w), "x") + b); }, mesh,
      {P("x"), P("x", mv::None), P()}, P())(x, weights, bias);
  r.out << ">>> layer_sharded(x, weights, bias)  # shard_map with psum(x @ weights, 'x')\n" << manual_out << "\n";
  r.check("jit layer vs golden (1e-6)", close(auto_out.to_host<float>(), expected, 1e-6f));
  r.check("explicit layer vs golden (1e-6)", close(explicit_out.to_host<float>(), expected, 1e-6f));
  r.check("shard_map layer vs golden (1e-6)", close(manual_out.to_host<float>(), expected, 1e-6f));
  report_printed(r.ctx, "jit layer vs the tutorial's printed values (printed precision)", auto_out, kTutorialLayerValues);
  report_printed(r.ctx, "explicit layer vs the tutorial's printed values (printed precision)", explicit_out, kTutorialLayerValues);
  report_printed(r.ctx, "shard_map layer vs the tutorial's printed values (printed precision)", manual_out, kTutorialLayerValues);
  r.out << "\n";
}

// Runs f and waits for every device, as .block_until_ready() does.
void block(const std::function<Array()>& f) {
  (void)f();
  mv::Runtime::current().synchronize();
}

void follows_data_001(Run& r, int64_t n, int64_t m, const mv::VisualizeOptions& viz) {
  r.out << "=== 001: computation follows data (" << n << "x" << n << ") ===\n\n";
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto x = mv::normal(mv::random_key(0), {n, n});  // uncommitted, on device 0
  const auto y = mv::device_put(x, mv::NamedSharding(mesh, P("a", "b")));
  const auto sin = mv::jit([](const Array& v) { return mv::sin(v); });
  r.out << ">>> x.apply_jax_(jax.device_put, NamedSharding(mesh, P('a', 'b'))); print('input sharding:'); visualize_array_sharding(x)\n"
        << "input sharding:\n" << mv::visualize_array_sharding(y, viz);
  const auto z = sin(y);
  r.out << ">>> y = torch.sin(x); print('output sharding:'); visualize_array_sharding(y)\noutput sharding:\n"
        << mv::visualize_array_sharding(z, viz);
  r.check("sin keeps P('a', 'b')", z.sharding() == y.sharding());
  report_timing(r.ctx, ">>> %timeit -n 5 -r 5 torch.sin(x).jax().block_until_ready()  # x on a single device",
                timeit([&] { block([&] { return sin(x); }); }, 5, 5),
                "144 ms \u00b1 13.5 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)  # 8192x8192");
  report_timing(r.ctx, ">>> %timeit -n 5 -r 5 torch.sin(y).jax().block_until_ready()  # y sharded across 8 devices",
                timeit([&] { block([&] { return sin(y); }); }, 5, 5),
                "68.6 ms \u00b1 1.25 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)  # 8192x8192");
  r.out << "\n";

  // The matmul of x by itself, at --matmul-size (the tutorial's 8192 takes minutes on a CPU adapter).
  const auto xm = m == n ? x : mv::normal(mv::random_key(0), {m, m});
  r.out << "--- matmul (" << m << "x" << m << ")" << (m == n ? "" : ": x = jax.random.normal(key(0), (" + std::to_string(m) + ", " + std::to_string(m) + "))") << " ---\n\n";
  const auto lhs = mv::device_put(xm, mv::NamedSharding(mesh, P("a", mv::None)));
  const auto rhs = mv::device_put(xm, mv::NamedSharding(mesh, P(mv::None, "b")));
  const auto mm = mv::jit([](const Array& a, const Array& b) { return mv::matmul(a, b); });
  const auto w = mm(lhs, rhs);
  r.out << ">>> y = x.apply_jax(jax.device_put, NamedSharding(mesh, P('a', None)))\n"
        << ">>> z = x.apply_jax(jax.device_put, NamedSharding(mesh, P(None, 'b')))\n"
        << ">>> w = torch.matmul(y, z)\nlhs sharding:\n" << mv::visualize_array_sharding(lhs, viz) << "rhs sharding:\n"
        << mv::visualize_array_sharding(rhs, viz) << "out sharding:\n" << mv::visualize_array_sharding(w, viz);
  const auto counts = mm.lower(lhs, rhs).collective_counts();
  r.check("out is P('a', 'b') with no communication", w.sharding() == mv::Sharding(mv::NamedSharding(mesh, P("a", "b"))) && counts.empty());
  const auto x_single = mv::device_put(xm, mv::SingleDeviceSharding(0, mv::Runtime::current().platform()));
  r.out << ">>> x_single = x.apply_jax(jax.device_put, jax.devices()[0]); visualize_array_sharding(x_single)\n"
        << mv::visualize_array_sharding(x_single, viz);
  const bool allclose = close(mm(x_single, x_single).to_host<float>(), w.to_host<float>(), 1e-3f);
  r.out << ">>> torch.allclose(torch.matmul(x_single, x_single).cpu(), torch.matmul(y, z).cpu())\n"
        << (allclose ? "True" : "False") << "\n";
  r.check("sharded matmul vs one device (allclose)", allclose);
  const std::string size_note = "  # 8192x8192";
  report_timing(r.ctx, ">>> %timeit torch.matmul(x_single, x_single).jax().block_until_ready()  # -n 1 -r 3 here",
                timeit([&] { block([&] { return mm(x_single, x_single); }); }, 1, 3),
                "1.89 s \u00b1 20.5 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)" + size_note);
  report_timing(r.ctx, ">>> %timeit torch.matmul(y, z).apply_jax(jax.block_until_ready)  # -n 1 -r 3 here",
                timeit([&] { block([&] { return mm(lhs, rhs); }); }, 1, 3),
                "1.93 s \u00b1 120 ms per loop (mean \u00b1 std. dev. of 5 runs, 5 loops each)" + size_note);
  // Even copying a sharded Array produces a result with the sharding of the input.
  const auto w_copy = mv::copy(w);
  r.out << ">>> w_copy = w.apply_jax(jnp.copy); visualize_array_sharding(w_copy)\n" << mv::visualize_array_sharding(w_copy, viz);
  r.check("copy(w) keeps w's sharding", w_copy.sharding() == w.sharding());
  r.out << "\n";
}

void errors_001(Run& r, int64_t n, const mv::VisualizeOptions& viz) {
  r.out << "=== 001: incompatible devices, uncommitted arrays, with_sharding_constraint (" << n << "x" << n << ") ===\n\n";
  const auto x = mv::normal(mv::random_key(0), {n, n});
  const auto add = mv::jit([](const Array& a, const Array& b) { return a + b; });
  const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> cases = {
      {{0, 1, 2, 3}, {4, 5, 6, 7}}, {all, {0, 1, 2, 3, 6, 7, 4, 5}}};
  const char* const code[] = {
      ">>> sharding1 = NamedSharding(Mesh(jax.devices()[:4], 'x'), P('x'))\n"
      ">>> sharding2 = NamedSharding(Mesh(jax.devices()[4:], 'x'), P('x'))\n",
      ">>> permuted_devices = [devices[i] for i in [0, 1, 2, 3, 6, 7, 4, 5]]\n"
      ">>> sharding1 = NamedSharding(Mesh(devices, 'x'), P('x'))\n"
      ">>> sharding2 = NamedSharding(Mesh(permuted_devices, 'x'), P('x'))\n"};
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& [first, second] = cases[k];
    const auto m1 = mv::make_mesh({static_cast<int>(first.size())}, {"x"}, {}, first);
    const auto m2 = mv::make_mesh({static_cast<int>(second.size())}, {"x"}, {}, second);
    r.out << code[k] << ">>> y = x.apply_jax(jax.device_put, sharding1); z = x.apply_jax(jax.device_put, sharding2)\n"
          << ">>> try: y + z\n>>> except ValueError as e: print_exception(e)\n";
    try {
      add(mv::device_put(x, mv::NamedSharding(m1, P("x"))), mv::device_put(x, mv::NamedSharding(m2, P("x"))));
      r.check("incompatible devices raise an error", false);
    } catch (const mv::Error& e) {
      // JAX's message, then the hint meshvk adds after "; ".
      const std::string message = e.what();
      const size_t hint = message.find("; ");
      r.out << exception_text("ValueError", message.substr(0, hint), viz.use_color.value_or(false)) << "\n";
      if (hint != std::string::npos) r.out << "(meshvk adds: " << message.substr(hint + 2) << ")\n";
    }
    r.out << "\n";
  }
  const auto sharding1 = mv::NamedSharding(mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3}), P("x"));
  const auto y = mv::device_put(x, sharding1);
  (void)(y + mv::ones_like(y)).sharding();
  (void)(y + mv::arange(0, static_cast<int32_t>(y.size())).reshape(y.shape())).sharding();
  r.out << ">>> y + torch.ones_like(y); y + torch.arange(0, y.nelement()).reshape(y.shape); print('no error!')\nno error!\n\n";
}

// Each case in its own scope: at 8192x8192 every array is 256 MiB, and a replicated one is that
// on each device, so a case's arrays and compiled program are let go before the next.
void constraints_001(Run& r, int64_t n, const mv::VisualizeOptions& viz) {
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto xr = mv::normal(mv::random_key(1), {n, n});  // x = torch.randn((8192, 8192)): one device
  {
    const auto f = mv::jit([&](const Array& v) { return mv::with_sharding_constraint(v + 1, mv::NamedSharding(mesh, P("y", "x"))); });
    r.out << ">>> def f(x): x = x + 1; x.shard_(NamedSharding(mesh, P('y', 'x'))); return x\n"
          << ">>> visualize_array_sharding(x); y = f(x); visualize_array_sharding(y)\n"
          << mv::visualize_array_sharding(xr, viz);
    const auto constrained = f(xr);
    r.out << mv::visualize_array_sharding(constrained, viz);
    r.check("f(x) is laid out P('y', 'x')", constrained.sharding() == mv::Sharding(mv::NamedSharding(mesh, P("y", "x"))));
    r.ctx.publish("f(x) constrained to P('y', 'x')", constrained);
  }
  const auto g = mv::jit([&](const Array& v) { return mv::with_sharding_constraint(v + 1, mv::NamedSharding(mesh, P())); });
  r.out << ">>> def f(x): x = x + 1; y = x.shard_(NamedSharding(mesh, P())); return y\n"
        << ">>> visualize_array_sharding(x); y = f(x); visualize_array_sharding(y)\n"
        << mv::visualize_array_sharding(xr, viz);
  const auto rg = g(xr);
  r.out << mv::visualize_array_sharding(rg, viz);
  r.check("constraint P() gives a fully replicated output", rg.sharding().is_fully_replicated() && rg.devices().size() == 8);
  r.out << "\n";
}

void matmul_square_002(Run& r) {
  r.out << "=== 002: sharded matmul with out_shardings ===\n\n";
  const auto mesh = mv::make_mesh({2, 2}, {"X", "Y"}, {}, {0, 1, 2, 3});
  const auto in = mv::device_put(mv::normal(mv::random_key(3), {8, 2048}), mv::NamedSharding(mesh, P("X", "Y")));
  const auto w = mv::device_put(mv::normal(mv::random_key(4), {2048, 8192}), mv::NamedSharding(mesh, P("Y", mv::None)));
  const auto matmul_square = mv::jit([](const Array& in, const Array& w) { return mv::einsum("bd,df->bf", mv::square(in), w); },
                                     {.out_shardings = {mv::NamedSharding(mesh, P("X", mv::None))}, .name = "matmul_square"});
  const auto lowered = matmul_square.lower(in, w);
  r.out << ">>> jax.jit(matmul_square, out_shardings=P('X', None)).lower(In, W).as_text()\n" << lowered.as_text();
  r.ctx.publish_program("matmul_square", lowered);
  r.ctx.publish("In", in);
  r.ctx.publish("W", w);
  const auto& counts = lowered.collective_counts();
  r.check("one all-reduce after a local [4,1024] x [1024,8192] matmul",
        counts.size() == 1 && counts.count("all-reduce") && lowered.as_text().find("(4, 1024) x (1024, 8192)") != std::string::npos);
  r.out << "\n";
}

// The tutorial's two matmuls with the hidden activations forced to P('x', 'y') in between. Its
// mesh is the (2, 2) TPU v5e of the matmul before; the constraint names the axes 'x', 'y'.
void constraint_between_matmuls_002(Run& r) {
  r.out << "=== 002: with_sharding_constraint between two matmuls ===\n\n";
  const auto mesh = mv::make_mesh({2, 2}, {"x", "y"}, {}, {0, 1, 2, 3});
  const auto xy = mv::NamedSharding(mesh, P("x", "y"));
  const auto x = mv::device_put(mv::normal(mv::random_key(5), {8, 2048}), xy);
  const auto Win = mv::device_put(mv::normal(mv::random_key(6), {2048, 8192}), mv::NamedSharding(mesh, P("y", mv::None)));
  const auto Wout = mv::device_put(mv::normal(mv::random_key(7), {2048, 8192}), mv::NamedSharding(mesh, P("y", mv::None)));
  std::optional<mv::Sharding> hidden_sharding;
  const auto matmul = mv::jit(
      [&](const Array& x, const Array& Win, const Array& Wout) {
        auto hidden = mv::einsum("bd,df->bf", x, Win);
        hidden = mv::with_sharding_constraint(hidden, xy);
        hidden_sharding = hidden.sharding();
        return mv::einsum("bf,df->bd", hidden, Wout);
      },
      {.name = "matmul"});
  const auto lowered = matmul.lower(x, Win, Wout);
  r.out << ">>> def matmul(x, Win, Wout):\n"
        << "...   hidden = jnp.einsum('bd,df->bf', x, Win)\n"
        << "...   hidden = jax.lax.with_sharding_constraint(hidden, P('x', 'y'))\n"
        << "...   return jnp.einsum('bf,df->bd', hidden, Wout)\n"
        << ">>> # x (8, 2048) P('x', 'y'), Win (2048, 8192) P('y', None), Wout (2048, 8192) P('y', None)\n"
        << ">>> jax.jit(matmul).lower(x, Win, Wout).as_text()\n"
        << lowered.as_text();
  r.out << "collectives:";
  for (const auto& [kind, c] : lowered.collective_counts()) r.out << " " << kind << " x" << c.count;
  r.out << "\n";
  r.ctx.publish_program("matmul", lowered);
  r.check("hidden is laid out P('x', 'y')", hidden_sharding && *hidden_sharding == mv::Sharding(xy));
  const auto out = matmul(x, Win, Wout);
  const auto single = [](const Array& a) { return mv::array(std::span<const float>(a.to_host<float>()), a.shape()); };
  const auto reference = mv::einsum("bf,df->bd", mv::einsum("bd,df->bf", single(x), single(Win)), single(Wout));
  // Sums of 8192 products of sums of 2048: compared relative to the largest value.
  const float largest = mv::max(mv::abs(reference)).to_host<float>()[0];
  const float diff = max_abs_diff(out, reference);
  r.out << "max |matmul(x, Win, Wout) - one device| = " << diff << " (largest |value| " << largest << ")\n";
  r.check("matmul(x, Win, Wout) vs one device (1e-5 of the largest value)", diff <= 1e-5f * largest);
  r.out << "\n";
}

}  // namespace


Scenario automatic_parallelism() {
  Scenario s;
  s.name = "automatic_parallelism";
  s.description = "jit's sharding propagation (000, 001), explicit mode, the layer in three modes, 002's matmul program";
  s.interactive_args = {"--size", "512", "--matmul-size", "512"};
  s.run = [](ScenarioContext& ctx) {
    int64_t size = 8192, matmul_size = 2048;
    std::string golden = (std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "tests" / "data" / "golden").string();
    mv::VisualizeOptions viz = ctx.viz;
    const char* usage = "usage: automatic_parallelism [--size N] [--matmul-size N] [--golden DIR] [--color | --no-color] [--trace FILE]\n"
        "  --size N         the arrays of 001 (default 8192, the tutorial's)\n"
        "  --matmul-size N  001's timed matmul (default 2048; the tutorial's 8192 takes minutes on a CPU adapter)\n";
    for (size_t i = 0; i < ctx.args.size(); ++i) {
      const std::string& a = ctx.args[i];
      if (a == "--size" && i + 1 < ctx.args.size()) {
        size = std::atoll(ctx.args[++i].c_str());
      } else if (a == "--matmul-size" && i + 1 < ctx.args.size()) {
        matmul_size = std::atoll(ctx.args[++i].c_str());
      } else if (a == "--golden" && i + 1 < ctx.args.size()) {
        golden = ctx.args[++i];
      } else if (a == "--color") {
        viz.use_color = true;
      } else if (a == "--no-color") {
        viz.use_color = false;
      } else {
        return ctx.help_or_unknown(a, usage);
      }
    }
    if (size < 8 || size % 8 || matmul_size < 8 || matmul_size % 8) {
      *ctx.err << "--size and --matmul-size must be positive multiples of 8 (the tutorial uses 8192)\n";
      return 2;
    }
    matmul_size = std::min(matmul_size, size);
    Run r{*ctx.out, ctx};
    intro_000(r, viz);
    ctx.checkpoint("jit and explicit mode");
    layer_three_modes(r, golden);
    ctx.checkpoint("layer");
    follows_data_001(r, size, matmul_size, viz);
    ctx.checkpoint("computation follows data");
    errors_001(r, size, viz);
    constraints_001(r, size, viz);
    ctx.checkpoint("constraints");
    matmul_square_002(r);
    ctx.checkpoint("constraint between matmuls");
    constraint_between_matmuls_002(r);
    return r.failures ? 1 : 0;
  };
  return s;
}

}  // namespace meshvk::scenarios

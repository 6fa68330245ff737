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
#include <string>

#include <meshvk/meshvk.hpp>
#include <meshvk/profile.hpp>  // profile hook: --trace

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

int failures = 0;

void check(const std::string& what, bool ok) {
  std::cout << what << ": " << (ok ? "equal" : "NOT EQUAL") << "\n";
  if (!ok) ++failures;
}

bool close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > tol * std::max(1.0f, std::fabs(b[i]))) return false;
  return true;
}

void intro_000(const mv::VisualizeOptions& viz) {
  std::cout << "=== 000: automatic parallelism with jit ===\n\n";
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto arr_sharded = mv::device_put(mv::arange(32.0f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto f_elementwise = mv::jit([](const Array& x) { return 2 * mv::sin(x) + 1; });
  const auto result = f_elementwise(arr_sharded);
  std::cout << ">>> result = f_elementwise(arr_sharded); print(\"shardings match:\", result.sharding == arr_sharded.sharding)\n"
            << "shardings match: " << (result.sharding() == arr_sharded.sharding() ? "True" : "False") << "\n\n";
  const auto f_contract = mv::jit([](const Array& x) { return mv::sum(x, {0}); });
  const auto contracted = f_contract(arr_sharded);
  std::cout << ">>> result = f_contract(arr_sharded); jax.debug.visualize_array_sharding(result); print(result)\n"
            << mv::visualize_array_sharding(contracted, viz) << contracted << "\n";
  check("f_contract == [48 52 56 60 64 68 72 76]", contracted.to_host<float>() == std::vector<float>{48, 52, 56, 60, 64, 68, 72, 76});
  std::cout << "program text of f_contract:\n" << f_contract.program_text(arr_sharded) << "\n";

  std::cout << "=== 000: sharding in types (explicit mode) ===\n\n";
  const auto some_array = mv::arange(8);
  std::cout << ">>> print(f\"JAX-level type of some_array: {jax.typeof(some_array)}\")\n"
            << "JAX-level type of some_array: " << mv::typeof(some_array) << "\n";
  std::string traced;
  const auto foo = mv::jit([&](const Array& x) {
    traced = mv::typeof(x);
    return x + x;
  });
  const auto doubled = foo(some_array);
  std::cout << "JAX-level type of x during tracing: " << traced << "\n" << doubled << "\n\n";
  const auto explicit_mesh = mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const auto replicated_array = mv::arange(8).reshape({4, 2});
  const auto sharded_array = mv::device_put(replicated_array, mv::NamedSharding(explicit_mesh, P("X", mv::None)));
  std::cout << "replicated_array type: " << mv::typeof(replicated_array) << "\n"
            << "sharded_array type: " << mv::typeof(sharded_array) << "\n\n";
  const auto arg0 = mv::device_put(mv::arange(4).reshape({4, 1}), mv::NamedSharding(explicit_mesh, P("X", mv::None)));
  const auto arg1 = mv::device_put(mv::arange(8).reshape({1, 8}), mv::NamedSharding(explicit_mesh, P(mv::None, "Y")));
  const auto add_arrays = mv::jit([](const Array& x, const Array& y) {
    const auto ans = x + y;
    std::cout << "x sharding: " << mv::typeof(x) << "\ny sharding: " << mv::typeof(y) << "\nans sharding: " << mv::typeof(ans) << "\n";
    return ans;
  });
  std::cout << ">>> with jax.sharding.use_mesh(mesh): add_arrays(arg0, arg1)\n";
  add_arrays(arg0, arg1);
  std::cout << "\n";
}

void layer_three_modes(const std::string& golden) {
  std::cout << "=== 000: the layer example in three modes ===\n\n";
  if (!std::filesystem::exists(golden + "/layer/x.npy")) {
    std::cout << "note: " << golden << "/layer/*.npy not found; pass --golden DIR to run this part\n\n";
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
  std::cout << ">>> layer(x_sharded, weights_sharded, bias)  # jit, x P('x'), weights P()\n" << auto_out << "\n";
  const auto explicit_mesh = mv::make_mesh({8}, {"X"}, {mv::AxisType::Explicit});
  const auto layer_auto = mv::jit([&](const Array& x, const Array& w, const Array& b) {
    std::cout << "x sharding: " << mv::typeof(x) << "\nweights sharding: " << mv::typeof(w) << "\nbias sharding: " << mv::typeof(b) << "\n";
    const auto out = layer(x, w, b);
    std::cout << "out sharding: " << mv::typeof(out) << "\n";
    return out;
  });
  std::cout << ">>> with jax.sharding.use_mesh(explicit_mesh): layer_auto(x_sharded, weights_sharded, bias)\n";
  const auto explicit_out = layer_auto(mv::device_put(x, mv::NamedSharding(explicit_mesh, P("X"))),
                                       mv::device_put(weights, mv::NamedSharding(explicit_mesh, P())), bias);
  std::cout << explicit_out << "\n";
  const auto manual_out = mv::shard_map(
      [](const Array& x, const Array& w, const Array& b) { return mv::sigmoid(mv::psum(mv::matmul(x, w), "x") + b); }, mesh,
      {P("x"), P("x", mv::None), P()}, P())(x, weights, bias);
  std::cout << ">>> layer_sharded(x, weights, bias)  # shard_map with psum(x @ weights, 'x')\n" << manual_out << "\n";
  check("jit layer vs golden (1e-6)", close(auto_out.to_host<float>(), expected, 1e-6f));
  check("explicit layer vs golden (1e-6)", close(explicit_out.to_host<float>(), expected, 1e-6f));
  check("shard_map layer vs golden (1e-6)", close(manual_out.to_host<float>(), expected, 1e-6f));
  std::cout << "\n";
}

void follows_data_001(int64_t n, const mv::VisualizeOptions& viz) {
  std::cout << "=== 001: computation follows data (" << n << "x" << n << ") ===\n\n";
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto x = mv::normal(mv::random_key(0), {n, n});
  const auto y = mv::device_put(x, mv::NamedSharding(mesh, P("a", "b")));
  const auto z = mv::jit([](const Array& v) { return mv::sin(v); })(y);
  std::cout << ">>> z = torch.sin(y); visualize_array_sharding(z)\n" << mv::visualize_array_sharding(z, viz);
  check("sin keeps P('a', 'b')", z.sharding() == y.sharding());
  const auto lhs = mv::device_put(x, mv::NamedSharding(mesh, P("a", mv::None)));
  const auto w = mv::normal(mv::random_key(1), {n, n});
  const auto rhs = mv::device_put(w, mv::NamedSharding(mesh, P(mv::None, "b")));
  const auto mm = mv::jit([](const Array& a, const Array& b) { return mv::matmul(a, b); });
  const auto out = mm(lhs, rhs);
  std::cout << ">>> out = lhs @ rhs\nlhs sharding:\n" << mv::visualize_array_sharding(lhs, viz) << "rhs sharding:\n"
            << mv::visualize_array_sharding(rhs, viz) << "out sharding:\n" << mv::visualize_array_sharding(out, viz);
  const auto counts = mm.lower(lhs, rhs).collective_counts();
  check("out is P('a', 'b') with no communication", out.sharding() == mv::Sharding(mv::NamedSharding(mesh, P("a", "b"))) && counts.empty());
  check("sharded matmul vs one device (allclose)", close(out.to_host<float>(), mv::matmul(x, w).to_host<float>(), 1e-3f));
  const auto w_copy = mv::copy(rhs);
  check("copy(w) keeps w's sharding", w_copy.sharding() == rhs.sharding());
  std::cout << "\n";
}

void errors_and_constraints_001(int64_t n, const mv::VisualizeOptions& viz) {
  std::cout << "=== 001: incompatible devices, uncommitted arrays, with_sharding_constraint ===\n\n";
  const auto x = mv::normal(mv::random_key(2), {n, n});
  const auto add = mv::jit([](const Array& a, const Array& b) { return a + b; });
  for (const std::vector<int>& other : {std::vector<int>{4, 5, 6, 7}, std::vector<int>{0, 1, 2, 3, 6, 7, 4, 5}}) {
    const auto m1 = mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3});
    const auto m2 = mv::make_mesh({static_cast<int>(other.size())}, {"x"}, {}, other);
    const auto m1b = other.size() == 8 ? mv::make_mesh({8}, {"x"}) : m1;
    try {
      add(mv::device_put(x, mv::NamedSharding(m1b, P("x"))), mv::device_put(x, mv::NamedSharding(m2, P("x"))));
      check("incompatible devices raise an error", false);
    } catch (const mv::Error& e) {
      std::cout << e.what() << "\n";
    }
  }
  const auto sharding1 = mv::NamedSharding(mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3}), P("x"));
  const auto y = mv::device_put(x, sharding1);
  (void)(y + mv::ones_like(y)).sharding();
  (void)(y + mv::arange(0, static_cast<int32_t>(y.size())).reshape(y.shape())).sharding();
  std::cout << ">>> y + torch.ones_like(y); y + torch.arange(0, y.nelement()).reshape(y.shape)\nno error!\n\n";

  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto xs = mv::device_put(x, mv::NamedSharding(mesh, P("x", "y")));
  const auto f = mv::jit([&](const Array& v) { return mv::with_sharding_constraint(v + 1, mv::NamedSharding(mesh, P("y", "x"))); });
  const auto r = f(xs);
  std::cout << ">>> f(x)  # x + 1 constrained to P('y', 'x')\n" << mv::visualize_array_sharding(r, viz);
  const auto g = mv::jit([&](const Array& v) { return mv::with_sharding_constraint(v + 1, mv::NamedSharding(mesh, P())); });
  const auto rg = g(xs);
  std::cout << ">>> constrained to P()\n" << mv::visualize_array_sharding(rg, viz);
  check("constraint P() gives a fully replicated output", rg.sharding().is_fully_replicated());
  std::cout << "\n";
}

void matmul_square_002() {
  std::cout << "=== 002: sharded matmul with out_shardings ===\n\n";
  const auto mesh = mv::make_mesh({2, 2}, {"X", "Y"}, {}, {0, 1, 2, 3});
  const auto in = mv::device_put(mv::normal(mv::random_key(3), {8, 2048}), mv::NamedSharding(mesh, P("X", "Y")));
  const auto w = mv::device_put(mv::normal(mv::random_key(4), {2048, 8192}), mv::NamedSharding(mesh, P("Y", mv::None)));
  const auto matmul_square = mv::jit([](const Array& in, const Array& w) { return mv::einsum("bd,df->bf", mv::square(in), w); },
                                     {.out_shardings = {mv::NamedSharding(mesh, P("X", mv::None))}, .name = "matmul_square"});
  const auto lowered = matmul_square.lower(in, w);
  std::cout << ">>> jax.jit(matmul_square, out_shardings=P('X', None)).lower(In, W).as_text()\n" << lowered.as_text();
  const auto& counts = lowered.collective_counts();
  check("one all-reduce after a local [4,1024] x [1024,8192] matmul",
        counts.size() == 1 && counts.count("all-reduce") && lowered.as_text().find("(4, 1024) x (1024, 8192)") != std::string::npos);
  std::cout << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  int64_t size = 2048;
  std::string golden = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string() + "/shared/golden";
  mv::VisualizeOptions viz;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: automatic_parallelism [--size N] [--golden DIR] [--color | --no-color]\n");
      return 0;
    } else if (a == "--size" && i + 1 < argc) {
      size = std::atoll(argv[++i]);
    } else if (a == "--golden" && i + 1 < argc) {
      golden = argv[++i];
    } else if (a == "--color") {
      viz.use_color = true;
    } else if (a == "--no-color") {
      viz.use_color = false;
    } else {
      std::fprintf(stderr, "unknown argument %s\nusage: automatic_parallelism [--size N] [--golden DIR] [--color | --no-color]\n", a.c_str());
      return 2;
    }
  }
  if (size < 8 || size % 8) {
    std::fprintf(stderr, "--size must be a positive multiple of 8 (the tutorial uses 8192)\n");
    return 2;
  }
  try {
    mv::Runtime rt({.num_devices = 8});
    intro_000(viz);
    layer_three_modes(golden);
    follows_data_001(size, viz);
    errors_and_constraints_001(size, viz);
    matmul_square_002();
  } catch (const mv::Error& e) {
    std::fprintf(stderr, "meshvk error: %s\n", e.what());
    return 1;
  }
  return failures ? 1 : 0;
}

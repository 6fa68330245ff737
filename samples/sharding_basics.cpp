// The sharding tour: the data-sharding part of the JAX "Introduction to parallel programming"
// tutorial (000) and the sharding basics of torchax's "Distributed arrays" tutorial (001),
// printing what the tutorials print.
//
//   build/bin/sharding_basics [--size N] [--color | --no-color]
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include <meshvk/meshvk.hpp>

namespace mv = meshvk;
using mv::P;

namespace {

std::string devices_list() {
  std::string s = "[";
  for (const auto& d : mv::devices()) s += (d.id ? ", " : "") + d.repr();
  return s + "]";
}

void show(const char* code, const mv::Array& x, const mv::VisualizeOptions& viz) {
  std::cout << ">>> " << code << "\n" << mv::visualize_array_sharding(x, viz) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  int64_t size = 8192;
  mv::VisualizeOptions viz;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      size = std::atoll(argv[++i]);
    } else if (a == "--color") {
      viz.use_color = true;
    } else if (a == "--no-color") {
      viz.use_color = false;
    } else {
      std::fprintf(stderr, "unknown argument %s\nusage: sharding_basics [--size N] [--color | --no-color]\n", a.c_str());
      return 2;
    }
  }
  if (size < 8 || size % 8 != 0) {
    std::fprintf(stderr, "--size must be a positive multiple of 8, got %lld\n", static_cast<long long>(size));
    return 2;
  }
  try {
    mv::Runtime rt({.num_devices = 8});
    std::cout << "meshvk on " << rt.adapter_name() << ", split into " << rt.num_devices()
              << " virtual devices\n>>> jax.devices()\n"
              << devices_list() << "\n\n";

    std::cout << "=== 000 Introduction to parallel programming: data sharding ===\n\n";
    const auto arr = mv::arange(32.0f).reshape({4, 8});
    std::cout << ">>> arr = jnp.arange(32.0).reshape(4, 8); arr.sharding\n"
              << arr.sharding().to_string() << "\n\n";
    show("jax.debug.visualize_array_sharding(arr)", arr, viz);

    const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
    const mv::NamedSharding sharding(mesh, P("x", "y"));
    std::cout << ">>> mesh = jax.make_mesh((2, 4), ('x', 'y')); print(NamedSharding(mesh, P('x', 'y')))\n"
              << sharding.to_string() << "\n\n";
    const auto arr_sharded = mv::device_put(arr, sharding);
    std::cout << ">>> arr_sharded = jax.device_put(arr, sharding); print(arr_sharded)\n" << arr_sharded << "\n";
    show("jax.debug.visualize_array_sharding(arr_sharded)", arr_sharded, viz);

    std::cout << ">>> jax.typeof(np.arange(8))\n" << mv::typeof(mv::arange(8)) << "\n\n";
    const auto explicit_mesh =
        mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
    const auto replicated_array = mv::arange(8).reshape({4, 2});
    const auto sharded_array =
        mv::device_put(replicated_array, mv::NamedSharding(explicit_mesh, P("X", mv::None)));
    std::cout << ">>> explicit mesh " << explicit_mesh.to_string() << "\n"
              << "replicated_array type: " << mv::typeof(replicated_array) << "\n"
              << "sharded_array type: " << mv::typeof(sharded_array) << "\n\n";

    std::cout << "=== 001 Distributed arrays: sharding basics ===\n\n";
    // torch.randn((N, N)): normal values made on the host, as the tutorial's are.
    std::vector<float> values(static_cast<size_t>(size * size));
    std::mt19937 rng(0);
    std::normal_distribution<float> normal;
    for (auto& v : values) v = normal(rng);
    const auto x = mv::array(std::span<const float>(values), mv::Shape{size, size});
    const std::string n = std::to_string(size);
    show(("x = torch.randn((" + n + ", " + n + ")); visualize_array_sharding(x)").c_str(), x, viz);

    const auto default_mesh = mv::make_mesh({4, 2}, {"a", "b"});
    for (const char* spec : {"P('a', 'b')", "P('b', 'a')", "P('a', None)", "P(None, 'b')",
                             "P(None, 'a')", "P(('a', 'b'), None)"}) {
      const auto y = mv::device_put(x, mv::NamedSharding(default_mesh, mv::PartitionSpec::parse(spec)));
      show(("y = jax.device_put(x, mesh_sharding(" + std::string(spec) + ")); visualize_array_sharding(y)").c_str(), y, viz);
    }
    // Every layout holds the same values, moved device to device.
    const auto back = mv::device_put(x, mv::NamedSharding(default_mesh, P({"a", "b"}, mv::None)));
    const bool same = back.to_host<float>() == values;
    std::cout << "values identical after resharding: " << (same ? "yes" : "NO") << "\n";
    return same ? 0 : 1;
  } catch (const mv::Error& e) {
    std::fprintf(stderr, "meshvk error: %s\n", e.what());
    return 1;
  }
}

// meshvk-bench collectives: an nccl-tests style table for 8 virtual devices: time, algbw and busbw
// of all-reduce, all-gather, reduce-scatter, all-to-all and ppermute from 4 KiB to 256 MiB, beside
// the adapter's own device-to-device vkCmdCopyBuffer bandwidth measured in the same run.
// Collectives run as jit(shard_map(...)), so each timing is a replay of recorded command buffers.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "meshvk/meshvk.hpp"

namespace meshvk::bench {

namespace {

using mv_array = meshvk::Array;

struct Collective {
  const char* name;
  double bus_factor;  // nccl-tests: busbw = algbw * factor
  // Builds the jitted program for `count` float32 elements per device (nccl-tests' "size" is
  // each rank's send buffer, count * 4 bytes; for all-gather it is the gathered total).
  std::function<std::function<mv_array(const mv_array&)>(const Mesh&)> make;
};

double copy_bandwidth(int reps) {
  // 64 MiB from device 0's memory to device 1's: one vkCmdCopyBuffer.
  Runtime& rt = Runtime::current();
  const auto x = zeros({16 << 20}, DType::float32, SingleDeviceSharding(0, rt.platform()));
  const double t = median_seconds(reps, [&] {
    const auto y = device_put(x, SingleDeviceSharding(1, rt.platform()));
    rt.synchronize();
  });
  return 2.0 * (64 << 20) / t / 1e9;  // bytes read + written, as the kernels table counts copies
}

}  // namespace

int run_collectives(const Options& options) {
  Runtime rt({.num_devices = 8});
  const int n = rt.num_devices();
  const Mesh mesh = make_mesh({n}, {"x"});
  const double n1 = static_cast<double>(n - 1) / n;
  const std::vector<Collective> collectives = {
      {"all-reduce", 2 * n1,
       [](const Mesh& m) {
         return [f = jit([m](const mv_array& x) { return shard_map([](const mv_array& v) { return psum(v, "x"); }, m, {P("x")}, P("x"))(x); })](
                    const mv_array& x) { return f(x); };
       }},
      {"all-gather", n1,
       [](const Mesh& m) {
         return [f = jit([m](const mv_array& x) {
                   return shard_map([](const mv_array& v) { return all_gather(v, "x", 0, true); }, m, {P("x")}, P("x"))(x);
                 })](const mv_array& x) { return f(x); };
       }},
      {"reduce-scatter", n1,
       [](const Mesh& m) {
         return [f = jit([m](const mv_array& x) {
                   return shard_map([](const mv_array& v) { return psum_scatter(v, "x", 0, true); }, m, {P("x")}, P("x"))(x);
                 })](const mv_array& x) { return f(x); };
       }},
      {"all-to-all", n1,
       [](const Mesh& m) {
         return [f = jit([m](const mv_array& x) {
                   return shard_map([](const mv_array& v) { return all_to_all(v, "x", 0, 0, true); }, m, {P("x")}, P("x"))(x);
                 })](const mv_array& x) { return f(x); };
       }},
      {"ppermute", 1.0,
       [n](const Mesh& m) {
         std::vector<std::pair<int, int>> ring;
         for (int i = 0; i < n; ++i) ring.push_back({i, (i + 1) % n});
         return [f = jit([m, ring](const mv_array& x) {
                   return shard_map([&](const mv_array& v) { return ppermute(v, "x", ring); }, m, {P("x")}, P("x"))(x);
                 })](const mv_array& x) { return f(x); };
       }},
  };

  std::cout << "meshvk-bench collectives: " << n << " virtual devices\n" << machine_summary(rt.adapter_name()) << "\n";
  const double copy_gbs = copy_bandwidth(options.reps);
  std::printf("adapter vkCmdCopyBuffer bandwidth, 64 MiB device 0 -> device 1: %.2f GB/s (bytes read + written), %.2f GB/s moved\n\n",
              copy_gbs, copy_gbs / 2);
  std::printf("%-15s %10s %12s %10s %10s %10s %10s %8s\n", "collective", "size", "time (us)", "algbw GB/s", "busbw GB/s",
              "busbw/copy", "n*bus/copy", "target");
  for (const Collective& c : collectives) {
    if (!options.wants(c.name)) continue;
    const auto f = c.make(mesh);
    for (uint64_t bytes = 4 << 10; bytes <= (256ull << 20); bytes *= 4) {
      // nccl-tests sizes: each rank's send buffer, except all-gather's, which is the gathered total.
      const bool per_rank = std::string(c.name) != "all-gather";
      const uint64_t per_device = per_rank ? bytes : bytes / n;
      const auto x = zeros({static_cast<int64_t>(per_device / 4 * n)}, DType::float32, NamedSharding(mesh, P("x")));
      f(x);  // trace
      const double t = median_seconds(options.reps, [&] {
        const auto y = f(x);
        rt.synchronize();
      });
      const double algbw = bytes / t / 1e9, busbw = algbw * c.bus_factor;
      // Data moved per byte of bus bandwidth is one read and one write, as copy_gbs / 2 counts.
      const double ratio = busbw / (copy_gbs / 2);
      const bool big = bytes >= (64ull << 20);
      // An adapter that runs one device at a time (lavapipe) can at best give each device 1/n of
      // its copy bandwidth; n * busbw / copy shows how close the whole mesh comes to that.
      std::printf("%-15s %10s %12.1f %10.2f %10.2f %9.0f%% %9.0f%% %8s\n", c.name,
                  (bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB").c_str(),
                  t * 1e6, algbw, busbw, 100 * ratio, 100 * ratio * n, big ? (ratio >= 0.8 ? "PASS" : "MISS") : "");
    }
  }
  std::printf("\nTarget: busbw >= 80%% of the adapter's copy bandwidth at 64 MiB and above. Small sizes show latency.\n");
  return 0;
}

}  // namespace meshvk::bench

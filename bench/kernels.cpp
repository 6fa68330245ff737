// `meshvk-bench kernels`: single-device kernel throughput against CPU baselines measured in the
// same run: matmul vs OpenBLAS, a fused elementwise chain and a sum vs vectorized C++ loops, a
// device-to-device copy vs memcpy, and the cost of a dispatch and of a submission.
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "cpu_baselines.hpp"
#include "exec/sharded_value.hpp"
#include "graph/array_impl.hpp"
#include "kernels/launch.hpp"
#include "kernels/matmul.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::bench {

namespace {

namespace mv = meshvk;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

const detail::DeviceBuffer& buffer_of(const mv::Array& x) {
  return *detail::materialized(x).shards.at(0);
}

// C = A @ B for square N on the device of the uncommitted operands (device 0), timed end to end
// per repetition: record, submit, wait. Checks the result against OpenBLAS.
void matmul_rows(mv::Runtime& runtime, const Options& opt, Table& table) {
  detail::RuntimeState& rt = *runtime.state();
  for (const int n : {1024, 2048}) {
    const std::string name = "matmul f32 N=" + std::to_string(n);
    if (!opt.wants(name)) continue;
    const auto va = random_floats(size_t(n) * n, 1), vb = random_floats(size_t(n) * n, 2);
    const mv::Array a = mv::array(std::span<const float>(va), Shape{n, n});
    const mv::Array b = mv::array(std::span<const float>(vb), Shape{n, n});
    const detail::DeviceBuffer& ab = buffer_of(a);
    const detail::DeviceBuffer& bb = buffer_of(b);
    const auto c = rt.allocate(ab.device(), uint64_t(n) * n * 4);
    const kernels::MatmulShape shape{.batch = 1, .m = n, .n = n, .k = n};
    const double flops = 2.0 * n * n * n;
    std::vector<float> want(size_t(n) * n);
    const auto [t_gpu, t_blas] = median_seconds_interleaved(
        opt.reps,
        [&] {
          detail::Recording rec = rt.begin(ab.device());
          rec.wait_for(ab.ready());
          rec.wait_for(bb.ready());
          kernels::record_matmul(rt, rec, shape, ab, bb, *c);
          c->written_by(rt.submit(std::move(rec)));
          rt.wait(c->ready(), "meshvk-bench matmul");
        },
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, va.data(), n,
                      vb.data(), n, 0.0f, want.data(), n);
        });

    exec::ShardedValue cv = detail::materialized(a);
    cv.shards = {c};
    std::vector<float> got(size_t(n) * n);
    exec::download(rt, cv, got.data());
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i)
      err = std::max(err, double(std::fabs(got[i] - want[i])));
    Row row{name,
            "GFLOP/s",
            flops / t_gpu / 1e9,
            "OpenBLAS sgemm",
            flops / t_blas / 1e9,
            n == 2048 ? 0.2 : 0};
    if (err > 1e-3) row.name += " (WRONG: max error " + std::to_string(err) + ")";
    table.add(row);
  }
}

// 2*sin(x)+1 over 16M floats through the public API (one fused dispatch), bytes read + written.
void elementwise_row(mv::Runtime& runtime, const Options& opt, Table& table) {
  const std::string name = "2*sin(x)+1, 16M f32";
  if (!opt.wants(name)) return;
  const size_t n = size_t{16} << 20;
  const auto host = random_floats(n, 3);
  const mv::Array x = mv::array(std::span<const float>(host));
  detail::materialized(x);
  runtime.synchronize();
  std::vector<float> y(n);
  const auto [t_gpu, t_cpu] = median_seconds_interleaved(
      opt.reps,
      [&] {
        const mv::Array y = 2 * mv::sin(x) + 1;
        detail::materialized(y);
        runtime.synchronize();
      },
      [&] { cpu_sin_affine(host.data(), y.data(), n, thread_count()); });
  const double bytes = 2.0 * n * 4;
  table.add({name, "GB/s", bytes / t_gpu / 1e9, "C++ loop (libmvec)", bytes / t_cpu / 1e9, 0.5});
}

// mv::sum over 16M floats, bytes read.
void sum_row(mv::Runtime& runtime, const Options& opt, Table& table) {
  const std::string name = "sum, 16M f32";
  if (!opt.wants(name)) return;
  const size_t n = size_t{16} << 20;
  const auto host = random_floats(n, 4);
  const mv::Array x = mv::array(std::span<const float>(host));
  detail::materialized(x);
  runtime.synchronize();
  volatile float sink = 0;
  const auto [t_gpu, t_cpu] = median_seconds_interleaved(
      opt.reps,
      [&] {
        const mv::Array s = mv::sum(x);
        detail::materialized(s);
        runtime.synchronize();
      },
      [&] { sink = cpu_sum(host.data(), n, thread_count()); });
  (void)sink;
  const double bytes = double(n) * 4;
  table.add({name, "GB/s", bytes / t_gpu / 1e9, "C++ loop", bytes / t_cpu / 1e9, 0.5});
}

// vkCmdCopyBuffer of 64 MiB from device 0's memory to device 1's, bytes read + written.
void copy_row(mv::Runtime& runtime, const Options& opt, Table& table) {
  const std::string name = "copy 64 MiB, device 0 -> 1";
  if (!opt.wants(name) || runtime.num_devices() < 2) return;
  detail::RuntimeState& rt = *runtime.state();
  const uint64_t bytes = uint64_t{64} << 20;
  const auto from = rt.allocate(0, bytes), to = rt.allocate(1, bytes);
  {
    detail::Recording rec = rt.begin(0);
    kernels::record_fill(rec, *from, 0x3f800000u);
    from->written_by(rt.submit(std::move(rec)));
  }
  std::vector<char> src(bytes, 1), dst(bytes);
  const auto [t_gpu, t_cpu] = median_seconds_interleaved(
      opt.reps,
      [&] {
        detail::Recording rec = rt.begin(1);
        rec.wait_for(from->ready());
        const VkBufferCopy region{from->offset(), to->offset(), bytes};
        vkCmdCopyBuffer(rec.cb, from->vk_buffer(), to->vk_buffer(), 1, &region);
        const detail::Fence done = rt.submit(std::move(rec));
        from->used_by(done);
        to->written_by(done);
        rt.wait(done, "meshvk-bench copy");
      },
      [&] { cpu_copy(src.data(), dst.data(), bytes, thread_count()); });
  table.add({name, "GB/s", 2.0 * bytes / t_gpu / 1e9, "memcpy", 2.0 * bytes / t_cpu / 1e9, 0});
}

// The cost of one small dispatch (with the barrier every kernel records after it) inside one
// command buffer, and of one submission of one such dispatch waited on from the host.
void dispatch_rows(mv::Runtime& runtime, const Options& opt, Table& table) {
  detail::RuntimeState& rt = *runtime.state();
  const auto buf = rt.allocate(0, 256);
  constexpr int kCount = 1000;
  if (opt.wants("dispatch")) {
    const double t = median_seconds(opt.reps, [&] {
      detail::Recording rec = rt.begin(0);
      for (int i = 0; i < kCount; ++i) {
        kernels::record_iota(rt, rec, *buf, 64, true, 0, 1);
        kernels::barrier(rec.cb);
      }
      buf->written_by(rt.submit(std::move(rec)));
      rt.wait(buf->ready(), "meshvk-bench dispatches");
    });
    table.add({"dispatch, 1000 in one command buffer", "us", t / kCount * 1e6, "", 0, 0, true});
  }
  if (opt.wants("submit")) {
    const double t = median_seconds(opt.reps, [&] {
      for (int i = 0; i < kCount; ++i) {
        detail::Recording rec = rt.begin(0);
        kernels::record_iota(rt, rec, *buf, 64, true, 0, 1);
        buf->written_by(rt.submit(std::move(rec)));
        rt.wait(buf->ready(), "meshvk-bench submissions");
      }
    });
    table.add(
        {"submit + wait of one dispatch, 1000 times", "us", t / kCount * 1e6, "", 0, 0, true});
  }
}

}  // namespace

int run_kernels(const Options& opt) {
  mv::Runtime runtime({.num_devices = 2});
  openblas_set_num_threads(thread_count());
  std::cout << machine_summary(runtime.adapter_name()) << "timing: median of " << opt.reps
            << " repetitions after one warm-up; GB/s count bytes read + written\n\n";
  Table table;
  matmul_rows(runtime, opt, table);
  elementwise_row(runtime, opt, table);
  sum_row(runtime, opt, table);
  copy_row(runtime, opt, table);
  dispatch_rows(runtime, opt, table);
  table.print(std::cout);
  return 0;
}

}  // namespace meshvk::bench

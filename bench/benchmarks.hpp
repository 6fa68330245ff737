#pragma once
// The benchmarks meshvk-bench runs, one function per subcommand (see main.cpp's table).
#include "bench.hpp"

namespace meshvk::bench {

int run_kernels(const Options& options);
int run_collectives(const Options& options);
int run_collective_matmul(const Options& options);
int run_train(const Options& options);
int run_jit(const Options& options);
int run_profile(const Options& options);
int run_peers(const Options& options);
int run_processes(const Options& options);

}  // namespace meshvk::bench

// meshvk-bench: named benchmarks, one per subcommand, each printing one table of meshvk's figures
// beside baselines measured in the same run.
//   meshvk-bench <benchmark> [--reps N] [--only SUBSTRING] [options of that benchmark]
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string_view>

#include "benchmarks.hpp"
#include "meshvk/error.hpp"

namespace {

struct Benchmark {
  std::string_view name;
  std::string_view summary;
  int (*run)(const meshvk::bench::Options&);
};

// Add new benchmarks here.
constexpr Benchmark kBenchmarks[] = {
    {"kernels",
     "matmul vs OpenBLAS, 2*sin(x)+1 and sum vs C++ loops, device copy vs memcpy, dispatch cost",
     meshvk::bench::run_kernels},
    {"collectives",
     "all-reduce, all-gather, reduce-scatter, all-to-all, ppermute over 8 devices, 4 KiB to 256 "
     "MiB, vs the adapter's copy",
     meshvk::bench::run_collectives},
    {"collective-matmul",
     "the scaling book's collective matmuls (ppermute rings) vs all-gather-then-matmul; --only "
     "BxDxF[:NAME]",
     meshvk::bench::run_collective_matmul},
    {"train",
     "an MLP training step on one device vs the sum of its matmuls (--only BATCH sets the batch)",
     meshvk::bench::run_train},
    {"jit",
     "a 100-op program: jit replay vs its command buffers submitted directly, eager ops vs replay",
     meshvk::bench::run_jit},
    {"profile",
     "profiler overhead: jit replays with profiling off and on, then the profile summary",
     meshvk::bench::run_profile},
    {"processes",
     "all-reduce, reduce-scatter and all-gather between processes (mpirun, 1 device each) vs "
     "MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Allgather on the same bytes; --processes N "
     "(default 2), across machines --hostfile "
     "PATH (mpirun's; the executable at the same path on every host), --mpirun PATH (another "
     "launcher taking mpirun's arguments), --mpirun-args \"ARGS\" (more of mpirun's, split at "
     "spaces)",
     meshvk::bench::run_processes},
    {"peers",
     "meshvk vs PyTorch (CPU) and Open MPI on the same machine and data: training step, matmul, "
     "elementwise, reductions, collectives; --rows, --batch, --matmul, --elements, --min-bytes, "
     "--max-bytes, --timeout",
     meshvk::bench::run_peers},
};

int usage(std::ostream& out, int rc) {
  out << "usage: meshvk-bench <benchmark> [--reps N] [--only SUBSTRING] [peers "
         "options]\n\nbenchmarks:\n";
  for (const Benchmark& b : kBenchmarks) out << "  " << b.name << "  " << b.summary << "\n";
  out << "\n--reps N         timed repetitions after one warm-up (default 5)\n"
         "--only SUBSTRING run only the rows whose name contains SUBSTRING\n"
         "--repeat N       the same as --reps N\n\n"
         "peers only:\n"
         "--rows LIST      comma-separated row groups (default all): train, train-dp, matmul, "
         "sin,\n"
         "                 sum, xent, all-reduce, all-gather, reduce-scatter\n"
         "--batch B        the MLP's batch (default 8192; a multiple of 8)\n"
         "--matmul LIST    square matmul sizes (default 1024,2048,4096)\n"
         "--elements N     elements of the 2*sin(x)+1 and sum rows (default 16777216)\n"
         "--min-bytes S    smallest collective size (default 1MiB; KiB/MiB/GiB suffixes work)\n"
         "--max-bytes S    largest collective size, sizes growing 4x (default 256MiB)\n"
         "--timeout S      seconds each peer process may run (default 1800)\n";
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(std::cerr, 2);
  const std::string_view name = argv[1];
  if (name == "-h" || name == "--help") return usage(std::cout, 0);
  meshvk::bench::Options options;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--reps" || arg == "--repeat") && i + 1 < argc) {
      options.reps = std::atoi(argv[++i]);
    } else if (arg == "--only" && i + 1 < argc) {
      options.only = argv[++i];
    } else if ((arg == "--rows" || arg == "--batch" || arg == "--matmul" || arg == "--elements" ||
                arg == "--min-bytes" || arg == "--max-bytes" || arg == "--timeout" ||
                arg == "--processes" || arg == "--hostfile" || arg == "--mpirun" ||
                arg == "--mpirun-args") &&
               i + 1 < argc) {
      options.settings[std::string(arg.substr(2))] = argv[++i];
    } else {
      std::cerr << "meshvk-bench: unknown option " << arg << "\n";
      return usage(std::cerr, 2);
    }
  }
  const auto only_processes_settings = [&] {
    for (const auto& [key, value] : options.settings)
      if (key != "processes" && key != "hostfile" && key != "mpirun" && key != "mpirun-args")
        return false;
    return true;
  };
  if (!options.settings.empty() && name != "peers" &&
      !(name == "processes" && only_processes_settings())) {
    std::cerr
        << "meshvk-bench: --" << options.settings.begin()->first
        << " is an option of `meshvk-bench peers` (or, for --processes, --hostfile, --mpirun and "
           "--mpirun-args, of `meshvk-bench processes`) only\n";
    return usage(std::cerr, 2);
  }
  for (const Benchmark& b : kBenchmarks) {
    if (b.name != name) continue;
    try {
      return b.run(options);
    } catch (const std::exception& e) {
      std::cerr << "meshvk-bench " << name << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "meshvk-bench: no benchmark named " << name << "\n";
  return usage(std::cerr, 2);
}

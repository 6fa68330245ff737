// `meshvk-bench processes [--processes N]`: collectives between processes (meshvk/distributed.hpp)
// beside Open MPI's own MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather on the same bytes,
// in the same run and the same processes. Started plainly it starts itself again under `mpirun -np
// N` (N = 2 by default) with one virtual device per process, so both sides move the same bytes
// between the same processes; under mpirun it runs the rows and process 0 prints the table.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "meshvk/meshvk.hpp"

#if MESHVK_BENCH_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace meshvk::bench {

#if MESHVK_BENCH_MPI

namespace {

namespace mv = meshvk;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A barrier that sleeps between polls. MPI_Barrier spins a core while it waits; with two
// simulated nodes on one machine (or ranks sharing cores) the rank that arrived first took the
// core its peer needed: meshvk's communication thread, which ships the peer's last bytes, ran
// a scheduler tick (~4 ms) late, and Open MPI's own collectives slowed too (all-gather 1 MiB
// 0.15 -> 0.27 GB/s busbw with this barrier). Both sides are timed between the same barriers.
void polled_barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    usleep(20);
  }
}

// Median seconds of `reps` runs of `op` after one warm-up, each between two barriers of every
// process (the slowest process's time, as MPI benchmarks take it).
template <class Op>
double timed(int reps, Op&& op) {
  op();
  std::vector<double> times;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    polled_barrier();
    const double start = MPI_Wtime();
    op();
    polled_barrier();
    times.push_back(MPI_Wtime() - start);
  }
  return median_of(times);
}

int run_inside_mpirun(const Options& options) {
  mv::Runtime rt;
  const int n = rt.num_devices();
  const auto mesh = mv::make_mesh({n}, {"x"});
  const int processes = mv::process_count();
  Table table;
  for (const uint64_t mib : {1, 4, 16, 64}) {
    const uint64_t bytes = mib << 20;  // each device's buffer, each rank's buffer
    const int64_t count = static_cast<int64_t>(bytes / 4);
    const std::string size = std::to_string(mib) + " MiB";
    std::vector<float> host(static_cast<size_t>(count) * n, 1.0f);
    const auto x = mv::device_put(std::span<const float>(host), {count * n},
                                  mv::NamedSharding(mesh, mv::P("x")));
    std::vector<float> send(static_cast<size_t>(count), 1.0f),
        recv(static_cast<size_t>(count) * processes);
    const double bus = 2.0 * (n - 1) / n;  // nccl-tests' all-reduce bus factor
    if (options.wants("all-reduce")) {
      const auto psum = mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, mesh,
                                      {mv::P("x")}, mv::P("x"));
      const double ours = timed(options.reps, [&] {
        const mv::Array y = psum(x);
        rt.synchronize();
      });
      const double theirs = timed(options.reps, [&] {
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      });
      table.add({"all-reduce " + size + " busbw", "GB/s", bus * bytes / ours / 1e9, "MPI_Allreduce",
                 bus * bytes / theirs / 1e9, mib == 64 ? 1.0 : 0.0});
    }
    if (options.wants("reduce-scatter")) {
      // Each device's `bytes` reduced, a 1/n share of the sum left on each: nccl-tests' busbw,
      // (n-1)/n of a member's input per time.
      const auto scatter =
          mv::shard_map([](const mv::Array& v) { return mv::psum_scatter(v, "x", 0, true); }, mesh,
                        {mv::P("x")}, mv::P("x"));
      const double ours = timed(options.reps, [&] {
        const mv::Array y = scatter(x);
        rt.synchronize();
      });
      const double theirs = timed(options.reps, [&] {
        MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(count / processes),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
      table.add({"reduce-scatter " + size + " busbw", "GB/s", (n - 1.0) / n * bytes / ours / 1e9,
                 "MPI_Reduce_scatter_block", (n - 1.0) / n * bytes / theirs / 1e9, 0.0});
    }
    if (options.wants("all-gather")) {
      // Each process's `bytes` gathered into every process: the busbw of nccl-tests, (n-1)/n of
      // the gathered total per time.
      const int64_t piece = count / n;
      const auto gather =
          mv::shard_map([](const mv::Array& v) { return mv::all_gather(v, "x", 0, true); }, mesh,
                        {mv::P("x")}, mv::P("x"));
      const auto small =
          mv::device_put(std::span<const float>(host.data(), static_cast<size_t>(piece * n)),
                         {piece * n}, mv::NamedSharding(mesh, mv::P("x")));
      const double ours = timed(options.reps, [&] {
        const mv::Array y = gather(small);
        rt.synchronize();
      });
      const double theirs = timed(options.reps, [&] {
        MPI_Allgather(send.data(), static_cast<int>(piece * n / processes), MPI_FLOAT, recv.data(),
                      static_cast<int>(piece * n / processes), MPI_FLOAT, MPI_COMM_WORLD);
      });
      const double gathered = static_cast<double>(piece) * n * 4;
      table.add({"all-gather " + size + " busbw", "GB/s", (n - 1.0) / n * gathered / ours / 1e9,
                 "MPI_Allgather", (n - 1.0) / n * gathered / theirs / 1e9, 0.0});
    }
  }
  if (mv::process_index() == 0) {
    std::cout << "## meshvk-bench processes: " << processes << " processes x "
              << mv::local_device_count() << " device(s), the same bytes through Open MPI\n\n"
              << machine_summary(rt.adapter_name()) << "\n\n";
    table.print(std::cout);
    std::cout
        << "\nbusbw as nccl-tests counts it; meshvk's figures include the eager shard_map call and "
           "a synchronize, MPI's one call; each the median of "
        << options.reps << " runs between barriers.\n";
  }
  return 0;
}

}  // namespace

int run_processes(const Options& options) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) return run_inside_mpirun(options);
  // Started plainly: again under mpirun, one device per process.
  const auto setting = [&](const char* key, const std::string& otherwise) {
    const auto it = options.settings.find(key);
    return it == options.settings.end() ? otherwise : it->second;
  };
  const std::string mpiexec = setting("mpirun", MESHVK_MPIEXEC);
  std::vector<std::string> args = {mpiexec, "-np", setting("processes", "2"), "--oversubscribe"};
  if (const std::string hostfile = setting("hostfile", ""); !hostfile.empty()) {
    if (access(hostfile.c_str(), R_OK) != 0)
      throw Error("cannot read the hostfile " + hostfile +
                  "; give mpirun's hostfile (a host per line, `host slots=N`)");
    args.insert(args.end(), {"--hostfile", hostfile});
  }
  const std::string extra = setting("mpirun-args", "");
  for (size_t start = 0; start < extra.size();) {
    const size_t end = std::min(extra.find(' ', start), extra.size());
    if (end > start) args.push_back(extra.substr(start, end - start));
    start = end + 1;
  }
  const size_t program = args.size();
  // One device per process unless MESHVK_NUM_DEVICES asks for more (4 per node is how programs
  // run; the MPI rows stay one rank per process).
  const char* devices = std::getenv("MESHVK_NUM_DEVICES");
  const std::string per_process =
      std::string("MESHVK_NUM_DEVICES=") + (devices && *devices ? devices : "1");
  args.insert(args.end(), {"-x", per_process, "-x", "LP_NUM_THREADS", "/proc/self/exe", "processes",
                           "--reps", std::to_string(options.reps)});
  if (!options.only.empty()) {
    args.push_back("--only");
    args.push_back(options.only);
  }
  if (!std::getenv("LP_NUM_THREADS")) setenv("LP_NUM_THREADS", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw Error("cannot find its own executable");
  self[len] = '\0';
  args[program + 4] = self;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  throw Error("cannot start " + mpiexec +
              "; install openmpi-bin (the README's set-up does), or give --mpirun PATH");
}

#else

int run_processes(const Options&) {
  std::cerr << "meshvk-bench processes: built without Open MPI; install libopenmpi-dev and "
               "openmpi-bin and build again\n";
  return 1;
}

#endif

}  // namespace meshvk::bench

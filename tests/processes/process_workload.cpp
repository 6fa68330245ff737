// The workload of tests/support/workload.hpp as a program: one line per result, its name and a
// digest of its bits, on standard output. Run as one process of 8 devices, one process of 2
// adapters x 4 devices, and under `mpirun -np 2` with 4 devices per process, the lines must be
// identical (tests/processes/compare_runs.cmake). Under mpirun only process 0 prints, first how
// bytes moved between the processes ("between processes: shared" or "staged"), which the
// comparison checks and then leaves out. `process_workload --sweep` runs the collectives at sizes
// that are not multiples of 4 over however many devices the job has instead.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>

#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"  // which transport moved bytes between the processes
#include "workload.hpp"

int main(int argc, char** argv) {
  try {
    meshvk::Runtime rt;
    // --sweep: the collectives at sizes that are not multiples of 4, over all the devices.
    const bool sweep = argc > 1 && std::strcmp(argv[1], "--sweep") == 0;
    const meshvk::testing::Results results =
        sweep ? meshvk::testing::collective_sweep() : meshvk::testing::workload();
    rt.synchronize();
    if (rt.state()->multi_process()) {
      const bool staged =
          rt.state()->between_processes() == meshvk::detail::RuntimeState::BetweenProcesses::staged;
      std::printf("between processes: %s\n", staged ? "staged" : "shared");
      // On standard error (standard output is compared with one process's): the tests check
      // that the staged tier sends out of device memory where it may, and not where it may not.
      if (staged)
        std::fprintf(stderr, "process %d: %llu pieces sent straight out of device memory\n",
                     meshvk::process_index(),
                     static_cast<unsigned long long>(rt.state()->direct_sends.load()));
      // That the shared tier on lavapipe moves and folds on the host, unless told not to.
      // and there reads its peers' memory in place where it maps it.
      std::fprintf(stderr, "process %d: transfers run on the host: %s\n", meshvk::process_index(),
                   !rt.state()->host_transfers() ? "no"
                   : rt.state()->peer_mapping()  ? "yes, in place"
                                                 : "yes, through the ring");
      // And that a process's devices share replicated elementwise work (graph/pending_pieces.cpp).
      std::fprintf(stderr, "process %d: %llu pieces computed once for their adapter\n", meshvk::process_index(),
                   static_cast<unsigned long long>(rt.state()->shared_pieces.load()));
    }
    std::printf("devices %d processes %d\n", rt.num_devices(), meshvk::process_count());
    for (const auto& [name, values] : results) {
      // FNV-1a over the bytes: any bit that differs shows.
      uint64_t hash = 1469598103934665603ull;
      for (const float v : values) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        for (int b = 0; b < 4; ++b) hash = (hash ^ ((bits >> (8 * b)) & 0xff)) * 1099511628211ull;
      }
      std::printf("%s: %zu values, digest %016" PRIx64 ", first %.9g\n", name.c_str(),
                  values.size(), hash, values.empty() ? 0.0 : values.front());
    }
    if (meshvk::Runtime::validation_messages_in_process() != 0) {
      std::fprintf(stderr, "process %d: %llu validation messages\n", meshvk::process_index(),
                   static_cast<unsigned long long>(meshvk::Runtime::validation_messages_in_process()));
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process %d: %s\n", meshvk::process_index(), e.what());
    return 1;
  }
}

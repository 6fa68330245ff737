// meshvk/distributed.hpp in a program written for several processes: run under `mpirun -np 2`
// with 4 devices per process (ctest processes_api); every process checks what it sees and exits
// non-zero (naming the check) when something is wrong.
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <stdlib.h>
#include <unistd.h>

#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"

namespace mv = meshvk;
using mv::P;

namespace {
int failures = 0;
void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "process %d: FAILED: %s\n", mv::process_index(), what.c_str());
}
}  // namespace

int main() {
  try {
    check(!mv::distributed::is_initialized(), "not initialized before initialize()");
    mv::distributed::initialize();
    check(mv::distributed::is_initialized(), "initialized");
    bool refused = false;
    try {
      mv::distributed::initialize({.num_processes = 3});
    } catch (const mv::Error& e) {
      refused = std::string(e.what()).find("Open MPI started 2 processes") != std::string::npos;
    }
    check(refused, "initialize with the wrong num_processes is an Error naming the real count");
    // A Runtime that ends before the job does: the next one keeps the node's shared memory,
    // cleared of what this one published (every check below runs on the second).
    {
      mv::Runtime first;
      const auto line = mv::make_mesh({first.num_devices()}, {"x"});
      const std::vector<float> ones(8, 1.0f);
      const auto sum = mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, line,
                                     {P("x")}, P("x"));
      const mv::Array y =
          sum(mv::device_put(std::span<const float>(ones), {8}, mv::NamedSharding(line, P("x"))));
      check(mv::multihost::process_allgather(y) == std::vector<float>(8, 8.0f),
            "psum in a first Runtime of the job");
    }
    mv::Runtime rt;
    const int me = mv::process_index();
    check(mv::process_count() == 2, "process_count() == 2");
    check(rt.num_devices() == 8 && mv::local_device_count() == 4, "8 devices, 4 local");
    const auto local = mv::local_devices();
    check(local.size() == 4 && local[0].id == 4 * me && local[3].id == 4 * me + 3 &&
              local[0].process_index == me,
          "local_devices() are this process's, process-major");
    const auto all = mv::devices();
    check(all.size() == 8 && all[5].process_index == 1 && mv::process_of(5) == 1, "devices() are global");

    // Each process gives its half of the rows; the global array is the whole.
    const auto mesh = mv::make_mesh({8}, {"x"});
    const mv::NamedSharding rows(mesh, P("x", mv::None));
    std::vector<float> mine(8 * 3);
    std::iota(mine.begin(), mine.end(), static_cast<float>(me * 24));
    const mv::Array x = mv::make_array_from_process_local_data(rows, mine, {8, 3}, {16, 3});
    check(x.shape() == mv::Shape{16, 3}, "make_array_from_process_local_data: the global shape");
    std::vector<float> expected(48);
    std::iota(expected.begin(), expected.end(), 0.0f);
    check(mv::multihost::process_allgather(x) == expected, "process_allgather of the global array");
    check(mv::multihost::process_allgather(x * 2.0f) == [&] {
      auto twice = expected;
      for (float& v : twice) v *= 2;
      return twice;
    }(), "an op on it, gathered");
    // JAX's rule for a program that initialized: no to_host of what spans processes.
    bool raised = false;
    try {
      (void)x.to_host<float>();
    } catch (const mv::Error& e) {
      raised = std::string(e.what()).find("non-addressable") != std::string::npos &&
               std::string(e.what()).find("process_allgather") != std::string::npos;
    }
    check(raised, "to_host of an array spanning processes raises JAX's error");
    const auto shards = x.addressable_shards();
    check(shards.size() == 4 && shards[0].device == 4 * me, "addressable_shards: this process's 4");
    check(shards[1].data.to_host<float>() ==
              std::vector<float>(expected.begin() + (4 * me + 1) * 6, expected.begin() + (4 * me + 2) * 6),
          "a local shard reads back");
    // A replicated result may be read on every process.
    const mv::Array total = mv::sum(x);
    check(total.to_host<float>() == std::vector<float>{47.0f * 48 / 2}, "sum of the global array");
    mv::multihost::sync_global_devices("done");
    bool mismatch = false;
    try {
      mv::multihost::sync_global_devices(me == 0 ? "a" : "b");
    } catch (const mv::Error& e) {
      mismatch = std::string(e.what()).find("another barrier") != std::string::npos;
    }
    check(mismatch, "sync_global_devices with different names is an Error");
    bool bad_local = false;
    try {
      (void)mv::make_array_from_process_local_data(rows, mine, {4, 3}, {16, 3});
    } catch (const mv::Error& e) {
      bad_local = std::string(e.what()).find("(8, 3)") != std::string::npos;
    }
    check(bad_local, "local data of the wrong shape is an Error naming the right one");
    check(mv::multihost::process_allgather(x) == expected, "the runtime still works after the errors");
    // A fold between the two processes (devices 0 and 4) gives the bits lavapipe's fold kernel
    // gives within one process, where the host folds (RuntimeState::host_transfers): denormals
    // kept, max and min of equal values the second operand's, NaN payloads as the kernel picks
    // them (the expected words are one process's psum / pmax / pmin of the same pairs).
    {
      const auto pair = mv::make_mesh({2}, {"x"}, {}, {0, 4});
      const auto word = [](uint32_t u) {
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      };
      const std::vector<float> a = {1e-45f, -0.0f, 0.0f, word(0x7fc00001), 1.0f, word(0x00400000), -0.0f, 3.0f};
      const std::vector<float> b = {1e-45f, 0.0f, -0.0f, word(0x7fc00002), word(0x7fc00003), word(0x00400000), -0.0f, word(0x7f800000)};
      std::vector<float> both(a);
      both.insert(both.end(), b.begin(), b.end());
      const mv::Array pairs = mv::device_put(std::span<const float>(both), {16}, mv::NamedSharding(pair, P("x")));
      const std::vector<std::vector<uint32_t>> expected_words = {
          {0x00000002, 0x00000000, 0x00000000, 0x7fc00002, 0x7fc00003, 0x00800000, 0x80000000, 0x7f800000},
          {0x00000001, 0x00000000, 0x80000000, 0x7fc00001, 0x7fc00003, 0x00400000, 0x80000000, 0x7f800000},
          {0x00000001, 0x00000000, 0x80000000, 0x7fc00001, 0x7fc00003, 0x00400000, 0x80000000, 0x40400000}};
      const char* names[] = {"psum", "pmax", "pmin"};
      for (int k = 0; k < 3; ++k) {
        const auto fold = mv::shard_map(
            [k](const mv::Array& v) {
              return k == 0 ? mv::psum(v, "x") : k == 1 ? mv::pmax(v, "x") : mv::pmin(v, "x");
            },
            pair, {P("x")}, P("x"));
        const std::vector<float> got = mv::multihost::process_allgather(fold(pairs));
        bool same = got.size() == 16;
        for (size_t i = 0; same && i < 16; ++i) {
          uint32_t u;
          std::memcpy(&u, &got[i], 4);
          same = u == expected_words[k][i % 8];
        }
        check(same, std::string(names[k]) + " between processes: the fold kernel's bits");
      }
    }
    // Each process writes its own trace: the same program would otherwise write one file twice.
    const std::string tag = ".process" + std::to_string(me);
    check(mv::profile::trace_path_of_process("out/trace.json") == "out/trace" + tag + ".json" &&
              mv::profile::trace_path_of_process("runs.d/trace") == "runs.d/trace" + tag,
          "trace_path_of_process puts the process's index before the file's extension");
    char folder[] = "/tmp/meshvk-process-api-XXXXXX";
    check(mkdtemp(folder) != nullptr, "a temporary folder");
    mv::multihost::sync_global_devices("folder");  // each made its own; the names differ
    mv::profile::start();
    (void)mv::multihost::process_allgather(x * 3.0f);
    mv::profile::stop();
    const std::string trace = std::string(folder) + "/trace.json";
    mv::profile::write_chrome_trace(trace);
    std::FILE* own = std::fopen((std::string(folder) + "/trace" + tag + ".json").c_str(), "r");
    std::string text;
    if (own) {
      char buffer[4096];
      for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, own)) > 0;) text.append(buffer, n);
      std::fclose(own);
    }
    check(text.find("meshvk process " + std::to_string(me) + ", runtime") != std::string::npos &&
              access(trace.c_str(), F_OK) != 0,
          "write_chrome_trace writes this process's file, naming the process");
    // The offset of process 0's clock, measured at initialisation: on one machine the clocks are
    // one, so it is 0 within its uncertainty (half the best round trip), which is under 10 ms.
    const auto number_after = [&](const std::string& key) -> std::optional<long long> {
      const size_t at = text.find("\"" + key + "\":");
      if (at == std::string::npos) return std::nullopt;
      return std::strtoll(text.c_str() + at + key.size() + 3, nullptr, 10);
    };
    const auto offset = number_after("clock_offset_ns"), uncertainty = number_after("clock_offset_uncertainty_ns");
    check(offset && uncertainty && *uncertainty >= 0 && *uncertainty < 10'000'000 &&
              std::llabs(*offset) <= *uncertainty + 1'000'000 && (me != 0 || (*offset == 0 && *uncertainty == 0)),
          "the trace records process 0's clock offset, 0 on one machine within its uncertainty");
    std::remove((std::string(folder) + "/trace" + tag + ".json").c_str());
    rmdir(folder);
    std::printf("process %d: %s\n", me, failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process %d: %s\n", mv::process_index(), e.what());
    return 1;
  }
}

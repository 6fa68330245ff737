// A process of the job that dies or hangs in the middle of a collective, or runs another
// program: under `mpirun -np 2` with 4 devices per process, `process_failure kill|hang`, process
// 1 stops at the third all-reduce, and process 0 must end the job within MESHVK_WAIT_TIMEOUT_MS
// with a message naming process 1, the collective and its ring step; `process_failure diverge`,
// process 1 jits an all-gather where process 0 jits the all-reduce, and the job ends at that trace,
// naming the function. The *_exchange modes fail while the processes exchange host data (a
// to_host of an array spanning them): process 1 stops (SIGSTOP), reads an array of another
// shape, or runs a collective instead; the job must end naming process 1 (or, for the
// collective, whichever process timed out first naming the other). tests/processes/
// failure_check.cmake checks each. The slow modes fail nothing: before the third all-reduce
// process 1 computes for SLOW_SECONDS (3 by default) on the host (slow) or on its device
// (slow_device: a chain of matmuls), longer than the tests' MESHVK_WAIT_TIMEOUT_MS, while
// process 0 waits in that all-reduce; the job must complete (tests/processes/slow_check.cmake).
// stop_wait: process 1 is stopped (SIGSTOP) while it waits in the third all-reduce; process 0
// must name it, and process 1, resumed as the job ends, must not blame process 0.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "meshvk/meshvk.hpp"

namespace mv = meshvk;

int main(int argc, char** argv) {
  const bool kill = argc > 1 && std::strcmp(argv[1], "kill") == 0;
  const bool diverge = argc > 1 && std::strcmp(argv[1], "diverge") == 0;
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    mv::Runtime rt;
    const auto mesh = mv::make_mesh({rt.num_devices()}, {"x"});
    // 512 KiB per device: the ring algorithm, whose steps the failure message names.
    std::vector<float> host(static_cast<size_t>(rt.num_devices()) * (128 << 10), 1.0f);
    const auto x = mv::device_put(std::span<const float>(host), {static_cast<int64_t>(host.size())},
                                  mv::NamedSharding(mesh, mv::P("x")));
    const auto total = mv::shard_map([](const mv::Array& v) { return mv::psum(v, "x"); }, mesh,
                                     {mv::P("x")}, mv::P("x"));
    for (int i = 0; i < 5; ++i) {
      if (i == 2 && diverge) {
        const auto other = mv::shard_map([](const mv::Array& v) { return mv::all_gather(v, "x", 0, true); },
                                         mesh, {mv::P("x")}, mv::P("x"));
        const auto step = mv::jit([&](const mv::Array& v) {
          return mv::process_index() == 1 ? other(v) : total(v);
        }, {.name = "step"});
        (void)step(x).to_host<float>();
      }
      if (i == 2 && mode.ends_with("_exchange")) {
        if (mv::process_index() == 1) {
          std::fprintf(stderr, "process 1: %s now\n", mode.c_str());
          std::fflush(stderr);
          if (mode == "stop_exchange") std::raise(SIGSTOP);
          if (mode == "shape_exchange") {
            const auto half = mv::device_put(
                std::span<const float>(host).first(host.size() / 2),
                {static_cast<int64_t>(host.size() / 2)}, mv::NamedSharding(mesh, mv::P("x")));
            (void)half.to_host<float>();
          }
          if (mode == "collective_exchange") (void)total(x).to_host<float>();
        }
        (void)x.to_host<float>();  // every piece from every process: an exchange of host data
      }
      if (i == 2 && mode == "stop_wait") {
        // Process 1 is stopped (SIGSTOP) half a second into its wait in the all-reduce, which
        // process 0 joins 2 s later; resumed by Open MPI's SIGCONT when the job ends, it must
        // not blame process 0 for the time it was stopped.
        if (mv::process_index() == 1) {
          std::fprintf(stderr, "process 1: stopping in its wait\n");
          std::fflush(stderr);
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            ::kill(getpid(), SIGSTOP);
          }).detach();
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(2));
        }
      }
      if (i == 2 && mode.starts_with("slow") && mv::process_index() == 1) {
        const char* seconds_text = std::getenv("SLOW_SECONDS");
        const double seconds = seconds_text ? std::atof(seconds_text) : 3.0;
        const auto start = std::chrono::steady_clock::now();
        auto elapsed = [&] {
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        };
        if (mode == "slow") {
          // User work outside meshvk: the host computes.
          volatile double sink = 0;
          while (elapsed() < seconds)
            for (int k = 0; k < 100000; ++k) sink = sink + k * 1e-9;
        } else {
          // Work on the device (lavapipe: the process's threads): elementwise kernels on its
          // own shards, timed once, then as many as fill the step, waited for once at the end.
          auto pass = [](const mv::Array& v) {
            auto r = v;
            for (int k = 0; k < 20; ++k) r = r * 1.0001f;
            return r;
          };
          auto local = mv::shard_map(pass, mesh, {mv::P("x")}, mv::P("x"));
          (void)local(x);  // traced and compiled
          rt.synchronize();
          const double before = elapsed();
          (void)local(x);
          rt.synchronize();
          const double one = std::max(elapsed() - before, 1e-3);
          // Again while time is left (a calibration on a loaded machine may overestimate a pass).
          auto y = x;
          while (elapsed() < seconds) {
            for (int k = 0; k < std::max(1, static_cast<int>((seconds - elapsed()) / one)); ++k) y = local(y);
            rt.synchronize();
          }
        }
        std::fprintf(stderr, "process 1: computed for %.1f s\n", elapsed());
        std::fflush(stderr);
      }
      // link_down: nothing fails here; both processes pause before step 2 while the harness
      // (tests/processes/two_nodes.sh) takes the link between them down on "step 1:".
      if (i == 2 && mode == "link_down") {
        std::this_thread::sleep_for(std::chrono::seconds(1));
      } else if (i == 2 && !diverge && !mode.ends_with("_exchange") && !mode.starts_with("slow") &&
                 mode != "stop_wait" &&
                 mv::process_index() == 1) {
        std::fprintf(stderr, "process 1: %s now\n", kill ? "dying" : "hanging");
        std::fflush(stderr);
        if (kill) std::raise(SIGKILL);
        while (true) pause();
      }
      const auto sum = total(x).to_host<float>();
      std::printf("step %d: %g\n", i, sum[0]);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process %d: %s\n", mv::process_index(), e.what());
    return 1;
  }
}

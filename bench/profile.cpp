// meshvk-bench profile: what the profiler costs. A jit replay of psum(2*sin(x)+1) in shard_map
// over 8 devices, timed with profiling off, on for every replay and on for 1 replay in 8
// (Options::sample_replays; repetitions interleaved so machine noise weighs on all alike), then
// the profile summary of the last repetition that profiled every replay.
//
// Three programs with identical work: one traced with profiling off (no timestamp queries in its
// command buffers), the same kind of program replayed with profiling off (the "A/A" pair, whose
// spread is the noise floor), and one traced with profiling on (timestamps around every
// dispatch and copy, read back on later submits and waits).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <vector>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "meshvk/meshvk.hpp"
#include "meshvk/profile.hpp"
#include "profile/hooks.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::bench {

namespace {

using Fn = std::function<Array(const Array&)>;

Fn make_program(const Mesh& mesh, const std::string& name) {
  auto f = jit(
      [mesh](const Array& x) {
        return shard_map([](const Array& v) { return psum(2.f * sin(v) + 1.f, "x"); }, mesh,
                         {P("x")}, P())(x);
      },
      JitOptions{.name = name});
  return [f](const Array& x) { return f(x); };
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Options::sample_replays for the sampled row: 1 replay in kSample is profiled.
constexpr uint32_t kSample = 8;

struct Timing {
  double off_a, off_b, stopped, on, sampled;  // seconds per replay
};

// Interleaved medians for one size; leaves the events of the last profiled repetition behind.
Timing time_size(Runtime& rt, const Mesh& mesh, int64_t per_device, int replays, int reps) {
  const Array x = device_put(arange(static_cast<float>(per_device * rt.num_devices())),
                             NamedSharding(mesh, P("x")));
  profile::stop();
  const Fn off_a = make_program(mesh, "off_a"), off_b = make_program(mesh, "off_b");
  (void)off_a(x), (void)off_b(x);  // traced without profiling: no timestamp queries
  profile::start();
  const Fn on = make_program(mesh, "profiled");
  (void)on(x);  // traced with profiling: its command buffers carry timestamp queries
  rt.synchronize();
  profile::stop();

  auto timed = [&](const Fn& f) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < replays; ++i) (void)f(x);
    rt.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
           replays;
  };
  std::vector<double> a, b, stopped, profiled, sampled;
  auto profiled_run = [&] {
    profile::start(profile::Options{.sample_replays = 1});
    profiled.push_back(timed(on));
    profile::stop();  // reads back the rest, outside the timing
  };
  auto sampled_run = [&] {
    profile::start(profile::Options{.sample_replays = kSample});
    sampled.push_back(timed(on));
    profile::stop();
  };
  for (int r = 0; r < reps; ++r) {
    // The order flips every repetition, so a position in it favours no variant.
    if (r % 2 == 0) {
      a.push_back(timed(off_a));
      stopped.push_back(timed(on));  // the instrumented program with profiling off
      sampled_run();
      profiled_run();
      b.push_back(timed(off_b));
    } else {
      b.push_back(timed(off_b));
      profiled_run();
      sampled_run();
      stopped.push_back(timed(on));
      a.push_back(timed(off_a));
    }
  }
  return {median(a), median(b), median(stopped), median(profiled), median(sampled)};
}

// What a hook costs while profiling is off: the three kinds on the submission path (a device
// span around a command, the submit hook, the wait hook), over many calls.
double off_hooks_ns(detail::RuntimeState& rt) {
  profile::stop();
  profile::DeviceProfiler& p = rt.profiler();
  profile::Slice* volatile no_slice = nullptr;  // what Recording::profile holds while off
  constexpr int kCalls = 10'000'000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    const profile::DeviceSpan span(no_slice, profile::Kind::kernel, "k");
    const profile::SubmitHook submit(p, 0, VK_NULL_HANDLE, static_cast<uint64_t>(i), {});
    const profile::WaitHook wait(p, 0, static_cast<uint64_t>(i));
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         kCalls / 3;
}

}  // namespace

int run_profile(const Options& options) {
  Runtime rt({.num_devices = 8});
  const int n = rt.num_devices();
  const Mesh mesh = make_mesh({n}, {"x"});
  const int reps = std::max(options.reps, 5) * 2 + 1;
  std::cout << "meshvk-bench profile: jit replay of psum(2*sin(x)+1) in shard_map over " << n
            << " devices; repetitions interleaved (" << reps << " each)\n"
            << machine_summary(rt.adapter_name()) << "\n";

  struct Size {
    int64_t per_device;  // floats
    int replays;         // per timed repetition
  };
  Table table;
  double small_off = 0, small_events = 0;
  for (const Size size : {Size{4096, 50}, Size{16384, 40}, Size{65536, 20}, Size{1 << 20, 4}}) {
    const int64_t kib = size.per_device * 4 >> 10;
    const std::string label = kib >= 1024 ? std::to_string(kib >> 10) + " MiB/device"
                                          : std::to_string(kib) + " KiB/device";
    if (!options.wants(label)) continue;
    const Timing t = time_size(rt, mesh, size.per_device, size.replays, reps);
    const double off = (t.off_a + t.off_b) / 2;
    if (!small_off) {
      small_off = off;
      small_events = static_cast<double>(profile::counters().events) / size.replays;
    }
    table.add({label + ", off (A)", "us", t.off_a * 1e6});
    table.add({label + ", off (B)", "us", t.off_b * 1e6, "off (A)", t.off_a * 1e6, 0, true});
    table.add(
        {label + ", profiled program, stopped", "us", t.stopped * 1e6, "off", off * 1e6, 0, true});
    table.add({label + ", profiling on", "us", t.on * 1e6, "off", off * 1e6, 1 / 1.10, true});
    table.add({label + ", profiling on, 1 replay in " + std::to_string(kSample), "us",
               t.sampled * 1e6, "off", off * 1e6, 1 / 1.10, true});
    std::printf(
        "%s: profiling on %+.1f%%, 1 replay in %u profiled %+.1f%%, profiled program while "
        "stopped %+.1f%%, A/A spread %.1f%%\n",
        label.c_str(), 100 * (t.on / off - 1), kSample, 100 * (t.sampled / off - 1),
        100 * (t.stopped / off - 1), 100 * std::abs(t.off_a - t.off_b) / off);
  }
  std::cout << "\n";
  table.print(std::cout);
  const double hook_ns = off_hooks_ns(*rt.state());
  std::printf(
      "\nA hook while profiling is off: %.2f ns. The smallest program's replay fires about as many "
      "hooks\n"
      "as it makes events when on (%.0f): ~%.2f us of its %.0f us, %.4f%% (not measurable: below "
      "the\n"
      "A/A spread).\n",
      hook_ns, small_events, small_events * hook_ns * 1e-3, small_off * 1e6,
      100 * small_events * hook_ns * 1e-9 / std::max(small_off, 1e-12));
  std::printf(
      "\nTarget: profiling on costs at most 10%% per replay at 16-256 KiB (ratio >= 91%%).\n"
      "While profiling is off each hook is one untaken branch and an unprofiled program has no\n"
      "timestamp queries, so off (A) and off (B) differ only by noise. With profiling on,\n"
      "lavapipe flushes its rasterizer scene (a round trip through its worker threads) at every\n"
      "barrier after a timestamp, and the profiler reads back and publishes ~100 events per\n"
      "replay; sampling 1 replay in %u (Options::sample_replays) spends the second on 1 in %u.\n",
      kSample, kSample);

  // What the profiler saw in the last profiled repetition.
  const profile::Counters c = profile::counters();
  const auto events = profile::events();
  size_t device_spans = 0;
  int runtime = 0;
  for (const auto& e : events)
    if (const auto* s = std::get_if<profile::Span>(&e); s && s->device >= 0) {
      ++device_spans;
      runtime = s->runtime;
    }
  std::printf("\nlast profiled repetition: %llu events, %zu device spans; clock: %s\n\n",
              static_cast<unsigned long long>(c.events), device_spans,
              profile::clock_source(runtime).c_str());
  std::cout << profile::summarize(events).to_string();
  return 0;
}

}  // namespace meshvk::bench

// meshvk estimate: traces the scaling book's programs (samples/programs/scaling_book.hpp) on an
// (X: 2, Y: 4) mesh at tutorial 002's sizes (B, D, F = 1024, 2048, 8192) or the samples' small
// ones, and projects each onto each hardware description.
#include "cli_estimate.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <meshvk/meshvk.hpp>
#include <sstream>

#ifdef MESHVK_CLI_PROGRAMS
#include "scaling_book.hpp"
#include "scenario.hpp"
#endif

namespace meshvk_cli {

namespace {

using meshvk::Array;
using meshvk::Mesh;
using meshvk::P;

// A program lowered for one size, and a call of it (for --measure).
struct Lowering {
  meshvk::Lowered lowered;
  std::function<void()> call;
};

struct Program {
  std::string name;
  std::string what;
  // Lowers the program for sizes B, D, F on `mesh`.
  std::function<Lowering(const Mesh&, int64_t, int64_t, int64_t)> lower;
};

// The best of 3 calls' wall time, the device drained after each.
double measured_seconds(const std::function<void()>& call) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    meshvk::Runtime::current().synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

#ifdef MESHVK_CLI_PROGRAMS
using Body = Array (*)(const Mesh&, const Array&, const Array&);

Array placed(const Mesh& mesh, meshvk::Shape shape, const meshvk::PartitionSpec& spec) {
  return meshvk::device_put(meshvk::zeros(std::move(shape)), meshvk::NamedSharding(mesh, spec));
}

// lhs[rows, inner] with `lhs_spec` @ rhs[inner, cols] with `rhs_spec`, through `body` under jit.
Program two_operand(std::string name, std::string what, Body body, bool lhs_contracting_sharded, bool rhs_rows_sharded,
                    bool reduce_scatter) {
  return {std::move(name), std::move(what), [=](const Mesh& mesh, int64_t B, int64_t D, int64_t F) {
            // A reduce-scatter matmul multiplies Tmp[B, F] by W2[F, D].
            const int64_t inner = reduce_scatter ? F : D, cols = reduce_scatter ? D : F;
            const Array lhs = placed(mesh, {B, inner}, lhs_contracting_sharded ? P("X", "Y") : P("X", meshvk::None));
            const Array rhs = placed(mesh, {inner, cols}, rhs_rows_sharded ? P("Y", meshvk::None) : P(meshvk::None, "Y"));
            const auto f = meshvk::jit([mesh, body](const Array& a, const Array& w) { return body(mesh, a, w); },
                                       {.name = "program"});
            return Lowering{f.lower(lhs, rhs), [f, lhs, rhs] { (void)f(lhs, rhs); }};
          }};
}
#endif

std::vector<Program> programs() {
  std::vector<Program> all;
#ifdef MESHVK_CLI_PROGRAMS
  namespace pr = meshvk::programs;
  all.push_back(two_operand("matmul_jit", "jit(A @ W), A[B_X, D_Y]: the partitioner's all-gather (002: 311 us)",
                            pr::matmul_jit, true, false, false));
  all.push_back(two_operand("matmul_unsharded_contracting", "jit(A @ W), A[B_X, D]: no communication (002: 224 us)",
                            pr::matmul_jit, false, false, false));
  all.push_back(two_operand("allgather_matmul", "shard_map: all_gather then matmul", pr::allgather_matmul, true, false, false));
  all.push_back(two_operand("collective_matmul_unidirectional", "002's collective matmul (244 us)",
                            pr::collective_matmul_unidirectional, true, false, false));
  all.push_back(two_operand("collective_matmul_bidirectional", "Problem 4: both ring directions",
                            pr::collective_matmul_bidirectional, true, false, false));
  all.push_back(two_operand("allreduce_matmul_naive", "Problem 3a: matmul then psum", pr::allreduce_matmul_naive, true, true, false));
  all.push_back(two_operand("allreduce_matmul_tiled_psum", "Problem 3a: a psum per output tile",
                            pr::allreduce_matmul_tiled_psum, true, true, false));
  all.push_back(two_operand("allreduce_collective_matmul_unidirectional", "Problem 3a: reduce-scatter ring + all_gather",
                            pr::allreduce_collective_matmul_unidirectional, true, true, false));
  all.push_back(two_operand("allreduce_collective_matmul_bidirectional", "Problem 3a: both ring directions",
                            pr::allreduce_collective_matmul_bidirectional, true, true, false));
  all.push_back(two_operand("reducescatter_matmul_naive", "Problem 3b: matmul then psum_scatter",
                            pr::reducescatter_matmul_naive, true, true, true));
  all.push_back(two_operand("reducescatter_collective_matmul_unidirectional", "Problem 3b: accumulators around the ring",
                            pr::reducescatter_collective_matmul_unidirectional, true, true, true));
  all.push_back(two_operand("reducescatter_collective_matmul_bidirectional", "Problem 3b: both ring directions",
                            pr::reducescatter_collective_matmul_bidirectional, true, true, true));
#endif
  return all;
}

std::string us(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << s * 1e6 << " us";
  return o.str();
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// Runs each sample named (or every one for "all") as its scenario, at the small sizes the
// inspector uses, and projects every jit program it traced onto `machines`.
int run_samples(const EstimateArgs& args, const std::vector<meshvk::Hardware>& machines) {
#ifdef MESHVK_CLI_PROGRAMS
  namespace sc = meshvk::scenarios;
  std::vector<const sc::Scenario*> chosen;
  for (const std::string& want : args.samples) {
    bool known = false;
    for (const sc::Scenario& s : sc::all())
      if (want == "all" || s.name == want) {
        chosen.push_back(&s);
        known = true;
      }
    if (!known) {
      std::string names;
      for (const sc::Scenario& s : sc::all()) names += (names.empty() ? "" : ", ") + s.name;
      throw UsageError("estimate: unknown sample '" + want + "'; valid: all, " + names);
    }
  }
  std::cout << std::left << std::setw(26) << "sample" << std::setw(28) << "jit program" << std::setw(14) << "hardware"
            << "step\n";
  int failed = 0;
  for (const sc::Scenario* s : chosen) {
    std::set<const meshvk::ProgramGraph*> before;
    for (const auto& t : meshvk::traced_programs()) before.insert(t.graph.get());
    std::ostringstream quiet;
    sc::ScenarioContext ctx;
    ctx.args = s->interactive_args;
    ctx.out = &quiet;
    ctx.err = &quiet;
    const int status = s->run(ctx);
    if (status != 0) {
      std::cerr << "meshvk: sample " << s->name << " exited " << status << "\n" << quiet.str();
      ++failed;
    }
    for (const auto& t : meshvk::traced_programs()) {
      if (before.count(t.graph.get())) continue;
      for (const meshvk::Hardware& hw : machines) {
        const meshvk::Estimate e = meshvk::estimate(*t.graph, hw);
        std::cout << std::left << std::setw(26) << s->name << std::setw(28) << t.name << std::setw(14) << hw.name
                  << us(e.step_time) << "\n";
      }
    }
  }
  return failed ? 1 : 0;
#else
  (void)machines;
  throw UsageError("estimate --sample: this meshvk was built without the samples");
#endif
}

}  // namespace

int run_estimate(const EstimateArgs& args) {
  const std::vector<Program> all = programs();
  std::vector<std::string> hardware = args.hardware;
  if (hardware.empty()) hardware = meshvk::shipped_hardware();
  if (args.list) {
    std::cout << "programs (mesh X: 2, Y: 4; B, D, F = 1024, 2048, 8192, or 64, 128, 256 with --small):\n";
    for (const Program& p : all) std::cout << "  " << std::left << std::setw(48) << p.name << p.what << "\n";
    if (all.empty()) std::cout << "  (none: this meshvk was built without samples/programs)\n";
    std::cout << "hardware (" << meshvk::hardware_dir() << "):\n";
    for (const auto& h : meshvk::shipped_hardware()) std::cout << "  " << h << "\n";
    return 0;
  }
  std::vector<const Program*> chosen;
  for (const Program& p : all)
    if (args.programs.empty() || std::find(args.programs.begin(), args.programs.end(), p.name) != args.programs.end())
      chosen.push_back(&p);
  for (const std::string& want : args.programs) {
    bool known = false;
    for (const Program& p : all) known = known || p.name == want;
    if (!known) throw UsageError("estimate: unknown program '" + want + "'; see meshvk estimate --list");
  }
  try {
    meshvk::Runtime rt(meshvk::RuntimeOptions{.num_devices = 8});
    if (args.print_hardware) {
      std::cout << meshvk::load_hardware(*args.print_hardware).to_text();
      return 0;
    }
    std::vector<meshvk::Hardware> machines;
    for (const auto& h : hardware) machines.push_back(meshvk::load_hardware(h));
    if (!args.samples.empty()) return run_samples(args, machines);
    const Mesh mesh = meshvk::make_mesh({2, 4}, {"X", "Y"});
    const int64_t B = args.small ? 64 : 1024, D = args.small ? 128 : 2048, F = args.small ? 256 : 8192;
    std::ostringstream trace;
    trace << std::setprecision(12) << "{\"traceEvents\":[";
    bool first = true;
    int pid = 0;
    std::cout << std::left << std::setw(48) << "program" << std::setw(14) << "hardware" << std::setw(14) << "step"
              << "critical path (longest step)\n";
    for (const Program* p : chosen) {
      const Lowering lowering = p->lower(mesh, B, D, F);
      const meshvk::Lowered& l = lowering.lowered;
      if (args.measure)
        std::cout << std::left << std::setw(48) << p->name << std::setw(14) << "measured" << std::setw(14)
                  << us(measured_seconds(lowering.call)) << "(this adapter, best of 3 calls)\n";
      for (const meshvk::Hardware& hw : machines) {
        const meshvk::Estimate e = l.estimate(hw);
        const meshvk::ProjectedSpan* longest = nullptr;
        for (const auto& s : e.critical_path)
          if (!longest || s.end - s.start > longest->end - longest->start) longest = &s;
        std::cout << std::left << std::setw(48) << p->name << std::setw(14) << hw.name << std::setw(14) << us(e.step_time)
                  << (longest ? longest->name + " " + us(longest->end - longest->start) : std::string("-")) << "\n";
        if (!args.trace) continue;
        // One process per (program, hardware, device), named so; lane 0 compute, lane 1 collectives.
        std::map<int, int> pids;
        for (const auto& d : e.devices) {
          pids[d.device] = pid;
          trace << (first ? "" : ",") << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid
                << ",\"args\":{\"name\":" << json_string(p->name + " on " + hw.name + ", device " + std::to_string(d.device))
                << "}}";
          first = false;
          ++pid;
        }
        for (const auto& s : e.timeline)
          trace << ",{\"name\":" << json_string(s.name) << ",\"ph\":\"X\",\"pid\":" << pids[s.device]
                << ",\"tid\":" << (s.communication ? 1 : 0) << ",\"ts\":" << s.start * 1e6
                << ",\"dur\":" << (s.end - s.start) * 1e6 << "}";
      }
    }
    trace << "]}";
    if (args.trace) {
      std::ofstream out(*args.trace);
      out << trace.str();
      if (!out) throw meshvk::Error("estimate: cannot write '" + *args.trace + "'");
    }
    return 0;
  } catch (const meshvk::Error& e) {
    std::cerr << "meshvk: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace meshvk_cli

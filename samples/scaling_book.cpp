// Every worked program of "How To Scale Your Model", part 10 (seed 002), at small sizes on the
// mesh (2, 4) ('X', 'Y'): the collective matmuls (all-gather, AllReduce and ReduceScatter, one
// way and both ways), the Transformer block, Problem 1 and the mixture of experts of Problem 2,
// each checked against its reference. The programs live in samples/programs/scaling_book.cpp.
//
//   build/bin/scaling_book [--only NAME] [--list] [--help]
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <meshvk/meshvk.hpp>

#include <meshvk/profile.hpp>  // profile hook: --trace
#include "scaling_book.hpp"

namespace mv = meshvk;
namespace programs = meshvk::programs;

namespace {

const char* const kUsage =
    "usage: scaling_book [--only NAME] [--list] [--help]\n"
    "  --only NAME  run only the programs whose name contains NAME (see --list)\n"
    "  --list       print the programs' names and exit\n";

struct Flags {
  std::string only;
  bool list = false;
};

// Returns the exit code to stop with, or -1 to run.
int parse(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--only" && i + 1 < argc) {
      flags.only = argv[++i];
    } else if (a == "--list") {
      flags.list = true;
    } else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      std::fprintf(stderr, "scaling_book: unknown or incomplete argument %s\n%s", a.c_str(),
                   kUsage);
      return 2;
    }
  }
  return -1;
}

// "float32[16,64] PartitionSpec('X', 'Y')": the result's type and layout.
std::string layout(const mv::Array& x) {
  const mv::NamedSharding* named = x.sharding().named();
  return mv::typeof(x) + " " + (named ? named->spec().to_string() : x.sharding().to_string());
}

// Runs one program and its reference; prints the >>> line, the result's layout and the check.
bool run_case(const programs::ScalingBookCase& c, const mv::Mesh& mesh) {
  std::cout << ">>> out = " << c.python << "\n";
  const programs::Comparison result = c.run(mesh);
  const float diff = programs::max_abs_diff(result.got, result.want);
  const bool ok = diff <= result.tolerance;
  std::cout << layout(result.got) << "\n"
            << c.name << " vs reference" << (result.tolerance == 0 ? " (bit for bit)" : "") << ": "
            << (ok ? "equal" : "NOT EQUAL") << "\n";
  if (!ok) std::cout << "  max |difference| = " << diff << "\n";
  return ok;
}

std::vector<programs::ScalingBookCase> selected(const std::string& only) {
  std::vector<programs::ScalingBookCase> picked;
  for (auto& c : programs::scaling_book_cases())
    if (only.empty() || c.name.find(only) != std::string::npos) picked.push_back(std::move(c));
  return picked;
}

}  // namespace

int main(int argc, char** argv) {
  if (!meshvk::profile::trace_from_args(argc, argv)) return 2;  // --trace out.json (profile hook)
  Flags flags;
  if (const int rc = parse(argc, argv, flags); rc >= 0) return rc;
  const auto cases = selected(flags.only);
  if (flags.list) {
    for (const auto& c : cases) std::cout << c.name << "  (" << c.problem << ")\n";
    return 0;
  }
  if (cases.empty()) {
    std::fprintf(stderr, "scaling_book: no program named like '%s' (see --list)\n%s",
                 flags.only.c_str(), kUsage);
    return 2;
  }
  try {
    mv::Runtime rt({.num_devices = 8});
    std::cout << "meshvk on " << rt.adapter_name() << ", split into " << rt.num_devices()
              << " virtual devices\n\n"
              << "=== 002 How To Scale Your Model, part 10: the worked programs ===\n\n"
              << ">>> mesh = jax.make_mesh(axis_shapes=(2, 4), axis_names=('X', 'Y'))\n";
    const mv::Mesh mesh = mv::make_mesh({2, 4}, {"X", "Y"});
    bool ok = true;
    std::string problem, inputs;
    for (const auto& c : cases) {
      if (c.problem != problem) std::cout << "\n--- " << (problem = c.problem) << " ---\n\n";
      if (c.inputs != inputs) std::cout << ">>> " << (inputs = c.inputs) << "\n";
      ok &= run_case(c, mesh);
    }
    std::cout << "\n"
              << cases.size() << " programs, " << (ok ? "all equal" : "SOME NOT EQUAL") << "\n";
    return ok ? 0 : 1;
  } catch (const mv::Error& e) {
    std::fprintf(stderr, "meshvk error: %s\n", e.what());
    return 1;
  }
}

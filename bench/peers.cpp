// meshvk-bench peers: meshvk beside what a user would pick instead on the same machine, in one
// run on the same sizes: PyTorch on the CPU (bench/peers/torch_peers.py through Debian's
// /usr/bin/python3, torch.set_num_threads equal to meshvk's CPU threads) and, for collectives,
// Open MPI (bench/peers/mpi_peers.cpp through mpirun, one rank per virtual device). Each row is
// the peer's time over meshvk's (above 1: meshvk is faster) against its target. A peer that is
// missing or fails gives its rows the reason instead of a figure.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "benchmarks.hpp"
#include "gpt_step.hpp"
#include "meshvk/error.hpp"
#include "meshvk/meshvk.hpp"
#include "peer_process.hpp"

#ifndef MESHVK_TORCH_PEERS
#define MESHVK_TORCH_PEERS ""
#endif
#ifndef MESHVK_MPI_PEERS
#define MESHVK_MPI_PEERS ""
#endif
#ifndef MESHVK_MPIEXEC
#define MESHVK_MPIEXEC "mpirun"
#endif

namespace meshvk::bench {

namespace {

const std::vector<int> kMlpSizes = {784, 1024, 1024, 1024, 10};
const std::vector<std::string> kGroups = {"train", "train-dp", "gpt",        "matmul",     "sin",
                                          "sum",   "xent",     "all-reduce", "all-gather", "reduce-scatter"};

struct Config {
  std::set<std::string> groups;
  int64_t batch = 8192;
  std::vector<int64_t> matmul = {1024, 2048, 4096};
  int64_t elements = int64_t{16} << 20;
  uint64_t min_bytes = uint64_t{1} << 20, max_bytes = uint64_t{256} << 20;
  double timeout_s = 1800;
  int reps = 5;
};

int64_t positive(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v <= 0)
    throw Error("--" + option + " " + text + ": expected a positive integer");
  return v;
}

uint64_t byte_size(const std::string& option, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  const int shift = unit.empty() || unit == "B" ? 0
                    : unit == "KiB"             ? 10
                    : unit == "MiB"             ? 20
                    : unit == "GiB"             ? 30
                                                : -1;
  if (digits == 0 || shift < 0)
    throw Error("--" + option + " " + text + ": expected bytes such as 4096, 64KiB, 1MiB or 1GiB");
  const uint64_t v = static_cast<uint64_t>(positive(option, text.substr(0, digits)));
  if (v > (uint64_t{1} << 40) >> shift) throw Error("--" + option + " " + text + ": past 1 TiB");
  return v << shift;
}

Config parse(const Options& options) {
  Config c;
  c.reps = std::max(options.reps, 1);
  const auto& s = options.settings;
  std::string rows = s.count("rows") ? s.at("rows") : "";
  std::stringstream in(rows);
  for (std::string g; std::getline(in, g, ',');) {
    if (std::find(kGroups.begin(), kGroups.end(), g) == kGroups.end()) {
      std::string valid;
      for (const auto& k : kGroups) valid += (valid.empty() ? "" : ", ") + k;
      throw Error("--rows: no row group named '" + g + "'; valid: " + valid);
    }
    c.groups.insert(g);
  }
  if (c.groups.empty()) c.groups.insert(kGroups.begin(), kGroups.end());
  if (s.count("batch")) c.batch = positive("batch", s.at("batch"));
  if (c.batch % 8)
    throw Error("--batch " + std::to_string(c.batch) + ": must be a multiple of 8 (8 devices)");
  if (s.count("matmul")) {
    c.matmul.clear();
    std::stringstream m(s.at("matmul"));
    for (std::string n; std::getline(m, n, ',');) c.matmul.push_back(positive("matmul", n));
  }
  if (s.count("elements")) c.elements = positive("elements", s.at("elements"));
  if (s.count("min-bytes")) c.min_bytes = byte_size("min-bytes", s.at("min-bytes"));
  if (s.count("max-bytes")) c.max_bytes = byte_size("max-bytes", s.at("max-bytes"));
  if (c.min_bytes % 32 || c.max_bytes < c.min_bytes)
    throw Error(
        "--min-bytes/--max-bytes: need min <= max and sizes that split into 8 float32 "
        "pieces (multiples of 32 bytes)");
  if (s.count("timeout")) c.timeout_s = static_cast<double>(positive("timeout", s.at("timeout")));
  return c;
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(s >= 1 ? 3 : s >= 1e-3 ? 2 : 1);
  if (s >= 1)
    o << s << " s";
  else if (s >= 1e-3)
    o << s * 1e3 << " ms";
  else
    o << s * 1e6 << " us";
  return o.str();
}

std::string size_text(uint64_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                            : std::to_string(bytes >> 10) + " KiB";
}

// One row: meshvk's time for some work beside one peer's time for the same work.
struct PeerRow {
  std::string name;
  std::string peer;  // "PyTorch", "PyTorch gloo x8", "Open MPI x8"
  double target;     // minimum peer time / meshvk time
  double meshvk_s = 0;
  std::string meshvk_error;
  PeerResult peer_result;
};

void print_table(const std::vector<PeerRow>& rows, std::ostream& out) {
  const std::vector<std::string> head = {"row", "meshvk", "peer", "peer time", "ratio", "target"};
  std::vector<std::vector<std::string>> cells;
  int pass = 0, miss = 0, missing = 0;
  for (const PeerRow& r : rows) {
    std::ostringstream target;
    target << ">= " << std::setprecision(2) << r.target << "x ";
    std::vector<std::string> c = {r.name, r.meshvk_error.empty() ? seconds_text(r.meshvk_s) : "",
                                  r.peer, "",
                                  "-",    target.str()};
    if (!r.meshvk_error.empty()) {
      c[1] = "failed: " + r.meshvk_error;
      c[5] += "n/a";
      ++missing;
    } else if (!r.peer_result.ok) {
      c[3] = r.peer_result.why;
      c[5] += "n/a";
      ++missing;
    } else {
      const double ratio = r.peer_result.seconds / r.meshvk_s;
      std::ostringstream o;
      o << std::fixed << std::setprecision(2) << ratio << "x";
      c[3] = seconds_text(r.peer_result.seconds);
      c[4] = o.str();
      c[5] += ratio >= r.target ? "PASS" : "MISS";
      ++(ratio >= r.target ? pass : miss);
    }
    cells.push_back(std::move(c));
  }
  print_markdown_table(out, head, cells);
  out << "\n"
      << rows.size() << " rows: " << pass << " PASS, " << miss << " MISS, " << missing
      << " without a peer figure\n";
}

// ---- meshvk's side ----

using Fn = std::function<void()>;

// One training step of the 001 MLP (forward, backward, SGD), on device 0 or 8-way data parallel
// (parameters replicated, the batch split, gradients summed by the partitioner's all-reduce).
double train_seconds(Runtime& rt, int64_t batch, bool data_parallel, int reps) {
  Params params = nn::init_mlp(kMlpSizes, 0);
  Array x = normal(random_key(1), {batch, kMlpSizes.front()});
  Array y = normal(random_key(2), {batch, kMlpSizes.back()});
  if (data_parallel) {
    const Mesh mesh = make_mesh({rt.num_devices()}, {"batch"});
    for (auto& [name, p] : params) p = device_put(p, NamedSharding(mesh, P()));
    x = device_put(x, NamedSharding(mesh, P("batch")));
    y = device_put(y, NamedSharding(mesh, P("batch")));
  }
  std::vector<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  const JitFunction step(
      [&](const std::vector<Array>& a) {
        Params p;
        for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], a[i]);
        auto [loss, grads] = value_and_grad_params(
            [&](const Params& q) {
              return nn::mse_loss(nn::mlp(q, a[names.size()]), a[names.size() + 1]);
            },
            p);
        std::vector<Array> out{loss};
        for (const auto& [name, v] : nn::sgd(p, grads, 1e-3f)) out.push_back(v);
        return out;
      },
      {.name = data_parallel ? "train_step_dp" : "train_step"});
  std::vector<Array> args;
  for (const auto& name : names) args.push_back(params.at(name));
  args.push_back(x);
  args.push_back(y);
  return median_seconds(reps, [&] {
    step.call(args);
    rt.synchronize();
  });
}

double timed_jit(Runtime& rt, int reps, const std::function<Array(const Array&)>& f,
                 const Array& x) {
  const auto g = jit(f);
  return median_seconds(reps, [&] {
    g(x);
    rt.synchronize();
  });
}

// A collective over every device as jit(shard_map(...)), sizes as nccl-tests count them.
double collective_seconds(Runtime& rt, const std::string& op, uint64_t bytes, int reps) {
  const int n = rt.num_devices();
  const Mesh mesh = make_mesh({n}, {"x"});
  const uint64_t per_device = op == "all-gather" ? bytes / n : bytes;
  const Array x = zeros({static_cast<int64_t>(per_device / 4 * n)}, DType::float32,
                        NamedSharding(mesh, P("x")));
  std::function<Array(const Array&)> body;
  if (op == "all-reduce")
    body = [](const Array& v) { return psum(v, "x"); };
  else if (op == "all-gather")
    body = [](const Array& v) { return all_gather(v, "x", 0, true); };
  else
    body = [](const Array& v) { return psum_scatter(v, "x", 0, true); };
  const auto f =
      jit([mesh, body](const Array& v) { return shard_map(body, mesh, {P("x")}, P("x"))(v); });
  return median_seconds(reps, [&] {
    f(x);
    rt.synchronize();
  });
}

// ---- the peers ----

struct Peers {
  std::string python = "/usr/bin/python3";
  std::string script = MESHVK_TORCH_PEERS;
  std::string mpi_program = MESHVK_MPI_PEERS;
  std::string mpiexec = MESHVK_MPIEXEC;
  int threads = 1;
  int world = 8;
  const Config* config = nullptr;

  std::map<std::string, PeerResult> torch(bool dist, const std::vector<std::string>& tasks) const {
    if (script.empty() || !find_program(python).size())
      return missing(tasks, "missing: PyTorch needs " + python + " (apt install python3-torch)");
    std::vector<std::string> argv = {python,      script,
                                     "--threads", std::to_string(threads),
                                     "--reps",    std::to_string(config->reps)};
    if (dist)
      argv.insert(argv.end(), {"--world", std::to_string(world), "dist"});
    else
      argv.push_back("single");
    argv.insert(argv.end(), tasks.begin(), tasks.end());
    auto out = run_peer(argv, {"PYTHONDONTWRITEBYTECODE=1"}, tasks, config->timeout_s);
    for (auto& [task, r] : out)
      if (!r.ok && r.why.find("No module named 'torch'") != std::string::npos)
        r.why = "missing: no PyTorch for " + python + " (apt install python3-torch)";
    return out;
  }

  std::map<std::string, PeerResult> mpi(const std::vector<std::string>& tasks) const {
    if (mpi_program.empty())
      return missing(tasks,
                     "missing: Open MPI was not found when meshvk was built "
                     "(apt install libopenmpi-dev openmpi-bin, then reconfigure)");
    if (find_program(mpiexec).empty())
      return missing(tasks, "missing: no " + mpiexec + " (apt install openmpi-bin)");
    std::vector<std::string> argv = {mpiexec,           "-np",       std::to_string(world),
                                     "--oversubscribe", "--bind-to", "none",
                                     mpi_program,       "--reps",    std::to_string(config->reps)};
    argv.insert(argv.end(), tasks.begin(), tasks.end());
    // Root is allowed (containers); no single-copy (CMA needs ptrace rights containers lack).
    return run_peer(argv,
                    {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                     "OMPI_MCA_btl_vader_single_copy_mechanism=none"},
                    tasks, config->timeout_s);
  }

  static std::map<std::string, PeerResult> missing(const std::vector<std::string>& tasks,
                                                   const std::string& why) {
    std::map<std::string, PeerResult> out;
    for (const auto& t : tasks) out[t] = {false, 0, why};
    return out;
  }
};

}  // namespace

int run_peers(const Options& options) {
  const Config config = parse(options);
  Runtime rt({.num_devices = 8});
  Peers peers;
  peers.threads = thread_count();
  peers.world = rt.num_devices();
  peers.config = &config;
  if (const char* p = std::getenv("MESHVK_PEERS_PYTHON")) peers.python = p;
  std::cout
      << "meshvk-bench peers: meshvk vs PyTorch (CPU) and Open MPI, same machine, same sizes\n"
      << machine_summary(rt.adapter_name()) << "PyTorch:        " << peers.python << " "
      << peers.script << ", torch.set_num_threads(" << peers.threads
      << "); distributed rows: " << peers.world << " gloo processes, "
      << std::max(1, peers.threads / peers.world) << " thread(s) each\n"
      << "Open MPI:       "
      << (peers.mpi_program.empty()
              ? std::string("not built")
              : peers.mpiexec + " -np " + std::to_string(peers.world) + " --oversubscribe")
      << "\ntiming:         median of " << config.reps
      << " runs after one warm-up; ratio = peer time / meshvk time (above 1: meshvk faster)\n\n";

  std::vector<PeerRow> rows;
  const auto torch_single = [&](const std::vector<std::string>& t) {
    return peers.torch(false, t);
  };
  const auto torch_dist = [&](const std::vector<std::string>& t) { return peers.torch(true, t); };
  const auto mpi = [&](const std::vector<std::string>& t) { return peers.mpi(t); };
  const std::string b = std::to_string(config.batch);
  const std::string e = std::to_string(config.elements);
  const int r = config.reps;

  // One group: meshvk's measurements for its rows, then the peer's, so load from elsewhere on a
  // shared machine weighs on both within minutes of each other.
  struct Spec {
    std::string name;
    double target;
    std::function<double()> measure;
    std::string task;
  };
  auto run_group =
      [&](const std::string& g, const std::string& peer_name,
          const std::function<std::map<std::string, PeerResult>(const std::vector<std::string>&)>&
              peer,
          std::vector<Spec> specs) {
        if (!config.groups.count(g)) return;
        std::cerr << "peers: " << g << " (" << peer_name << ")...\n";
        std::vector<PeerRow> out;
        std::vector<std::string> tasks;
        for (const Spec& s : specs) {
          if (!options.wants(s.name)) continue;  // --only SUBSTRING
          PeerRow row{s.name, peer_name, s.target};
          try {
            row.meshvk_s = s.measure();
          } catch (const std::exception& ex) {
            row.meshvk_error = ex.what();
          }
          out.push_back(std::move(row));
          tasks.push_back(s.task);
        }
        if (tasks.empty()) return;
        const auto results = peer(tasks);
        for (size_t i = 0; i < out.size(); ++i) {
          const auto it = results.find(tasks[i]);
          out[i].peer_result = it != results.end() ? it->second : PeerResult{false, 0, "no result"};
          rows.push_back(std::move(out[i]));
        }
      };

  const std::string mlp = "MLP step 784-1024-1024-1024-10, batch " + b;
  run_group("train", "PyTorch", torch_single,
            {{mlp + ", one device", 0.7, [&] { return train_seconds(rt, config.batch, false, r); },
              "train:" + b}});
  run_group("train-dp", "PyTorch DDP gloo x" + std::to_string(peers.world), torch_dist,
            {{mlp + ", 8-way data parallel", 0.6,
              [&] { return train_seconds(rt, config.batch, true, r); }, "train-dp:" + b}});
  // The GPT of samples/programs, one device and two of its 8-device layouts, against the same
  // model in PyTorch (tests/models/gpt_reference.py) on one process at the same thread count.
  std::map<std::string, double> gpt_times;
  {
    const char* gpt = "GPT step (d_model 128, 2 layers, seq 64, batch 16, Adam)";
    std::vector<Spec> specs;
    for (const auto& [mode, label] : std::vector<std::pair<std::string, std::string>>{
             {"single", "one device"}, {"dp", "8-way data parallel"}, {"dp_tp", "8-way dp + tp (2, 4)"}})
      specs.push_back({std::string(gpt) + ", " + label, 0.5,
                       [&rt, &gpt_times, mode = mode, r] { return gpt_times[mode] = gpt_step_seconds(rt, mode, r); },
                       "gpt:16"});
    run_group("gpt", "PyTorch", torch_single, std::move(specs));
  }
  {
    std::vector<Spec> specs;
    for (const int64_t n : config.matmul) {
      specs.push_back(
          {"matmul f32 " + std::to_string(n) + "^3", 0.6,
           [&rt, n, r] {
             const Array a = normal(random_key(3), {n, n}), c = normal(random_key(4), {n, n});
             const auto mm = jit([](const Array& p, const Array& q) { return matmul(p, q); });
             return median_seconds(r, [&] {
               mm(a, c);
               rt.synchronize();
             });
           },
           "matmul:" + std::to_string(n)});
    }
    run_group("matmul", "PyTorch", torch_single, std::move(specs));
  }
  const std::string elems = config.elements == (int64_t{16} << 20) ? "16M" : e;
  run_group("sin", "PyTorch", torch_single,
            {{"2*sin(x)+1, " + elems + " f32", 2.0,
              [&] {
                return timed_jit(
                    rt, r, [](const Array& x) { return 2.f * sin(x) + 1.f; },
                    normal(random_key(5), {config.elements}));
              },
              "sin:" + e}});
  run_group("sum", "PyTorch", torch_single,
            {{"sum, " + elems + " f32", 2.0,
              [&] {
                return timed_jit(
                    rt, r, [](const Array& x) { return sum(x); },
                    normal(random_key(6), {config.elements}));
              },
              "sum:" + e}});
  run_group("xent", "PyTorch", torch_single,
            {{"softmax cross-entropy [" + b + ",10]", 1.0,
              [&] {
                const int classes = kMlpSizes.back();
                std::vector<int32_t> labels(static_cast<size_t>(config.batch));
                for (size_t i = 0; i < labels.size(); ++i)
                  labels[i] = static_cast<int32_t>(i * 7 % classes);
                const Array l = array(std::span<const int32_t>(labels));
                const Array logits = normal(random_key(7), {config.batch, classes});
                const auto f = jit(
                    [](const Array& z, const Array& y) { return nn::softmax_cross_entropy(z, y); });
                return median_seconds(r, [&] {
                  f(logits, l);
                  rt.synchronize();
                });
              },
              "xent:" + b + "x10"}});
  for (const std::string op : {"all-reduce", "all-gather", "reduce-scatter"}) {
    if (!config.groups.count(op)) continue;
    // meshvk is measured once per size and compared with both peers.
    std::vector<Spec> specs_torch, specs_mpi;
    for (uint64_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 4) {
      const std::string name = op + " " + size_text(bytes) + " x" + std::to_string(peers.world);
      const std::string task = op + ":" + std::to_string(bytes);
      auto once = std::make_shared<std::optional<double>>();
      auto measure = [&rt, op, bytes, r, once] {
        if (!once->has_value()) *once = collective_seconds(rt, op, bytes, r);
        return **once;
      };
      specs_torch.push_back({name, 1.0, measure, task});
      specs_mpi.push_back({name, 1.0, measure, task});
    }
    const std::string torch_name =
        op == "reduce-scatter" ? "PyTorch gloo x8 (all_reduce+slice)" : "PyTorch gloo x8";
    run_group(op, torch_name, torch_dist, std::move(specs_torch));
    run_group(op, "Open MPI x8", mpi, std::move(specs_mpi));
  }

  std::cout << "\n";
  print_table(rows, std::cout);
  if (gpt_times.count("single") && gpt_times.count("dp")) {
    const double ratio = gpt_times["dp"] / gpt_times["single"];
    std::printf("\nGPT step, 8-way data parallel / one device: %.2fx (target <= 1.25x %s)\n", ratio,
                ratio <= 1.25 ? "PASS" : "MISS");
    for (const std::string mode : {"single", "dp_tp"}) {
      try {
        const GptStepProfile p = gpt_step_profile(rt, mode);
        std::printf("GPT step %s, one profiled replay: wall %.1f ms, %d kernels per step (all devices)\n",
                    mode.c_str(), p.wall_ms, p.kernels);
        for (const auto& [kind, ms] : p.device_ms)
          std::printf("  %-22s %5d spans %9.1f ms device time\n", kind.c_str(), p.spans.at(kind), ms);
        std::printf("  the ops that took the most device time:\n");
        for (const auto& [op, n, ms] : p.top_ops) std::printf("    %-44s %5d spans %9.1f ms\n", op.c_str(), n, ms);
      } catch (const std::exception& ex) {
        std::printf("GPT step %s profile: %s\n", mode.c_str(), ex.what());
      }
    }
  }
  std::cout << "\nTargets: 2*sin(x)+1 and sum >= 2x PyTorch, cross-entropy >= 1x; matmul and the data-parallel "
               "MLP step >= 0.6x,\nthe one-device MLP step >= 0.7x, the GPT step >= 0.5x, its data-parallel step <= 1.25x "
               "the one-device one;\ncollectives >= 1x both peers. Collective sizes as nccl-tests: "
               "each rank's send buffer, all-gather's\ngathered total. torch 1.13's gloo has no "
               "reduce_scatter: its reduce-scatter rows time all_reduce\nand each rank keeping "
               "its slice, what a gloo user would write.\n";
  return 0;
}

}  // namespace meshvk::bench

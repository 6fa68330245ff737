// A character-level GPT trained on a text every Debian machine has, in one of five layouts over
// the virtual devices: one device, data parallel, data + Megatron tensor parallel, FSDP, or
// sequence parallel with ring attention (samples/programs/gpt*.{hpp,cpp}). Each step is one jit
// of value_and_grad and optax's Adam update, the layers one lax::scan over their stacked
// parameters (or unrolled); it prints the loss per step, where the parameters live, the
// collectives the step's program runs and the program's size.
//
//   build/bin/gpt [--mode single|dp|dp_tp|fsdp|sp] [--steps N] [--seed N] [--text FILE]
//                 [--weights DIR] [--batch-file FILE] [--lr X] [--batch N] [--seq N]
//                 [--layers N] [--layers-as scan|loop] [--unrolled] [--dtype f32|bf16]
//                 [--program] [--color | --no-color]
//
// With --weights and --batch-file (as tests/models/gpt_reference.py writes them) every step
// trains on that one batch from those weights; the test gpt_vs_pytorch compares the losses with
// PyTorch's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpt.hpp"
#include "gpt_parallel.hpp"
#include "scenario.hpp"

namespace meshvk::scenarios {
namespace {

const char* const kUsage =
    "usage: gpt [--mode single|dp|dp_tp|fsdp|sp] [--steps N] [--seed N] [--text FILE]\n"
    "           [--weights DIR] [--batch-file FILE] [--lr X] [--batch N] [--seq N] [--layers N]\n"
    "           [--layers-as scan|loop] [--unrolled] [--dtype f32|bf16] [--program]\n"
    "           [--color | --no-color]\n"
    "  --mode        the layout (default dp_tp): one device, data parallel, data + tensor\n"
    "                parallel on (devices/4, 4), fully sharded data parallel, sequence parallel\n"
    "  --steps N     training steps (default 5)\n"
    "  --seed N      the initial weights' and the batches' seed (default 0)\n"
    "  --text FILE   the training text, read as bytes (default /usr/share/common-licenses/GPL-3)\n"
    "  --weights DIR initial weights, DIR/<parameter name>.npy\n"
    "  --batch-file FILE  int32 [batch, seq + 1] tokens: every step trains on this one batch\n"
    "  --lr X        Adam's learning rate (default 1e-3; b1 0.9, b2 0.999, eps 1e-8)\n"
    "  --batch N, --seq N  batch size (default 16) and context length (default 64)\n"
    "  --layers N    transformer layers (default 2)\n"
    "  --layers-as scan|loop  the layers as one lax::scan over their stacked parameters (default;\n"
    "                the program holds one layer) or a loop unrolled into the program\n"
    "  --unrolled    the same as --layers-as loop\n"
    "  --dtype f32|bf16  the forward pass's parameters (default f32); bf16: mixed precision,\n"
    "                float32 master weights cast to bfloat16 in the step, float32 sums, loss\n"
    "                and Adam\n"
    "  --program     print the step's partitioned per-device program, with its cost and\n"
    "                memory analysis (FLOPs, bytes accessed and sent, memory per device)\n";

struct Flags {
  programs::GptConfig cfg;
  std::string mode = "dp_tp";
  int steps = 5;
  uint32_t seed = 0;
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string weights, batch_file;
  bool program = false;
  VisualizeOptions viz;
};

// Tokens and targets [batch, seq], on the host: the next byte after each token.
struct Batch {
  std::vector<int32_t> tokens, targets;
};

std::string read_text(const std::string& path, const programs::GptConfig& cfg) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("gpt: cannot read --text " + path + "; give a text file (any file of bytes)");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() < static_cast<size_t>(cfg.seq) + 1)
    throw Error("gpt: --text " + path + " has " + std::to_string(text.size()) +
                " bytes; a batch needs at least seq + 1 = " + std::to_string(cfg.seq + 1));
  return text;
}

Batch random_batch(const std::string& text, const programs::GptConfig& cfg, std::mt19937& rng) {
  std::uniform_int_distribution<size_t> start(0, text.size() - static_cast<size_t>(cfg.seq) - 1);
  Batch b;
  for (int i = 0; i < cfg.batch; ++i) {
    const size_t s = start(rng);
    for (int t = 0; t < cfg.seq; ++t) {
      b.tokens.push_back(static_cast<unsigned char>(text[s + t]));
      b.targets.push_back(static_cast<unsigned char>(text[s + t + 1]));
    }
  }
  return b;
}

Batch file_batch(const std::string& path, const programs::GptConfig& cfg) {
  const Array a = load_npy(path);
  const Shape want{cfg.batch, cfg.seq + 1};
  if (a.dtype() != DType::int32 || a.shape() != want)
    throw Error("gpt: --batch-file " + path + " holds " + type_of(a) + "; want int32" +
                shape_to_string(want) + " (--batch by --seq + 1 token ids)");
  const std::vector<int32_t> v = a.to_host<int32_t>();
  Batch b;
  for (int i = 0; i < cfg.batch; ++i)
    for (int t = 0; t < cfg.seq; ++t) {
      const int32_t token = v[static_cast<size_t>(i) * (cfg.seq + 1) + t];
      const int32_t next = v[static_cast<size_t>(i) * (cfg.seq + 1) + t + 1];
      for (const int32_t id : {token, next})
        if (id < 0 || id >= cfg.vocab)
          throw Error("gpt: --batch-file " + path + " holds token " + std::to_string(id) +
                      "; ids lie in [0, " + std::to_string(cfg.vocab) + ")");
      b.tokens.push_back(token);
      b.targets.push_back(next);
    }
  return b;
}

std::string layout_of(const Array& x) {
  const NamedSharding* n = x.sharding().named();
  return n ? n->spec().to_string() : x.sharding().to_string();
}

std::string bytes_text(uint64_t bytes) {
  char text[32];
  if (bytes >= (1u << 20))
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024);
  return text;
}

// The step's cost and memory analysis, per device (the busiest device's numbers; with the layers
// in a scan, its body counted once per layer).
std::string cost_text(const Lowered& lowered) {
  const CostAnalysis& c = lowered.cost_analysis();
  const MemoryAnalysis& m = lowered.memory_analysis();
  char line[256];
  std::snprintf(line, sizeof line,
                "cost per device: %.4g FLOPs, %.4g transcendentals, %.4g bytes accessed\n",
                static_cast<double>(c.flops), static_cast<double>(c.transcendentals),
                static_cast<double>(c.bytes_accessed));
  std::string s = line;
  for (const Communication& k : c.communication) {
    std::string axes;
    for (const auto& a : k.axes) axes += (axes.empty() ? "'" : ", '") + a + "'";
    s += "  " + k.kind + " over (" + axes + (k.axes.size() == 1 ? ",)" : ")") + ": x" + std::to_string(k.count) +
         ", " + bytes_text(k.bytes) + " sent per device\n";
  }
  s += "memory per device: arguments " + bytes_text(m.argument_size_in_bytes) + ", outputs " +
       bytes_text(m.output_size_in_bytes) + ", temporaries " + bytes_text(m.temp_size_in_bytes) + ", peak " +
       bytes_text(m.peak_memory_in_bytes) + "\n";
  return s;
}

int parse(ScenarioContext& ctx, Flags& f) {
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    const std::string& a = ctx.args[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= ctx.args.size()) throw std::invalid_argument(a + " needs a value");
      return ctx.args[++i];
    };
    try {
      if (a == "--mode")
        f.mode = value();
      else if (a == "--steps")
        f.steps = std::stoi(value());
      else if (a == "--seed")
        f.seed = static_cast<uint32_t>(std::stoul(value()));
      else if (a == "--text")
        f.text = value();
      else if (a == "--weights")
        f.weights = value();
      else if (a == "--batch-file")
        f.batch_file = value();
      else if (a == "--lr")
        f.cfg.lr = std::stof(value());
      else if (a == "--batch")
        f.cfg.batch = std::stoi(value());
      else if (a == "--seq")
        f.cfg.seq = std::stoi(value());
      else if (a == "--layers")
        f.cfg.layers = std::stoi(value());
      else if (a == "--layers-as") {
        const std::string v = value();
        if (v != "scan" && v != "loop") throw std::invalid_argument("want scan or loop");
        f.cfg.scan_layers = v == "scan";
      } else if (a == "--unrolled")
        f.cfg.scan_layers = false;
      else if (a == "--dtype") {
        const std::string v = value();
        if (v == "f32" || v == "float32")
          f.cfg.compute = DType::float32;
        else if (v == "bf16" || v == "bfloat16")
          f.cfg.compute = DType::bfloat16;
        else
          throw std::invalid_argument("want f32 or bf16");
      }
      else if (a == "--program")
        f.program = true;
      else if (a == "--color")
        f.viz.use_color = true;
      else if (a == "--no-color")
        f.viz.use_color = false;
      else
        return ctx.help_or_unknown(a, kUsage);
    } catch (const std::exception& e) {
      *ctx.err << "bad value for " << a << ": " << e.what() << "\n" << kUsage;
      return 2;
    }
  }
  bool known = false;
  for (const auto& m : programs::gpt_modes()) known = known || m == f.mode;
  if (!known || f.steps < 1 || f.cfg.batch < 1 || f.cfg.seq < 1 || f.cfg.layers < 1 ||
      !(f.cfg.lr > 0)) {
    *ctx.err << "--mode must be single|dp|dp_tp|fsdp|sp, and --steps, --batch, --seq, --layers "
                "and --lr positive\n"
             << kUsage;
    return 2;
  }
  return -1;
}

int run(ScenarioContext& ctx) {
  Flags f;
  f.viz = ctx.viz;
  if (const int rc = parse(ctx, f); rc >= 0) return rc;
  std::ostream& out = *ctx.out;
  const programs::GptConfig& cfg = f.cfg;
  const programs::GptLayout layout = programs::gpt_layout(f.mode, cfg);
  ctx.banner();
  out << "GPT: vocab " << cfg.vocab << " (bytes), d_model " << cfg.d_model << ", " << cfg.heads
      << " heads, " << cfg.layers << " pre-LayerNorm layers, tanh-GELU MLP " << 4 * cfg.d_model
      << " wide, seq " << cfg.seq << ", batch " << cfg.batch << ", untied lm_head, "
      << programs::gpt_param_count(cfg) << " parameters\n"
      << "optax.adam lr " << cfg.lr << " (b1 " << cfg.b1 << ", b2 " << cfg.b2 << ", eps "
      << cfg.eps << "), softmax cross-entropy; mode " << f.mode << ": " << layout.description
      << "\n"
      << "layers: "
      << (cfg.scan_layers ? "one lax::scan over the stacked layer parameters"
                          : "unrolled (a loop over the layers, each sliced from the stacks)")
      << "; forward pass in "
      << (cfg.compute == DType::bfloat16
              ? "bfloat16 (mixed precision: float32 master weights, float32 sums, loss and "
                "Adam)"
              : "float32")
      << "\n";

  std::string text;
  Batch fixed;
  if (f.batch_file.empty()) {
    text = read_text(f.text, cfg);
    out << "data: " << f.text << " (" << text.size() << " bytes), " << cfg.batch
        << " random windows a step (seed " << f.seed << ")\n";
  } else {
    fixed = file_batch(f.batch_file, cfg);
    out << "data: " << f.batch_file << ", the same batch every step\n";
  }
  Params params = programs::gpt_place(
      layout, cfg,
      f.weights.empty() ? programs::gpt_init(cfg, f.seed) : programs::gpt_load(cfg, f.weights));
  out << "weights: "
      << (f.weights.empty() ? "GPT-2 init, seed " + std::to_string(f.seed)
                            : "loaded from " + f.weights)
      << "\n\nparameter layouts:\n";
  for (const auto& [name, p] : params)
    out << "  " << name << " " << type_of(p) << " " << layout_of(p) << "\n";
  optax::OptState state = programs::gpt_optimizer(cfg).init(params);

  std::mt19937 rng(f.seed);
  const Shape shape{cfg.batch, cfg.seq};
  const auto batch_arrays = [&](const Batch& b) {
    return std::make_pair(device_put(std::span<const int32_t>(b.tokens), shape, layout.batch),
                          device_put(std::span<const int32_t>(b.targets), shape, layout.batch));
  };
  auto [tokens, targets] =
      batch_arrays(f.batch_file.empty() ? random_batch(text, cfg, rng) : fixed);
  // Layer 0 of the stacks (the layer axis is whole, so layer i is laid out as the stack's rest).
  for (const char* name : {"h.attn.q.weight", "h.mlp.fc2.weight"})
    out << ">>> visualize_array_sharding(params['" << name << "'][0])\n"
        << visualize_array_sharding(params.at(name)[0], f.viz);
  out << ">>> visualize_array_sharding(tokens)\n"
      << visualize_array_sharding(tokens, f.viz) << "\n";

  // The loop replaces the parameters and the optimizer state with the step's results: they are
  // donated (jax.jit's donate_argnums), so the step reuses them instead of copying its results.
  const programs::GptTrainStep step(cfg, layout, /*donate=*/true);
  std::vector<Sharding> before;
  for (const auto& [name, p] : params) before.push_back(p.sharding());
  bool finite = true;
  double first_seconds = 0, later_seconds = 0;
  for (int i = 0; i < f.steps; ++i) {
    if (i > 0 && f.batch_file.empty())
      std::tie(tokens, targets) = batch_arrays(random_batch(text, cfg, rng));
    const auto start = std::chrono::steady_clock::now();
    auto [loss, next_params, next_state] = step(params, state, tokens, targets);
    const float value = loss.to_host<float>()[0];
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i == 0) {
      // Compiled by now, so lowering runs nothing.
      const Lowered lowered = step.lower(params, state, tokens, targets);
      // Per step: a loop body's collectives once per iteration (cost_analysis), where
      // collective_counts() counts the program's text, which holds a scan's body once.
      std::map<std::string, CollectiveCount> per_step;
      for (const Communication& c : lowered.cost_analysis().communication) {
        per_step[c.kind].count += static_cast<int>(c.count);
        per_step[c.kind].bytes += c.bytes;
      }
      out << "collectives per step:";
      if (per_step.empty()) out << " none";
      for (const auto& [kind, c] : per_step)
        out << " " << kind << " x" << c.count << " (" << bytes_text(c.bytes) << " per device)";
      out << "\n";
      // The program's size: with the layers in a scan it holds one layer whatever --layers is.
      const std::string& text = lowered.as_text();
      out << "program size: " << std::count(text.begin(), text.end(), '\n') << " lines ("
          << cfg.layers << " layers, " << (cfg.scan_layers ? "scan" : "unrolled") << ")\n";
      if (f.program) out << text << cost_text(lowered) << "\n";
      ctx.publish_program("gpt_train_step", lowered);
    }
    params = std::move(next_params);
    state = std::move(next_state);
    finite = finite && std::isfinite(value);
    // The time apart from the loss: runs of one program compare their text without timings.
    (i == 0 ? first_seconds : later_seconds) += seconds;
    char line[64];
    std::snprintf(line, sizeof line, "step %d/%d  loss %.9g\n", i + 1, f.steps, value);
    out << line << std::flush;
    ctx.publish("tokens", tokens);
    for (const char* name : {"h.attn.q.weight", "h.mlp.fc2.weight", "wte.weight"})
      ctx.publish(name, params.at(name));
    ctx.checkpoint("step " + std::to_string(i + 1));
  }
  bool unchanged = true;
  size_t k = 0;
  for (const auto& [name, p] : params)
    unchanged = unchanged && before[k++].is_equivalent_to(p.sharding(), p.ndim());
  char timing[128];
  std::snprintf(timing, sizeof timing, "step time: %.2f s the first (tracing included)",
                first_seconds);
  out << timing;
  if (f.steps > 1) {
    std::snprintf(timing, sizeof timing, ", %.3f s each after", later_seconds / (f.steps - 1));
    out << timing;
  }
  out << "\nparameter layouts unchanged by the steps: " << (unchanged ? "yes" : "NO") << "\n"
      << "losses finite: " << (finite ? "yes" : "NO") << "\n";
  return unchanged && finite ? 0 : 1;
}

}  // namespace

Scenario gpt() {
  return {"gpt",
          "A character-level GPT (2 layers in a lax::scan, d_model 128) trained with Adam in "
          "one of five "
          "layouts: single, dp, dp_tp (Megatron), fsdp, sp (ring attention in shard_map)",
          {"--mode", "dp_tp", "--steps", "3"},
          {},
          run};
}

}  // namespace meshvk::scenarios

#include "gpt_parallel.hpp"

#include <utility>

namespace meshvk::programs {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void require_divides(const std::string& mode, const char* what, int64_t size, int64_t parts,
                     const std::string& why) {
  if (parts < 1 || size % parts)
    throw Error("gpt --mode " + mode + ": " + what + " " + std::to_string(size) +
                " is not a multiple of " + std::to_string(parts) + " (" + why + ")");
}

}  // namespace

const std::vector<std::string>& gpt_modes() {
  static const std::vector<std::string> modes = {"single", "dp", "dp_tp", "fsdp", "sp"};
  return modes;
}

PartitionSpec GptLayout::tensor_parallel_spec(const std::string& name) {
  // A stack of layers: the layer axis whole (None), the rest as one layer's.
  if (name.compare(0, 2, "h.") == 0) {
    std::vector<SpecEntry> entries{None};
    const PartitionSpec one = tensor_parallel_spec(name.substr(2));
    entries.insert(entries.end(), one.entries().begin(), one.entries().end());
    return PartitionSpec(entries);
  }
  // Column-parallel: the output features (rows of torch's [out, in] weight) and the bias split,
  // so each device computes whole heads (q, k, v) or a slice of the hidden layer (fc1) with no
  // communication. Row-parallel: the input features split, so the product is a partial sum
  // that one all-reduce completes; the bias is added after it, replicated.
  for (const char* column : {"attn.q.", "attn.k.", "attn.v.", "mlp.fc1."})
    if (name.find(column) != std::string::npos) return P("model");
  for (const char* row : {"attn.proj.weight", "mlp.fc2.weight"})
    if (ends_with(name, row)) return P(None, "model");
  return P();
}

Sharding GptLayout::param(const GptConfig& cfg, const std::string& name) const {
  if (!mesh) return batch;  // single: the batch's device
  if (mode == "dp_tp") return NamedSharding(*mesh, tensor_parallel_spec(name));
  if (mode == "fsdp") {
    // Along the first axis where it divides (every parameter at the default sizes), else kept
    // whole: FSDP's point is the memory, and a small odd parameter costs little. A stack of
    // layers keeps its layer axis whole and splits the next one.
    const int64_t n = mesh->size();
    const bool stacked = name.compare(0, 2, "h.") == 0;
    if (gpt_param_shape(cfg, name)[stacked ? 1 : 0] % n == 0)
      return NamedSharding(*mesh, stacked ? P(None, "fsdp") : P("fsdp"));
  }
  return NamedSharding(*mesh, P());
}

GptLayout gpt_layout(const std::string& mode, const GptConfig& cfg) {
  check_config(cfg);
  Runtime& rt = Runtime::current();
  const int n = rt.num_devices();
  GptLayout l;
  l.mode = mode;
  l.attention = causal_attention;
  const std::string devices = std::to_string(n);
  if (mode == "single") {
    l.description = "one device";
    l.batch = SingleDeviceSharding(0, rt.platform());
  } else if (mode == "dp") {
    require_divides(mode, "--batch", cfg.batch, n, "the batch is split over every device");
    l.mesh = make_mesh({n}, {"data"});
    l.description = devices + "-way data parallel, mesh (" + devices + ",) ('data',)";
    l.batch = NamedSharding(*l.mesh, P("data", None));
  } else if (mode == "dp_tp") {
    require_divides(mode, "the device count", n, 4, "the mesh is (devices / 4, 4)");
    const int data = n / 4;
    require_divides(mode, "--batch", cfg.batch, data, "the batch is split over 'data'");
    require_divides(mode, "heads", cfg.heads, 4, "each 'model' device computes whole heads");
    l.mesh = make_mesh({data, 4}, {"data", "model"});
    l.description = "data + tensor parallel, mesh (" + std::to_string(data) +
                    ", 4) ('data', 'model'), Megatron layout over 'model'";
    l.batch = NamedSharding(*l.mesh, P("data", None));
  } else if (mode == "fsdp") {
    require_divides(mode, "--batch", cfg.batch, n, "the batch is split over every device");
    l.mesh = make_mesh({n}, {"fsdp"});
    l.description = "fully sharded data parallel, mesh (" + devices + ",) ('fsdp',)";
    l.batch = NamedSharding(*l.mesh, P("fsdp", None));
    l.gather_params = true;
  } else if (mode == "sp") {
    require_divides(mode, "--seq", cfg.seq, n, "the sequence is split over every device");
    l.mesh = make_mesh({n}, {"seq"});
    l.description = "sequence parallel, mesh (" + devices + ",) ('seq',), ring attention";
    l.batch = NamedSharding(*l.mesh, P(None, "seq"));
    const Mesh mesh = *l.mesh;
    l.attention = [mesh](const Array& q, const Array& k, const Array& v) {
      return ring_attention(mesh, "seq", q, k, v);
    };
  } else {
    std::string valid;
    for (const auto& m : gpt_modes()) valid += (valid.empty() ? "" : "|") + m;
    throw Error("gpt: no mode '" + mode + "'; use --mode " + valid);
  }
  return l;
}

Params gpt_place(const GptLayout& layout, const GptConfig& cfg, const Params& params) {
  Params out;
  for (const auto& [name, p] : params) out.emplace(name, device_put(p, layout.param(cfg, name)));
  return out;
}

optax::GradientTransformation gpt_optimizer(const GptConfig& cfg) {
  // optax.adam: eps outside the square root, as torch.optim.Adam's.
  return optax::adam(cfg.lr, cfg.b1, cfg.b2, cfg.eps);
}

GptTrainStep::GptTrainStep(GptConfig cfg, GptLayout layout, bool donate)
    : step_(Fn([cfg, layout, opt = gpt_optimizer(cfg)](const Params& params,
                                                       const optax::OptState& state,
                                                       const Array& tokens, const Array& targets) {
              // FSDP: the parameters whole where they are read, gathered together (one packed
              // all-gather: a layer's inside the scan's body, one layer at a time); the
              // constraint's gradient puts each gradient back in its split layout (reduce-scatters,
              // packed where the optimizer reads them).
              ParamUse use;
              if (layout.gather_params) {
                const NamedSharding whole(*layout.mesh, P());
                use = [whole](const Params& p) { return with_sharding_constraint(p, ShardingTree(whole)); };
              }
              const auto loss = [&](const Params& p) {
                return gpt_loss(cfg, p, tokens, targets, layout.attention, use);
              };
              auto [value, grads] = value_and_grad(loss)(params);
              auto [updates, next] = opt.update(grads, state, params);
              return std::make_tuple(value, optax::apply_updates(params, updates), std::move(next));
            }),
            JitOptions{.name = "gpt_train_step",
                       .donate_argnums = donate ? std::vector<int>{0, 1} : std::vector<int>{},
                       .location = SourceLocation::current()}) {}

std::tuple<Array, Params, optax::OptState> GptTrainStep::operator()(
    const Params& params, const optax::OptState& state, const Array& tokens,
    const Array& targets) const {
  return step_(params, state, tokens, targets);
}

Lowered GptTrainStep::lower(const Params& params, const optax::OptState& state,
                            const Array& tokens, const Array& targets) const {
  return step_.lower(params, state, tokens, targets);
}

std::string GptTrainStep::program_text(const Params& params, const optax::OptState& state,
                                       const Array& tokens, const Array& targets) const {
  return step_.program_text(params, state, tokens, targets);
}

}  // namespace meshvk::programs

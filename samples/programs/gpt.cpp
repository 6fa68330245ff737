#include "gpt.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

namespace meshvk::programs {
namespace {

int64_t head_dim(const GptConfig& cfg) {
  return cfg.d_model / cfg.heads;
}

// Mixed precision: the forward pass computes with parameters of dtype cfg.compute (astype of
// the float32 master weights where they are used) and feeds its matmuls operands of that dtype,
// summed in float32 (preferred_element_type); everything else is float32. With float32 every
// cast is the identity.
struct Forward {
  GptConfig cfg;  // by value: the scan's body keeps a copy (see gpt_logits)
  // A parameter as the forward pass reads it (gathered already: ParamUse), cast.
  Array param(const Array& p) const { return astype(p, cfg.compute); }
  Array operand(const Array& x) const { return astype(x, cfg.compute); }
  // The caller's line goes on to einsum, so the program text names the line of the layer (not
  // this helper's) beside the collectives its contraction needs.
  Array einsum2(const std::string& subscripts, const Array& a, const Array& b,
                SourceLocation loc = SourceLocation::current()) const {
    return einsum(subscripts, operand(a), operand(b), DType::float32, loc);
  }
  // x @ weight^T + bias over the last axis of a [batch, seq, in] x (nn::linear takes 2-D x).
  Array linear3(const Array& x, const Params& p, const std::string& name,
                SourceLocation loc = SourceLocation::current()) const {
    return einsum2("bsi,oi->bso", x, param(p.at(name + ".weight")), loc) + param(p.at(name + ".bias"));
  }
  Array layer_norm(const Array& x, const Params& p, const std::string& name) const {
    return nn::layer_norm(x, param(p.at(name + ".weight")), param(p.at(name + ".bias")), cfg.ln_eps);
  }
};

// [batch, seq, d] -> [batch, heads, seq, head_dim]: a reshape that splits d (heads leading, so
// a d split over a mesh axis stays split, by heads) and a transpose.
Array split_heads(const GptConfig& cfg, const Array& x) {
  const Shape& s = x.shape();
  return transpose(reshape(x, {s[0], s[1], cfg.heads, head_dim(cfg)}), {0, 2, 1, 3});
}

Array merge_heads(const Array& x) {
  const Shape& s = x.shape();
  return reshape(transpose(x, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
}

// The scores' scale as the reference's float: 1 / sqrt(head_dim), rounded once to float32.
float score_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// One pre-LayerNorm block; `p` holds one layer's parameters (gpt_layer_param_names()). q, k and
// v reach the attention in the compute dtype; its result is float32.
Array block(const Forward& f, const Params& p, const Array& x, const Attention& attention) {
  const GptConfig& cfg = f.cfg;
  const Array a = f.layer_norm(x, p, "ln_1");
  const Array q = split_heads(cfg, f.operand(f.linear3(a, p, "attn.q")));
  const Array k = split_heads(cfg, f.operand(f.linear3(a, p, "attn.k")));
  const Array v = split_heads(cfg, f.operand(f.linear3(a, p, "attn.v")));
  const Array y = x + f.linear3(merge_heads(attention(q, k, v)), p, "attn.proj");
  const Array m = f.layer_norm(y, p, "ln_2");
  return y + f.linear3(nn::gelu(f.linear3(m, p, "mlp.fc1"), /*approximate=*/true), p, "mlp.fc2");
}

bool is_stacked(const std::string& name) {
  return name.compare(0, 2, "h.") == 0;
}

}  // namespace

void check_config(const GptConfig& cfg) {
  const std::pair<const char*, int> sizes[] = {{"vocab", cfg.vocab}, {"d_model", cfg.d_model},
                                               {"heads", cfg.heads}, {"layers", cfg.layers},
                                               {"seq", cfg.seq},     {"batch", cfg.batch}};
  for (const auto& [name, value] : sizes)
    if (value < 1)
      throw Error(std::string("gpt: ") + name + " = " + std::to_string(value) +
                  "; every size must be at least 1");
  if (cfg.d_model % cfg.heads)
    throw Error("gpt: d_model " + std::to_string(cfg.d_model) + " is not a multiple of heads " +
                std::to_string(cfg.heads) + "; each head takes d_model / heads features");
}

std::vector<std::string> gpt_param_names(const GptConfig& cfg) {
  (void)cfg;
  std::vector<std::string> names = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias",
                                    "lm_head.weight"};
  for (const auto& name : gpt_layer_param_names()) names.push_back("h." + name);
  std::sort(names.begin(), names.end());  // Params' order
  return names;
}

const std::vector<std::string>& gpt_layer_param_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const char* ln : {"ln_1", "ln_2"})
      for (const char* what : {".weight", ".bias"}) n.push_back(std::string(ln) + what);
    for (const char* lin : {"attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc1", "mlp.fc2"})
      for (const char* what : {".weight", ".bias"}) n.push_back(std::string(lin) + what);
    std::sort(n.begin(), n.end());
    return n;
  }();
  return names;
}

Shape gpt_param_shape(const GptConfig& cfg, const std::string& name) {
  const int64_t d = cfg.d_model, v = cfg.vocab;
  if (is_stacked(name)) {
    Shape s = gpt_param_shape(cfg, name.substr(2));
    s.insert(s.begin(), cfg.layers);
    return s;
  }
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (name == "wte.weight" || name == "lm_head.weight") return {v, d};
  if (name == "wpe.weight") return {cfg.seq, d};
  if (ends("mlp.fc1.weight")) return {4 * d, d};
  if (ends("mlp.fc1.bias")) return {4 * d};
  if (ends("mlp.fc2.weight")) return {d, 4 * d};
  if (ends(".weight") && name.find("attn.") != std::string::npos) return {d, d};
  if (ends(".weight") || ends(".bias")) return {d};
  throw Error("gpt: no parameter named '" + name + "'");
}

int64_t gpt_param_count(const GptConfig& cfg) {
  int64_t n = 0;
  for (const auto& name : gpt_param_names(cfg)) {
    int64_t size = 1;
    for (const int64_t dim : gpt_param_shape(cfg, name)) size *= dim;
    n += size;
  }
  return n;
}

Params gpt_init(const GptConfig& cfg, uint32_t seed) {
  check_config(cfg);
  const Array key = random_key(seed);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers));
  Params p;
  uint32_t index = 0;
  for (const auto& name : gpt_param_names(cfg)) {
    const Shape shape = gpt_param_shape(cfg, name);
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = name.find("ln_") != std::string::npos;
    const bool residual =
        name.find("attn.proj.") != std::string::npos || name.find("mlp.fc2.") != std::string::npos;
    // A key per parameter (a stack has one for all its layers): its place in the sorted names.
    const Array k = fold_in(key, index++);
    if (is_bias)
      p.emplace(name, zeros(shape));
    else if (is_norm)
      p.emplace(name, ones(shape));
    else
      p.emplace(name, normal(k, shape) * (residual ? residual_std : 0.02f));
  }
  return p;
}

Params gpt_load(const GptConfig& cfg, const std::string& dir) {
  const auto load = [&](const std::string& file, const Shape& want) {
    const std::string path = (std::filesystem::path(dir) / (file + ".npy")).string();
    if (!std::filesystem::exists(path))
      throw Error("gpt: --weights " + dir + " has no " + file +
                  ".npy; it needs one .npy per "
                  "parameter, as tests/models/gpt_reference.py writes them");
    Array a = load_npy(path);
    if (a.dtype() != DType::float32 || a.shape() != want)
      throw Error("gpt: " + path + " holds " + type_of(a) + "; the model (d_model " +
                  std::to_string(cfg.d_model) + ", vocab " + std::to_string(cfg.vocab) + ", seq " +
                  std::to_string(cfg.seq) + ") wants float32" + shape_to_string(want));
    return a;
  };
  Params p;
  for (const auto& name : gpt_param_names(cfg)) {
    if (!is_stacked(name)) {
      p.emplace(name, load(name, gpt_param_shape(cfg, name)));
      continue;
    }
    // torch's h.{i}.<name>, stacked along a new leading axis.
    std::vector<Array> layers;
    for (int i = 0; i < cfg.layers; ++i)
      layers.push_back(load("h." + std::to_string(i) + name.substr(1),
                            gpt_param_shape(cfg, name.substr(2))));
    p.emplace(name, stack(layers, 0));
  }
  return p;
}

Array causal_attention(const Array& q, const Array& k, const Array& v) {
  const int64_t s = q.shape()[2];
  const Array pos = arange(static_cast<int32_t>(s));
  const Array causal = reshape(pos, {1, s}) <= reshape(pos, {s, 1});  // key <= query
  // Operands in q's dtype, products summed in float32 (bfloat16 q, k, v: mixed precision).
  const Array scores =
      einsum("bhqd,bhkd->bhqk", q, k, DType::float32) * score_scale(q.shape()[3]);
  const Array masked = where(causal, scores, -std::numeric_limits<float>::infinity());
  return einsum("bhqk,bhkd->bhqd", astype(nn::softmax(masked, -1), v.dtype()), v, DType::float32);
}

Array ring_attention(const Mesh& mesh, const std::string& axis, const Array& q, const Array& k,
                     const Array& v) {
  const int n = mesh.axis_size(axis);
  const PartitionSpec spec = P(None, None, axis, None);
  const auto body = [n, axis](const Array& ql, const Array& kl, const Array& vl) {
    const int64_t s = ql.shape()[2];  // this device's block of the sequence
    const float scale = score_scale(ql.shape()[3]);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const Array me = axis_index(axis);
    const Array local = arange(static_cast<int32_t>(s));
    const Array q_pos = reshape(me * s + local, {s, 1});
    // Each device sends to the next: after j steps a device holds the block of device me - j.
    std::vector<std::pair<int, int>> to_next;
    for (int i = 0; i < n; ++i) to_next.emplace_back(i, (i + 1) % n);
    Array kv = stack({kl, vl});  // one ppermute per step for both
    Array m, l, acc;             // running maximum, denominator, numerator
    for (int j = 0; j < n; ++j) {
      if (j > 0) kv = ppermute(kv, axis, to_next);
      const Array k_pos = reshape(remainder(me - j + n, n) * s + local, {1, s});
      const Array scores = einsum("bhqd,bhkd->bhqk", ql, kv[0], DType::float32) * scale;
      const Array masked = where(k_pos <= q_pos, scores, neg_inf);
      // The maximum only keeps exp in range: the result does not depend on it, so no gradient
      // flows through it (as nn::softmax's). Step 0 is the device's own block, where every
      // query sees at least itself, so the maximum is finite from the start and a block masked
      // whole later (max -inf) leaves it as it is.
      const Array block_max = max(masked, {-1}, true);
      const Array m_new = stop_gradient(j == 0 ? block_max : maximum(m, block_max));
      const Array p = exp(masked - m_new);
      const Array pv = einsum("bhqk,bhkd->bhqd", astype(p, vl.dtype()), kv[1], DType::float32);
      if (j == 0) {
        l = sum(p, {-1}, true);
        acc = pv;
      } else {
        const Array rescale = exp(m - m_new);
        l = l * rescale + sum(p, {-1}, true);
        acc = acc * rescale + pv;
      }
      m = m_new;
    }
    return acc / l;
  };
  return shard_map(body, mesh, {spec, spec, spec}, spec)(q, k, v);
}

Array gpt_logits(const GptConfig& cfg, const Params& params, const Array& tokens,
                 const Attention& attention, const ParamUse& use) {
  const Forward f{cfg};
  // The parameters as read: gathered at the start where `use` gathers (every one unrolled; with
  // the layers in a scan, those outside the layers, the layers' inside the body).
  Params p = params;
  if (use) {
    Params first;
    for (const auto& [name, a] : params)
      if (!cfg.scan_layers || name.rfind("h.", 0) != 0) first.emplace(name, a);
    for (auto& [name, a] : use(first)) p.insert_or_assign(name, a);
  }
  // wte[tokens] + wpe (in the compute dtype): positions broadcast over the batch; the residual
  // stream is float32.
  Array x = astype(gather(f.param(p.at("wte.weight")), tokens) + f.param(p.at("wpe.weight")),
                   DType::float32);
  // The stacks, named as one layer's parameters.
  Params stacks;
  for (const auto& name : gpt_layer_param_names()) stacks.emplace(name, p.at("h." + name));
  if (cfg.scan_layers) {
    // One layer in the program, whatever the depth: each iteration gets layer i of every stack.
    // The body captures by value: where the loop cannot be replayed (between processes) the
    // backward pass calls it again after this function has returned.
    x = lax::scan(
            [f, attention, use](const Array& h, const Params& layer) {
              return std::make_pair(block(f, use ? use(layer) : layer, h, attention), std::nullopt);
            },
            x, stacks)
            .first;
  } else {
    for (int i = 0; i < cfg.layers; ++i) {
      Params layer;
      for (const auto& [name, s] : stacks) layer.emplace(name, s[i]);
      x = block(f, layer, x, attention);
    }
  }
  x = f.layer_norm(x, p, "ln_f");
  return f.einsum2("bsd,vd->bsv", x, f.param(p.at("lm_head.weight")));
}

Array gpt_loss(const GptConfig& cfg, const Params& p, const Array& tokens, const Array& targets,
               const Attention& attention, const ParamUse& use) {
  const Array logits = gpt_logits(cfg, p, tokens, attention, use);
  const Array nll = -sum(nn::log_softmax(logits, -1) * one_hot(targets, cfg.vocab), {-1});
  return mean(nll);
}

}  // namespace meshvk::programs

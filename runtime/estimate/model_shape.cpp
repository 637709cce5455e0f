// Unit sizes of the built-in models (see model_shape.hpp).
#include "runtime/estimate/model_shape.hpp"

#include <numeric>

#include "runtime/common/errors.hpp"
#include "runtime/config/model_section.hpp"

namespace accel::estimate {

int64_t ModelShape::num_parameters() const {
  return std::accumulate(units.begin(), units.end(), int64_t(0),
                         [](int64_t sum, const UnitShape& u) { return sum + u.numel; });
}

std::vector<int64_t> ModelShape::unit_numels() const {
  std::vector<int64_t> out;
  for (const auto& u : units) out.push_back(u.numel);
  return out;
}

ModelShape model_shape(const config::ModelSection& s, config::AutoWrapPolicy wrap, int64_t min_num_params) {
  config::check_model_section(s);

  const int64_t C = s.n_embd, V = s.vocab_size, T = s.block_size;
  // The modules outside the layers, before and after them in spec order, and the layers.
  std::vector<UnitShape> before, after, layers;
  switch (s.name) {
    case config::ModelName::gpt: {
      before = {{"wte", V * C}, {"wpe", T * C}};
      after = {{"ln_f", 2 * C}};
      // ln_1 (2C), c_attn (3C^2 + 3C), attn.c_proj (C^2 + C), ln_2 (2C), c_fc (4C^2 + 4C), mlp.c_proj (4C^2 + C)
      const int64_t block = 12 * C * C + 13 * C;
      for (int i = 0; i < s.n_layer; ++i) layers.push_back({"h." + std::to_string(i), block});
      break;
    }
    case config::ModelName::mlp: {
      before = {{"wte", V * C}};  // no position table, no final norm
      for (int i = 0; i < s.n_layer; ++i) layers.push_back({"layer." + std::to_string(i), C * C + C});
      break;
    }
    case config::ModelName::llama: {
      const int64_t H = s.n_head, KV = config::llama_kv_heads(s), D = config::llama_head_dim(s);
      const int64_t I = config::llama_intermediate_size(s);
      before = {{"embed_tokens", V * C}};
      if (!s.tie_word_embeddings) before.push_back({"lm_head", V * C});  // registered before the layers
      after = {{"norm", C}};
      // q_proj [H*D, C], k_proj and v_proj [KV*D, C], o_proj [C, H*D]; gate/up [I, C], down [C, I];
      // two norms of C; biases: H*D + 2*KV*D + C (attention_bias), 2I + C (mlp_bias).
      int64_t layer = 2 * H * D * C + 2 * KV * D * C + 3 * I * C + 2 * C;
      if (s.attention_bias) layer += H * D + 2 * KV * D + C;
      if (s.mlp_bias) layer += 2 * I + C;
      for (int i = 0; i < s.n_layer; ++i) layers.push_back({"layers." + std::to_string(i), layer});
      break;
    }
    default:
      throw ConfigError(Diagnostic{"model.name", {}, "unknown model", config::to_string(s.name), "gpt | llama | mlp", ""});
  }
  // A module outside the layers is a unit of its own when the size rule picks it; else the root's.
  const bool by_size = wrap == config::AutoWrapPolicy::SIZE_BASED_WRAP && min_num_params > 0;
  ModelShape shape;
  UnitShape root{"root", 0};
  bool wte_in_root = false;
  std::vector<UnitShape> own;  // the picked ones, then the layers, then the picked ones after them
  auto place = [&](const UnitShape& m) {
    if (by_size && m.numel >= min_num_params) {
      if (m.name == "wte" || m.name == "embed_tokens") shape.tied_unit = int(own.size());
      own.push_back(m);
    } else {
      root.numel += m.numel;
      wte_in_root = wte_in_root || m.name == "wte" || m.name == "embed_tokens";
    }
  };
  for (const auto& m : before) place(m);
  own.insert(own.end(), layers.begin(), layers.end());
  for (const auto& m : after) place(m);
  if (root.numel > 0) {
    shape.units.push_back(root);
    shape.tied_unit = wte_in_root ? 0 : shape.tied_unit + 1;
  }
  shape.units.insert(shape.units.end(), own.begin(), own.end());
  return shape;
}

std::string describe_model(const config::ModelSection& s) {
  std::string out = config::to_string(s.name) + " (n_layer " + std::to_string(s.n_layer);
  const bool attention = s.name != config::ModelName::mlp;
  if (attention) out += ", n_head " + std::to_string(s.n_head);
  if (s.name == config::ModelName::llama) out += ", n_kv_head " + std::to_string(config::llama_kv_heads(s));
  out += ", n_embd " + std::to_string(s.n_embd) + ", vocab_size " + std::to_string(s.vocab_size);
  if (s.name == config::ModelName::llama)
    out += ", intermediate_size " + std::to_string(config::llama_intermediate_size(s)) +
           (s.tie_word_embeddings ? ", tied head" : ", untied head");
  if (attention) out += ", block_size " + std::to_string(s.block_size);
  return out + ")";
}

}  // namespace accel::estimate

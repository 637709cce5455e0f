// The per-family name and layout tables (see hf_family.hpp).
#include "runtime/hf/hf_family.hpp"

#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/config/model_section.hpp"

namespace accel::hf {
namespace {

// GPT2LMHeadModel: every accel name gets "transformer."; the four Conv1D weights are stored
// [in, out]. The head is tied with wte and absent from the file.
Family gpt2_family(const config::ModelSection& s) {
  const int64_t C = s.n_embd, V = s.vocab_size, T = s.block_size;
  Family f;
  f.architecture = "GPT2LMHeadModel";
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool conv1d = false) {
    f.tensors.push_back({name, "transformer." + name, std::move(shape), conv1d});
  };
  add("wte.weight", {V, C});
  add("wpe.weight", {T, C});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {3 * C, C}, true);
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C}, true);  // square: only the table knows it is transposed
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {4 * C, C}, true);
    add(h + "mlp.c_fc.bias", {4 * C});
    add(h + "mlp.c_proj.weight", {C, 4 * C}, true);
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return f;
}

// LlamaForCausalLM / MistralForCausalLM: every accel name gets "model." except lm_head.weight,
// which is absent when the head is tied with embed_tokens. Linear weights are [out, in] in both.
Family llama_family(const config::ModelSection& s, const std::string& architecture) {
  const int64_t C = s.n_embd, V = s.vocab_size, I = config::llama_intermediate_size(s);
  const int64_t D = config::llama_head_dim(s), Q = s.n_head * D, KV = (s.n_kv_head ? s.n_kv_head : s.n_head) * D;
  Family f;
  f.architecture = architecture;
  f.head_tied = s.tie_word_embeddings;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    f.tensors.push_back({name, "model." + name, std::move(shape), false});
  };
  add("embed_tokens.weight", {V, C});
  if (!s.tie_word_embeddings) f.tensors.push_back({"lm_head.weight", "lm_head.weight", {V, C}, false});
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
      add(l + name + ".weight", {out, in});
      if (bias) add(l + name + ".bias", {out});
    };
    linear("self_attn.q_proj", Q, C, s.attention_bias);
    linear("self_attn.k_proj", KV, C, s.attention_bias);
    linear("self_attn.v_proj", KV, C, s.attention_bias);
    linear("self_attn.o_proj", C, Q, s.attention_bias);
    linear("mlp.gate_proj", I, C, s.mlp_bias);
    linear("mlp.up_proj", I, C, s.mlp_bias);
    linear("mlp.down_proj", C, I, s.mlp_bias);
    add(l + "input_layernorm.weight", {C});
    add(l + "post_attention_layernorm.weight", {C});
  }
  add("norm.weight", {C});
  return f;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool Family::ignorable(const std::string& hf_name) const {
  if (architecture == "GPT2LMHeadModel")
    return hf_name == "lm_head.weight" || ends_with(hf_name, ".attn.bias") || ends_with(hf_name, ".attn.masked_bias");
  // Llama/Mistral: RoPE's inverse frequencies (older transformers saved them; accel computes them
  // from config.json) and, with a tied head, a stored copy of embed_tokens as lm_head.
  if (ends_with(hf_name, ".rotary_emb.inv_freq")) return true;
  return hf_name == "lm_head.weight" && head_tied;
}

Family family_for(const config::ModelSection& section) {
  if (section.name == config::ModelName::gpt) return gpt2_family(section);
  if (section.name == config::ModelName::llama)
    return llama_family(section, section.sliding_window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM");
  throw UsageError("model.name " + config::to_string(section.name) +
                   " has no Hugging Face counterpart (export format hf and model.from_pretrained take gpt)");
}

std::vector<std::string> supported_architectures() {
  return {"GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM"};
}

namespace {

// Llama / Mistral in the spelling published folders use (top-level rope_theta, rope_scaling null
// or a dict), which transformers 4.x and 5.x both read. A Mistral sliding window is written only
// where the job set one (it masks nothing at the trained length; validate.cpp).
nlohmann::ordered_json llama_config_json(const config::ModelSection& s, const std::string& torch_dtype) {
  const bool mistral = s.sliding_window > 0;
  nlohmann::ordered_json c;
  c["architectures"] = nlohmann::ordered_json::array({mistral ? "MistralForCausalLM" : "LlamaForCausalLM"});
  c["model_type"] = mistral ? "mistral" : "llama";
  c["vocab_size"] = s.vocab_size;
  c["hidden_size"] = s.n_embd;
  c["intermediate_size"] = config::llama_intermediate_size(s);
  c["num_hidden_layers"] = s.n_layer;
  c["num_attention_heads"] = s.n_head;
  c["num_key_value_heads"] = config::llama_kv_heads(s);
  c["head_dim"] = config::llama_head_dim(s);
  c["max_position_embeddings"] = s.block_size;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = s.norm_eps;
  c["rope_theta"] = s.rope_theta;
  if (s.rope_scaling == config::RopeScaling::llama3) {
    nlohmann::ordered_json r;
    r["rope_type"] = "llama3";
    r["factor"] = s.rope_scaling_factor;
    r["low_freq_factor"] = s.rope_scaling_low_freq_factor;
    r["high_freq_factor"] = s.rope_scaling_high_freq_factor;
    r["original_max_position_embeddings"] = s.rope_scaling_original_max_position_embeddings;
    c["rope_scaling"] = r;
  } else {
    c["rope_scaling"] = nullptr;
  }
  c["attention_bias"] = s.attention_bias;
  c["attention_dropout"] = 0.0;
  c["mlp_bias"] = s.mlp_bias;
  if (mistral) c["sliding_window"] = s.sliding_window;
  c["tie_word_embeddings"] = s.tie_word_embeddings;
  c["dtype"] = torch_dtype;
  c["torch_dtype"] = torch_dtype;
  return c;
}

}  // namespace

nlohmann::ordered_json config_json(const config::ModelSection& s, const std::string& torch_dtype) {
  if (s.name == config::ModelName::llama) return llama_config_json(s, torch_dtype);
  if (s.name != config::ModelName::gpt) family_for(s);  // throws, naming the model
  // accel's gpt is GPT-2 without dropout: tanh GELU, LayerNorm eps 1e-5, attention scaled by
  // 1/sqrt(head_dim), the head tied with wte.
  nlohmann::ordered_json c;
  c["architectures"] = nlohmann::ordered_json::array({"GPT2LMHeadModel"});
  c["model_type"] = "gpt2";
  c["vocab_size"] = s.vocab_size;
  c["n_positions"] = s.block_size;
  c["n_embd"] = s.n_embd;
  c["n_layer"] = s.n_layer;
  c["n_head"] = s.n_head;
  c["n_inner"] = nullptr;
  c["activation_function"] = "gelu_new";
  c["layer_norm_epsilon"] = 1e-5;
  c["resid_pdrop"] = 0.0;
  c["embd_pdrop"] = 0.0;
  c["attn_pdrop"] = 0.0;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["tie_word_embeddings"] = true;
  c["dtype"] = torch_dtype;        // transformers 5 reads this key,
  c["torch_dtype"] = torch_dtype;  // earlier versions this one
  return c;
}

}  // namespace accel::hf

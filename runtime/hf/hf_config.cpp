// config.json into the model section (see hf_config.hpp).
#include "runtime/hf/hf_config.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "runtime/hf/hf_family.hpp"
#include "runtime/hf/hf_folder.hpp"

namespace accel::hf {
namespace {

using Json = nlohmann::json;
constexpr const char* kKey = "model.from_pretrained";

struct Reader {
  const Json& config;
  std::string file;
  Location where;
  std::vector<Diagnostic>& errors;

  void error(const std::string& message, const std::string& value, const std::string& allowed, const std::string& hint) {
    errors.push_back({kKey, where, file + ": " + message, value, allowed, hint});
  }
  // A value that changes the math: absent (the default) or `expected`.
  void require(const char* key, const Json& expected, const std::string& why) {
    if (!config.contains(key) || config[key].is_null() || config[key] == expected) return;
    if (expected.is_number() && config[key].is_number() &&
        std::fabs(config[key].get<double>() - expected.get<double>()) <= 1e-12 * std::fabs(expected.get<double>()))
      return;
    error(std::string("\"") + key + "\" is " + config[key].dump() + "; accel's model " + why, config[key].dump(),
          expected.dump(), "accel cannot load this model as it is; use a folder with the value allowed");
  }
};

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " | ") + n;
  return s;
}

// One accel key from config.json: derived when the job leaves it unset; an error naming both
// values when the job sets it to another.
void set_key(Reader& r, config::JobBuilder& builder, const std::string& hf_key, const char* accel_key,
             const config::Value& value) {
  const config::Value current = config::find_field(accel_key)->get(builder.job());
  bool same = config::values_equal(current, value);
  if (!same && std::holds_alternative<double>(current) && std::holds_alternative<double>(value)) {
    const double a = std::get<double>(current), b = std::get<double>(value);
    same = std::fabs(a - b) <= 1e-12 * std::fabs(b);
  }
  if (builder.layer_of(accel_key) != config::Layer::Default && !same) {
    r.error("\"" + hf_key + "\" is " + config::value_to_yaml(value) + " but the job sets " + accel_key + " to " +
                config::value_to_yaml(current),
            config::value_to_yaml(current), config::value_to_yaml(value),
            std::string("remove ") + accel_key + " from the job (the folder's config.json sets it)");
    return;
  }
  builder.derive(accel_key, value, r.file + " \"" + hf_key + "\"");
}

// A positive integer key of config.json, or nullopt after an error (missing, not an integer, < 1).
std::optional<int64_t> positive(Reader& r, const std::string& hf_key, const std::string& architecture) {
  if (!r.config.contains(hf_key) || !r.config[hf_key].is_number_integer() || r.config[hf_key].get<int64_t>() < 1 ||
      r.config[hf_key].get<int64_t>() > (int64_t(1) << 24)) {
    r.error("\"" + hf_key + "\" is missing or not a positive integer", r.config.value(hf_key, Json()).dump(),
            "integer >= 1", "a " + architecture + " config.json has it");
    return std::nullopt;
  }
  return r.config[hf_key].get<int64_t>();
}

// GPT2LMHeadModel's shape keys, and the values of the keys that change its math.
void apply_gpt2(Reader& r, config::JobBuilder& builder) {
  // gelu_pytorch_tanh is the same function as gelu_new (tanh-approximated GELU).
  if (r.config.value("activation_function", Json("gelu_new")) != Json("gelu_pytorch_tanh"))
    r.require("activation_function", "gelu_new", "uses tanh-approximated GELU (gelu_new)");
  r.require("layer_norm_epsilon", 1e-5, "normalizes with epsilon 1e-5");
  r.require("scale_attn_weights", true, "scales attention by 1/sqrt(head_dim)");
  r.require("scale_attn_by_inverse_layer_idx", false, "does not scale attention by layer index");
  r.require("add_cross_attention", false, "is a decoder without cross-attention");
  r.require("tie_word_embeddings", true, "ties the head with wte");
  struct ShapeKey {
    const char* hf;
    const char* accel;
  };
  const ShapeKey keys[] = {{"n_layer", "model.n_layer"}, {"n_head", "model.n_head"}, {"n_embd", "model.n_embd"},
                           {"vocab_size", "model.vocab_size"}, {"n_positions", "model.block_size"}};
  for (const auto& k : keys)
    if (const auto value = positive(r, k.hf, "GPT2LMHeadModel")) set_key(r, builder, k.hf, k.accel, config::Value{*value});
  const int64_t n_inner = r.config.contains("n_inner") && r.config["n_inner"].is_number_integer()
                              ? r.config["n_inner"].get<int64_t>() : 0;
  if (n_inner != 0 && n_inner != 4 * int64_t(builder.job().model.n_embd))
    r.error("\"n_inner\" is " + std::to_string(n_inner) + "; accel's gpt MLP is 4 x n_embd wide",
            std::to_string(n_inner), "null or " + std::to_string(4 * builder.job().model.n_embd), "");
}

// The RoPE settings of a Llama/Mistral config.json in either spelling: transformers 5's
// "rope_parameters" {rope_theta, rope_type, ...} or the published folders' top-level "rope_theta"
// with "rope_scaling" {rope_type (or "type"), factor, ...} or null.
void apply_rope(Reader& r, config::JobBuilder& builder) {
  const Json* params = nullptr;
  std::string where;
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (r.config.contains(key) && r.config[key].is_object()) {
      params = &r.config[key];
      where = key;
      break;
    }
  double theta = 10000.0;  // LlamaConfig's default
  std::string theta_key = "rope_theta";
  if (params && params->contains("rope_theta") && (*params)["rope_theta"].is_number()) {
    theta = (*params)["rope_theta"].get<double>();
    theta_key = where + ".rope_theta";
  } else if (r.config.contains("rope_theta") && r.config["rope_theta"].is_number()) {
    theta = r.config["rope_theta"].get<double>();
  }
  set_key(r, builder, theta_key, "model.rope_theta", config::Value{theta});
  std::string type = "default";
  if (params) {
    const Json t = params->contains("rope_type") ? (*params)["rope_type"] : params->value("type", Json("default"));
    type = t.is_string() ? t.get<std::string>() : t.dump();
  }
  if (type == "default") {
    set_key(r, builder, where.empty() ? "rope_scaling" : where, "model.rope_scaling", config::Value{std::string("none")});
    return;
  }
  if (type != "llama3") {
    r.error("\"" + where + "\" has rope_type " + type + ", which accel's llama model does not compute", type,
            "default | llama3", "accel cannot load this model as it is; use a folder with the value allowed");
    return;
  }
  set_key(r, builder, where + ".rope_type", "model.rope_scaling", config::Value{std::string("llama3")});
  struct Factor {
    const char* hf;
    const char* accel;
  };
  for (const Factor& f : {Factor{"factor", "model.rope_scaling_factor"},
                          Factor{"low_freq_factor", "model.rope_scaling_low_freq_factor"},
                          Factor{"high_freq_factor", "model.rope_scaling_high_freq_factor"}}) {
    if (!params->contains(f.hf) || !(*params)[f.hf].is_number()) {
      r.error("\"" + where + "." + f.hf + "\" is missing or not a number", params->value(f.hf, Json()).dump(), "a number",
              "a llama3 rope scaling has it");
      continue;
    }
    set_key(r, builder, where + "." + f.hf, f.accel, config::Value{(*params)[f.hf].get<double>()});
  }
  const std::string original = "original_max_position_embeddings";
  if (!params->contains(original) || !(*params)[original].is_number_integer() || (*params)[original].get<int64_t>() < 1)
    r.error("\"" + where + "." + original + "\" is missing or not a positive integer",
            params->value(original, Json()).dump(), "integer >= 1", "a llama3 rope scaling has it");
  else
    set_key(r, builder, where + "." + original, "model.rope_scaling_original_max_position_embeddings",
            config::Value{(*params)[original].get<int64_t>()});
}

// LlamaForCausalLM / MistralForCausalLM: shape keys, RoPE, and the keys that change the math.
// Absent optional keys take transformers' LlamaConfig defaults (rms_norm_eps 1e-6, untied head,
// no biases, n_kv_head = n_head, head_dim = hidden_size / heads).
void apply_llama(Reader& r, config::JobBuilder& builder, const std::string& architecture) {
  r.require("hidden_act", "silu", "uses SwiGLU with SiLU (hidden_act silu)");
  r.require("attention_dropout", 0.0, "trains without attention dropout");
  struct ShapeKey {
    const char* hf;
    const char* accel;
  };
  const ShapeKey keys[] = {{"num_hidden_layers", "model.n_layer"}, {"num_attention_heads", "model.n_head"},
                           {"hidden_size", "model.n_embd"}, {"vocab_size", "model.vocab_size"},
                           {"max_position_embeddings", "model.block_size"},
                           {"intermediate_size", "model.intermediate_size"}};
  for (const auto& k : keys)
    if (const auto value = positive(r, k.hf, architecture)) set_key(r, builder, k.hf, k.accel, config::Value{*value});
  // Optional sizes: null, absent or equal to the derived default is 0 in the model section (a job
  // that leaves them derived then agrees with a folder that spells them out).
  const config::ModelSection& m = builder.job().model;
  struct OptionalSize {
    const char* hf;
    const char* accel;
    int64_t derived;
  };
  for (const OptionalSize& k : {OptionalSize{"num_key_value_heads", "model.n_kv_head", m.n_head},
                                OptionalSize{"head_dim", "model.head_dim", m.n_head && m.n_embd % m.n_head == 0 ? m.n_embd / m.n_head : 0},
                                OptionalSize{"sliding_window", "model.sliding_window", 0}}) {
    if (!r.config.contains(k.hf) || r.config[k.hf].is_null()) {
      set_key(r, builder, k.hf, k.accel, config::Value{int64_t(0)});
      continue;
    }
    if (const auto value = positive(r, k.hf, architecture))
      set_key(r, builder, k.hf, k.accel, config::Value{*value == k.derived ? int64_t(0) : *value});
  }
  const Json eps = r.config.value("rms_norm_eps", Json(1e-6));
  if (!eps.is_number() || eps.get<double>() <= 0)
    r.error("\"rms_norm_eps\" is not a positive number", eps.dump(), "a number > 0", "");
  else
    set_key(r, builder, "rms_norm_eps", "model.norm_eps", config::Value{eps.get<double>()});
  for (const ShapeKey& k : {ShapeKey{"tie_word_embeddings", "model.tie_word_embeddings"},
                            ShapeKey{"attention_bias", "model.attention_bias"}, ShapeKey{"mlp_bias", "model.mlp_bias"}}) {
    const Json v = r.config.value(k.hf, Json(false));
    if (!v.is_boolean())
      r.error(std::string("\"") + k.hf + "\" is not true or false", v.dump(), "true | false", "");
    else
      set_key(r, builder, k.hf, k.accel, config::Value{v.get<bool>()});
  }
  apply_rope(r, builder);
}

}  // namespace

void apply_from_pretrained(config::JobBuilder& builder, bool check_weights, std::vector<Diagnostic>& errors) {
  const std::string dir = builder.job().model.from_pretrained;
  const auto source = builder.sources().find(kKey);
  const Location where = source != builder.sources().end() ? source->second : Location{};
  const std::string file = dir + "/" + kConfigFile;
  std::string text;
  {
    const int fd = files::open_nofollow(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      errors.push_back({kKey, where, "cannot read " + file + ": " + files::open_error(file, errno), dir, "",
                        "point it at a Hugging Face model folder (config.json and safetensors weights)"});
      return;
    }
    char buf[65536];
    ssize_t got;
    while ((got = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (16u << 20)) text.append(buf, size_t(got));
    ::close(fd);
  }
  const Json config = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    errors.push_back({kKey, where, file + " is not a JSON object", dir, "", "a Hugging Face config.json"});
    return;
  }
  Reader r{config, file, where, errors};
  const size_t before = errors.size();
  std::string architecture;
  if (config.contains("architectures") && config["architectures"].is_array() && config["architectures"].size() == 1 &&
      config["architectures"][0].is_string())
    architecture = config["architectures"][0].get<std::string>();
  const std::vector<std::string> supported = supported_architectures();
  if (std::find(supported.begin(), supported.end(), architecture) == supported.end()) {
    const std::string why = architecture == "GraniteForCausalLM"
                                ? " (Granite scales embeddings, residuals, attention and logits by multipliers accel's "
                                  "llama model does not apply; a Granite-shaped job trains from scratch as model.name llama)"
                                : "";
    r.error("architecture " + (config.contains("architectures") ? config["architectures"].dump() : "(none)") +
                " is not one accel builds" + why,
            config.value("architectures", Json()).dump(), join(supported),
            "\"architectures\" in config.json names the model class; accel reads the ones allowed");
    return;
  }
  const config::ModelName name = architecture == "GPT2LMHeadModel" ? config::ModelName::gpt : config::ModelName::llama;
  if (builder.layer_of("model.name") != config::Layer::Default && builder.job().model.name != name) {
    r.error("a " + architecture + " folder is model.name " + config::to_string(name) + ", the job sets " +
                config::to_string(builder.job().model.name),
            config::to_string(builder.job().model.name), config::to_string(name), "remove model.name from the job");
    return;
  }
  builder.derive("model.name", config::Value{config::to_string(name)}, file + " \"architectures\"");
  if (name == config::ModelName::gpt)
    apply_gpt2(r, builder);
  else
    apply_llama(r, builder, architecture);
  if (errors.size() != before || !check_weights) return;
  try {
    const FolderContents contents = read_folder(dir);
    const std::vector<std::string> problems = check_folder(contents, family_for(builder.job().model));
    if (!problems.empty()) {
      std::string message = dir + " does not hold the weights config.json describes (" +
                            std::to_string(problems.size()) + " problem" + (problems.size() > 1 ? "s" : "") + "):";
      for (const auto& p : problems) message += "\n  " + p;
      errors.push_back({kKey, where, message, dir, "", "the folder's weights must match its config.json"});
    }
  } catch (const UsageError& e) {
    errors.push_back({kKey, where, e.what(), dir, "", "a Hugging Face model folder"});
  }
}

}  // namespace accel::hf

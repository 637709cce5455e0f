// config.json into the model section (see hf_config.hpp).
#include "runtime/hf/hf_config.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
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
  for (const auto& k : keys) {
    if (!r.config.contains(k.hf) || !r.config[k.hf].is_number_integer() || r.config[k.hf].get<int64_t>() < 1 ||
        r.config[k.hf].get<int64_t>() > (int64_t(1) << 24)) {
      r.error(std::string("\"") + k.hf + "\" is missing or not a positive integer", r.config.value(k.hf, Json()).dump(),
              "integer >= 1", "a GPT2LMHeadModel config.json has it");
      continue;
    }
    const int64_t value = r.config[k.hf].get<int64_t>();
    const config::Value current = config::find_field(k.accel)->get(builder.job());
    if (builder.layer_of(k.accel) != config::Layer::Default && std::get<int64_t>(current) != value) {
      r.error(std::string("\"") + k.hf + "\" is " + std::to_string(value) + " but the job sets " + k.accel + " to " +
                  std::to_string(std::get<int64_t>(current)),
              std::to_string(std::get<int64_t>(current)), std::to_string(value),
              std::string("remove ") + k.accel + " from the job (the folder's config.json sets it)");
      continue;
    }
    builder.derive(k.accel, config::Value{value}, r.file + " \"" + k.hf + "\"");
  }
  const int64_t n_inner = r.config.contains("n_inner") && r.config["n_inner"].is_number_integer()
                              ? r.config["n_inner"].get<int64_t>() : 0;
  if (n_inner != 0 && n_inner != 4 * int64_t(builder.job().model.n_embd))
    r.error("\"n_inner\" is " + std::to_string(n_inner) + "; accel's gpt MLP is 4 x n_embd wide",
            std::to_string(n_inner), "null or " + std::to_string(4 * builder.job().model.n_embd), "");
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
  if (architecture != "GPT2LMHeadModel") {
    r.error("architecture " + (config.contains("architectures") ? config["architectures"].dump() : "(none)") +
                " is not one accel builds",
            config.value("architectures", Json()).dump(), join(supported_architectures()),
            "\"architectures\" in config.json names the model class; accel reads the ones allowed");
    return;
  }
  if (builder.layer_of("model.name") != config::Layer::Default && builder.job().model.name != config::ModelName::gpt) {
    r.error("a GPT2LMHeadModel folder is model.name gpt, the job sets " + config::to_string(builder.job().model.name),
            config::to_string(builder.job().model.name), "gpt", "remove model.name from the job");
    return;
  }
  builder.derive("model.name", config::Value{std::string("gpt")}, file + " \"architectures\"");
  apply_gpt2(r, builder);
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

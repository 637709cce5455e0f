// bos and eos resolution: see special_tokens.hpp.
#include "trainer/text/special_tokens.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "runtime/common/errors.hpp"

namespace accel::text {

namespace {

constexpr uint32_t kAbsent = std::numeric_limits<uint32_t>::max();

// tokenizer_config.json's `key`: a string, {"content": string}, or absent/null.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const auto& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::nullopt;
}

std::optional<nlohmann::json> read_config_beside(const std::string& tokenizer_path) {
  const auto path = std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::is_symlink(path, ec)) return std::nullopt;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    Diagnostic d;
    d.where = Location::in_file(path.string(), 0, 0);
    d.message = std::string("is not valid JSON: ") + e.what();
    d.hint = "fix or remove it, or set data.bos and data.eos explicitly";
    throw ConfigError(std::move(d));
  }
}

std::optional<uint32_t> resolve(const TokenizerSpec& spec, const std::string& setting, const char* key,
                                const char* config_key, const std::vector<const char*>& well_known,
                                const std::optional<nlohmann::json>& config) {
  if (setting == "none") return std::nullopt;
  if (setting != "auto") {
    const uint32_t id = spec.id_of(setting);
    if (id == kAbsent) {
      Diagnostic d;
      d.key_path = key;
      d.message = "token '" + setting + "' is neither an added token nor in the vocabulary of " + spec.path;
      d.value = setting;
      d.allowed = "auto | none | a token of the tokenizer";
      d.hint = "write the token's exact text (for example <s> or <|endoftext|>)";
      throw ConfigError(std::move(d));
    }
    return id;
  }
  if (config) {
    const auto named = config_token(*config, config_key);
    if (!named) return std::nullopt;
    const uint32_t id = spec.id_of(*named);
    return id == kAbsent ? std::nullopt : std::optional<uint32_t>(id);
  }
  for (const char* name : well_known)
    for (const auto& t : spec.added_tokens)
      if (t.content == name) return t.id;
  return std::nullopt;
}

}  // namespace

DocumentBoundaries resolve_boundaries(const TokenizerSpec& spec, const std::string& bos_setting,
                                      const std::string& eos_setting) {
  std::optional<nlohmann::json> config;
  if (bos_setting == "auto" || eos_setting == "auto") config = read_config_beside(spec.path);
  DocumentBoundaries b;
  b.bos = resolve(spec, bos_setting, "data.bos", "bos_token", {"<|begin_of_text|>", "<s>", "<bos>"}, config);
  b.eos = resolve(spec, eos_setting, "data.eos", "eos_token", {"<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>"}, config);
  if (b.bos && b.eos && *b.bos == *b.eos) b.bos.reset();
  return b;
}

}  // namespace accel::text

// TokenizerSpec: see tokenizer_spec.hpp.
#include "trainer/text/tokenizer_spec.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"

namespace accel::text {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

constexpr size_t kMaxTokenizerBytes = size_t{1} << 30;

// Parsing state: the file's path and the JSON path of the value being read, for messages.
struct Reader {
  std::string file;

  [[noreturn]] void refuse(const std::string& where, const std::string& what, const std::string& allowed,
                           const std::string& fix) const {
    Diagnostic d;
    d.key_path = where;
    d.where = Location::in_file(file, 0, 0);
    d.message = what;
    d.allowed = allowed;
    d.hint = fix;
    throw ConfigError(std::move(d));
  }

  const json& member(const json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) refuse(where + "." + key, "is missing", "", "a tokenizer.json as the tokenizers library writes it");
    return obj.at(key);
  }
  std::string string_at(const json& obj, const std::string& where, const char* key) const {
    const json& v = member(obj, where, key);
    if (!v.is_string()) refuse(where + "." + key, "must be a string, not " + v.dump(), "a string", "");
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& where, const char* key, bool absent) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return absent;
    if (!obj.at(key).is_boolean()) refuse(where + "." + key, "must be true or false, not " + obj.at(key).dump(), "true | false", "");
    return obj.at(key).get<bool>();
  }
  void require_off(const json& obj, const std::string& where, const char* key, const std::string& why) const {
    if (obj.contains(key) && !obj.at(key).is_null() && obj.at(key) != json(false))
      refuse(where + "." + key, "is " + obj.at(key).dump() + ", which accel's tokenizer does not implement (" + why + ")",
             "null or false", "use a tokenizer without it, or tokenize the data yourself into an llm.c token file (data.kind: tokens)");
  }
};

const std::string kUnsupportedFix =
    "use a tokenizer.json of a supported shape (GPT-2, Llama 2/3, Mistral), or tokenize the data yourself "
    "into an llm.c token file (data.kind: tokens)";

void read_normalizer(const Reader& r, const json& n, const std::string& where, std::vector<NormalizerStep>& out) {
  if (n.is_null()) return;
  const std::string type = r.string_at(n, where, "type");
  using K = NormalizerStep::Kind;
  if (type == "Sequence") {
    const json& list = r.member(n, where, "normalizers");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], where + ".normalizers[" + std::to_string(i) + "]", out);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    out.push_back({type == "NFC" ? K::nfc : type == "NFD" ? K::nfd : type == "NFKC" ? K::nfkc : K::nfkd, "", ""});
  } else if (type == "Prepend") {
    out.push_back({K::prepend, r.string_at(n, where, "prepend"), ""});
  } else if (type == "Replace") {
    const json& pattern = r.member(n, where, "pattern");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern.at("String").is_string())
      r.refuse(where + ".pattern", "a Replace normalizer with pattern " + pattern.dump() + " is not implemented",
               "{\"String\": ...}", kUnsupportedFix);
    const std::string from = pattern.at("String").get<std::string>();
    if (from.empty()) r.refuse(where + ".pattern.String", "is empty", "a non-empty string", "");
    out.push_back({K::replace, from, r.string_at(n, where, "content")});
  } else {
    r.refuse(where + ".type", "normalizer '" + type + "' is not implemented",
             "NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence", kUnsupportedFix);
  }
}

void read_pre_tokenizer(const Reader& r, const json& p, const std::string& where, std::vector<PreTokenizerStep>& out) {
  if (p.is_null()) return;
  const std::string type = r.string_at(p, where, "type");
  using K = PreTokenizerStep::Kind;
  PreTokenizerStep step;
  if (type == "Sequence") {
    const json& list = r.member(p, where, "pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(r, list[i], where + ".pretokenizers[" + std::to_string(i) + "]", out);
    return;
  } else if (type == "ByteLevel") {
    step.kind = K::byte_level;
    step.use_regex = r.flag(p, where, "use_regex", true);
    step.add_prefix_space = r.flag(p, where, "add_prefix_space", true);
    step.pattern = kGpt2Pattern;
  } else if (type == "Split") {
    step.kind = K::split;
    const json& pattern = r.member(p, where, "pattern");
    if (pattern.is_object() && pattern.contains("Regex") && pattern.at("Regex").is_string()) {
      step.pattern = pattern.at("Regex").get<std::string>();
    } else if (pattern.is_object() && pattern.contains("String") && pattern.at("String").is_string()) {
      step.pattern = "\\Q" + pattern.at("String").get<std::string>() + "\\E";
      if (pattern.at("String").get<std::string>().find("\\E") != std::string::npos)
        r.refuse(where + ".pattern.String", "contains \\E, which accel cannot quote", "", kUnsupportedFix);
    } else {
      r.refuse(where + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}, not " + pattern.dump(), "", "");
    }
    const std::string behavior = r.string_at(p, where, "behavior");
    if (behavior != "Isolated")
      r.refuse(where + ".behavior", "Split behavior '" + behavior + "' is not implemented", "Isolated", kUnsupportedFix);
    if (r.flag(p, where, "invert", false))
      r.refuse(where + ".invert", "an inverted Split is not implemented", "false", kUnsupportedFix);
  } else if (type == "Metaspace") {
    step.kind = K::metaspace;
    step.replacement = r.string_at(p, where, "replacement");
    step.split = r.flag(p, where, "split", true);
    std::string scheme = "always";
    if (p.contains("prepend_scheme")) scheme = r.string_at(p, where, "prepend_scheme");
    else if (p.contains("add_prefix_space")) scheme = r.flag(p, where, "add_prefix_space", true) ? "always" : "never";
    if (scheme == "always") step.prepend = PreTokenizerStep::Prepend::always;
    else if (scheme == "first") step.prepend = PreTokenizerStep::Prepend::first;
    else if (scheme == "never") step.prepend = PreTokenizerStep::Prepend::never;
    else r.refuse(where + ".prepend_scheme", "is '" + scheme + "'", "always | first | never", "");
  } else {
    r.refuse(where + ".type", "pre-tokenizer '" + type + "' is not implemented",
             "ByteLevel, Split, Metaspace, Sequence", kUnsupportedFix);
  }
  out.push_back(std::move(step));
}

uint32_t checked_id(const Reader& r, const json& v, const std::string& where) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() >= std::numeric_limits<uint32_t>::max())
    r.refuse(where, "must be a token id (a non-negative integer below 2^32 - 1), not " + v.dump(), "", "");
  return v.get<uint32_t>();
}

void read_model(const Reader& r, const json& m, BpeSpec& out) {
  const std::string where = "model";
  const std::string type = r.string_at(m, where, "type");
  if (type != "BPE")
    r.refuse("model.type", "model '" + type + "' is not implemented", "BPE", kUnsupportedFix);
  r.require_off(m, where, "dropout", "it makes tokenization random");
  r.require_off(m, where, "continuing_subword_prefix", "a WordPiece-style prefix");
  r.require_off(m, where, "end_of_word_suffix", "a suffix on word ends");
  if (m.contains("unk_token") && !m.at("unk_token").is_null()) out.unk_token = r.string_at(m, where, "unk_token");
  out.fuse_unk = r.flag(m, where, "fuse_unk", false);
  out.byte_fallback = r.flag(m, where, "byte_fallback", false);
  out.ignore_merges = r.flag(m, where, "ignore_merges", false);
  const json& vocab = r.member(m, where, "vocab");
  if (!vocab.is_object()) r.refuse("model.vocab", "must be an object {token: id}", "", "");
  out.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    out.vocab.emplace_back(it.key(), checked_id(r, it.value(), "model.vocab[\"" + it.key() + "\"]"));
  const json& merges = r.member(m, where, "merges");
  if (!merges.is_array()) r.refuse("model.merges", "must be a list", "", "");
  out.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    const std::string at = "model.merges[" + std::to_string(i) + "]";
    if (e.is_string()) {  // the older "a b" form
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.refuse(at, "must be two tokens separated by one space, not " + e.dump(), "\"a b\" or [\"a\", \"b\"]", "");
      out.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      out.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      r.refuse(at, "must be \"a b\" or [\"a\", \"b\"], not " + e.dump(), "", "");
    }
  }
}

}  // namespace

bool TokenizerSpec::byte_level() const {
  for (const auto& s : pre_tokenizer)
    if (s.kind == PreTokenizerStep::Kind::byte_level) return true;
  return false;
}

uint32_t TokenizerSpec::id_limit() const {
  uint32_t limit = 0;
  for (const auto& [token, id] : model.vocab) limit = std::max(limit, id + 1);
  for (const auto& t : added_tokens) limit = std::max(limit, t.id + 1);
  return limit;
}

uint32_t TokenizerSpec::id_of(const std::string& token) const {
  for (const auto& t : added_tokens)
    if (t.content == token) return t.id;
  for (const auto& [text, id] : model.vocab)
    if (text == token) return id;
  return std::numeric_limits<uint32_t>::max();
}

TokenizerSpec parse_tokenizer_json(const std::string& json_text, const std::string& path) {
  const Reader r{path};
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    r.refuse("", std::string("is not valid JSON: ") + e.what(), "", "regenerate it with tokenizer.save(path)");
  }
  if (!doc.is_object()) r.refuse("", "is not a JSON object", "", "");
  TokenizerSpec spec;
  spec.path = path;
  r.require_off(doc, "", "truncation", "it would cut documents");
  if (doc.contains("added_tokens")) {
    const json& added = doc.at("added_tokens");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const json& t = added[i];
      for (const char* key : {"lstrip", "rstrip", "single_word"}) r.require_off(t, where, key, "whitespace around added tokens");
      AddedToken token{checked_id(r, r.member(t, where, "id"), where + ".id"), r.string_at(t, where, "content"),
                       r.flag(t, where, "special", false)};
      if (token.content.empty()) r.refuse(where + ".content", "is empty", "", "");
      // Non-special added tokens are matched in the normalized text; with a normalizer that differs.
      const bool normalized = r.flag(t, where, "normalized", !token.special);
      if (normalized && doc.contains("normalizer") && !doc.at("normalizer").is_null())
        r.refuse(where + ".normalized", "an added token matched after normalization is not implemented", "false",
                 kUnsupportedFix);
      spec.added_tokens.push_back(std::move(token));
    }
  }
  if (doc.contains("normalizer")) read_normalizer(r, doc.at("normalizer"), "normalizer", spec.normalizer);
  if (doc.contains("pre_tokenizer")) read_pre_tokenizer(r, doc.at("pre_tokenizer"), "pre_tokenizer", spec.pre_tokenizer);
  read_model(r, r.member(doc, "", "model"), spec.model);
  return spec;
}

TokenizerSpec read_tokenizer_json(const std::string& path) {
  const int fd = files::open_nofollow(path, O_RDONLY);
  if (fd < 0) {
    const int err = errno;
    Diagnostic d;
    d.key_path = "data.tokenizer";
    d.where = Location::in_file(path, 0, 0);
    d.message = files::open_error(path, err);
    d.hint = "point data.tokenizer at a tokenizer.json (the tokenizers library's file)";
    throw ConfigError(std::move(d));
  }
  struct stat st {};
  std::string text;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) <= kMaxTokenizerBytes;
  if (ok) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (ok && done < text.size()) {
      const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!ok) {
    Diagnostic d;
    d.key_path = "data.tokenizer";
    d.where = Location::in_file(path, 0, 0);
    d.message = "cannot read it: not a regular file of at most 1 GiB, or a read failed";
    throw ConfigError(std::move(d));
  }
  return parse_tokenizer_json(text, path);
}

}  // namespace accel::text

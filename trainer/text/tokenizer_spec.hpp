// TokenizerSpec: what accel implements of a Hugging Face tokenizer.json (the `tokenizers` library's
// file), read and checked once. Supported, as Llama 2/3, Mistral and GPT-2 ship them:
//   added_tokens     matched in the raw text before anything else (lstrip/rstrip/single_word false)
//   normalizer       null, NFC, NFD, NFKC, NFKD, Prepend, Replace (String pattern), Sequence of these
//   pre_tokenizer    null, ByteLevel, Split (Regex or String, behavior Isolated, not inverted),
//                    Metaspace, Sequence of these
//   model            BPE (vocab, merges as "a b" or [a, b], unk_token, fuse_unk, byte_fallback,
//                    ignore_merges; no dropout, continuing_subword_prefix or end_of_word_suffix)
//   truncation       null; post_processor and decoder are not used (accel adds bos/eos itself)
// Anything else is a ConfigError (exit 2) naming the JSON path, e.g. tokenizer.json: model.type.
// Invariant: a spec that parses encodes exactly as `tokenizers` does with add_special_tokens=False.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::text {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false;
};

struct NormalizerStep {
  enum class Kind { nfc, nfd, nfkc, nfkd, prepend, replace } kind = Kind::nfc;
  std::string text;         // prepend: the prefix; replace: the pattern
  std::string replacement;  // replace: what replaces it
};

struct PreTokenizerStep {
  enum class Kind { byte_level, split, metaspace } kind = Kind::split;
  // byte_level: GPT-2's regex when use_regex; split: the pattern (a regex, or a quoted literal).
  std::string pattern;
  bool use_regex = false;         // byte_level
  bool add_prefix_space = false;  // byte_level
  // metaspace
  std::string replacement;        // "▁"
  enum class Prepend { always, first, never } prepend = Prepend::always;
  bool split = true;
};

struct BpeSpec {
  std::vector<std::pair<std::string, uint32_t>> vocab;       // as written (byte-level strings undecoded)
  std::vector<std::pair<std::string, std::string>> merges;   // in rank order
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

struct TokenizerSpec {
  std::string path;
  std::vector<AddedToken> added_tokens;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  BpeSpec model;
  // The model's symbols are bytes (a ByteLevel pre-tokenizer maps them to printable characters).
  bool byte_level() const;
  // One more than the largest id in the vocabulary and the added tokens.
  uint32_t id_limit() const;
  uint32_t id_of(const std::string& added_or_vocab) const;  // UINT32_MAX when absent
};

// Parses `json_text` (read from `path`, used in messages). ConfigError naming the JSON path of the
// first unsupported or malformed entry.
TokenizerSpec parse_tokenizer_json(const std::string& json_text, const std::string& path);
// Reads and parses `path` (no symlinks followed; at most 1 GiB).
TokenizerSpec read_tokenizer_json(const std::string& path);

// GPT-2's pre-split pattern, which the ByteLevel pre-tokenizer applies when use_regex is true.
extern const char* const kGpt2Pattern;

}  // namespace accel::text

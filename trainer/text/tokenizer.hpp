// Tokenizer: a tokenizer.json applied as the tokenizers library applies it in
// `Tokenizer.encode(text, add_special_tokens=False)`:
//   1. added tokens are cut out of the raw text, leftmost-longest first, each one its own id;
//   2. each stretch between them is normalized (tokenizer_spec.hpp's steps, in order);
//   3. pre-tokenized: ByteLevel (optional prefix space, GPT-2's regex), Split (a regex, Isolated),
//      Metaspace (spaces to "▁", prepended per prepend_scheme -- "first" only to the stretch at the
//      start of the text --, split before each "▁" when split is true);
//   4. each piece through the BPE model (bpe_model.hpp).
// Not thread-safe (per-instance caches and scratch space); one per thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/text/bpe_model.hpp"
#include "trainer/text/regex_splitter.hpp"
#include "trainer/text/tokenizer_spec.hpp"

namespace accel::text {

class Tokenizer {
 public:
  // ConfigError (exit 2) naming the JSON path of anything unsupported or malformed.
  explicit Tokenizer(TokenizerSpec spec);
  static Tokenizer from_file(const std::string& path) { return Tokenizer(read_tokenizer_json(path)); }
  Tokenizer(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Appends the ids of `text` (valid UTF-8: callers check their input) to `out`.
  void encode(std::string_view text, std::vector<uint32_t>& out);
  std::vector<uint32_t> encode(std::string_view text) {
    std::vector<uint32_t> ids;
    encode(text, ids);
    return ids;
  }

  const TokenizerSpec& spec() const { return spec_; }

 private:
  void encode_stretch(std::string_view raw, bool at_text_start, std::vector<uint32_t>& out);
  // The added token starting at text[i] (longest first), or -1.
  int added_at(std::string_view text, size_t i) const;

  TokenizerSpec spec_;
  std::unique_ptr<BpeModel> model_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // one per pre-tokenizer step (null if none)
  std::vector<int> added_by_first_byte_[256];              // indices into spec_.added_tokens, longest first
  // Scratch space reused across stretches.
  std::string normalized_;
  std::deque<std::string> owned_;  // a deque: adding never moves the strings pieces view
};

}  // namespace accel::text

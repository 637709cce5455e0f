// RegexSplitter: a pre-tokenizer's regex split with tokenizers' "Isolated" behaviour: every match
// is a piece, and so is every non-empty stretch between matches. PCRE2 in UTF + UCP mode (\p{L},
// \p{N} and \s by Unicode properties, as the Oniguruma patterns of GPT-2 and Llama 3 mean them),
// JIT-compiled. Not thread-safe (it owns its match data); one per tokenizer instance.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace accel::text {

class RegexSplitter {
 public:
  // Throws std::invalid_argument with PCRE2's message and offset when `pattern` does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (valid UTF-8), in order, to `out`; they concatenate to `text`.
  void split(std::string_view text, std::vector<std::string_view>& out);

 private:
  void* code_ = nullptr;        // pcre2_code_8*
  void* match_data_ = nullptr;  // pcre2_match_data_8*
};

}  // namespace accel::text

// RegexSplitter: see regex_splitter.hpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "trainer/text/regex_splitter.hpp"

#include <pcre2.h>

#include <stdexcept>

#include "trainer/text/utf8.hpp"

namespace accel::text {

RegexSplitter::RegexSplitter(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                             &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument("regex does not compile at offset " + std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
  code_ = code;
  match_data_ = pcre2_match_data_create_from_pattern(code, nullptr);
}

RegexSplitter::~RegexSplitter() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(match_data_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, at = 0;
  while (at < text.size()) {
    // The text is valid UTF-8 (checked on input): skip PCRE2's own check on every call.
    const int rc = pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;  // the rest is one gap
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw std::runtime_error("pre-tokenizer regex failed at byte " + std::to_string(at) + " of a " +
                               std::to_string(text.size()) + "-byte stretch: " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match splits nothing; move on by one character
      at = begin + utf8_length(static_cast<uint8_t>(text[begin]));
      continue;
    }
    if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
    out.push_back(text.substr(begin, end - begin));
    gap_start = at = end;
  }
  if (gap_start < text.size()) out.push_back(text.substr(gap_start));
}

}  // namespace accel::text

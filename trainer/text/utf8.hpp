// UTF-8 helpers for the tokenizer: the length of a character from its lead byte, and validation
// (tokenizers only ever sees valid text: Python strings; accel checks its input files the same way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace accel::text {

// Bytes of the UTF-8 character starting with `lead` (1 for a continuation or invalid byte).
inline size_t utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Offset of the first byte that is not part of well-formed UTF-8 (no overlongs, surrogates or code
// points above U+10FFFF), or npos when all of `s` is valid.
size_t first_invalid_utf8(std::string_view s);

// Appends the UTF-8 encoding of `cp` (a valid scalar value) to `out`.
void append_utf8(uint32_t cp, std::string& out);

}  // namespace accel::text

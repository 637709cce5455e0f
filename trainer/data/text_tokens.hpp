// Byte-level text: token i of the stream is byte i of the file (vocabulary 256, no tokenizer).
// Invariant: the stream has exactly as many tokens as the file has bytes, each in [0, 256).
#pragma once

#include <string>

#include "trainer/data/token_store.hpp"

namespace accel::train {

constexpr int kTextVocabSize = 256;

// Reads `path` (an empty file is a DataError naming it).
TokenStore read_text_tokens(const std::string& path);

}  // namespace accel::train

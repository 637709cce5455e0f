// llm.c token files (the format of llm.c's dev/data scripts and of spec/training.md, section Data):
// a header of 256 little-endian int32 -- [0] magic 20240520, [1] version 1, [2] the number of tokens N,
// the rest zero -- followed by exactly N little-endian uint16 tokens (file size 1024 + 2N bytes).
// llm.c's llama-3 variant (magic 20240801, version 7) holds uint32 tokens (1024 + 4N bytes), for
// vocabularies above 65536 ids; the token cache of trainer/text writes it for those.
// Invariant: read_token_file returns only a file that matches this layout exactly and whose tokens are
// all below the given vocabulary; anything else is a DataError naming the file and the fix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/token_store.hpp"

namespace accel::train {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
constexpr int kTokenFileHeaderInts = 256;
constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);
// llm.c's llama-3 files (uint32 tokens).
constexpr int32_t kLlama3TokenFileMagic = 20240801;
constexpr int32_t kLlama3TokenFileVersion = 7;

// Maps `path` and validates it (header, size, tokens < vocab_size; vocab_size <= 0 skips that check).
TokenStore read_token_file(const std::string& path, int64_t vocab_size);

// Writes `tokens` as an llm.c token file, atomically (a temporary file in the same directory,
// renamed over `path`). Throws DataError on I/O failure or more than 2^31 - 1 tokens.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace accel::train

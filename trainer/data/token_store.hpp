// TokenStore: a read-only sequence of tokens, uint16 (GPT-2-sized vocabularies) or uint32 (larger,
// e.g. Llama 3's 128256), either owned (text, synthetic) or a view into a memory-mapped token file. Also the two whole-stream scans every source needs: the first token
// outside a vocabulary, and the content hash that identifies the data in checkpoints.
// Invariant: data()[0, size()) stays valid and unchanged for the store's lifetime (copies share it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/mapped_file.hpp"

namespace accel::train {

class TokenStore {
 public:
  TokenStore() = default;
  static TokenStore owned(std::vector<uint16_t> tokens);
  // `count` tokens of `token_bytes` (2 or 4) starting `byte_offset` bytes into `file` (which must
  // hold them, aligned to the token size).
  static TokenStore mapped(std::shared_ptr<const MappedFile> file, size_t byte_offset, int64_t count,
                           int token_bytes = 2);

  // The tokens of a uint16 store (nullptr for a uint32 one: use operator[]).
  const uint16_t* data() const { return data_; }
  int64_t size() const { return size_; }
  int token_bytes() const { return data32_ ? 4 : 2; }
  uint32_t operator[](int64_t i) const { return data32_ ? data32_[i] : data_[i]; }

  // Position of the first token >= vocab_size, or -1 when every token is below it.
  int64_t first_at_or_above(int64_t vocab_size) const;

  // FNV-1a 64 over the tokens' little-endian bytes (token_bytes() per token, low byte first): offset basis
  // 0xcbf29ce484222325, prime 0x100000001b3. Identifies the data in checkpoints.
  uint64_t fnv1a64() const;

 private:
  std::shared_ptr<const std::vector<uint16_t>> owned_;
  std::shared_ptr<const MappedFile> file_;
  const uint16_t* data_ = nullptr;
  const uint32_t* data32_ = nullptr;
  int64_t size_ = 0;
};

// Throws DataError naming `source` ("data file 'x.bin'") and the first position of a token >=
// vocab_size, with the largest token seen, when any token is outside the vocabulary.
void check_vocabulary(const TokenStore& tokens, int64_t vocab_size, const std::string& source);

// "0x" followed by 16 lower-case hex digits (JSON-safe: no 64-bit numbers in checkpoints).
std::string hex64(uint64_t value);

}  // namespace accel::train

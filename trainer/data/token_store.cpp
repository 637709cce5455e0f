// TokenStore: see token_store.hpp.
#include "trainer/data/token_store.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "trainer/data/data_error.hpp"

namespace accel::train {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian uint16; a big-endian host would need byte swaps");

TokenStore TokenStore::owned(std::vector<uint16_t> tokens) {
  TokenStore s;
  s.owned_ = std::make_shared<const std::vector<uint16_t>>(std::move(tokens));
  s.data_ = s.owned_->data();
  s.size_ = static_cast<int64_t>(s.owned_->size());
  return s;
}

TokenStore TokenStore::mapped(std::shared_ptr<const MappedFile> file, size_t byte_offset, int64_t count,
                              int token_bytes) {
  TokenStore s;
  if (token_bytes == 4) s.data32_ = reinterpret_cast<const uint32_t*>(file->bytes() + byte_offset);
  else s.data_ = reinterpret_cast<const uint16_t*>(file->bytes() + byte_offset);
  s.size_ = count;
  s.file_ = std::move(file);
  return s;
}

int64_t TokenStore::first_at_or_above(int64_t vocab_size) const {
  if (vocab_size > (data32_ ? int64_t{UINT32_MAX} : int64_t{65535})) return -1;  // every token fits
  const int64_t limit = vocab_size < 0 ? 0 : vocab_size;
  for (int64_t i = 0; i < size_; ++i)
    if ((*this)[i] >= limit) return i;
  return -1;
}

uint64_t TokenStore::fnv1a64() const {
  uint64_t h = 0xcbf29ce484222325ULL;
  constexpr uint64_t prime = 0x100000001b3ULL;
  const int bytes = token_bytes();
  for (int64_t i = 0; i < size_; ++i) {
    const uint32_t t = (*this)[i];
    for (int b = 0; b < bytes; ++b) h = (h ^ ((t >> (8 * b)) & 0xFFu)) * prime;
  }
  return h;
}

void check_vocabulary(const TokenStore& tokens, int64_t vocab_size, const std::string& source) {
  const int64_t pos = tokens.first_at_or_above(vocab_size);
  if (pos < 0) return;
  uint32_t largest = 0;
  for (int64_t i = 0; i < tokens.size(); ++i) largest = std::max(largest, tokens[i]);
  throw DataError(source + ": token " + std::to_string(tokens[pos]) + " at position " + std::to_string(pos) +
                  " is outside the model's vocabulary (model.vocab_size " + std::to_string(vocab_size) +
                  "; the largest token is " + std::to_string(largest) + "): set model.vocab_size to at least " +
                  std::to_string(int64_t{largest} + 1) + ", or tokenize the data for this model");
}

std::string hex64(uint64_t value) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace accel::train

// BpeModel: the BPE model of a tokenizer.json, applied to one pre-tokenized piece at a time with
// the tokenizers library's exact procedure (models/bpe: merge_word and Word::merge_all):
//  - The piece's units are its bytes (byte-level vocabularies, decoded once from GPT-2's alphabet)
//    or its UTF-8 characters. A unit outside the vocabulary becomes its bytes' <0xXX> tokens when
//    byte_fallback is on and all of them exist, else the unk token (consecutive ones fused into
//    one when fuse_unk; a pending unk is emitted before the next known unit), else nothing.
//  - Merges apply lowest rank first, ties to the leftmost position, from a priority queue whose
//    stale entries are skipped when the pair at their position no longer merges to their id.
//  - ignore_merges: a piece that is itself in the vocabulary is that one token.
// Pieces are memoised (a bounded cache), as words repeat.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainer/text/tokenizer_spec.hpp"

namespace accel::text {

class BpeModel {
 public:
  // Throws ConfigError naming model.merges[i] when a merge names a token outside the vocabulary.
  explicit BpeModel(const TokenizerSpec& spec);

  // Appends the ids of `piece` to `out`.
  void encode(std::string_view piece, std::vector<uint32_t>& out);

 private:
  struct Merge {
    uint32_t rank;
    uint32_t id;
  };
  void merge_word(std::string_view piece, std::vector<uint32_t>& out);
  int64_t unit_id(std::string_view unit) const;  // -1 when absent

  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int64_t unk_id_ = -1;
  std::unordered_map<std::string, uint32_t> vocab_;     // unit text (bytes when byte-level) -> id
  std::unordered_map<uint64_t, Merge> merges_;           // (left id << 32 | right id) -> rank, id
  int64_t byte_unit_[256];                               // byte-level: the id of each single byte
  int64_t fallback_[256];                                // <0xXX> ids (-1 absent)
  std::unordered_map<std::string, std::vector<uint32_t>> cache_;

  // Scratch space reused across pieces.
  struct Symbol {
    uint32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  std::vector<Symbol> symbols_;
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    uint32_t id;  // what the pair merged to when queued: a stale entry no longer matches it
  };
  std::vector<Candidate> heap_;  // a min-heap on (rank, pos)
};

}  // namespace accel::text

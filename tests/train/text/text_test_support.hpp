// A hand-written tokenizer.json for the text tests: a character-level BPE (no byte-level alphabet)
// small enough that every expected id can be worked out by hand.
//   vocab  <unk>0 <s>1 </s>2 a3 b4 c5 ' '6 ab7 aa8 abc9 ' a'10 <0x7A>11 (z's byte, for fallback)
//   merges a b (rank 0), a a (1), ab c (2), ' ' a (3)
#pragma once

#include <string>

namespace accel::test {

inline std::string tiny_tokenizer_json(const std::string& model_extra = "", const std::string& top_extra = "") {
  return R"({"version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
                   {"id": 1, "content": "<s>", "special": true, "normalized": false},
                   {"id": 2, "content": "</s>", "special": true, "normalized": false}],
  "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,)" + top_extra + R"(
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,)" +
         model_extra + R"(
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "c": 5, " ": 6, "ab": 7, "aa": 8, "abc": 9, " a": 10, "<0x7A>": 11},
    "merges": [["a", "b"], "a a", ["ab", "c"], [" ", "a"]]}})";
}

}  // namespace accel::test

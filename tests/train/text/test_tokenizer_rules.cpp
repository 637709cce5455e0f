// The tokenizer's rules on a hand-made vocabulary (text_test_support.hpp), every expectation worked
// out by hand from tokenizers' procedure (bpe_model.hpp): merge order, leftmost ties, added tokens,
// byte fallback and fused unknowns; and the refusals of unsupported tokenizer.json features, each
// naming its JSON path (exit 2 through ConfigError). Parity with tokenizers itself on generated text:
// tests/data/test_tokenizer_parity.py.
#include <catch2/catch.hpp>

#include "runtime/common/errors.hpp"
#include "tests/train/text/text_test_support.hpp"
#include "trainer/text/tokenizer.hpp"

using namespace accel;
using namespace accel::text;
using Ids = std::vector<uint32_t>;

namespace {

Tokenizer tiny(const std::string& model_extra = "", const std::string& top_extra = "") {
  return Tokenizer(parse_tokenizer_json(test::tiny_tokenizer_json(model_extra, top_extra), "tiny.json"));
}

// The diagnostic text of a ConfigError `json` raises, or "" when it parses.
std::string refusal(const std::string& json) {
  try {
    Tokenizer t(parse_tokenizer_json(json, "tok.json"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("merges apply lowest rank first, ties to the leftmost pair", "[text]") {
  Tokenizer t = tiny();
  CHECK(t.encode("ab") == Ids{7});
  CHECK(t.encode("abc") == Ids{9});       // a b (rank 0) then ab c (rank 2)
  CHECK(t.encode("aab") == Ids{3, 7});    // a b (rank 0) beats a a (rank 1)
  CHECK(t.encode("aaa") == Ids{8, 3});    // the leftmost a a merges first
  CHECK(t.encode("aaaa") == Ids{8, 8});
  CHECK(t.encode(" ab") == Ids{6, 7});    // a b (rank 0) before ' ' a (rank 3): ' ' stays alone
  CHECK(t.encode(" ac") == Ids{10, 5});
  CHECK(t.encode("").empty());
}

TEST_CASE("added tokens are cut out first; unknown characters fall back to bytes or fuse into one unk", "[text]") {
  Tokenizer t = tiny();
  CHECK(t.encode("a<s>b</s>") == Ids{3, 1, 4, 2});
  CHECK(t.encode("<s><s>") == Ids{1, 1});
  CHECK(t.encode("z") == Ids{11});           // no 'z' in the vocabulary: its byte <0x7A>
  CHECK(t.encode("xy") == Ids{0});           // no byte tokens for x, y: one fused unk
  CHECK(t.encode("xazy") == Ids{0, 3, 11, 0});
  CHECK(t.encode("xzy") == Ids{11, 0});      // as tokenizers: the pending unk waits past the fallback byte
  Tokenizer unfused = tiny("\"ignore_merges\": false,", "");
  CHECK(unfused.encode("ab") == Ids{7});
}

TEST_CASE("ignore_merges takes a piece that is itself in the vocabulary whole", "[text]") {
  // "aab" is not in the vocabulary; "abc" is, and would also be reached by merges.
  Tokenizer t = tiny("\"ignore_merges\": true,");
  CHECK(t.encode("abc") == Ids{9});
  CHECK(t.encode("aab") == Ids{3, 7});
}

TEST_CASE("unsupported tokenizer.json features are refused by JSON path", "[text]") {
  using Catch::Matchers::Contains;
  const std::string base = test::tiny_tokenizer_json();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK_THAT(refusal(with("\"type\": \"BPE\"", "\"type\": \"Unigram\"")),
             Contains("tok.json: error: model.type") && Contains("Unigram") && Contains("allowed: BPE"));
  CHECK_THAT(refusal(with("\"normalizer\": null", "\"normalizer\": {\"type\": \"Lowercase\"}")),
             Contains("normalizer.type") && Contains("Lowercase"));
  CHECK_THAT(refusal(with("\"pre_tokenizer\": null",
                          "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\", "
                          "\"replacement\": \"x\"}, {\"type\": \"Whitespace\"}]}")),
             Contains("pre_tokenizer.pretokenizers[1].type") && Contains("Whitespace"));
  CHECK_THAT(refusal(with("\"pre_tokenizer\": null",
                          "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
                          "\"behavior\": \"Removed\", \"invert\": false}")),
             Contains("pre_tokenizer.behavior") && Contains("Isolated"));
  CHECK_THAT(refusal(with("\"dropout\": null", "\"dropout\": 0.1")), Contains("model.dropout"));
  CHECK_THAT(refusal(with("\"truncation\": null", "\"truncation\": {\"max_length\": 8}")), Contains("truncation"));
  CHECK_THAT(refusal(with("\"lstrip\": false", "\"lstrip\": true")), Contains("added_tokens[0].lstrip"));
  CHECK_THAT(refusal(with("[\"ab\", \"c\"]", "[\"ab\", \"q\"]")), Contains("model.merges[2]"));
  CHECK_THAT(refusal(with("\"pre_tokenizer\": null",
                          "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
                          "\"behavior\": \"Isolated\", \"invert\": false}")),
             Contains("pattern") && Contains("PCRE2"));
  CHECK_THAT(refusal("{not json"), Contains("not valid JSON"));
  CHECK(refusal(base).empty());
}

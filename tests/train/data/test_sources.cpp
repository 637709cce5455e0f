// Token sources: byte-level text, and the synthetic stream (deterministic, the documented size,
// learnable, and reproduced exactly by the Python reference).
#include "tests/support/catch_with_torch.hpp"

#include <cmath>
#include <map>

#include "tests/support/temp_dir.hpp"
#include "tests/train/data/data_test_support.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/synthetic_tokens.hpp"
#include "trainer/data/token_file.hpp"

using namespace accel;
using namespace accel::train;
using Catch::Matchers::Contains;

TEST_CASE("text: each byte of the file is one token", "[data][text]") {
  test::TempDir dir;
  const std::string text = "hello, w\xC3\xA9rld\n\x01\xFF";  // UTF-8 bytes map one by one, 0xFF -> 255
  const std::string path = dir.write("corpus.txt", text);
  auto ds = make_dataset(test::data_section(config::DataKind::text, path), 256, 4, 0);
  REQUIRE(ds->num_tokens() == static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) CHECK(ds->tokens()[i] == static_cast<uint8_t>(text[i]));
  CHECK(ds->tokens()[text.size() - 1] == 255);
  const Batch b = ds->train_batch(0, 0, 0, 1, 2, 1);
  auto row = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong); };
  CHECK(b.x[0].equal(row({'h', 'e', 'l', 'l'})));
  CHECK(b.y[0].equal(row({'e', 'l', 'l', 'o'})));
  CHECK(b.x[1].equal(row({'o', ',', ' ', 'w'})));
  CHECK_THAT(ds->describe(), Contains("text file '" + path + "'"));

  CHECK_THROWS_WITH(make_dataset(test::data_section(config::DataKind::text, dir.write("empty.txt", "")), 256, 4, 0),
                    Contains("empty.txt") && Contains("empty"));
  CHECK_THROWS_WITH(make_dataset(test::data_section(config::DataKind::text, path), 190, 4, 0),
                    Contains(path) && Contains("token 195 at position 8"));
  CHECK_THROWS_WITH(make_dataset(test::data_section(config::DataKind::text, dir.write("short.txt", "abcd")), 256, 4, 0),
                    Contains("short.txt") && Contains("not one whole window"));
}

TEST_CASE("synthetic: deterministic, seeded, of the documented size and vocabulary", "[data][synthetic]") {
  const auto a = synthetic_tokens(1337, 256);
  REQUIRE(a.size() == size_t{1} << 20);
  CHECK(kSyntheticTokens == 1048576);
  CHECK(synthetic_tokens(1337, 256) == a);
  CHECK(synthetic_tokens(1338, 256) != a);
  CHECK(*std::max_element(a.begin(), a.end()) == 255);  // uses the whole vocabulary
  // A shorter stream is a prefix of the longer one.
  const auto prefix = synthetic_tokens(1337, 256, 1000);
  CHECK(std::equal(prefix.begin(), prefix.end(), a.begin()));
  // Pinned values: a change to the generator is a change to the data format (and the Python reference).
  CHECK(std::vector<uint16_t>(a.begin(), a.begin() + 10) ==
        std::vector<uint16_t>{81, 37, 85, 213, 92, 43, 93, 113, 137, 42});

  const auto big = synthetic_tokens(7, 50257, 4096);
  CHECK(*std::max_element(big.begin(), big.end()) < 50257);
  CHECK_THROWS_WITH(synthetic_tokens(7, 70000), Contains("synthetic data") && Contains("70000"));

  auto ds = make_dataset(test::data_section(config::DataKind::synthetic), 256, 128, 1337);
  CHECK(ds->num_tokens() == kSyntheticTokens);
  CHECK(ds->num_windows() == (kSyntheticTokens - 1) / 128);
  CHECK(std::equal(a.begin(), a.end(), ds->tokens().data()));
  CHECK_THAT(ds->describe(), Contains("synthetic data (seed 1337)") && Contains("1048576 tokens"));
}

TEST_CASE("synthetic: the stream is learnable (bigram entropy far below ln V)", "[data][synthetic]") {
  for (const int V : {64, 256}) {
    const auto t = synthetic_tokens(1337, V);
    std::vector<double> pair(static_cast<size_t>(V) * V, 0.0), prev(V, 0.0), uni(V, 0.0);
    for (size_t i = 1; i < t.size(); ++i) {
      pair[t[i - 1] * V + t[i]] += 1;
      prev[t[i - 1]] += 1;
    }
    for (uint16_t x : t) uni[x] += 1;
    const double n = static_cast<double>(t.size() - 1);
    double conditional = 0, unigram = 0;
    for (int a = 0; a < V; ++a)
      for (int b = 0; b < V; ++b)
        if (const double c = pair[a * V + b]; c > 0) conditional -= c / n * std::log(c / prev[a]);
    for (double c : uni)
      if (c > 0) unigram -= c / t.size() * std::log(c / t.size());
    INFO("V " << V << ": H(next | prev) " << conditional << " nats, H(unigram) " << unigram << ", ln V "
              << std::log(V));
    // Theory: 7/8 of tokens follow one of 4 successors: H ~ 0.875 ln 4 + H(mixture) ~ 2.2 nats at V 256.
    CHECK(conditional < 0.5 * std::log(V));
    CHECK(conditional < unigram - 1.0);  // what a model gains from the previous token
    CHECK(unigram > 0.9 * std::log(V));  // but no single token dominates
  }
}

TEST_CASE("synthetic: the Python reference reproduces the stream and the shuffle exactly", "[data][synthetic][python]") {
  test::TempDir dir;
  const std::string synth = (dir.path() / "synthetic.bin").string();
  write_token_file(synth, synthetic_tokens(1337, 256));
  auto r = test::run_reference("synthetic " + test::shell_quote(synth) + " 1337 256");
  if (r.exit_code == -1) {
    WARN("skipped: " << test::kPython << " is missing");
    return;
  }
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("1048576 tokens match"));

  // A large vocabulary and a large seed (every 64-bit operation wraps the same way).
  write_token_file(synth, synthetic_tokens(0xFFFFFFFFFFFFFFF0ULL, 50257, 20000));
  r = test::run_reference("synthetic " + test::shell_quote(synth) + " 18446744073709551600 50257");
  INFO(r.output);
  CHECK(r.exit_code == 0);

  const std::string perm_path = (dir.path() / "perm.bin").string();
  const auto perm = epoch_permutation(42, 3, 1000);
  write_token_file(perm_path, std::vector<uint16_t>(perm.begin(), perm.end()));
  r = test::run_reference("permutation " + test::shell_quote(perm_path) + " 42 3");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("1000 tokens match"));
}

ACCEL_ASSERT_CHECK_IS_CATCH();

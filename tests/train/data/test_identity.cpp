// Checkpoint identity: state() records the data (kind, path, token count, content hash, order, seed,
// val_fraction, seq_len); check_state() refuses a resume whose batches would differ, and says why.
#include "tests/support/catch_with_torch.hpp"

#include "tests/support/temp_dir.hpp"
#include "tests/train/data/data_test_support.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/token_file.hpp"

using namespace accel;
using namespace accel::train;
using Catch::Matchers::Contains;

namespace {

std::unique_ptr<Dataset> from_file(const std::string& path, int seq_len = 8,
                                   config::DataOrder order = config::DataOrder::sequential, uint64_t seed = 1,
                                   double val_fraction = 0.1) {
  return make_dataset(test::data_section(config::DataKind::tokens, path, order, val_fraction), 1000, seq_len, seed);
}

// check_state through a JSON text round trip, as a checkpoint stores it; "" when accepted.
std::string resume_error(const Dataset& saved, const Dataset& now) {
  try {
    now.check_state(nlohmann::json::parse(saved.state().dump()));
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("state: records the data identity", "[data][identity]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "a.bin").string();
  write_token_file(path, test::counting_tokens(801));
  const auto ds = from_file(path, 8, config::DataOrder::shuffled, 99, 0.25);
  const auto s = ds->state();
  CHECK(s.at("kind") == "tokens");
  CHECK(s.at("path") == path);
  CHECK(s.at("num_tokens") == 801);
  CHECK(s.at("content_fnv1a64") == hex64(ds->tokens().fnv1a64()));
  CHECK(s.at("order") == "shuffled");
  CHECK(s.at("seed") == 99);
  CHECK(s.at("val_fraction") == 0.25);
  CHECK(s.at("seq_len") == 8);
  CHECK_THAT(ds->describe(), Contains(path) && Contains("801 tokens") && Contains("100 windows") &&
                                 Contains("75 train + 25 validation") && Contains("order shuffled (seed 99)"));

  // FNV-1a 64 over little-endian token bytes: the empty stream is the offset basis; pinned values.
  CHECK(TokenStore::owned({}).fnv1a64() == 0xcbf29ce484222325ULL);
  CHECK(hex64(TokenStore::owned({0x6261}).fnv1a64()) == "0x089c4407b545986a");  // FNV-1a 64 of "ab"
}

TEST_CASE("check_state: accepts the same data, refuses different data", "[data][identity]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "a.bin").string();
  auto tokens = test::counting_tokens(801);
  write_token_file(path, tokens);
  const auto saved = from_file(path);

  CHECK(resume_error(*saved, *from_file(path)).empty());
  // The same content elsewhere is the same data.
  const std::string copy = (dir.path() / "copy.bin").string();
  write_token_file(copy, tokens);
  CHECK(resume_error(*saved, *from_file(copy)).empty());
  // The seed does not change sequential batches over a file.
  CHECK(resume_error(*saved, *from_file(path, 8, config::DataOrder::sequential, 2)).empty());

  SECTION("a changed file") {
    tokens[400] = 999;
    write_token_file(path, tokens);
    const auto e = resume_error(*saved, *from_file(path));
    CHECK_THAT(e, Contains("cannot resume") && Contains("the data was tokens file '" + path + "'") &&
                      Contains(hex64(saved->tokens().fnv1a64())) && Contains("fresh training.output_dir"));
  }
  SECTION("a longer file") {
    tokens.push_back(1);
    write_token_file(path, tokens);
    CHECK_THAT(resume_error(*saved, *from_file(path)), Contains("801 tokens") && Contains("802 tokens"));
  }
  SECTION("another seq_len, order or val_fraction") {
    CHECK_THAT(resume_error(*saved, *from_file(path, 16)), Contains("training.seq_len was 8, now 16"));
    CHECK_THAT(resume_error(*saved, *from_file(path, 8, config::DataOrder::shuffled)),
               Contains("data.order was sequential, now shuffled"));
    CHECK_THAT(resume_error(*saved, *from_file(path, 8, config::DataOrder::sequential, 1, 0.2)),
               Contains("data.val_fraction was 0.1, now 0.2"));
  }
  SECTION("another shuffle seed") {
    const auto shuffled = from_file(path, 8, config::DataOrder::shuffled, 5);
    CHECK(resume_error(*shuffled, *from_file(path, 8, config::DataOrder::shuffled, 5)).empty());
    CHECK_THAT(resume_error(*shuffled, *from_file(path, 8, config::DataOrder::shuffled, 6)),
               Contains("training.seed (it sets the shuffled order) was 5, now 6"));
  }
  SECTION("another kind, or another synthetic seed") {
    const std::string text = dir.write("a.txt", std::string(801, 'a'));
    const auto as_text = make_dataset(test::data_section(config::DataKind::text, text, config::DataOrder::sequential,
                                                         0.1), 1000, 8, 1);
    CHECK_THAT(resume_error(*saved, *as_text), Contains("data.kind was tokens, now text"));
    const auto s1 = make_dataset(test::data_section(config::DataKind::synthetic), 256, 8, 1);
    const auto s2 = make_dataset(test::data_section(config::DataKind::synthetic), 256, 8, 2);
    CHECK(resume_error(*s1, *s1).empty());
    CHECK_THAT(resume_error(*s1, *s2), Contains("the data was synthetic data"));
  }
  SECTION("a malformed state") {
    auto s = saved->state();
    s.erase("content_fnv1a64");
    CHECK_THROWS_WITH(saved->check_state(s), Contains("missing field 'content_fnv1a64'"));
    s = saved->state();
    s["num_tokens"] = "many";
    CHECK_THROWS_WITH(saved->check_state(s), Contains("malformed"));
  }
}

ACCEL_ASSERT_CHECK_IS_CATCH();

// llm.c token files: round trip, every corruption error names the file, the vocabulary check names
// the first offending position, and Python (numpy, read as llm.c does) agrees with the writer.
#include "tests/support/catch_with_torch.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.hpp"
#include "tests/train/data/data_test_support.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/data/token_file.hpp"

using namespace accel;
using namespace accel::train;
using Catch::Matchers::Contains;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void patch_int32(const std::string& path, int index, int32_t value) {
  std::string bytes = read_bytes(path);
  std::memcpy(bytes.data() + 4 * index, &value, 4);  // the host is little-endian (token_store.cpp)
  write_bytes(path, bytes);
}

// The error message read_token_file throws for `path`, or "" when it succeeds.
std::string read_error(const std::string& path, int64_t vocab = 0) {
  try {
    read_token_file(path, vocab);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("token file: write then read returns the same tokens and the llm.c layout", "[data][token_file]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "round.bin").string();
  const std::vector<uint16_t> tokens = {0, 1, 2, 65535, 50256, 7, 7, 300};
  write_token_file(path, tokens);

  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == static_cast<int32_t>(tokens.size()));
  for (int i = 3; i < 256; ++i) CHECK(header[i] == 0);
  CHECK(static_cast<uint8_t>(bytes[1024 + 2 * 3]) == 0xFF);      // 65535, little-endian
  CHECK(static_cast<uint8_t>(bytes[1024 + 2 * 7]) == (300 & 0xFF));
  CHECK(static_cast<uint8_t>(bytes[1024 + 2 * 7 + 1]) == (300 >> 8));

  const TokenStore read = read_token_file(path, 65536);
  REQUIRE(read.size() == static_cast<int64_t>(tokens.size()));
  CHECK(std::vector<uint16_t>(read.data(), read.data() + read.size()) == tokens);

  // Atomic write: no temporary file is left beside it, and rewriting replaces the content.
  write_token_file(path, {5, 6});
  CHECK(read_token_file(path, 0).size() == 2);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("token file: llm.c's llama-3 variant holds uint32 tokens", "[data][token_file]") {
  test::TempDir dir;
  const std::vector<uint32_t> tokens = {0, 65535, 65536, 128255, 7, 70000, 1, 2, 3};
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = 7;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  const std::string path = dir.write("llama3.bin", bytes);
  const TokenStore read = read_token_file(path, 128256);
  REQUIRE(read.size() == static_cast<int64_t>(tokens.size()));
  CHECK(read.token_bytes() == 4);
  for (size_t i = 0; i < tokens.size(); ++i) CHECK(read[static_cast<int64_t>(i)] == tokens[i]);
  CHECK_THAT(read_error(path, 100000), Contains("token 128255 at position 3"));
  // FNV-1a over 4 little-endian bytes per token: {0x6261} as uint32 hashes the bytes "ab\0\0".
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : {'a', 'b', '\0', '\0'}) h = (h ^ c) * 0x100000001b3ULL;
  header[2] = 1;
  const uint32_t ab = 0x6261;
  std::string one(reinterpret_cast<const char*>(header.data()), 1024);
  one.append(reinterpret_cast<const char*>(&ab), 4);
  CHECK(read_token_file(dir.write("one.bin", one), 0).fnv1a64() == h);
  // Batches carry the wide values.
  config::DataSection section;
  section.kind = config::DataKind::tokens;
  section.val_fraction = 0;
  const Dataset ds(read, section, 4, 0);
  const Batch b = ds.windows({0, 1});
  CHECK(b.x[0][2].item<int64_t>() == 65536);
  CHECK(b.y[0][3].item<int64_t>() == 7);
  CHECK(b.x[1][1].item<int64_t>() == 70000);
  patch_int32(path, 1, 1);
  CHECK_THAT(read_error(path), Contains("version 1") && Contains("expected 7"));
}

TEST_CASE("token file: each corruption is an error naming the file", "[data][token_file]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "bad.bin").string();
  write_token_file(path, test::counting_tokens(100));
  REQUIRE(read_error(path).empty());

  SECTION("bad magic") {
    patch_int32(path, 0, 12345);
    const auto e = read_error(path);
    CHECK_THAT(e, Contains(path) && Contains("bad magic number 12345") && Contains("20240520"));
  }
  SECTION("llama-3 magic is named") {
    patch_int32(path, 0, 20240801);
    CHECK_THAT(read_error(path), Contains(path) && Contains("llama-3"));
  }
  SECTION("bad version") {
    patch_int32(path, 1, 2);
    CHECK_THAT(read_error(path), Contains(path) && Contains("unsupported token file version 2"));
  }
  SECTION("truncated data") {
    std::filesystem::resize_file(path, 1024 + 2 * 100 - 3);
    CHECK_THAT(read_error(path), Contains(path) && Contains("truncated") && Contains("declares 100 tokens"));
  }
  SECTION("truncated header") {
    std::filesystem::resize_file(path, 1000);
    CHECK_THAT(read_error(path), Contains(path) && Contains("too short"));
  }
  SECTION("empty file") {
    std::filesystem::resize_file(path, 0);
    CHECK_THAT(read_error(path), Contains(path) && Contains("too short"));
  }
  SECTION("count mismatch: more data than the header declares") {
    patch_int32(path, 2, 90);
    CHECK_THAT(read_error(path), Contains(path) && Contains("count mismatch") && Contains("declares 90 tokens"));
  }
  SECTION("count mismatch: an odd trailing byte") {
    write_bytes(path, read_bytes(path) + "x");
    CHECK_THAT(read_error(path), Contains(path) && Contains("count mismatch"));
  }
  SECTION("zero or negative token count") {
    patch_int32(path, 2, 0);
    CHECK_THAT(read_error(path), Contains(path) && Contains("declares 0 tokens"));
    patch_int32(path, 2, -5);
    CHECK_THAT(read_error(path), Contains(path) && Contains("declares -5 tokens"));
  }
  SECTION("missing file") {
    const std::string missing = (dir.path() / "missing.bin").string();
    CHECK_THAT(read_error(missing), Contains(missing) && Contains("cannot open"));
  }
  SECTION("a directory") {
    CHECK_THAT(read_error(dir.path().string()), Contains(dir.path().string()) && Contains("not a regular file"));
  }
}

TEST_CASE("token file: tokens at or above the vocabulary name the first position", "[data][token_file]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "vocab.bin").string();
  write_token_file(path, {1, 2, 3, 64, 9, 70, 64});
  CHECK(read_error(path, 71).empty());
  const auto e = read_error(path, 64);
  CHECK_THAT(e, Contains(path) && Contains("token 64 at position 3") && Contains("vocab_size 64") &&
                    Contains("at least 71"));
  // make_dataset applies the model's vocabulary to token files.
  CHECK_THROWS_WITH(make_dataset(test::data_section(config::DataKind::tokens, path), 50, 2, 0),
                    Contains("token 64 at position 3"));
}

TEST_CASE("token file: Python reads what write_token_file wrote, as llm.c does", "[data][token_file][python]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "py.bin").string();
  std::vector<uint16_t> tokens = {50256, 0, 1, 65535, 42};
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>((i * 7919) % 50257));
  write_token_file(path, tokens);
  std::string text;
  for (uint16_t t : tokens) text += std::to_string(t) + " ";
  const std::string expected = dir.write("expected.txt", text);

  const auto r = test::run_reference("token-file " + test::shell_quote(path) + " " + test::shell_quote(expected));
  if (r.exit_code == -1) {
    WARN("skipped: " << test::kPython << " is missing");
    return;
  }
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("1005 tokens match"));

  // And Python notices a corrupted token.
  std::string bytes = read_bytes(path);
  bytes[1024 + 2 * 500] ^= 1;
  write_bytes(path, bytes);
  CHECK(test::run_reference("token-file " + test::shell_quote(path) + " " + test::shell_quote(expected)).exit_code ==
        1);
}

ACCEL_ASSERT_CHECK_IS_CATCH();

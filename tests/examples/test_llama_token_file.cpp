// examples/llama's token file reader: a file that is missing, short or of another format is named
// as such, with how to write it when it is missing (the first run of examples/README.md).
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <vector>

#include "support/temp_dir.hpp"
#include "token_file.hpp"

using accel::test::TempDir;

namespace {

// An llm.c token file with the given header fields, followed by `tokens`.
std::string write_token_file(const TempDir& dir, const std::string& name, int32_t magic, int32_t version,
                             int32_t count, const std::vector<uint16_t>& tokens) {
  auto path = (dir.path() / name).string();
  int32_t header[256] = {magic, version, count};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(uint16_t)));
  return path;
}

std::string error_of(const std::string& path) {
  try {
    read_llm_c_tokens(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("read " << path << " without an error");
  return {};
}

}  // namespace

TEST_CASE("a missing token file says it is missing and how to write it") {
  TempDir dir;
  auto path = (dir.path() / "runs/llama/tokens.bin").string();
  auto message = error_of(path);
  CHECK_THAT(message, Catch::StartsWith(path + ": no such file"));
  CHECK_THAT(message, Catch::Contains("examples/llama/make_tokens.py " + path + " TEXT_FILE..."));
  CHECK_THAT(message, !Catch::Contains("not an llm.c token file"));
}

TEST_CASE("a directory, a short file and a foreign file are each named for what they are") {
  TempDir dir;
  CHECK_THAT(error_of(dir.path().string()), Catch::Contains("a directory"));
  auto short_file = dir.write("short.bin", "0123456789");
  CHECK(error_of(short_file) == short_file + ": 10 bytes, too short for an llm.c token file (its header alone is "
                                             "1024 bytes)");
  auto llama3 = write_token_file(dir, "llama3.bin", 20240801, 7, 1, {1});
  CHECK(error_of(llama3) == llama3 + ": not an llm.c token file (magic 20240801, version 7; expected magic "
                                     "20240520, version 1)");
  CHECK_THAT(error_of(write_token_file(dir, "none.bin", 20240520, 1, -5, {})),
             Catch::Contains("the header declares -5 tokens"));
  CHECK_THAT(error_of(write_token_file(dir, "cut.bin", 20240520, 1, 4, {1, 2})),
             Catch::Contains("shorter than its header's 4 tokens"));
}

TEST_CASE("a token file reads back the tokens written") {
  TempDir dir;
  const std::vector<uint16_t> tokens = {72, 105, 0, 255, 65535};
  CHECK(read_llm_c_tokens(write_token_file(dir, "ok.bin", 20240520, 1, 5, tokens)) == tokens);
}

// The token cache (trainer/text/token_cache.hpp): its stream ([bos] ids [eos] per document), built
// once when several processes race for it (an exclusive lock, a staged file renamed into place) and
// found by every later call; bos/eos resolution; malformed documents named by file:line:col.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/common/errors.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/train/text/text_test_support.hpp"
#include "trainer/data/data_error.hpp"
#include "trainer/text/token_cache.hpp"

using namespace accel;
using namespace accel::text;
using Catch::Matchers::Contains;

namespace {

std::vector<uint16_t> read_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() >= 1024);
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  std::vector<uint16_t> tokens((bytes.size() - 1024) / 2);
  std::memcpy(tokens.data(), bytes.data() + 1024, tokens.size() * 2);
  CHECK(header[2] == static_cast<int32_t>(tokens.size()));
  return tokens;
}

TokenCacheRequest request_in(const test::TempDir& dir, const std::string& data, DocumentFormat format) {
  TokenCacheRequest r;
  r.data_path = data;
  r.format = format;
  r.tokenizer_path = dir.write("tok/tokenizer.json", test::tiny_tokenizer_json());
  r.cache_dir = (dir.path() / "cache").string();
  return r;
}

// The header (magic, version, count) and the tokens of a cache file of either width.
std::pair<std::vector<int32_t>, std::vector<uint32_t>> read_any(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() >= 1024);
  std::vector<int32_t> header(3);
  std::memcpy(header.data(), bytes.data(), 12);
  const size_t width = header[0] == 20240801 ? 4 : 2;
  std::vector<uint32_t> tokens((bytes.size() - 1024) / width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t t = 0;
    std::memcpy(&t, bytes.data() + 1024 + i * width, width);
    tokens[i] = t;
  }
  return {header, tokens};
}

}  // namespace

TEST_CASE("a tokenizer with ids above 65535 gets llm.c's uint32 (llama-3) token file", "[text]") {
  test::TempDir dir;
  TokenCacheRequest r = request_in(dir, dir.write("d.txt", "a<big>\nab\n"), DocumentFormat::text);
  std::string json = test::tiny_tokenizer_json();
  const std::string last = R"({"id": 2, "content": "</s>", "special": true, "normalized": false}])";
  REQUIRE(json.find(last) != std::string::npos);
  json.replace(json.find(last), last.size(),
               R"({"id": 2, "content": "</s>", "special": true, "normalized": false}, {"id": 70000, "content": "<big>", "special": true}])");
  r.tokenizer_path = dir.write("wide/tokenizer.json", json);
  const TokenCache cache = ensure_token_cache(r);
  CHECK(cache.id_limit == 70001);
  const auto [header, tokens] = read_any(cache.path);
  CHECK(header == std::vector<int32_t>{20240801, 7, 7});
  CHECK(tokens == std::vector<uint32_t>{1, 3, 70000, 2, 1, 7, 2});
  CHECK_FALSE(ensure_token_cache(r).built);  // found: its header and size check out
}

TEST_CASE("the cached stream is [bos] ids [eos] per document, keyed by data, tokenizer and settings", "[text]") {
  test::TempDir dir;
  const std::string data = dir.write("docs.jsonl", "{\"text\": \"ab\"}\n\n{\"text\": \"\", \"n\": 1}\n{\"text\": \"aaa z\"}\n");
  TokenCacheRequest r = request_in(dir, data, DocumentFormat::jsonl);
  const TokenCache first = ensure_token_cache(r);
  CHECK(first.built);
  CHECK(first.documents == 2);  // the empty one is skipped
  // auto: no tokenizer_config.json, so the well-known added tokens <s> and </s>.
  CHECK(read_tokens(first.path) == std::vector<uint16_t>{1, 7, 2, 1, 8, 3, 6, 11, 2});
  const TokenCache again = ensure_token_cache(r);
  CHECK_FALSE(again.built);
  CHECK(again.path == first.path);
  CHECK(again.tokens == 9);

  r.bos = "none";  // other settings, another file
  const TokenCache no_bos = ensure_token_cache(r);
  CHECK(no_bos.built);
  CHECK(no_bos.path != first.path);
  CHECK(read_tokens(no_bos.path) == std::vector<uint16_t>{7, 2, 8, 3, 6, 11, 2});

  // tokenizer_config.json beside tokenizer.json decides auto; the same token for both: eos only.
  r.bos = "auto";
  dir.write("tok/tokenizer_config.json", R"({"bos_token": {"content": "</s>"}, "eos_token": "</s>"})");
  CHECK(read_tokens(ensure_token_cache(r).path) == std::vector<uint16_t>{7, 2, 8, 3, 6, 11, 2});
  r.eos = "<missing>";
  CHECK_THROWS_AS(ensure_token_cache(r), ConfigError);

  const std::string text = dir.write("lines.txt", "ab\r\n\nabc\n");
  TokenCacheRequest t = request_in(dir, text, DocumentFormat::text);
  t.bos = "none";
  CHECK(read_tokens(ensure_token_cache(t).path) == std::vector<uint16_t>{7, 2, 9, 2});
}

TEST_CASE("malformed documents are named by file:line:col", "[text]") {
  test::TempDir dir;
  auto fails_with = [&](const std::string& name, const std::string& content, DocumentFormat format) {
    const TokenCacheRequest r = request_in(dir, dir.write(name, content), format);
    try {
      ensure_token_cache(r);
    } catch (const train::DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(fails_with("a.jsonl", "{\"text\": \"ab\"}\n{\"txt\": \"ab\"}\n", DocumentFormat::jsonl),
             Contains("a.jsonl:2:1") && Contains("no field 'text'"));
  CHECK_THAT(fails_with("b.jsonl", "{\"text\": 5}\n", DocumentFormat::jsonl), Contains("b.jsonl:1:1") && Contains("number"));
  CHECK_THAT(fails_with("c.jsonl", "{\"text\": \"ab\"\n", DocumentFormat::jsonl), Contains("c.jsonl:1:") && Contains("not a JSON"));
  CHECK_THAT(fails_with("d.txt", "ab\nab\xFF" "c\n", DocumentFormat::text), Contains("d.txt:2:3") && Contains("invalid UTF-8"));
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "cache"))  // no half-built file left behind
    CHECK(e.path().extension() == ".lock");
}

TEST_CASE("processes racing for one cache: exactly one builds it, every one gets the same file", "[text]") {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 200000; ++i) text += (i % 7 ? "abc aab " : "z ab\n");  // ~1.6 MB: tokenizing takes a while
  const TokenCacheRequest r = request_in(dir, dir.write("big.txt", text), DocumentFormat::text);
  constexpr int kProcesses = 4;
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      (void)!::read(go[0], &c, 1);  // all start together, at the parent's close
      int code = 1;
      try {
        code = ensure_token_cache(r).built ? 10 : 11;
      } catch (...) {
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  int built = 0, found = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    built += WEXITSTATUS(status) == 10;
    found += WEXITSTATUS(status) == 11;
  }
  CHECK(built == 1);
  CHECK(found == kProcesses - 1);
  const TokenCache later = ensure_token_cache(r);
  CHECK_FALSE(later.built);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "cache")) {
    const std::string name = e.path().filename().string();
    CHECK(name.find(".tmp.") == std::string::npos);  // no staged file left
    files += name.size() > 4 && name.substr(name.size() - 4) == ".bin";
  }
  CHECK(files == 1);
  CHECK(later.tokens == static_cast<int64_t>(read_tokens(later.path).size()));
}

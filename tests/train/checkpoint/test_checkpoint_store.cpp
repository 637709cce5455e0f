// The checkpoint store on real temporary directories: commit and `latest`, crash leftovers, and
// every kind of damage verification must report by file name. Hashes are checked against an
// independent FNV-1a 64 written here and published reference values.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using namespace accel::checkpoint;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Independent of the library: byte at a time over an in-memory string.
uint64_t reference_fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A committed checkpoint with two files, as the trainer would write it.
std::string make_checkpoint(const std::string& root, int64_t step, const std::string& model = "a",
                            const std::string& trainer = "") {
  const std::string tmp = begin_checkpoint(root, step);
  write_bytes(fs::path(tmp) / "model.safetensors", model);
  write_bytes(fs::path(tmp) / "trainer.json", trainer);
  return commit_checkpoint(root, step, nlohmann::json{{"backend", "ddp"}, {"world_size", 2}});
}

}  // namespace

TEST_CASE("step directory names have 8 digits, more when the step needs them") {
  CHECK(step_dir_name(0) == "step_00000000");
  CHECK(step_dir_name(20) == "step_00000020");
  CHECK(step_dir_name(99999999) == "step_99999999");
  CHECK(step_dir_name(123456789) == "step_123456789");
  CHECK_THROWS_AS(step_dir_name(-1), std::invalid_argument);
  CHECK(checkpoints_root("/runs/a") == "/runs/a/checkpoints");
}

TEST_CASE("fnv1a64_file matches the reference values, across 1 MiB chunk boundaries") {
  test::TempDir tmp;
  write_bytes(tmp.path() / "a", "a");
  write_bytes(tmp.path() / "empty", "");
  CHECK(fnv1a64_file((tmp.path() / "a").string()) == 0xaf63dc4c8601ec8cULL);
  CHECK(fnv1a64_file((tmp.path() / "empty").string()) == 0xcbf29ce484222325ULL);
  CHECK(reference_fnv1a64("a") == 0xaf63dc4c8601ec8cULL);  // the test's own reference is right

  std::string big((size_t{5} << 20) / 2 + 7, '\0');  // 2.5 MiB + 7: a partial last chunk
  uint32_t x = 12345;
  for (auto& c : big) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  write_bytes(tmp.path() / "big", big);
  CHECK(fnv1a64_file((tmp.path() / "big").string()) == reference_fnv1a64(big));

  CHECK_THROWS_AS(fnv1a64_file((tmp.path() / "nope").string()), CheckpointError);
}

TEST_CASE("begin, write and commit produce a verified checkpoint that latest names") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  CHECK_FALSE(find_latest_checkpoint(root).has_value());

  const std::string tmp = begin_checkpoint(root, 20);
  CHECK(tmp == root + "/.tmp.step_00000020");
  CHECK(fs::is_directory(tmp));
  write_bytes(fs::path(tmp) / "model.safetensors", "a");
  write_bytes(fs::path(tmp) / "trainer.json", "");
  const std::string dir = commit_checkpoint(root, 20, nlohmann::json{{"backend", "ddp"}, {"world_size", 2}});

  CHECK(dir == root + "/step_00000020");
  CHECK(fs::is_directory(dir));
  CHECK_FALSE(fs::exists(tmp));
  CHECK_FALSE(fs::exists(root + "/latest.tmp"));
  CHECK_FALSE(fs::exists(dir + "/manifest.json.tmp"));
  CHECK(read_bytes(root + "/latest") == "step_00000020\n");
  REQUIRE(find_latest_checkpoint(root) == std::optional<std::string>(dir));

  const Manifest m = verify_checkpoint(dir);
  CHECK(m.format_version == 1);
  CHECK(m.step == 20);
  REQUIRE(m.files.size() == 2);  // manifest.json is not listed; sorted by name
  CHECK(m.files[0].name == "model.safetensors");
  CHECK(m.files[0].bytes == 1);
  CHECK(m.files[0].fnv1a64 == 0xaf63dc4c8601ec8cULL);
  CHECK(m.files[1].name == "trainer.json");
  CHECK(m.files[1].bytes == 0);
  CHECK(m.files[1].fnv1a64 == 0xcbf29ce484222325ULL);
  CHECK(m.extra == nlohmann::json{{"backend", "ddp"}, {"world_size", 2}});

  // The on-disk format other tools read.
  const auto j = nlohmann::json::parse(read_bytes(dir + "/manifest.json"));
  CHECK(j.at("format") == "accel-checkpoint");
  CHECK(j.at("version") == 1);
  CHECK(j.at("step") == 20);
  CHECK(j.at("files").at(0).at("fnv1a64") == "af63dc4c8601ec8c");
  CHECK(j.at("extra").at("world_size") == 2);

  const Manifest listed = read_manifest(dir);
  CHECK(listed.files.size() == 2);
  CHECK(listed.extra == m.extra);
}

TEST_CASE("a second checkpoint moves latest and leaves the first verifiable") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  const std::string first = make_checkpoint(root, 20, "first model");
  const std::string second = make_checkpoint(root, 40, "second model, longer");
  CHECK(read_bytes(root + "/latest") == "step_00000040\n");
  CHECK(find_latest_checkpoint(root) == std::optional<std::string>(second));
  CHECK(verify_checkpoint(first).files.at(0).fnv1a64 == reference_fnv1a64("first model"));
  CHECK(verify_checkpoint(second).files.at(0).fnv1a64 == reference_fnv1a64("second model, longer"));
}

TEST_CASE("a crash before commit leaves the previous checkpoint as latest; the next writer cleans up") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  const std::string committed = make_checkpoint(root, 20);

  const std::string crashed = begin_checkpoint(root, 30);
  write_bytes(fs::path(crashed) / "model.safetensors", "partial");  // no commit: the writer died
  CHECK(find_latest_checkpoint(root) == std::optional<std::string>(committed));
  CHECK_NOTHROW(verify_checkpoint(committed));
  CHECK_FALSE(fs::exists(root + "/step_00000030"));
  // A crash during commit can leave a manifest without the rename; still never read.
  write_bytes(fs::path(crashed) / "manifest.json.tmp", "{");
  write_bytes(fs::path(root) / "latest.tmp", "step_000");

  SECTION("the same step again starts from an empty directory") {
    const std::string again = begin_checkpoint(root, 30);
    CHECK(again == crashed);
    CHECK(fs::is_empty(again));
    CHECK_FALSE(fs::exists(root + "/latest.tmp"));
    write_bytes(fs::path(again) / "model.safetensors", "complete");
    const Manifest m = verify_checkpoint(commit_checkpoint(root, 30, nullptr));
    REQUIRE(m.files.size() == 1);
    CHECK(m.files[0].bytes == 8);
    CHECK(m.extra == nlohmann::json::object());
  }
  SECTION("another step removes every leftover .tmp.* directory") {
    write_bytes(fs::path(root) / ".tmp.replaced.step_00000010", "left by a crashed replace");
    const std::string next = begin_checkpoint(root, 40);
    CHECK(fs::is_directory(next));
    CHECK_FALSE(fs::exists(crashed));
    CHECK_FALSE(fs::exists(root + "/.tmp.replaced.step_00000010"));
    CHECK_FALSE(fs::exists(root + "/latest.tmp"));
    CHECK(fs::exists(committed));  // committed checkpoints are never touched
    CHECK(read_bytes(root + "/latest") == "step_00000020\n");
  }
}

TEST_CASE("verification names the damaged file and what differs") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  const std::string dir = make_checkpoint(root, 20, "0123456789", "{\"step\": 20}");
  const std::string model = dir + "/model.safetensors";
  const std::string manifest = dir + "/manifest.json";

  SECTION("truncated") {
    write_bytes(model, "01234");
    CHECK_THROWS_AS(verify_checkpoint(dir), CheckpointError);
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(model + " is truncated: 5 bytes, the manifest records 10"));
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains("delete " + dir));
  }
  SECTION("larger") {
    write_bytes(model, "0123456789ab");
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(model + " is larger than the manifest records: 12 bytes"));
  }
  SECTION("a flipped byte, same size") {
    write_bytes(model, "0123456788");
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(model + " is corrupted: its FNV-1a 64 hash is 0x"));
    char expected[64];
    std::snprintf(expected, sizeof expected, "the manifest records 0x%016llx",
                  static_cast<unsigned long long>(reference_fnv1a64("0123456789")));
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(expected));
  }
  SECTION("a deleted file") {
    fs::remove(model);
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(model + " is missing"));
  }
  SECTION("every damaged file is reported at once") {
    fs::remove(model);
    write_bytes(dir + "/trainer.json", "{\"step\": 21}");
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(model + " is missing") && Contains(dir + "/trainer.json is corrupted"));
  }
  SECTION("an unexpected extra file is ignored: nothing reads it") {
    write_bytes(dir + "/notes.txt", "added later");
    CHECK(verify_checkpoint(dir).files.size() == 2);
  }
  SECTION("manifest.json with invalid JSON") {
    write_bytes(manifest, "{\"format\": \"accel-checkpoint\",");
    CHECK_THROWS_AS(read_manifest(dir), CheckpointError);
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(manifest + " is not valid JSON"));
  }
  SECTION("manifest.json of another format, version, or shape") {
    auto j = nlohmann::json::parse(read_bytes(manifest));
    auto rewrite = [&](const std::function<void(nlohmann::json&)>& change) {
      auto copy = j;
      change(copy);
      write_bytes(manifest, copy.dump());
    };
    rewrite([](auto& m) { m["format"] = "something-else"; });
    CHECK_THROWS_WITH(read_manifest(dir), Contains(manifest) && Contains("\"format\" is \"something-else\""));
    rewrite([](auto& m) { m["version"] = 3; });
    CHECK_THROWS_WITH(read_manifest(dir), Contains(manifest) && Contains("this accel reads versions 1 and 2"));
    rewrite([](auto& m) { m.erase("files"); });
    CHECK_THROWS_WITH(read_manifest(dir), Contains(manifest) && Contains("\"files\" is missing"));
    rewrite([](auto& m) { m["files"][0]["name"] = "../../escape"; });
    CHECK_THROWS_WITH(read_manifest(dir), Contains(manifest) && Contains("not a plain file name"));
    rewrite([](auto& m) { m["files"][0]["fnv1a64"] = 12345; });
    CHECK_THROWS_WITH(read_manifest(dir), Contains(manifest) && Contains("fnv1a64"));
    rewrite([](auto& m) { m["files"][1] = m["files"][0]; });
    CHECK_THROWS_WITH(read_manifest(dir), Contains(manifest) && Contains("listed twice"));
    rewrite([](auto&) {});
    CHECK_NOTHROW(verify_checkpoint(dir));
  }
  SECTION("a missing manifest") {
    fs::remove(manifest);
    CHECK_THROWS_WITH(verify_checkpoint(dir), Contains(dir + " is not a complete checkpoint") && Contains(manifest + " is missing"));
    CHECK_THROWS_WITH(read_manifest(dir), Contains("not a complete checkpoint"));
  }
  SECTION("a directory that does not exist") {
    CHECK_THROWS_WITH(verify_checkpoint(root + "/step_00000099"), Contains(root + "/step_00000099 does not exist"));
  }
}

TEST_CASE("latest: absent means no checkpoint, damaged is an error naming it") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  const std::string latest = root + "/latest";
  CHECK_FALSE(find_latest_checkpoint(root).has_value());  // no root
  fs::create_directories(root);
  CHECK_FALSE(find_latest_checkpoint(root).has_value());  // root without latest
  begin_checkpoint(root, 10);
  CHECK_FALSE(find_latest_checkpoint(root).has_value());  // only an uncommitted checkpoint

  make_checkpoint(root, 20);
  SECTION("naming a directory that does not exist") {
    fs::remove_all(root + "/step_00000020");
    CHECK_THROWS_AS(find_latest_checkpoint(root), CheckpointError);
    CHECK_THROWS_WITH(find_latest_checkpoint(root), Contains(latest + " names step_00000020") && Contains("does not exist"));
  }
  SECTION("empty") {
    write_bytes(latest, "");
    CHECK_THROWS_WITH(find_latest_checkpoint(root), Contains(latest + " is empty"));
  }
  SECTION("garbage") {
    write_bytes(latest, "\x01\x02garbage/../../etc");
    CHECK_THROWS_WITH(find_latest_checkpoint(root), Contains(latest + " is malformed"));
    write_bytes(latest, ".tmp.step_00000030\n");
    CHECK_THROWS_WITH(find_latest_checkpoint(root), Contains(latest + " is malformed"));
  }
  SECTION("without its newline, as a user might write it") {
    write_bytes(latest, "step_00000020");
    CHECK(find_latest_checkpoint(root) == std::optional<std::string>(root + "/step_00000020"));
  }
}

TEST_CASE("recommitting an existing step (a rerun) replaces it") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  make_checkpoint(root, 20, "old");
  make_checkpoint(root, 30, "newer");
  const std::string dir = make_checkpoint(root, 20, "rerun");
  CHECK(read_bytes(root + "/latest") == "step_00000020\n");
  CHECK(verify_checkpoint(dir).files.at(0).fnv1a64 == reference_fnv1a64("rerun"));
  CHECK(read_bytes(dir + "/model.safetensors") == "rerun");
  for (const auto& e : fs::directory_iterator(root))  // the old copy moved aside is gone
    CHECK(e.path().filename().string().rfind(".tmp.", 0) != 0);
}

TEST_CASE("commit refuses what it could not verify later") {
  test::TempDir out;
  const std::string root = checkpoints_root(out.path().string());
  SECTION("no begin") {
    CHECK_THROWS_WITH(commit_checkpoint(root, 20, nullptr), Contains(root + "/.tmp.step_00000020 does not exist"));
  }
  SECTION("a subdirectory") {
    const std::string tmp = begin_checkpoint(root, 20);
    fs::create_directory(tmp + "/shards");
    CHECK_THROWS_WITH(commit_checkpoint(root, 20, nullptr), Contains(tmp + "/shards is not a regular file"));
    CHECK_FALSE(fs::exists(root + "/step_00000020"));
    CHECK_FALSE(find_latest_checkpoint(root).has_value());
  }
  SECTION("extra that is not an object") {
    begin_checkpoint(root, 20);
    CHECK_THROWS_AS(commit_checkpoint(root, 20, nlohmann::json::array()), std::invalid_argument);
  }
}

TEST_CASE("write_file_synced reports a full disk instead of leaving a short file") {
  test::TempDir out;
  const std::string path = (out.path() / "f.json").string();
  write_file_synced(path, "{\"a\": 1}\n");
  CHECK(read_bytes(path) == "{\"a\": 1}\n");
  CHECK_THROWS_WITH(write_file_synced((out.path() / "no/such/dir/f").string(), "x"), Contains("cannot create"));
  if (fs::exists("/dev/full")) {
    CHECK_THROWS_AS(write_file_synced("/dev/full", "x"), CheckpointError);
    CHECK_THROWS_WITH(write_file_synced("/dev/full", "x"), Contains("/dev/full") && Contains("No space left"));
  }
}

TEST_CASE("write_file_synced never writes through a symbolic link at its path") {
  // The staged files beside metrics.jsonl, the TensorBoard event file and MLflow's files are
  // written by it in output_dir, where another user may plant a link to a file of the user's.
  test::TempDir out;
  const std::string victim = out.write("victim", "the user's file\n");
  const std::string link = (out.path() / "metrics.jsonl.tmp").string();
  fs::create_symlink(victim, link);
  CHECK_THROWS_AS(write_file_synced(link, "{}\n"), UsageError);
  CHECK_THROWS_WITH(write_file_synced(link, "{}\n"), Contains(link) && Contains("never follows"));
  CHECK(read_bytes(victim) == "the user's file\n");
}

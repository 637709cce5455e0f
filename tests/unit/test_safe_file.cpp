// runtime/common/safe_file.hpp, the one way accel opens a file it writes: a symbolic link planted
// at the name (or at a staged name) is never followed, replaced or removed, but refused with a
// UsageError naming it and saying so; what the link points at is unchanged. A FIFO at the name is
// refused without blocking. The writers themselves are covered through the launcher
// (tests/cli/test_output_links.cpp).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/common/errors.hpp"
#include "runtime/common/safe_file.hpp"
#include "support/temp_dir.hpp"

using namespace accel;
using accel::test::read_file;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr const char* kVictimText = "a file of the user's, outside output_dir\n";

// dir/victim and a link dir/out/<name> to it.
struct Planted {
  std::string victim, link;
};
Planted plant(const accel::test::TempDir& dir, const std::string& name) {
  Planted p{dir.write("victim", kVictimText), (dir.path() / "out" / name).string()};
  fs::create_directories(fs::path(p.link).parent_path());
  fs::create_symlink(p.victim, p.link);
  return p;
}

// The UsageError's message of `f()`, or what else it did.
template <typename F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a UsageError: ") + e.what();
  }
  return "(no error)";
}

}  // namespace

// `expr` is refused with the link's message, naming `link`.
#define CHECK_REFUSES_LINK(expr, link)                                                              \
  CHECK_THAT(usage_error_of([&] { expr; }), Contains(link) && Contains("is a symbolic link") &&   \
                                                 Contains("never follows") && Contains("fix: remove the link"))

TEST_CASE("open_for_write opens, empties and appends to regular files, and never follows a link") {
  accel::test::TempDir dir;
  const std::string path = (dir.path() / "log").string();
  for (auto how : {files::WriteMode::truncate, files::WriteMode::append}) {
    const int fd = files::open_for_write(path, how);
    files::write_all(fd, "line\n", path);
    ::close(fd);
  }
  CHECK(read_file(path) == "line\nline\n");
  const int fd = files::open_for_write(path, files::WriteMode::truncate);
  ::close(fd);
  CHECK(read_file(path).empty());

  const auto p = plant(dir, "rank_0.log");
  for (auto how : {files::WriteMode::truncate, files::WriteMode::append}) {
    CHECK_REFUSES_LINK(files::open_for_write(p.link, how), p.link);
    CHECK_REFUSES_LINK(files::fopen_for_write(p.link, how), p.link);
  }
  CHECK(read_file(p.victim) == kVictimText);
  CHECK(fs::is_symlink(p.link));
}

TEST_CASE("write_file_replacing replaces a file whole and refuses a link at its name") {
  accel::test::TempDir dir;
  const std::string path = (dir.path() / "job.resolved.yaml").string();
  files::write_file_replacing(path, "old\n");
  files::write_file_replacing(path, "new\n", /*sync=*/true);
  CHECK(read_file(path) == "new\n");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.is_regular_file() ? 1 : 0;
  CHECK(entries == 1);  // no staged file left

  const auto p = plant(dir, "metrics.jsonl");
  CHECK_REFUSES_LINK(files::write_file_replacing(p.link, "x"), p.link);
  CHECK(read_file(p.victim) == kVictimText);
  CHECK(fs::is_symlink(p.link));
}

TEST_CASE("create_fresh removes a link planted at a staged name instead of writing through it") {
  accel::test::TempDir dir;
  const auto p = plant(dir, "weights.safetensors.tmp.1");
  const int fd = files::create_fresh(p.link);
  files::write_all(fd, "staged", p.link);
  ::close(fd);
  CHECK(read_file(p.victim) == kVictimText);
  CHECK_FALSE(fs::is_symlink(p.link));
  CHECK(read_file(p.link) == "staged");
}

TEST_CASE("a FIFO at a name accel writes is refused at once, not waited on") {
  accel::test::TempDir dir;
  const std::string fifo = (dir.path() / "rank_0.log").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (auto how : {files::WriteMode::truncate, files::WriteMode::append})
    CHECK_THROWS_WITH(files::open_for_write(fifo, how), Contains(fifo));
}

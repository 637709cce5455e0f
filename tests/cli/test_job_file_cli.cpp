// The job file as the accel executable reads and writes it: `accel config` never replaces an
// existing file unless told to (--force), and a job file that cannot be opened is reported with
// the operating system's reason.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/accel_cli.hpp"
#include "support/run_command.hpp"
#include "support/temp_dir.hpp"

using accel::test::run_command;
using accel::test::shell_quote;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = ACCEL_SOURCE_DIR;

// No terminal to answer a question: stdin is /dev/null.
accel::test::CommandResult run_accel(const std::string& args) {
  return accel::test::run_accel(args + " < /dev/null");
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string kMine = "# my own job, which accel config must not replace\nbackend: ddp\n";

}  // namespace

TEST_CASE("accel config refuses to replace an existing file without --force, before asking anything") {
  accel::test::TempDir dir;
  const std::string job = dir.write("job.yaml", kMine);
  const std::string quickstart = (kSource / "config_templates/quickstart.yaml").string();

  SECTION("the questionnaire") {
    auto r = run_accel("config -o " + shell_quote(job));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(job) && Catch::Contains("already exists") && Catch::Contains("--force"));
    CHECK_THAT(r.output, !Catch::Contains("answer each question"));  // refused before the first question
  }
  SECTION("--defaults") {
    auto r = run_accel("config --defaults -o " + shell_quote(job));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(job) && Catch::Contains("--force"));
  }
  SECTION("import -o") {
    auto r = run_accel("config import " + shell_quote(quickstart) + " -o " + shell_quote(job));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(job) && Catch::Contains("--force"));
  }
  SECTION("convert -o") {
    auto r = run_accel("config convert " + shell_quote(quickstart) + " --to fsdp -o " + shell_quote(job));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(job) && Catch::Contains("--force"));
  }
  CHECK(read_text(job) == kMine);
}

TEST_CASE("accel config --force replaces an existing file, and a new path needs no --force") {
  accel::test::TempDir dir;
  const std::string job = dir.write("job.yaml", kMine);
  auto forced = run_accel("config --defaults --force -o " + shell_quote(job));
  INFO(forced.output);
  CHECK(forced.exit_code == 0);
  CHECK(read_text(job) != kMine);
  CHECK(run_accel("config validate " + shell_quote(job)).exit_code == 0);

  const std::string quickstart = (kSource / "config_templates/quickstart.yaml").string();
  auto converted = run_accel("config convert " + shell_quote(quickstart) + " --to fsdp --force -o " + shell_quote(job));
  INFO(converted.output);
  CHECK(converted.exit_code == 0);
  CHECK_THAT(read_text(job), Catch::Contains("backend: fsdp"));

  const std::string fresh = (dir.path() / "sub" / "new.yaml").string();
  auto created = run_accel("config --defaults -o " + shell_quote(fresh));
  INFO(created.output);
  CHECK(created.exit_code == 0);
  CHECK(fs::exists(fresh));
}

TEST_CASE("a job file that cannot be opened is reported with the operating system's reason") {
  accel::test::TempDir dir;
  const std::string missing = (dir.path() / "no_such_job.yaml").string();
  for (const std::string command : {"config validate", "config show", "launch --dry-run"}) {
    SECTION(command) {
      auto r = run_accel(command + " " + shell_quote(missing));
      INFO(r.output);
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.output, Catch::Contains(missing) && Catch::Contains("No such file or directory"));
    }
  }
  SECTION("a path through a file that is not a directory") {
    const std::string file = dir.write("plain", "x");
    auto r = run_accel("config validate " + shell_quote(file + "/job.yaml"));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("Not a directory"));
  }
}

TEST_CASE("accel config validate refuses an output_dir that accel launch cannot create, as launch does") {
  // /proc takes no new directories, also for root, whom access(2) lets write anywhere: validate used
  // to say ok there and launch then failed.
  const std::string quickstart = shell_quote((kSource / "config_templates/quickstart.yaml").string());
  for (const std::string command : {"config validate", "launch"}) {
    SECTION(command) {
      auto r = run_accel(command + " " + quickstart + " --set training.output_dir=/proc/accel-no-such-run");
      INFO(r.output);
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.output, Catch::Contains("training.output_dir") && Catch::Contains("/proc"));
    }
  }
  accel::test::TempDir dir;  // a creatable one passes, and validate leaves nothing behind
  auto ok = run_accel("config validate " + quickstart + " --set training.output_dir=" +
                      shell_quote((dir.path() / "new" / "run").string()));
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(fs::is_empty(dir.path()));
}

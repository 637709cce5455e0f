// Relaunching into a run's output_dir after switching the backend key: a launch that has nothing
// to train spawns nothing and leaves the finished run's record alone (accel report reads it), and a
// resume under another backend names both layouts before it trains.
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

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

accel::test::CommandResult launch(const fs::path& out, const std::string& sets) {
  const std::string job = (kSource / "config_templates/quickstart.yaml").string();
  return accel::test::run_accel("launch " + shell_quote(job) +
                     " --set training.eval_every=0 --set main_process_port=0 --set training.output_dir=" + shell_quote(out.string()) + " " +
                     sets + " < /dev/null");
}

}  // namespace

TEST_CASE("a backend switch into a finished run trains nothing, says so, and keeps the run's record") {
  accel::test::TempDir dir;
  const fs::path out = dir.path() / "run";
  auto first = launch(out, "--set training.max_steps=4 --set backend=deepspeed --set deepspeed.zero_stage=3");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // Every worker line in one format: the first ones (the world's setup) once carried spdlog's stamp.
  CHECK_THAT(first.output, Catch::Contains("[rank 0] accel: collectives over") && !Catch::Contains("[info]"));
  const std::string record = read_text(out / "job.resolved.yaml");
  REQUIRE_THAT(record, Catch::Contains("backend: deepspeed"));

  auto again = launch(out, "--set training.max_steps=4 --set backend=fsdp");
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("nothing to train") && Catch::Contains("deepspeed zero_stage 3, world 2") &&
                               Catch::Contains("training.resume=never"));
  CHECK_THAT(again.output, !Catch::Contains("[rank 0]"));      // no worker was started
  CHECK(read_text(out / "job.resolved.yaml") == record);        // the finished run's record is untouched

  auto more = launch(out, "--set training.max_steps=6 --set backend=fsdp");
  INFO(more.output);
  CHECK(more.exit_code == 0);
  CHECK_THAT(more.output, Catch::Contains("written under deepspeed zero_stage 3, world 2 and resumes under fsdp "
                                          "FULL_SHARD, world 2"));
  CHECK_THAT(read_text(out / "job.resolved.yaml"), Catch::Contains("backend: fsdp"));
}

// `accel launch` with Accelerate's habits, as the accel executable takes them: Accelerate's flags set
// the job keys they name (shown in the banner and in the resolved job's sources), a program named
// after the options runs with its own arguments untouched, and a Python script is told what to run.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/accel_cli.hpp"
#include "support/run_command.hpp"
#include "support/temp_dir.hpp"

using accel::test::run_command;
using accel::test::shell_quote;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = ACCEL_SOURCE_DIR;

// In `dir`, with no terminal to answer a question (stdin is /dev/null).
accel::test::CommandResult run_accel_in(const fs::path& dir, const std::string& args) {
  return accel::test::run_accel_in(dir, args + " < /dev/null");
}

const std::string quickstart() { return shell_quote((kSource / "config_templates/quickstart.yaml").string()); }

}  // namespace

TEST_CASE("Accelerate's flags set the job keys they name, shown in the banner and the sources") {
  accel::test::TempDir dir;
  auto r = run_accel_in(dir.path(), "launch --dry-run --num_processes 3 --use_fsdp --mixed-precision bf16 "
                                    "--fsdp_sharding_strategy SHARD_GRAD_OP " + quickstart());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("--num_processes 3 -> num_processes: 3"));
  CHECK_THAT(r.output, Catch::Contains("--use_fsdp -> backend: fsdp"));
  CHECK_THAT(r.output, Catch::Contains("--mixed_precision bf16 -> mixed_precision: bf16"));
  CHECK_THAT(r.output, Catch::Contains("backend fsdp, 3 process(es)"));
  CHECK_THAT(r.output, Catch::Contains("sharding_strategy: SHARD_GRAD_OP"));
  CHECK_THAT(r.output, Catch::Contains("# --fsdp_sharding_strategy SHARD_GRAD_OP"));  // the key's source
}

TEST_CASE("a flag and a --set of one key that disagree, and two backends, are refused") {
  accel::test::TempDir dir;
  auto twice = run_accel_in(dir.path(), "launch --dry-run --num_processes 2 --set num_processes=3 " + quickstart());
  INFO(twice.output);
  CHECK(twice.exit_code == 2);
  CHECK_THAT(twice.output, Catch::Contains("set twice") && Catch::Contains("--num_processes 2"));

  auto both = run_accel_in(dir.path(), "launch --dry-run --use_deepspeed --use_fsdp " + quickstart());
  INFO(both.output);
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.output, Catch::Contains("--use_deepspeed and --use_fsdp"));

  auto bad = run_accel_in(dir.path(), "launch --dry-run --mixed_precision fp8 " + quickstart());
  INFO(bad.output);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("--mixed_precision fp8") && Catch::Contains("bf16"));
}

TEST_CASE("--rdzv_backend and --rdzv_endpoint set the etcd rendezvous keys; a backend accel lacks is refused") {
  accel::test::TempDir dir;
  auto r = run_accel_in(dir.path(), "launch --dry-run --num_machines 1:2 --machine_rank 0 --main_process_ip 10.0.0.1 "
                                    "--rdzv_backend etcd --rdzv-endpoint 10.0.0.5:2379,10.0.0.6:2379 " + quickstart());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("--rdzv_backend etcd -> rdzv_backend: etcd"));
  CHECK_THAT(r.output, Catch::Contains("--rdzv_endpoint 10.0.0.5:2379,10.0.0.6:2379 -> rdzv_endpoint: "
                                       "10.0.0.5:2379,10.0.0.6:2379"));

  auto c10d = run_accel_in(dir.path(), "launch --dry-run --num_machines 1:2 --rdzv_backend c10d " + quickstart());
  INFO(c10d.output);
  CHECK(c10d.exit_code == 2);
  CHECK_THAT(c10d.output, Catch::Contains("--rdzv_backend c10d") && Catch::Contains("etcd"));
}

TEST_CASE("a program after the options runs with every argument after it, its look-alike options included") {
  accel::test::TempDir dir;
  SECTION("resolved, with --config_file") {
    auto r = run_accel_in(dir.path(), "launch --dry-run --config_file " + quickstart() +
                                          " /bin/echo --set x=1 --dry-run --num_processes 9");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains(R"(program: [/bin/echo, "--set", x=1, "--dry-run", "--num_processes", "9"])"));
    CHECK_THAT(r.output, Catch::Contains("2 process(es)"));  // the program's --num_processes 9 is its own
  }
  SECTION("run by the workers, without a job file") {
    auto r = run_accel_in(dir.path(), "launch --num_processes 2 --cpu --main_process_port 0 sh -c 'echo worker-$RANK-of-$WORLD_SIZE'");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("worker-0-of-2") && Catch::Contains("worker-1-of-2"));
  }
  SECTION("after a job file") {
    auto r = run_accel_in(dir.path(), "launch --dry-run " + quickstart() + " true --epochs 3");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains(R"(true, "--epochs", "3"])"));
  }
}

TEST_CASE("a Python script, a missing program and a second job file get a clear message and exit 2") {
  accel::test::TempDir dir;
  dir.write("train.py", "print('hello')\n");
  auto py = run_accel_in(dir.path(), "launch train.py --lr 1e-4");
  INFO(py.output);
  CHECK(py.exit_code == 2);
  CHECK_THAT(py.output, Catch::Contains("train.py is a Python script") && Catch::Contains("accelerate launch train.py") &&
                            Catch::Contains("accel launch job.yaml"));

  auto missing = run_accel_in(dir.path(), "launch ./no_such_trainer --epochs 3");
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains("./no_such_trainer: neither a job file nor a program"));

  auto two = run_accel_in(dir.path(), "launch --dry-run --config_file " + quickstart() + " " + quickstart());
  INFO(two.output);
  CHECK(two.exit_code == 2);
  CHECK_THAT(two.output, Catch::Contains("two job files"));
}

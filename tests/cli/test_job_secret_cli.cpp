// The job secret through the real executable (SECURITY.md, docs/design/0033): a job spread over
// several launchers is refused without ACCEL_SECRET_FILE before it writes or listens anything, runs
// with a warning when the job opts out (allow_unauthenticated), and a bad secret file is refused
// naming it. Every command starts without the caller's ACCEL_SECRET_FILE or opt-out (accel_cli.hpp).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/accel_cli.hpp"
#include "support/background.hpp"
#include "support/run_command.hpp"
#include "support/secret_file.hpp"
#include "support/temp_dir.hpp"

using namespace accel::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string accel_cmd(const std::string& args, const std::string& env = "") { return accel_command(args, env); }

// Machine 0 of a 2-machine job whose workers only record that they started.
std::string two_machine_job(const TempDir& dir, int port) {
  const std::string worker = dir.write("worker.sh", "touch " + shell_quote(dir.path().string()) + "/started_$RANK\n");
  return dir.write("job.yaml", "num_processes: 2\nnum_machines: 2\nmachine_rank: 0\nmain_process_port: " +
                                   std::to_string(port) + "\nprogram: [bash, " + worker + "]\ntraining:\n  output_dir: " +
                                   (dir.path() / "out").string() + "\n");
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a launcher of a multi-launcher job without ACCEL_SECRET_FILE exits 2 before it writes anything, with the recipe") {
  TempDir dir;
  const std::string job = two_machine_job(dir, reserve_port());
  std::string env, layout;
  SECTION("machine 0 of 2") { layout = "this job spans 2 machines (num_machines), one launcher each"; }
  SECTION("one task per process under mpirun") {
    env = "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2";
    layout = "this launcher runs ranks 0..0 of the job's 2 and a scheduler (srun/mpirun, one task per process)";
  }
  const std::string sets = env.empty() ? "" : " --set num_machines=1";
  const auto r = run_command(accel_cmd("launch " + job + sets, env));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("error: no job secret: " + layout) &&
                           Catch::Contains("ACCEL_SECRET_FILE is not set") && Catch::Contains("fix:") &&
                           Catch::Contains("(umask 077; head -c 32 /dev/urandom > ~/.accel-secret)") &&
                           Catch::Contains("srun accel launch job.yaml") && Catch::Contains("allow_unauthenticated: true"));
  // Refused before the output_dir lock, the resolved job, the logs and the rendezvous listener.
  CHECK_FALSE(fs::exists(dir.path() / "out" / ".accel-launch"));
  CHECK_FALSE(fs::exists(dir.path() / "out" / "job.resolved.yaml"));
  CHECK_FALSE(fs::exists(dir.path() / "out" / "logs"));
  CHECK_FALSE(fs::exists(dir.path() / "started_0"));
}

TEST_CASE("allow_unauthenticated runs a 2-machine job without the file; each launcher warns once") {
  TempDir dir;
  const std::string common = " --set num_processes=2 --set num_machines=2 --set main_process_port=" +
                             std::to_string(reserve_port()) + " --set rendezvous_timeout_s=60 --set training.output_dir=";
  // The opt-out as a job key (--set) on machine 0 and as its ACCEL_* variable on machine 1.
  Background machine0(accel_cmd("test" + common + (dir.path() / "m0").string() +
                                " --set machine_rank=0 --set allow_unauthenticated=true"),
                      (dir.path() / "m0.log").string());
  Background machine1(accel_cmd("test" + common + (dir.path() / "m1").string() + " --set machine_rank=1",
                                "ACCEL_ALLOW_UNAUTHENTICATED=true"),
                      (dir.path() / "m1.log").string());
  const auto code0 = machine0.wait_for(120s), code1 = machine1.wait_for(30s);
  INFO(machine0.output() + "\n---- machine 1 ----\n" + machine1.output());
  CHECK(code0 == std::optional<int>(0));
  CHECK(code1 == std::optional<int>(0));
  CHECK_THAT(machine0.output(), Catch::Contains("passed, 0 failed"));
  const std::string warning = "[launcher] warning: no job secret: this job spans 2 machines";
  CHECK(count(machine0.output(), warning) == 1);
  CHECK(count(machine1.output(), warning) == 1);
}

TEST_CASE("a bad secret file is refused with exit 2, naming the file and the fix") {
  TempDir dir;
  const std::string job = two_machine_job(dir, reserve_port());
  const fs::path good = write_secret_file(dir.path() / "good");
  std::string path, problem;
  SECTION("a symbolic link") {
    path = (dir.path() / "link").string();
    REQUIRE(symlink(good.c_str(), path.c_str()) == 0);
    problem = "it is a symbolic link";
  }
  SECTION("a directory") {
    path = (dir.path() / "directory").string();
    fs::create_directory(path);
    problem = "it is not a regular file";
  }
  SECTION("readable by others") {
    path = write_secret_file(dir.path() / "shared");
    chmod(path.c_str(), 0644);
    problem = "its mode is 0644, wider than 0600: group or others may read or change it";
  }
  SECTION("too short") {
    path = dir.write("short", std::string(16, 'k'));
    chmod(path.c_str(), 0600);
    problem = "it holds 16 bytes; a secret needs at least 32";
  }
  SECTION("too large") {
    path = dir.write("large", std::string(5000, 'k'));
    chmod(path.c_str(), 0600);
    problem = "it holds 5000 bytes; a secret file holds at most 4096";
  }
  SECTION("missing") {
    path = (dir.path() / "missing").string();
    problem = "cannot open the job secret file: No such file or directory";
  }
  const auto r = run_command(accel_cmd("launch " + job, "ACCEL_SECRET_FILE=" + shell_quote(path)));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("error: ACCEL_SECRET_FILE=" + path + ": ") && Catch::Contains(problem) &&
                           Catch::Contains("fix: create it") && Catch::Contains("umask 077"));
  CHECK_FALSE(fs::exists(dir.path() / "out" / "job.resolved.yaml"));
  CHECK_FALSE(fs::exists(dir.path() / "started_0"));
}

// `launch --dry-run` and `config validate` say beforehand what the launch would refuse (a warning:
// the environment they run in may not be the launchers'), and say nothing once the file is right.
TEST_CASE("dry-run and config validate warn of a missing or refused secret file of a multi-launcher job") {
  TempDir dir;
  const std::string job = two_machine_job(dir, reserve_port());
  const fs::path good = write_secret_file(dir.path() / "good");
  const fs::path shared = write_secret_file(dir.path() / "shared");
  chmod(shared.c_str(), 0644);
  for (const std::string command : {"launch --dry-run ", "config validate "}) {
    INFO(command);
    const auto missing = run_command(accel_cmd(command + job));
    INFO(missing.output);
    CHECK(missing.exit_code == 0);
    CHECK_THAT(missing.output,
               Catch::Contains("would refuse this job (exit 2)") || Catch::Contains("would stop here (exit 2)"));
    CHECK_THAT(missing.output, Catch::Contains("ACCEL_SECRET_FILE is not set") && Catch::Contains("umask 077"));
    const auto refused = run_command(accel_cmd(command + job, "ACCEL_SECRET_FILE=" + shell_quote(shared.string())));
    INFO(refused.output);
    CHECK(refused.exit_code == 0);
    CHECK_THAT(refused.output, Catch::Contains("ACCEL_SECRET_FILE=" + shared.string()) &&
                                   Catch::Contains("its mode is 0644, wider than 0600"));
    const auto fine = run_command(accel_cmd(command + job, "ACCEL_SECRET_FILE=" + shell_quote(good.string())));
    INFO(fine.output);
    CHECK(fine.exit_code == 0);
    CHECK_THAT(fine.output, !Catch::Contains("ACCEL_SECRET_FILE") && !Catch::Contains("warning"));
  }
  CHECK_FALSE(fs::exists(dir.path() / "out" / "job.resolved.yaml"));
  CHECK_FALSE(fs::exists(dir.path() / "started_0"));
}

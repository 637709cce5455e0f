// Signals to the launcher, which runs in a forked child here so the test process keeps its own
// handlers: SIGINT or SIGTERM stops every worker and exits 1; a SIGKILLed launcher takes its workers with it
// (PR_SET_PDEATHSIG).
#include <catch2/catch.hpp>

#include "launch_test_support.hpp"

using namespace accel::test::launch;
using accel::test::read_file;
using accel::test::TempDir;

TEST_CASE("SIGINT or SIGTERM to the launcher: workers are stopped, the launcher exits 1, no worker survives") {
  const int sig = GENERATE(SIGINT, SIGTERM);
  const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  INFO(name);
  TempDir dir;
  LaunchPlan plan = script_plan(dir, publish_pid() + "exec sleep 60\n", 3);
  plan.max_restarts = 2;  // an interrupt never restarts
  ForkedLauncher launcher = fork_launcher(dir, plan);
  REQUIRE(wait_for_files(pid_files(dir, 3), 20s));
  std::vector<pid_t> workers = read_pids(pid_files(dir, 3));

  kill(launcher.pid, sig);
  int status = wait_launcher(launcher, 20s);
  INFO(read_file(launcher.summary_path));
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(read_file(launcher.summary_path), Catch::StartsWith("interrupted by " + name));
  CHECK(read_file(launcher.stderr_path).find("restarting") == std::string::npos);
  for (pid_t pid : workers) CHECK(reaped(pid));
}

TEST_CASE("a SIGKILLed launcher leaves no worker behind (PR_SET_PDEATHSIG)") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir, publish_pid() + "exec sleep 60\n", 2);
  ForkedLauncher launcher = fork_launcher(dir, plan);
  REQUIRE(wait_for_files(pid_files(dir, 2), 20s));
  std::vector<pid_t> workers = read_pids(pid_files(dir, 2));

  kill(launcher.pid, SIGKILL);
  int status = 0;
  waitpid(launcher.pid, &status, 0);
  for (pid_t pid : workers) CHECK(wait_dead(pid, 5s));
}

TEST_CASE("a second signal to the launcher skips shutdown_grace: workers ignoring SIGTERM are SIGKILLed", "[wall_clock]") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir, "trap '' TERM\n" + publish_pid() + "sleep 60 &\nwait\n", 2);
  plan.shutdown_grace = std::chrono::milliseconds(60000);
  ForkedLauncher launcher = fork_launcher(dir, plan);
  REQUIRE(wait_for_files(pid_files(dir, 2), 20s));
  std::vector<pid_t> workers = read_pids(pid_files(dir, 2));

  auto start = Clock::now();
  kill(launcher.pid, SIGINT);
  kill(launcher.pid, SIGTERM);  // a different signal, so the two cannot merge while pending
  int status = wait_launcher(launcher, 20s);
  std::string summary = read_file(launcher.summary_path);
  INFO(summary);
  REQUIRE(status != -1);
  CHECK(Clock::now() - start < 10s);  // far below the 60 s grace
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  // Both are pending at once when the launcher gets to run; the kernel picks which it delivers first.
  CHECK_THAT(summary, (Catch::StartsWith("interrupted by SIGINT") || Catch::StartsWith("interrupted by SIGTERM")) &&
                          Catch::Contains("killed with SIGKILL"));
  for (pid_t pid : workers) CHECK(reaped(pid));
}

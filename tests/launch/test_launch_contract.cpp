// run_launch() end to end with bash workers: the environment contract, port 0, prefixed output and
// per-rank logs, restarts, restoring signal handlers, and plans it must reject.
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "launch_test_support.hpp"
#include "runtime/launch/rendezvous_listener.hpp"
#include "runtime/launch/worker_env.hpp"

using namespace accel::test::launch;
using accel::launch::run_launch;
using accel::test::read_file;
using accel::test::TempDir;

namespace {

// Each worker writes its contract variables to $OUT_DIR/env_<LOCAL_RANK>.
const char* kEnvWorker = R"(
printf 'RANK=%s\nLOCAL_RANK=%s\nWORLD_SIZE=%s\nLOCAL_WORLD_SIZE=%s\nGROUP_RANK=%s\nMASTER_ADDR=%s\nMASTER_PORT=%s\nACCEL_JOB=%s\nOMP_NUM_THREADS=%s\nACCEL_RESTART_COUNT=%s\nFOO=%s\n' \
  "$RANK" "$LOCAL_RANK" "$WORLD_SIZE" "$LOCAL_WORLD_SIZE" "$GROUP_RANK" "$MASTER_ADDR" "$MASTER_PORT" \
  "${ACCEL_JOB:-unset}" "$OMP_NUM_THREADS" "$ACCEL_RESTART_COUNT" "${FOO:-unset}" > "$OUT_DIR/env_$LOCAL_RANK.tmp"
mv "$OUT_DIR/env_$LOCAL_RANK.tmp" "$OUT_DIR/env_$LOCAL_RANK"
)";

std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// Sets or unsets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    value ? setenv(name.c_str(), value, 1) : unsetenv(name.c_str());
  }
  ~ScopedEnv() { old ? setenv(name.c_str(), old->c_str(), 1) : unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("each worker gets the rank environment contract (rank_offset, machine rank, job, threads)") {
  TempDir dir;
  ScopedEnv omp("OMP_NUM_THREADS", nullptr);
  LaunchPlan plan = script_plan(dir, kEnvWorker, 3);
  plan.world_size = 6;
  plan.num_machines = 2;
  plan.machine_rank = 1;
  plan.rank_offset = 3;
  plan.master_addr = "10.1.2.3";
  plan.master_port = 29555;
  plan.job_file = "/runs/job.resolved.yaml";
  plan.extra_env["FOO"] = "bar";
  // One of two machines needs a shared secret, as `accel launch` chooses it (test_job_secret.cpp).
  plan.secret = accel::secret::JobSecret::generate();

  LaunchResult result = run_launch(plan);
  INFO(result.summary);
  REQUIRE(result.exit_code == 0);
  CHECK(result.restarts == 0);
  CHECK(result.summary == "all 3 workers exited with code 0");
  const std::string threads = std::to_string(std::max(1, accel::launch::available_cores() / 3));
  for (int local = 0; local < 3; ++local) {
    auto env = read_env_file((dir.path() / ("env_" + std::to_string(local))).string());
    INFO("local rank " << local);
    CHECK(env["RANK"] == std::to_string(3 + local));
    CHECK(env["LOCAL_RANK"] == std::to_string(local));
    CHECK(env["WORLD_SIZE"] == "6");
    CHECK(env["LOCAL_WORLD_SIZE"] == "3");
    CHECK(env["GROUP_RANK"] == "1");
    CHECK(env["MASTER_ADDR"] == "10.1.2.3");
    CHECK(env["MASTER_PORT"] == "29555");
    CHECK(env["ACCEL_JOB"] == "/runs/job.resolved.yaml");
    CHECK(env["OMP_NUM_THREADS"] == threads);
    CHECK(env["ACCEL_RESTART_COUNT"] == "0");
    CHECK(env["FOO"] == "bar");
  }
}

TEST_CASE("a user's OMP_NUM_THREADS is kept; master_port 0 becomes one free port for every worker") {
  TempDir dir;
  ScopedEnv omp("OMP_NUM_THREADS", "7");
  LaunchPlan plan = script_plan(dir, kEnvWorker, 2);
  plan.master_port = 0;
  LaunchResult result = run_launch(plan);
  INFO(result.summary);
  REQUIRE(result.exit_code == 0);
  auto env0 = read_env_file((dir.path() / "env_0").string());
  auto env1 = read_env_file((dir.path() / "env_1").string());
  CHECK(env0["OMP_NUM_THREADS"] == "7");
  CHECK(env0["ACCEL_JOB"] == "unset");
  CHECK(env0["MASTER_PORT"] == env1["MASTER_PORT"]);
  int port = std::atoi(env0["MASTER_PORT"].c_str());
  CHECK(port > 0);
  CHECK(port < 65536);
}

// Each worker records whether ACCEL_RENDEZVOUS_FD names an open descriptor of its own, and what
// /proc says the descriptor is (rank 0's must be the launcher's socket).
const char* kListenerWorker = R"(
fd=${ACCEL_RENDEZVOUS_FD:-none}
what=none
if [ "$fd" != none ] && [ -e "/proc/self/fd/$fd" ]; then what=$(readlink "/proc/self/fd/$fd"); fi
printf 'fd=%s\nwhat=%s\nport=%s\n' "$fd" "$what" "$MASTER_PORT" > "$OUT_DIR/listener_$RANK"
)";

TEST_CASE("the launcher holds the rendezvous port and hands the listening socket to rank 0 only") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir, kListenerWorker, 3);
  LaunchResult result = run_launch(plan);
  INFO(result.summary);
  REQUIRE(result.exit_code == 0);
  auto rank0 = read_env_file((dir.path() / "listener_0").string());
  CHECK(rank0["fd"] != "none");
  CHECK_THAT(rank0["what"], Catch::StartsWith("socket:["));
  for (int rank = 1; rank < 3; ++rank) {
    auto other = read_env_file((dir.path() / ("listener_" + std::to_string(rank))).string());
    INFO("rank " << rank);
    CHECK(other["fd"] == "none");
    CHECK(other["port"] == rank0["port"]);
  }
}

TEST_CASE("a rendezvous port in use fails the launch at once, naming main_process_port") {
  TempDir dir;
  accel::launch::RendezvousListener taken(0, "127.0.0.1");
  LaunchPlan plan = script_plan(dir, "touch \"$OUT_DIR/started_$RANK\"\n", 2);
  plan.master_port = taken.port();
  LaunchResult result = run_launch(plan);
  CHECK(result.exit_code == 1);
  CHECK_THAT(result.summary, Catch::Contains("port " + std::to_string(taken.port())) &&
                                 Catch::Contains("Address already in use") && Catch::Contains("main_process_port"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "started_0"));
}

TEST_CASE("worker output is prefixed with [rank r] on the launcher's stdout/stderr and teed to rank logs") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir, "echo hello\necho \"oops $RANK\" >&2\nprintf 'partial %s' \"$RANK\"\n", 3);
  ForkedLauncher launcher = fork_launcher(dir, plan);
  int status = wait_launcher(launcher, 20s);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  std::string out = read_file(launcher.stdout_path), err = read_file(launcher.stderr_path);
  for (int r = 0; r < 3; ++r) {
    std::string prefix = "[rank " + std::to_string(r) + "] ";
    CHECK(out.find(prefix + "hello\n") != std::string::npos);
    CHECK(out.find(prefix + "partial " + std::to_string(r) + "\n") != std::string::npos);  // flushed at EOF
    CHECK(err.find(prefix + "oops " + std::to_string(r) + "\n") != std::string::npos);
    CHECK(out.find(prefix + "oops") == std::string::npos);
  }
  std::string log1 = read_file((dir.path() / "logs" / "rank_1.log").string());
  CHECK(log1.rfind("hello\n", 0) == 0);  // unprefixed, first line
  CHECK(log1.find("oops 1\n") != std::string::npos);
  CHECK(log1.find("partial 1\n") != std::string::npos);
  CHECK(log1.find("[rank") == std::string::npos);
}

TEST_CASE("a failed group restarts up to max_restarts with ACCEL_RESTART_COUNT incremented") {
  TempDir dir;
  const char* body = R"(
echo "attempt $ACCEL_RESTART_COUNT"
if [ "$ACCEL_RESTART_COUNT" = 0 ]; then
  if [ "$LOCAL_RANK" = 1 ]; then
    while [ ! -f "$OUT_DIR/rank0_printed" ]; do sleep 0.02; done
    exit 5
  fi
  touch "$OUT_DIR/rank0_printed"
  exec sleep 60
fi
)";
  LaunchPlan plan = script_plan(dir, body, 2);
  SECTION("max_restarts 1: the second attempt succeeds") {
    plan.max_restarts = 1;
    LaunchResult result = run_launch(plan);
    INFO(result.summary);
    CHECK(result.exit_code == 0);
    CHECK(result.restarts == 1);
    CHECK(result.summary == "all 2 workers exited with code 0 after 1 restart");
    CHECK(read_file((dir.path() / "logs" / "rank_1.log").string()) == "attempt 0\n--- restart 1 ---\nattempt 1\n");
    CHECK(read_file((dir.path() / "logs" / "rank_0.log").string()) == "attempt 0\n--- restart 1 ---\nattempt 1\n");
  }
  SECTION("max_restarts 0: the failure is final") {
    LaunchResult result = run_launch(plan);
    INFO(result.summary);
    CHECK(result.exit_code == 1);
    CHECK(result.restarts == 0);
    CHECK_THAT(result.summary, Catch::StartsWith("rank 1 (pid ") && Catch::Contains("exited with code 5"));
    CHECK_THAT(result.summary, Catch::Contains("attempt 0"));
    CHECK_THAT(result.summary, Catch::Contains("rank 0 (pid ") && Catch::Contains("had to be stopped"));
  }
}

namespace {
size_t open_descriptors() {
  namespace fs = std::filesystem;
  return static_cast<size_t>(std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{}));
}
}  // namespace

TEST_CASE("run_launch restores the signal dispositions it replaced and leaks no descriptors") {
  TempDir dir;
  struct sigaction custom {}, before[3], after[3];
  custom.sa_handler = [](int) {};
  sigemptyset(&custom.sa_mask);
  struct sigaction saved[3];
  const int signals[] = {SIGINT, SIGTERM, SIGCHLD};
  for (int i = 0; i < 3; ++i) sigaction(signals[i], &custom, &saved[i]);
  for (int i = 0; i < 3; ++i) sigaction(signals[i], nullptr, &before[i]);
  const size_t descriptors = open_descriptors();
  LaunchPlan plan = script_plan(dir, "echo out; echo err >&2; exit 1\n", 2);
  plan.max_restarts = 1;  // the failure, stop and restart paths
  LaunchResult result = run_launch(plan);
  for (int i = 0; i < 3; ++i) sigaction(signals[i], nullptr, &after[i]);
  for (int i = 0; i < 3; ++i) sigaction(signals[i], &saved[i], nullptr);
  CHECK(result.exit_code == 1);
  CHECK(result.restarts == 1);
  CHECK(open_descriptors() == descriptors);
  for (int i = 0; i < 3; ++i) CHECK(after[i].sa_handler == before[i].sa_handler);
}

TEST_CASE("plans that cannot describe a launch are rejected before anything starts") {
  TempDir dir;
  LaunchPlan plan = script_plan(dir, "true\n", 2);
  SECTION("empty argv") { plan.worker_argv.clear(); }
  SECTION("ranks beyond world_size") { plan.rank_offset = 1; }
  SECTION("port 0 across machines") {
    plan.world_size = 4;
    plan.num_machines = 2;
    plan.master_port = 0;
  }
  CHECK_THROWS_AS(run_launch(plan), std::invalid_argument);
}

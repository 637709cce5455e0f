// The runtime through the real executable: `accel test` worlds (1, 2, 4 processes, and 2 machines
// x 2 processes on loopback), a rank that never arrives, kill -9 of a worker, SIGINT to the
// launcher, and `accel bench comm`. Multi-process tests go through the real launcher.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/accel_cli.hpp"
#include "support/background.hpp"
#include "support/run_command.hpp"
#include "support/secret_file.hpp"
#include "support/temp_dir.hpp"

using namespace accel::test;
using namespace std::chrono_literals;

namespace {

std::string accel_cmd(const std::string& args, const std::string& env = "") { return accel_command(args, env); }

std::vector<int> read_pids(const std::string& dir, int n) {
  std::vector<int> pids;
  for (int r = 0; r < n; ++r) {
    std::ifstream in(dir + "/pid_" + std::to_string(r));
    int pid = 0;
    if (in >> pid) pids.push_back(pid);
  }
  return pids;
}

// A worker program that records its PID and then sleeps: a stand-in for a long training job.
std::string sleeper_job(TempDir& dir, int processes) {
  auto script = dir.write("worker.sh", "echo \"worker $RANK of $WORLD_SIZE\"\necho $$ > " + dir.path().string() +
                                           "/pid_$RANK\nexec sleep 60\n");
  return dir.write("job.yaml", "num_processes: " + std::to_string(processes) +
                                   "\nmain_process_port: 0\nshutdown_grace_s: 1\nprogram: [bash, " + script +
                                   "]\ntraining:\n  output_dir: " + (dir.path() / "out").string() + "\n");
}

// `ACCEL_SECRET_FILE=...` for accel_cmd's environment: the job secret every launcher of a job spread
// over several launchers reads (made in `dir` on first use).
std::string with_secret(const TempDir& dir) {
  const auto path = dir.path() / "job-secret";
  if (!std::filesystem::exists(path)) write_secret_file(path);
  return "ACCEL_SECRET_FILE=" + shell_quote(path.string());
}

bool wait_for_pids(const std::string& dir, int n, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (read_pids(dir, n).size() < size_t(n)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

}  // namespace

TEST_CASE("accel test passes every collective at world 1, 2 and 4") {
  for (int world : {1, 2, 4}) {
    SECTION("world " + std::to_string(world)) {
      TempDir dir;
      auto r = run_command(accel_cmd("test --set num_processes=" + std::to_string(world) +
                                     " --set main_process_port=0 --set training.output_dir=" + dir.path().string()));
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("[rank 0] accel test: " + std::to_string(world) + " rank"));
      CHECK_THAT(r.output, Catch::Contains("[rank 0] 18 passed, 0 failed"));  // 6 float32 + 6 bfloat16 + 5 int64 checks + barrier
      CHECK_THAT(r.output, Catch::Contains("reduce_scatter sum") && Catch::Contains("bfloat16"));
      CHECK_THAT(r.output, !Catch::Contains("FAIL"));
      CHECK(std::filesystem::exists(dir.path() / "logs/rank_0.log"));
    }
  }
}

TEST_CASE("accel test passes at 2 machines x 2 processes on loopback") {
  TempDir dir;
  int port = reserve_port();
  // Both launchers read one job secret file, as SECURITY.md says (refused without it).
  auto common = " --set num_processes=4 --set num_machines=2 --set main_process_port=" + std::to_string(port) +
                " --set rendezvous_timeout_s=60 --set training.output_dir=";
  Background machine0(accel_cmd("test" + common + (dir.path() / "m0").string() + " --set machine_rank=0", with_secret(dir)),
                      (dir.path() / "m0.log").string());
  Background machine1(accel_cmd("test" + common + (dir.path() / "m1").string() + " --set machine_rank=1", with_secret(dir)),
                      (dir.path() / "m1.log").string());
  auto code0 = machine0.wait_for(120s), code1 = machine1.wait_for(30s);
  INFO(machine0.output() + "\n---- machine 1 ----\n" + machine1.output());
  REQUIRE(code0 == std::optional<int>(0));
  REQUIRE(code1 == std::optional<int>(0));
  CHECK_THAT(machine0.output(), Catch::Contains("accel test: 4 ranks over 2 machine(s)"));
  CHECK_THAT(machine0.output(), Catch::Contains("passed, 0 failed"));
  CHECK_THAT(machine1.output(), Catch::Contains("[rank 2]") && Catch::Contains("[rank 3]"));
  CHECK_THAT(machine0.output() + machine1.output(), !Catch::Contains("no job secret"));
}

TEST_CASE("a rank that never arrives times out with a message naming it") {
  TempDir dir;
  // Machine 1 is never started: ranks 2 and 3 are missing.
  auto r = run_command(accel_cmd("test --set num_processes=4 --set num_machines=2 --set machine_rank=0 "
                                 "--set main_process_port=" + std::to_string(reserve_port()) +
                                 " --set rendezvous_timeout_s=3 --set training.output_dir=" + dir.path().string(),
                                 with_secret(dir)));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("rendezvous timed out after 3 s"));
  CHECK_THAT(r.output, Catch::Contains("2 of 4 ranks did not arrive: ranks 2, 3 (machine 1)"));
}

TEST_CASE("kill -9 of one worker: the launcher exits 1 within 5 s naming the rank, no worker left", "[wall_clock]") {
  TempDir dir;
  auto job = sleeper_job(dir, 3);
  Background launcher(accel_cmd("launch " + job), (dir.path() / "launcher.log").string());
  REQUIRE(wait_for_pids(dir.path().string(), 3, 30s));
  auto pids = read_pids(dir.path().string(), 3);
  auto killed_at = std::chrono::steady_clock::now();
  kill(pids[1], SIGKILL);
  auto code = launcher.wait_for(10s);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  INFO(launcher.output());
  REQUIRE(code == std::optional<int>(1));
  CHECK(seconds < 5.0);  // the acceptance bound, not a performance goal
  CHECK_THAT(launcher.output(), Catch::Contains("rank 1") && Catch::Contains("SIGKILL"));
  for (int pid : pids) CHECK_FALSE(process_alive(pid));
}

TEST_CASE("SIGINT to the launcher leaves no worker") {
  TempDir dir;
  auto job = sleeper_job(dir, 2);
  Background launcher(accel_cmd("launch " + job), (dir.path() / "launcher.log").string());
  REQUIRE(wait_for_pids(dir.path().string(), 2, 30s));
  auto pids = read_pids(dir.path().string(), 2);
  kill(launcher.pid(), SIGINT);
  auto code = launcher.wait_for(10s);
  INFO(launcher.output());
  CHECK(code == std::optional<int>(1));
  for (int pid : pids) CHECK_FALSE(process_alive(pid));
}

TEST_CASE("a second launch into a running launch's output_dir is refused with exit 2; the lock goes with the launcher") {
  TempDir dir;
  auto job = sleeper_job(dir, 1);
  {
    Background first(accel_cmd("launch " + job), (dir.path() / "first.log").string());
    REQUIRE(wait_for_pids(dir.path().string(), 1, 30s));
    auto second = run_command(accel_cmd("test " + job));
    INFO(second.output);
    CHECK(second.exit_code == 2);
    CHECK_THAT(second.output, Catch::Contains("training.output_dir") && Catch::Contains("in use by another accel launch") &&
                                  Catch::Contains("pid " + std::to_string(first.pid())) && Catch::Contains("fix:"));
    // The running job's resolved file is still its own (the refused launch wrote nothing).
    std::ifstream resolved(dir.path() / "out" / "job.resolved.yaml");
    std::stringstream text;
    text << resolved.rdbuf();
    CHECK_THAT(text.str(), Catch::Contains("worker.sh"));
    kill(first.pid(), SIGKILL);  // no cleanup runs: the kernel still drops the lock
    first.wait_for(10s);
    for (int pid : read_pids(dir.path().string(), 1)) kill(pid, SIGKILL);
  }
  auto again = run_command(accel_cmd("test " + job));
  INFO(again.output);
  CHECK(again.exit_code == 0);
}

TEST_CASE("accel bench comm prints a table and writes JSON") {
  TempDir dir;
  auto json = (dir.path() / "bench.json").string();
  auto r = run_command(accel_cmd("bench comm --set num_processes=2 --set main_process_port=0 --set training.output_dir=" +
                                 dir.path().string() + " --max-bytes 65536 --iters 2 --json " + json));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("busbw (GB/s)"));
  auto doc = nlohmann::json::parse(read_file(json));
  CHECK(doc["world_size"] == 2);
  CHECK(doc["results"].size() == 4 * 4);  // 4 collectives x sizes 1K, 4K, 16K, 64K
}

TEST_CASE("under srun or mpirun (one task per process) each launcher runs its scheduler-assigned rank") {
  // The scheduler's variables are simulated; the launchers and workers are real. The tasks share one
  // output_dir, as a scheduler's tasks of one job do (each holds its own rank's lock).
  for (std::string scheduler : {"slurm", "openmpi"}) {
    SECTION(scheduler) {
      TempDir dir;
      int port = reserve_port();
      std::vector<std::unique_ptr<Background>> tasks;
      for (int task = 0; task < 2; ++task) {
        std::string t = std::to_string(task);
        std::string env = scheduler == "slurm"
                              ? "SLURM_PROCID=" + t + " SLURM_NTASKS=2 SLURM_LOCALID=" + t + " SLURM_NODEID=0 SLURM_NNODES=1"
                              : "OMPI_COMM_WORLD_RANK=" + t + " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=" + t +
                                    " OMPI_COMM_WORLD_LOCAL_SIZE=2";
        tasks.push_back(std::make_unique<Background>(
            accel_cmd("test --set num_processes=2 --set main_process_port=" + std::to_string(port) +
                          " --set training.output_dir=" + (dir.path() / "out").string(),
                      with_secret(dir) + " " + env),
            (dir.path() / ("task" + t + ".log")).string()));
      }
      auto code0 = tasks[0]->wait_for(60s), code1 = tasks[1]->wait_for(30s);
      INFO(tasks[0]->output() + "\n---- task 1 ----\n" + tasks[1]->output());
      CHECK(code0 == std::optional<int>(0));
      CHECK(code1 == std::optional<int>(0));
      CHECK_THAT(tasks[0]->output(), Catch::Contains("one task per process, this task is rank 0 of 2"));
      CHECK_THAT(tasks[1]->output(), Catch::Contains("[rank 1] rank 1 of 2: 18 of 18 checks passed here"));
      CHECK_THAT(tasks[0]->output(), Catch::Contains("18 passed, 0 failed"));
    }
  }
}

TEST_CASE("a scheduler's tasks of one job share the output_dir; a launch of any of their ranks is refused") {
  TempDir dir;
  // Two launchers of one job meet at a fixed port (port 0 works for one launcher only).
  auto job = sleeper_job(dir, 2) + " --set main_process_port=" + std::to_string(reserve_port());
  auto task_env = [&dir](int task) {
    std::string t = std::to_string(task);
    return with_secret(dir) + " OMPI_COMM_WORLD_RANK=" + t + " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=" + t +
           " OMPI_COMM_WORLD_LOCAL_SIZE=2";
  };
  Background task0(accel_cmd("launch " + job, task_env(0)), (dir.path() / "task0.log").string());
  Background task1(accel_cmd("launch " + job, task_env(1)), (dir.path() / "task1.log").string());
  REQUIRE(wait_for_pids(dir.path().string(), 2, 30s));
  CHECK(std::filesystem::exists(dir.path() / "out" / ".accel-launch" / "rank0.lock"));
  CHECK(std::filesystem::exists(dir.path() / "out" / ".accel-launch" / "rank1.lock"));

  auto plain = run_command(accel_cmd("launch " + job));  // ranks 0 and 1: task 0 holds rank 0
  INFO(plain.output);
  CHECK(plain.exit_code == 2);
  CHECK_THAT(plain.output, Catch::Contains("in use by another accel launch (pid " + std::to_string(task0.pid()) +
                                           ", which runs rank 0)"));
  auto other_task1 = run_command(accel_cmd("launch " + job, task_env(1)));  // another job's task of rank 1
  INFO(other_task1.output);
  CHECK(other_task1.exit_code == 2);
  CHECK_THAT(other_task1.output, Catch::Contains("pid " + std::to_string(task1.pid()) + ", which runs rank 1)"));

  for (Background* task : {&task0, &task1}) kill(task->pid(), SIGINT);
  CHECK(task0.wait_for(10s).has_value());
  CHECK(task1.wait_for(10s).has_value());
  for (int pid : read_pids(dir.path().string(), 2)) CHECK_FALSE(process_alive(pid));
}

TEST_CASE("accel bench launch reports when every worker is ready to train") {
  TempDir dir;
  auto json = (dir.path() / "launch.json").string();
  auto r = run_command(accel_cmd("bench launch --set num_processes=2 --set main_process_port=0 --set training.output_dir=" +
                                 dir.path().string() + " --json " + json));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("2 workers ready to train"));
  auto doc = nlohmann::json::parse(read_file(json));
  CHECK(doc["per_rank_ready_ms"].size() == 2);
  CHECK(doc["slowest_ready_ms"].get<double>() >= doc["fastest_ready_ms"].get<double>());
}

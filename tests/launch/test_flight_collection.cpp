// The launcher's side of the flight recorder (runtime/launch/flight_collection.hpp): which workers
// it may signal, the old dumps it clears, and a launch whose failing worker makes it collect the
// others' records (bash workers that answer SIGUSR2 with a canned dump), print the diagnosis and
// write it beside the records.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>

#include "runtime/common/wall_clock.hpp"
#include "runtime/diag/flight_records.hpp"
#include "runtime/launch/flight_collection.hpp"
#include "launch_test_support.hpp"

using namespace accel::launch;
using namespace accel::test::launch;
using accel::test::read_file;
using accel::test::TempDir;

namespace {

// A dump of rank `rank` (world 3) whose world group ran `ops` all_reduces of 8 float32, the last
// one still running when `running` is set; times a few seconds before now.
std::string canned_dump(int rank, int ops, bool running) {
  const int64_t now = accel::realtime_ns();
  accel::flight::RankDump d;
  d.rank = rank;
  d.world = 3;
  d.pid = 4242;
  d.host = "node0";
  d.reason = "signal";
  d.dumped_at_ns = now;
  accel::flight::GroupRecords g;
  g.members = {0, 1, 2};
  g.name = "world";
  g.group_rank = rank;
  g.issued = static_cast<uint64_t>(ops);
  for (int s = 1; s <= ops; ++s) {
    accel::flight::OpRecord r;
    r.seq = r.order = static_cast<uint64_t>(s);
    r.op = "all_reduce";
    r.dtype = "float32";
    r.count = 8;
    r.bytes = 32;
    r.issued_ns = r.started_ns = now - (10 - s) * 1'000'000'000LL;
    const bool last_running = running && s == ops;
    r.ended_ns = last_running ? 0 : r.started_ns + 1'000'000;
    r.state = last_running ? accel::flight::OpState::Running : accel::flight::OpState::Completed;
    g.records.push_back(r);
  }
  d.groups.push_back(g);
  return accel::flight::to_json(d);
}

}  // namespace

TEST_CASE("flight collection: a worker is signalled only when it handles SIGUSR2") {
  struct sigaction old {};
  sigaction(SIGUSR2, nullptr, &old);
  REQUIRE(old.sa_handler == SIG_DFL);  // nothing in this test program handles it
  CHECK_FALSE(catches_signal(::getpid(), SIGUSR2));
  struct sigaction handler {};
  handler.sa_handler = [](int) {};
  sigemptyset(&handler.sa_mask);
  sigaction(SIGUSR2, &handler, nullptr);
  CHECK(catches_signal(::getpid(), SIGUSR2));
  CHECK_FALSE(catches_signal(::getpid(), SIGUSR1));
  sigaction(SIGUSR2, &old, nullptr);
  CHECK_FALSE(catches_signal(999999999, SIGUSR2));  // no such process
}

TEST_CASE("flight collection: prepare clears only this launcher's ranks; no dumps, no diagnosis") {
  TempDir dir;
  const std::string flight = (dir.path() / "run" / "flight").string();
  FlightCollection collection(flight, flight + "/diagnosis.txt");
  REQUIRE(collection.prepare({0, 1}) == "");
  dir.write("run/flight/rank1.json", "old");
  dir.write("run/flight/rank2.json", "another machine's");
  REQUIRE(collection.prepare({0, 1}) == "");
  CHECK_FALSE(std::filesystem::exists(flight + "/rank1.json"));
  CHECK(std::filesystem::exists(flight + "/rank2.json"));
  std::filesystem::remove(flight + "/rank2.json");
  collection.request({}, accel::realtime_ns());
  CHECK(collection.complete());
  CHECK(collection.diagnose({}, 2) == "");
  CHECK_FALSE(std::filesystem::exists(flight + "/diagnosis.txt"));
}

TEST_CASE("flight collection: a failing worker makes the launcher collect, diagnose and then stop the group") {
  // Rank 1 fails after writing its records (as a failed collective does); rank 0 answers SIGUSR2 with
  // its records (still in op 3); rank 2 does not handle SIGUSR2, so it is not sent one: SIGTERM ends it.
  TempDir dir;
  dir.write("canned_rank0.json", canned_dump(0, 3, true));
  dir.write("canned_rank1.json", canned_dump(1, 2, false));
  const char* body = R"(
dump() { cp "$OUT_DIR/canned_rank$RANK.json" "$ACCEL_FLIGHT_DIR/.tmp$RANK" && mv "$ACCEL_FLIGHT_DIR/.tmp$RANK" "$ACCEL_FLIGHT_DIR/rank$RANK.json"; }
if [ "$RANK" = 0 ]; then
  trap dump USR2
  while true; do sleep 60 & wait $!; done
fi
if [ "$RANK" = 1 ]; then
  sleep 0.5
  dump
  exit 1
fi
exec sleep 60
)";
  LaunchPlan plan = script_plan(dir, body, 3);
  plan.flight_dir = (dir.path() / "flight").string();
  auto launcher = fork_launcher(dir, plan);
  const int status = wait_launcher(launcher, 30s);  // a hang bound, far above the second it takes
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::string err = read_file(launcher.stderr_path);
  const std::string summary = read_file(launcher.summary_path);
  INFO(err);
  INFO(summary);
  CHECK_THAT(err, Catch::Contains("[flight] diagnosis: rank 1 is behind: it never issued seq 3 of group world, all_reduce "
                                  "of 8 float32 (32 B), which rank 0 issued and has been in for"));
  CHECK_THAT(err, Catch::Contains("; it exited with code 1; its last op there is seq 2"));
  CHECK_THAT(err, Catch::Contains("[flight] rank 2 running: no records"));
  CHECK_THAT(err, Catch::Contains("[flight] records and this diagnosis in " + plan.flight_dir + "/"));
  const std::string written = read_file(plan.flight_dir + "/diagnosis.txt");
  CHECK_THAT(written, Catch::StartsWith("diagnosis: rank 1 is behind"));
  CHECK_THAT(summary, Catch::StartsWith("rank 1 (pid "));
  CHECK_THAT(summary, Catch::Contains("rank 2 (pid ") && Catch::Contains("killed by signal 15 (SIGTERM)"));
  CHECK_THAT(summary, !Catch::Contains("SIGUSR2"));
}

TEST_CASE("flight collection: every worker failing at once is still diagnosed") {
  // Both ranks write their records, close their output (the launcher reads its end), and exit 1 while
  // the launcher is stopped, so it finds both ended in one look with no output left to drain: the
  // collection has no one to wait for and must still diagnose before the group ends. (It once ended
  // the group with nothing printed: a network partition timed out both ranks of a machine at once.)
  TempDir dir;
  dir.write("canned_rank0.json", canned_dump(0, 3, true));
  dir.write("canned_rank1.json", canned_dump(1, 3, true));
  const char* body = R"(
cp "$OUT_DIR/canned_rank$RANK.json" "$ACCEL_FLIGHT_DIR/.tmp$RANK" && mv "$ACCEL_FLIGHT_DIR/.tmp$RANK" "$ACCEL_FLIGHT_DIR/rank$RANK.json"
exec > /dev/null 2>&1
if [ "$RANK" = 0 ]; then
  while [ ! -e "$OUT_DIR/closed1" ]; do sleep 0.05; done
  sleep 0.3
  launcher=$PPID
  kill -STOP "$launcher"
  setsid sh -c "sleep 0.5; kill -CONT $launcher" < /dev/null > /dev/null 2>&1 &
  touch "$OUT_DIR/stopped"
else
  touch "$OUT_DIR/closed1"
  while [ ! -e "$OUT_DIR/stopped" ]; do sleep 0.05; done
fi
exit 1
)";
  LaunchPlan plan = script_plan(dir, body, 2);
  plan.flight_dir = (dir.path() / "flight").string();
  auto launcher = fork_launcher(dir, plan);
  const int status = wait_launcher(launcher, 30s);  // a hang bound, far above the second it takes
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::string err = read_file(launcher.stderr_path);
  INFO(err);
  CHECK_THAT(err, Catch::Contains("[flight] diagnosis: ranks 0 and 1 are in seq 3 of group world"));
  CHECK_THAT(err, Catch::Contains("[flight] records and this diagnosis in " + plan.flight_dir + "/"));
}

TEST_CASE("flight collection: SIGINT to the launcher collects and diagnoses before the workers stop") {
  // Both ranks are in op 3 (a hang the user gives up on); each answers SIGUSR2 with its records. The
  // records name a third member, rank 2, of which no records are here.
  TempDir dir;
  dir.write("canned_rank0.json", canned_dump(0, 3, true));
  dir.write("canned_rank1.json", canned_dump(1, 3, true));
  const std::string body = R"(
dump() { cp "$OUT_DIR/canned_rank$RANK.json" "$ACCEL_FLIGHT_DIR/.tmp$RANK" && mv "$ACCEL_FLIGHT_DIR/.tmp$RANK" "$ACCEL_FLIGHT_DIR/rank$RANK.json"; }
trap dump USR2
)" + publish_pid() + R"(
while true; do sleep 60 & wait $!; done
)";
  LaunchPlan plan = script_plan(dir, body, 2);
  plan.flight_dir = (dir.path() / "flight").string();
  auto launcher = fork_launcher(dir, plan);
  REQUIRE(wait_for_files(pid_files(dir, 2), 30s));
  ::kill(launcher.pid, SIGINT);
  const int status = wait_launcher(launcher, 30s);  // a hang bound, far above the second it takes
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  const std::string err = read_file(launcher.stderr_path);
  INFO(err);
  CHECK_THAT(err, Catch::Contains("[flight] diagnosis: ranks 0 and 1 are in seq 3 of group world, all_reduce of 8 float32 "
                                  "(32 B); no records from rank 2 (not supervised here, or no answer): look at them first"));
  CHECK_THAT(read_file(launcher.summary_path), Catch::StartsWith("interrupted by SIGINT"));
  for (pid_t pid : read_pids(pid_files(dir, 2))) CHECK(wait_dead(pid, 10s));
}

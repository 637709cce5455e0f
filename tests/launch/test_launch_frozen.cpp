// A frozen worker (SIGSTOP: a hung rank that never joins its peers' collective): when another rank
// fails, the launcher reads every worker's /proc state, names the frozen rank in the summary, and
// takes it down at once with SIGTERM + SIGCONT (a stopped process acts on SIGTERM only when
// continued), not after shutdown_grace; no process is left behind.
#include <catch2/catch.hpp>

#include <cstdio>

#include "launch_test_support.hpp"
#include "runtime/launch/process_state.hpp"

using namespace accel::test::launch;
using accel::launch::describe_hang_state;
using accel::launch::parse_stat_state;
using accel::launch::process_state;
using accel::launch::run_launch;
using accel::test::TempDir;

TEST_CASE("process state: parsed after the command name, frozen states described") {
  CHECK(parse_stat_state("42 (accel) S 1 42 42 0 -1") == 'S');
  CHECK(parse_stat_state("42 (a b) (c)) T 1 42") == 'T');  // the name may hold spaces and ')'
  CHECK(parse_stat_state("42 (accel)") == 0);
  CHECK(parse_stat_state("") == 0);
  CHECK(process_state(getpid()) == 'R');
  CHECK(process_state(-1) == 0);
  CHECK_THAT(describe_hang_state('T'), Catch::Contains("stopped") && Catch::Contains("SIGSTOP"));
  CHECK_THAT(describe_hang_state('t'), Catch::Contains("debugger"));
  CHECK_THAT(describe_hang_state('D'), Catch::Contains("uninterruptible"));
  for (char running : {'R', 'S', 'Z', '\0'}) CHECK(describe_hang_state(running).empty());
}

TEST_CASE("a SIGSTOPped worker is named as the likely cause and taken down without waiting for shutdown_grace", "[wall_clock]") {
  TempDir dir;
  // Rank 1 freezes itself; rank 0 waits until it is frozen (and every pid is published), then fails
  // as a peer timing out in a collective would; rank 2 is a healthy bystander.
  const char* body = R"(
echo $$ > "$OUT_DIR/pid_$RANK.tmp" && mv "$OUT_DIR/pid_$RANK.tmp" "$OUT_DIR/pid_$RANK"
if [ "$RANK" = 1 ]; then echo "about to freeze"; kill -STOP $$; echo "continued"; exec sleep 60; fi
if [ "$RANK" = 2 ]; then exec sleep 60; fi
while [ ! -f "$OUT_DIR/pid_1" ] || [ ! -f "$OUT_DIR/pid_2" ]; do sleep 0.02; done
pid=$(cat "$OUT_DIR/pid_1")
for i in $(seq 1 500); do
  read -r stat < "/proc/$pid/stat"; state=${stat##*) }; state=${state%% *}
  [ "$state" = T ] && break
  sleep 0.02
done
echo "error: all_reduce on rank 0 of 3 (gloo): timed out after 1000 ms waiting for a peer rank" >&2
exit 1
)";
  LaunchPlan plan = script_plan(dir, body, 3);
  plan.shutdown_grace = std::chrono::milliseconds(20000);  // long: the frozen rank must not need it
  auto start = Clock::now();
  LaunchResult result = run_launch(plan);
  std::chrono::duration<double> elapsed = Clock::now() - start;
  std::fprintf(stderr, "frozen rank 1: run_launch returned %.2f s after start (shutdown_grace 20 s)\n", elapsed.count());
  INFO(result.summary);
  std::vector<pid_t> pids = read_pids(pid_files(dir, 3));
  const std::string rank1 = "rank 1 (pid " + std::to_string(pids[1]) + ")";
  CHECK(result.exit_code == 1);
  CHECK(elapsed < std::chrono::seconds(10));  // acceptance bound: far below shutdown_grace, with slack for slow CI
  CHECK_THAT(result.summary,
             Catch::StartsWith("rank 0 (pid " + std::to_string(pids[0]) +
                               ") exited with code 1: all_reduce on rank 0 of 3 (gloo): timed out after 1000 ms"));
  CHECK_THAT(result.summary, Catch::Contains("\n" + rank1 + " was stopped (process state T: SIGSTOP or SIGTSTP) "
                                             "when the group was stopped") &&
                                 Catch::Contains("likely cause"));
  // continued by SIGCONT, it met the pending SIGTERM at once
  CHECK_THAT(result.summary, Catch::Contains(rank1 + " (frozen, sent SIGTERM and SIGCONT) had to be stopped: it was "
                                             "killed by signal 15 (SIGTERM)"));
  CHECK_THAT(result.summary, Catch::Contains("rank 2 (pid " + std::to_string(pids[2]) + ") had to be stopped") &&
                                 !Catch::Contains("rank 2 (pid " + std::to_string(pids[2]) + ") was stopped"));
  for (pid_t pid : pids) CHECK(reaped(pid));
}

// The text of a launch outcome: the one-line restart notice and the final LaunchResult summary.
// Invariant: pure formatting of a GroupResult; the first line of a failure summary always names the
// failing rank and how it ended ("rank 1 (pid 42) exited with code 3", "... was killed by signal 9
// (SIGKILL)"), with the error it reported last when it printed one ("...: all_reduce on rank 0 of 2
// (gloo): timed out ..."), or "interrupted by SIGINT", so callers can show just that line. Ranks
// found frozen when the group was stopped (process_state.hpp) follow on lines of their own.
#pragma once

#include <string>

#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/worker_group.hpp"

namespace accel::launch {

// "rank 1 (pid 42) exited with code 3[: <its error line>]" for the first failure of `group`.
std::string describe_failure_line(const GroupResult& group);

// "rank 1 (pid 42) exited with code 3; restarting all 4 workers (restart attempt 1 of 2)", with the
// frozen ranks between the two, on the same line.
std::string restart_notice(const GroupResult& group, int local_world_size, int attempt, int max_restarts);

// The summary of a finished launch: success, or the failure line, the failing rank's last log lines,
// one line per rank the launcher had to stop, and the restarts used.
std::string launch_summary(const LaunchPlan& plan, const GroupResult& group, int restarts);

}  // namespace accel::launch

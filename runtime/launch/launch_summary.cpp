// Launch outcome text; see launch_summary.hpp.
#include "runtime/launch/launch_summary.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <sstream>

#include "runtime/launch/process_state.hpp"
#include "runtime/launch/rank_logs.hpp"
#include "runtime/launch/signal_names.hpp"

namespace accel::launch {
namespace {

std::string who(const WorkerRecord& worker) {
  return "rank " + std::to_string(worker.rank) + " (pid " + std::to_string(worker.pid) + ")";
}

std::string how_it_ended(const WorkerRecord& worker) {
  if (worker.status_lost) return "ended, but its exit status was lost (another part of the process reaped it)";
  return describe_wait_status(worker.wait_status);
}

// "rank 0 (pid 41) had to be stopped: it was killed by signal 15 (SIGTERM) 12 ms after the launcher's SIGTERM".
std::string stopped_line(const WorkerRecord& worker, const LaunchPlan& plan) {
  const bool frozen = !describe_hang_state(worker.state_at_stop).empty();
  std::string line = who(worker) + (frozen ? " (frozen, sent SIGTERM and SIGCONT)" : "") + " had to be stopped: it ";
  if (worker.stop_signal == SIGKILL)
    return line + "was still running " + std::to_string(worker.stop_time.count()) +
           " ms after SIGTERM and was killed with SIGKILL (shutdown_grace " +
           std::to_string(plan.shutdown_grace.count()) + " ms)";
  return line + how_it_ended(worker) + " " + std::to_string(worker.stop_time.count()) + " ms after the launcher's SIGTERM";
}

std::string plural(int n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// The error a worker reported last ("error: all_reduce on rank 0 of 2 (gloo): timed out ..."), the
// line accel's own workers print before they exit 1; "" when its last lines hold none.
std::string reported_error(const WorkerRecord& worker) {
  std::vector<std::string> tail = worker.tail.lines();
  for (auto it = tail.rbegin(); it != tail.rend(); ++it)
    if (it->rfind("error: ", 0) == 0) return it->substr(7);
  return "";
}

// "\nrank 1 (pid 43) was stopped (process state T: ...) when the group was stopped: ..." for every
// worker frozen when the launcher stopped the group: when its peers timed out in a collective, it
// is the rank they waited for.
std::string frozen_ranks(const GroupResult& group) {
  std::string text;
  for (const WorkerRecord& worker : group.workers) {
    std::string state = describe_hang_state(worker.state_at_stop);
    if (state.empty()) continue;
    text += "\n" + who(worker) + " was " + state +
            " when the group was stopped: ranks waiting for it in a collective fail after collective_timeout_s, "
            "so it is the likely cause";
  }
  return text;
}

}  // namespace

std::string describe_failure_line(const GroupResult& group) {
  if (group.first_failure < 0) return "no worker failed";
  const WorkerRecord& worker = group.workers[static_cast<size_t>(group.first_failure)];
  std::string line = who(worker) + " " + how_it_ended(worker);
  std::string error = reported_error(worker);
  return error.empty() ? line : line + ": " + error;
}

std::string restart_notice(const GroupResult& group, int local_world_size, int attempt, int max_restarts) {
  std::string frozen = frozen_ranks(group);
  for (char& c : frozen)
    if (c == '\n') c = ' ';
  return describe_failure_line(group) + ";" + (frozen.empty() ? "" : frozen + ";") + " restarting all " +
         plural(local_world_size, "worker") + " (restart attempt " + std::to_string(attempt) + " of " +
         std::to_string(max_restarts) + ")";
}

std::string launch_summary(const LaunchPlan& plan, const GroupResult& group, int restarts) {
  std::ostringstream out;
  const std::string after = restarts > 0 ? " after " + plural(restarts, "restart") : "";
  switch (group.end) {
    case GroupEnd::Succeeded:
      out << "all " << plural(static_cast<int>(group.workers.size()), "worker") << " exited with code 0" << after;
      return out.str();
    case GroupEnd::Interrupted:
      out << "interrupted by " << signal_name(group.interrupt_signal) << frozen_ranks(group);
      break;
    case GroupEnd::SpawnFailed:
      out << group.spawn_error;
      break;
    case GroupEnd::StopRequested:
      out << "stopped for a restart round of the machines" << frozen_ranks(group);
      break;
    case GroupEnd::WorkerFailed: {
      const WorkerRecord& failed = group.workers[static_cast<size_t>(group.first_failure)];
      out << describe_failure_line(group);
      if (group.interrupt_signal) out << " (then interrupted by " << signal_name(group.interrupt_signal) << ")";
      out << frozen_ranks(group);
      std::vector<std::string> tail = failed.tail.lines();
      std::string log = RankLogs::path(plan.log_dir, failed.rank);
      if (tail.empty()) {
        out << "\nrank " << failed.rank << " printed nothing";
      } else {
        out << "\nlast " << plural(static_cast<int>(tail.size()), "line") << " of rank " << failed.rank
            << (log.empty() ? "" : " (" + log + ")") << ":";
        for (const auto& line : tail) out << "\n  " << line;
      }
      break;
    }
  }
  for (size_t i = 0; i < group.workers.size(); ++i) {
    const WorkerRecord& worker = group.workers[i];
    const bool reported_above = group.end == GroupEnd::WorkerFailed && static_cast<int>(i) == group.first_failure;
    if (reported_above || worker.pid < 0) continue;
    if (worker.failed_on_its_own)
      out << "\n" << who(worker) << (group.end == GroupEnd::WorkerFailed ? " also failed: " : " failed: ")
          << how_it_ended(worker);
    else if (worker.stop_signal)
      out << "\n" << stopped_line(worker, plan);
  }
  if (restarts > 0 || (group.end == GroupEnd::WorkerFailed && plan.max_restarts > 0 && !group.interrupt_signal))
    out << "\nthe group was restarted " << plural(restarts, "time") << " (max_restarts " << plan.max_restarts << ")";
  return out.str();
}

}  // namespace accel::launch

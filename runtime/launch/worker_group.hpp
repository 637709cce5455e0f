// One generation of this machine's workers: spawn them all, relay their output, reap them, and stop
// the whole group on the first failure or on SIGINT/SIGTERM to the launcher.
// Invariant: run_worker_group() returns only after every worker it started has been reaped and its
// process group signalled, so no worker of this generation outlives the call. It never restarts;
// run_launch() decides that from the returned record.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/line_relay.hpp"
#include "runtime/launch/signal_guard.hpp"
#include "runtime/launch/worker_env.hpp"

namespace accel::launch {

// What happened to one worker.
struct WorkerRecord {
  int rank = 0;
  pid_t pid = -1;              // -1: never started
  bool reaped = false;
  bool status_lost = false;    // reaped by someone else (ECHILD): the exit status is unknown
  int wait_status = 0;         // from waitpid(), valid when reaped && !status_lost
  bool failed_on_its_own = false;  // ended badly before the launcher signalled the group
  int stop_signal = 0;         // strongest signal the launcher sent it: 0, SIGTERM or SIGKILL
  std::chrono::milliseconds stop_time{0};  // SIGTERM to its exit, or to the SIGKILL that followed
  char state_at_stop = 0;      // its /proc state when the launcher began stopping the group (0: gone
                               // or unknown); 'T' says it was frozen, e.g. the rank peers waited for
  LineTail tail{10};           // its last output lines (stdout and stderr)
};

enum class GroupEnd {
  Succeeded,     // every worker exited 0
  WorkerFailed,  // a worker exited non-zero or died by a signal (first_failure says which)
  Interrupted,   // the launcher got SIGINT/SIGTERM
  SpawnFailed,   // a worker could not be started (spawn_error says why)
  StopRequested, // GroupSetup::stop_fd became readable: an elastic round ended (docs/design/0027)
};

struct GroupResult {
  GroupEnd end = GroupEnd::Succeeded;
  int first_failure = -1;    // index in workers of the first worker that failed on its own
  int interrupt_signal = 0;  // SIGINT/SIGTERM received while this generation ran, else 0
  std::string spawn_error;
  std::vector<WorkerRecord> workers;  // one per local rank
};

struct GroupSetup {
  std::string program_path;   // resolved worker_argv[0]
  int master_port = 0;        // resolved (never 0)
  int rendezvous_fd = -1;     // the listening socket rank 0 inherits (RendezvousListener), or -1
  int restart_count = 0;      // ACCEL_RESTART_COUNT of this generation
  EnvMap base_env;            // the launcher's environment
  int cores = 1;
  std::vector<int> log_fds;   // per local rank, -1 for none
  int stop_fd = -1;           // readable (never read here): stop the group, GroupEnd::StopRequested; -1: none
  int secret_fd = -1;         // the job secret's sealed memfd every worker inherits (ACCEL_SECRET_FD), or -1
};

GroupResult run_worker_group(const LaunchPlan& plan, const GroupSetup& setup, SignalGuard& guard);

}  // namespace accel::launch

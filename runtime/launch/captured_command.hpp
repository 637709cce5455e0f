// Runs a short helper program to completion and captures what it printed: how `accel env` asks
// accel-worker for the facts only a process with libtorch loaded can see. Not for workers (they
// stream through the launcher, worker_process.hpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace accel::launch {

struct CapturedOutput {
  int exit_code = -1;       // the exit status; -1 when killed by a signal or not started
  bool timed_out = false;   // killed (SIGKILL) after the timeout
  std::string out, err;     // everything written to stdout and stderr
};

// argv[0] is the program's path (no PATH search). Never throws for the program's own failure;
// throws RunError only when it cannot be started at all.
CapturedOutput run_captured(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace accel::launch

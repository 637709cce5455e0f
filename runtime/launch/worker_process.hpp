// Starts one worker: fork + execve with stdout/stderr on fresh pipes, stdin on /dev/null, in its own
// process group, with PR_SET_PDEATHSIG(SIGKILL) so a SIGKILLed launcher takes it down.
// Invariants: every descriptor the launcher creates is O_CLOEXEC, so a worker holds only its own
// pipe ends (and rank 0 the rendezvous socket it is handed); between fork and exec the child makes only async-signal-safe calls (everything it
// needs is allocated before fork); a failed exec is reported to the parent as a SpawnError and the
// child is reaped, never left behind. PDEATHSIG fires when the *thread* that forked exits, so the
// thread calling spawn_worker() must outlive the worker (run_launch() reaps before returning).
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace accel::launch {

class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SpawnedWorker {
  pid_t pid = -1;      // also its process group id
  int stdout_fd = -1;  // read ends, O_CLOEXEC | O_NONBLOCK; the caller closes them
  int stderr_fd = -1;
};

// The file execvp() would run for `program` under PATH `path_env` (a name with '/' is used as is).
// Throws SpawnError when nothing executable is found.
std::string resolve_program(const std::string& program, const std::string& path_env);

// Starts `path` with `argv` (argv[0] included) and the NAME=value strings `env`. `inherit_fds` (-1
// entries skipped) are the launcher descriptors the worker keeps open (O_CLOEXEC cleared in the
// child): rank 0's rendezvous socket, the job secret's memfd.
SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::vector<int>& inherit_fds = {});

}  // namespace accel::launch

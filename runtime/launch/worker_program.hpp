// Where the launcher finds accel-worker, the program that links libtorch and runs everything that
// needs it: the built-in trainer and the collective tasks in each rank, merge-weights, and the
// torch facts of `accel env`. The launcher (`accel`) itself never loads libtorch, so its commands
// start in milliseconds and a few MiB.
// Search order: $ACCEL_WORKER_PROGRAM; accel-worker beside the running executable (the build
// tree); <prefix>/libexec/accel/accel-worker for an installed <prefix>/bin/accel.
#pragma once

#include <string>
#include <vector>

namespace accel::launch {

inline constexpr const char* kWorkerProgramName = "accel-worker";
inline constexpr const char* kWorkerProgramEnv = "ACCEL_WORKER_PROGRAM";

// The path of accel-worker; throws RunError naming every place it looked when none is there.
std::string worker_program_path();

// The same search for another program installed beside accel (accel-report): $`env_var`, `name`
// beside the running executable, <prefix>/libexec/accel/`name`.
std::string companion_program_path(const std::string& name, const std::string& env_var);

// Replaces this process with `program args...`; throws RunError when it cannot be started.
[[noreturn]] void exec_program(const std::string& program, const std::vector<std::string>& args);

// Replaces this process with `accel-worker args...` (stdin, stdout, stderr and exit code are the
// worker's). Throws RunError when the program cannot be found or started.
[[noreturn]] void exec_worker_program(const std::vector<std::string>& args);

}  // namespace accel::launch

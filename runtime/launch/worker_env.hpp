// The environment contract of one worker: the launcher's environment plus the rank variables.
// Invariant: pure functions of their arguments (the caller passes the launcher's environment and
// core count), so the contract is unit-testable without spawning anything.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/launch/launch_plan.hpp"

namespace accel::launch {

using EnvMap = std::map<std::string, std::string>;

// Parses a NAME=value array (such as `environ`) into a map; entries without '=' are skipped.
EnvMap environment_map(char** envp);

// CPUs this process may run on (sched_getaffinity), falling back to hardware_concurrency; >= 1.
int available_cores();

// Workers on this machine over all launchers: plan.machine_local_world_size, or local_world_size.
int machine_local_world_size(const LaunchPlan& plan);

// The environment of local rank `local_rank` in restart attempt `restart_count`. Precedence, lowest
// first: `base` (the launcher's environment), OMP_NUM_THREADS = max(1, cores / workers on this
// machine) when neither `base` nor extra_env sets it, plan.extra_env, then the contract variables
// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT (the
// resolved `master_port`), ACCEL_JOB (removed when plan.job_file is empty), ACCEL_RESTART_COUNT and
// ACCEL_FLIGHT_DIR (removed when plan.flight_dir is empty).
EnvMap worker_environment(const LaunchPlan& plan, int local_rank, int restart_count, int master_port,
                          const EnvMap& base, int cores);

// NAME=value strings, ready to become an envp array.
std::vector<std::string> environment_strings(const EnvMap& env);

}  // namespace accel::launch

// Turns a validated job into a LaunchPlan for this machine and runs it: writes the resolved job
// (ACCEL_JOB) atomically under output_dir, applies srun/mpirun layouts, and turns a failed
// launch into a RunError carrying the launcher's summary. Shared by launch, test and bench.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/config/job_loader.hpp"

namespace accel::cli {

void launch_job(const config::LoadedJob& job, const std::vector<std::string>& worker_argv,
                const std::map<std::string, std::string>& extra_env);

// The job secret check launch_job makes before anything is written or listened on, alone (for
// `launch --dry-run` and `config validate`, which report it as a warning: the environment they run
// in may not be the launchers'): why a launch here would be refused with exit 2 (this launcher is
// one of several and ACCEL_SECRET_FILE is unset, without allow_unauthenticated; or the file it
// names is refused), or "" when it would not.
std::string launch_secret_problem(const config::LoadedJob& job);

// launch_job with accel-worker as every worker (`accel-worker run`), running `task` (train,
// comm-test, comm-bench, launch-probe) with `options` (JSON text, ACCEL_WORKER_OPTIONS; "" for none).
void launch_worker_task(const config::LoadedJob& job, const std::string& task, const std::string& options = "");

}  // namespace accel::cli

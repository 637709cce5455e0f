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

}  // namespace accel::cli

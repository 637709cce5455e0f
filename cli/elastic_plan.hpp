// The elastic part of a LaunchPlan (docs/design/0027), from a validated job: the machine range,
// the round timing, what the workers' job becomes at each world size (the elastic_batch rule) and
// where restarted workers resume, for the launcher's restart line.
#pragma once

#include "runtime/config/job_loader.hpp"
#include "runtime/launch/launch_plan.hpp"

namespace accel::cli {

// Sets plan's elastic fields when the job is elastic; leaves a fixed-world plan as it is.
void fill_elastic_plan(const config::LoadedJob& loaded, launch::LaunchPlan& plan);

}  // namespace accel::cli

// `accel bench launch`: how long from the launcher's start until every worker is ready to train
// (past rendezvous, communicator connected). Each rank records its ready time (CLOCK_REALTIME) in
// the store; rank 0 prints the slowest rank's delay after the launcher's start time.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/common/wall_clock.hpp"
#include "runtime/worker/worker_context.hpp"

namespace accel::worker {

// Called right after start_worker(). `launch_start_ns` is the launcher's realtime at start.
void report_launch_probe(WorkerContext& ctx, int64_t launch_start_ns, const std::string& json_path);

}  // namespace accel::worker

// Everything a worker process holds after start-up: its resolved job, its place in the world, the
// rendezvous store and a communicator for the job's device. Built once by start_worker().
#pragma once

#include <memory>

#include "runtime/comm/communicator.hpp"
#include "runtime/comm/rendezvous.hpp"
#include "runtime/config/job_loader.hpp"

namespace accel::worker {

struct WorkerContext {
  config::LoadedJob job;
  comm::WorldInfo world;
  std::unique_ptr<comm::Rendezvous> rendezvous;
  std::unique_ptr<comm::Communicator> communicator;
};

// The launcher's resolved job (ACCEL_JOB), with the user's keys told from the defaults. Throws
// RunError when ACCEL_JOB is not set (a worker started by hand), ConfigError for a bad file.
config::LoadedJob load_launched_job();

// Loads ACCEL_JOB, reads the launch environment, rendezvous with every rank, and builds the
// communicator: Gloo for CPU jobs; for cuda jobs, after binding this rank's GPU as the current
// device, NCCL (or Gloo staged through host memory with cuda_collectives: gloo). Throws RunError
// (naming missing ranks) or ConfigError.
WorkerContext start_worker();

// Sets libtorch's intra-op pool to OMP_NUM_THREADS, which the launcher gives each worker (cores /
// local workers); without it libtorch starts with its own default.
void apply_thread_count();

}  // namespace accel::worker

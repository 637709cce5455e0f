// What the launcher needs to start and supervise one machine's workers (no torch, no YAML).
// cli/cmd_launch.cpp builds a LaunchPlan from a validated job; run_launch() executes it.
// Environment contract for each worker (torchrun's names, documented in the README):
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (= machine rank),
//   MASTER_ADDR, MASTER_PORT, ACCEL_JOB (the resolved job file), ACCEL_RESTART_COUNT,
//   ACCEL_RENDEZVOUS_FD (rank 0 only: the listening socket on MASTER_PORT, rendezvous_listener.hpp),
//   ACCEL_FLIGHT_DIR (where flight records are dumped, when flight_dir is set),
//   OMP_NUM_THREADS = max(1, cores / workers on this machine) unless the user set it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/job_secret.hpp"

namespace accel::launch {

// What the workers' job becomes in an elastic round of a given size (docs/design/0027).
struct RoundJob {
  std::map<std::string, std::string> env;  // set in every worker of the round (ACCEL_* job keys)
  std::string change;                      // the batch split at this size, for the round's line; "" none
  std::string error;                       // non-empty: the job cannot run at this size (ends the launch)
};

struct LaunchPlan {
  std::vector<std::string> worker_argv;  // program and arguments, started once per local rank
  int world_size = 1;                    // total workers over all machines
  int num_machines = 1;
  int machine_rank = 0;
  int local_world_size = 1;              // workers on this machine
  int rank_offset = 0;                   // global rank of local rank 0 (machine_rank * local_world_size,
                                         // or a scheduler-assigned rank under srun/mpirun)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;               // 0: pick a free port on this machine (single machine only)
  std::string job_file;                  // exported as ACCEL_JOB
  std::string log_dir;                   // rank_<r>.log files go here (created)
  std::string flight_dir;                // workers dump collective flight records here (ACCEL_FLIGHT_DIR,
                                         // docs/design/0025); "" collects none
  int max_restarts = 0;                  // whole-group restarts after a failure
  std::chrono::milliseconds shutdown_grace{3000};  // SIGTERM -> SIGKILL delay
  std::map<std::string, std::string> extra_env;    // set in every worker (the contract variables win)
  // Under srun/mpirun with one task per process, this launcher runs 1 of several workers on its
  // machine (see cluster_env.hpp): LOCAL_RANK must stay the scheduler's local id (it picks the GPU)
  // and LOCAL_WORLD_SIZE / OMP_NUM_THREADS must count every worker on the machine.
  int local_rank_offset = 0;         // LOCAL_RANK of local rank 0; 0 when this launcher runs all workers
  int machine_local_world_size = 0;  // workers on this machine over all launchers; 0: local_world_size
  // Elastic jobs (docs/design/0027, elastic_launch.hpp): with 1 <= min_machines < num_machines the
  // launchers join rounds at machine 0's rendezvous on master_port, and each round's world is the
  // machines that joined (num_machines is then the most, world_size the world at num_machines).
  int min_machines = 0;                                  // 0: a fixed world
  std::chrono::milliseconds join_window{10000};          // a round's wait for more after min_machines
  std::chrono::seconds peer_timeout{15};                 // elastic_peer_timeout_s: launcher connections
  std::chrono::milliseconds rendezvous_timeout{300000};  // how long a round may gather
  std::function<RoundJob(int machines, int machine_rank)> round_job;  // none: the job is unchanged
  // Where a restarted round of `machines` machines resumes ("checkpoint step 4 (<dir>)").
  std::function<std::string(int machines)> resume_point;
  // rdzv_backend etcd (docs/design/0034): rdzv_endpoint, the etcd cluster that elects the launcher
  // hosting the rounds and the store; "" (rdzv_backend static): machine 0's launcher hosts them.
  std::string rdzv_etcd;
  int rdzv_lease_s = 5;  // rdzv_lease_s: the host's lease in etcd, seconds
  // The job secret (launch_secret.hpp, docs/design/0033). A job spread over several launchers needs
  // ACCEL_SECRET_FILE; without it the launch is refused (exit 2) unless allow_unauthenticated (the
  // job key of that name), which runs it unauthenticated with a warning.
  bool allow_unauthenticated = false;
  // The secret as the caller already chose it with launch_secret() (cli does, so a refusal comes
  // before the run's lock and files; present() false: unauthenticated, allowed); unset: run_launch
  // chooses it.
  std::optional<secret::JobSecret> secret;
};

struct LaunchResult {
  int exit_code = 0;     // 0: every worker exited 0; 1: the job failed (summary says how); 2: refused
                         // before a worker ran (a link planted at a log's name; elastic: this machine;
                         // the job secret: a refused file, or none for a multi-launcher job)
  std::string summary;   // names the failing rank, its exit code or signal, its last log lines
  int restarts = 0;
};

// Spawns, prefixes output with [rank r], tees each rank's output to log_dir/rank_<r>.log,
// supervises (first failure stops the group), forwards SIGINT/SIGTERM, restarts up to
// max_restarts times. Never leaves a worker behind.
// While it runs it owns the process's SIGINT, SIGTERM and SIGCHLD handlers and ignores SIGPIPE
// (restored on return); one call at a time per process. It blocks the calling thread until every
// worker is reaped (workers' PR_SET_PDEATHSIG is tied to that thread). Problems of the run (a
// program that cannot start, a log that cannot be opened) come back as exit_code 1 with a summary
// (2 for a symbolic link at a log's name, which is never followed);
// a plan that cannot describe a launch throws std::invalid_argument. Implementation and pieces:
// run_launch.cpp, worker_group.hpp (supervision), worker_env.hpp (environment), cluster_env.hpp.
LaunchResult run_launch(const LaunchPlan& plan);

}  // namespace accel::launch

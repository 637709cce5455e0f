// Chooses the secret a launcher hands its workers; see launch_secret.hpp.
#include "runtime/launch/launch_secret.hpp"

#include <unistd.h>

#include "runtime/common/errors.hpp"
#include "runtime/launch/line_relay.hpp"

namespace accel::launch {
namespace {

// Why this launcher is not alone in the job, for the refusal and the warning.
std::string spread(const LaunchPlan& plan) {
  if (plan.num_machines > 1)
    return "this job spans " + std::to_string(plan.num_machines) + " machines (num_machines), one launcher each";
  return "this launcher runs ranks " + std::to_string(plan.rank_offset) + ".." +
         std::to_string(plan.rank_offset + plan.local_world_size - 1) + " of the job's " +
         std::to_string(plan.world_size) + " and a scheduler (srun/mpirun, one task per process) starts the others'";
}

// What to do, in the order a user on a shared cluster should consider it.
std::string recipe() {
  const std::string var = secret::kSecretFileVariable;
  return "\n  fix: give every launcher of the job the same secret file, readable by you only:\n"
         "    (umask 077; head -c 32 /dev/urandom > ~/.accel-secret)   # or: (umask 077; openssl rand 32 > ~/.accel-secret)\n"
         "    export " + var + "=~/.accel-secret   # on every machine: a shared file system, or a 0600 copy on each\n"
         "  under SLURM, in the sbatch script around srun (srun passes the variable to every task):\n"
         "    (umask 077; head -c 32 /dev/urandom > ~/.accel-secret-$SLURM_JOB_ID)\n"
         "    export " + var + "=~/.accel-secret-$SLURM_JOB_ID\n"
         "    srun accel launch job.yaml; rm -f \"$" + var + "\"\n"
         "  under Open MPI: mpirun -x " + var + " ... accel launch job.yaml\n"
         "  on a network only you use, opt out instead: allow_unauthenticated: true in the job (or --set "
         "allow_unauthenticated=true on every launcher); SECURITY.md says what that leaves open";
}

// Whether this launcher runs every worker of the job (one machine, not a scheduler's task layout):
// only then may it draw a secret of its own.
bool runs_whole_job(const LaunchPlan& plan) {
  return plan.num_machines == 1 && plan.local_world_size == plan.world_size;
}

}  // namespace

LaunchSecret launch_secret(const LaunchPlan& plan, const EnvMap& env) {
  LaunchSecret out;
  auto file = env.find(secret::kSecretFileVariable);
  if (file != env.end() && !file->second.empty()) {
    out.secret = secret::JobSecret::from_file(file->second);
    out.origin = "the file " + file->second;
    return out;
  }
  if (runs_whole_job(plan)) {
    out.secret = secret::JobSecret::generate();
    out.origin = "generated";
    return out;
  }
  const std::string var = secret::kSecretFileVariable;
  if (!plan.allow_unauthenticated)
    throw UsageError("no job secret: " + spread(plan) + ", and " + var +
                     " is not set. Without one shared secret its launchers and workers cannot tell each other from "
                     "any other process that reaches its ports (other users' on a shared cluster), which could join "
                     "the job and read or forge what its processes exchange; nothing was started" + recipe());
  write_all(STDERR_FILENO, "[launcher] warning: no job secret: " + spread(plan) + ", " + var +
                               " is not set and the job sets allow_unauthenticated: true, so its launchers and "
                               "workers cannot tell each other from other users' processes that reach its ports. "
                               "On a shared cluster set " + var + " instead (SECURITY.md)\n");
  return out;
}

SecretFd::~SecretFd() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace accel::launch

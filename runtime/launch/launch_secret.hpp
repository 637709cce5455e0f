// The job secret a launcher hands its workers (runtime/common/job_secret.hpp, docs/design/0033).
// A launcher that runs every worker of the job (one machine, not an srun/mpirun task layout)
// draws a fresh one; launchers of a job spread over several launchers must share one, so they read
// ACCEL_SECRET_FILE (also honoured by a one-machine job). Without it such a job is refused (exit 2,
// with the recipe for the file) unless the job opts out with allow_unauthenticated, when it runs
// with a one-line warning that its control plane is unauthenticated.
#pragma once

#include <string>

#include "runtime/common/job_secret.hpp"
#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/worker_env.hpp"

namespace accel::launch {

struct LaunchSecret {
  secret::JobSecret secret;
  std::string origin;  // "generated", "the file NAME", or "" (absent)
};

// The secret for this launcher, from `env` (the launcher's environment). Throws UsageError when
// ACCEL_SECRET_FILE names a file that is refused, or when a multi-launcher job has none and
// plan.allow_unauthenticated is false; writes the warning to stderr when it has none and may.
LaunchSecret launch_secret(const LaunchPlan& plan, const EnvMap& env);

// The sealed memfd the workers inherit, owned by the caller (close it when the launch ends).
class SecretFd {
 public:
  explicit SecretFd(const secret::JobSecret& secret) : fd_(secret.present() ? secret.to_memfd() : -1) {}
  ~SecretFd();
  SecretFd(const SecretFd&) = delete;
  SecretFd& operator=(const SecretFd&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace accel::launch

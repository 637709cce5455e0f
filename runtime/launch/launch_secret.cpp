// Chooses the secret a launcher hands its workers; see launch_secret.hpp.
#include "runtime/launch/launch_secret.hpp"

#include <unistd.h>

#include "runtime/launch/line_relay.hpp"

namespace accel::launch {

LaunchSecret launch_secret(const LaunchPlan& plan, const EnvMap& env) {
  LaunchSecret out;
  auto file = env.find(secret::kSecretFileVariable);
  if (file != env.end() && !file->second.empty()) {
    out.secret = secret::JobSecret::from_file(file->second);
    out.origin = "the file " + file->second;
    return out;
  }
  const bool whole_job_here = plan.num_machines == 1 && plan.local_world_size == plan.world_size;
  if (whole_job_here) {
    out.secret = secret::JobSecret::generate();
    out.origin = "generated";
    return out;
  }
  const std::string warning =
      "[launcher] warning: no job secret: this job spans several launchers and " +
      std::string(secret::kSecretFileVariable) +
      " is not set, so its launchers and workers cannot tell each other from other users' processes that reach its "
      "ports. On a shared cluster give every launcher the same 0600 secret file (SECURITY.md)\n";
  write_all(STDERR_FILENO, warning);
  return out;
}

SecretFd::~SecretFd() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace accel::launch

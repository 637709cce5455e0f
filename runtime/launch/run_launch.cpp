// run_launch(): validates the plan, resolves the port and program, runs worker generations and
// restarts them after failures; see launch_plan.hpp and worker_group.hpp.
// Invariant: SIGINT/SIGTERM/SIGCHLD handlers are installed only while run_launch() runs (SignalGuard)
// and every worker generation is reaped before the next starts or the call returns.
#include <unistd.h>

#include <optional>
#include <stdexcept>

#include "runtime/common/errors.hpp"
#include "runtime/launch/elastic_launch.hpp"
#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/launch_secret.hpp"
#include "runtime/launch/launch_summary.hpp"
#include "runtime/launch/rank_logs.hpp"
#include "runtime/launch/rendezvous_listener.hpp"
#include "runtime/launch/shm_sweep.hpp"
#include "runtime/launch/signal_guard.hpp"
#include "runtime/launch/worker_env.hpp"
#include "runtime/launch/worker_group.hpp"
#include "runtime/launch/worker_process.hpp"

extern char** environ;

namespace accel::launch {
namespace {

// A plan that cannot describe a launch is a programming error of the caller (cli validates jobs).
void check_plan(const LaunchPlan& plan) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("invalid LaunchPlan: " + what); };
  if (plan.worker_argv.empty() || plan.worker_argv[0].empty()) fail("worker_argv is empty");
  if (plan.world_size < 1) fail("world_size must be >= 1");
  if (plan.local_world_size < 1) fail("local_world_size must be >= 1");
  if (plan.num_machines < 1 || plan.machine_rank < 0 || plan.machine_rank >= plan.num_machines)
    fail("machine_rank " + std::to_string(plan.machine_rank) + " is outside num_machines " +
         std::to_string(plan.num_machines));
  if (plan.rank_offset < 0 || plan.rank_offset + plan.local_world_size > plan.world_size)
    fail("ranks " + std::to_string(plan.rank_offset) + ".." + std::to_string(plan.rank_offset + plan.local_world_size - 1) +
         " do not fit in world_size " + std::to_string(plan.world_size));
  if (plan.local_rank_offset < 0 || plan.local_rank_offset + plan.local_world_size > machine_local_world_size(plan))
    fail("local ranks do not fit in machine_local_world_size");
  if (plan.master_port < 0 || plan.master_port > 65535) fail("master_port must be in 0..65535");
  if (plan.master_port == 0 && plan.local_world_size != plan.world_size)
    fail("master_port 0 (pick a free port) needs every worker on this launcher; set a fixed port");
  if (plan.max_restarts < 0) fail("max_restarts must be >= 0");
  if (plan.shutdown_grace.count() < 0) fail("shutdown_grace must be >= 0");
}

LaunchResult failed(std::string summary, int restarts = 0, int exit_code = 1) {
  LaunchResult result;
  result.exit_code = exit_code;
  result.summary = std::move(summary);
  result.restarts = restarts;
  return result;
}

}  // namespace

LaunchResult run_launch(const LaunchPlan& plan) {
  check_plan(plan);
  SignalGuard guard;

  GroupSetup setup;
  setup.base_env = environment_map(environ);
  setup.cores = available_cores();
  std::optional<SecretFd> secret_fd;
  try {
    // Chosen before any listener or worker: a refusal (exit 2) leaves nothing behind.
    const secret::JobSecret secret = plan.secret ? *plan.secret : launch_secret(plan, setup.base_env).secret;
    secret_fd.emplace(secret);
    setup.secret_fd = secret_fd->fd();
    remove_segments_of_gone_launchers();  // what the workers of a SIGKILLed launcher left in /dev/shm
    if (is_elastic(plan)) return run_elastic_launch(plan, std::move(setup), guard, secret);
  } catch (const UsageError& e) {  // a refused ACCEL_SECRET_FILE, or none for a multi-launcher job
    return failed(e.what(), 0, 2);
  } catch (const std::runtime_error& e) {
    return failed(std::string("cannot set up the job secret: ") + e.what());
  }
  // The launcher that runs rank 0 holds the port for the whole launch (every generation's rank 0
  // accepts on it); the others only connect to it.
  std::optional<RendezvousListener> listener;
  setup.master_port = plan.master_port;
  if (plan.rank_offset == 0) {
    try {
      listener.emplace(plan.master_port, plan.master_addr);
    } catch (const std::runtime_error& e) {
      return failed(e.what());
    }
    setup.master_port = listener->port();
    setup.rendezvous_fd = listener->fd();
  }
  try {
    EnvMap env = worker_environment(plan, 0, 0, setup.master_port, setup.base_env, setup.cores);
    setup.program_path = resolve_program(plan.worker_argv[0], env.count("PATH") ? env["PATH"] : "");
  } catch (const SpawnError& e) {
    return failed(std::string("cannot start the workers: ") + e.what());
  }

  std::vector<int> ranks;
  for (int i = 0; i < plan.local_world_size; ++i) ranks.push_back(plan.rank_offset + i);

  for (int restart = 0;; ++restart) {
    // An interrupt between generations is seen by the next one at its first check: it stops at once.
    std::optional<RankLogs> logs;
    try {
      logs.emplace(plan.log_dir, ranks, restart);
    } catch (const UsageError& e) {  // a link planted at a log's name, never followed: exit 2
      return failed(e.what(), restart, 2);
    } catch (const std::runtime_error& e) {
      return failed(e.what(), restart);
    }
    setup.restart_count = restart;
    setup.log_fds.clear();
    for (size_t i = 0; i < ranks.size(); ++i) setup.log_fds.push_back(logs->fd(i));

    GroupResult group = run_worker_group(plan, setup, guard);
    const bool may_restart = group.end == GroupEnd::WorkerFailed && !group.interrupt_signal && restart < plan.max_restarts;
    if (!may_restart) {
      LaunchResult result;
      result.exit_code = group.end == GroupEnd::Succeeded ? 0 : 1;
      result.summary = launch_summary(plan, group, restart);
      result.restarts = restart;
      return result;
    }
    write_all(STDERR_FILENO, "[launcher] " + restart_notice(group, plan.local_world_size, restart + 1, plan.max_restarts) + "\n");
  }
}

}  // namespace accel::launch

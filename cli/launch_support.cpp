#include "cli/launch_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <unistd.h>

#include "cli/elastic_plan.hpp"
#include "runtime/config/default_keys.hpp"
#include "runtime/config/dump.hpp"
#include "runtime/launch/cluster_env.hpp"
#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/output_dir_lock.hpp"
#include "runtime/launch/worker_env.hpp"
#include "runtime/launch/worker_program.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace accel::cli {
namespace {

// Machine 0 writes <output_dir>/job.resolved.yaml, machine k job.resolved.machine<k>.yaml: the
// launchers of one job may share the output directory (loopback, or a shared filesystem), and
// their resolved jobs differ (machine_rank). The temporary name is the process's own, so two
// launchers never rename each other's file.
std::string write_resolved_job(const config::LoadedJob& loaded) {
  fs::path dir = fs::absolute(loaded.job.training.output_dir);
  fs::create_directories(dir);
  const int machine = loaded.job.machine_rank;
  fs::path path = dir / (machine == 0 ? std::string("job.resolved.yaml")
                                      : "job.resolved.machine" + std::to_string(machine) + ".yaml");
  fs::path tmp = dir / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
  // First the keys that kept their default (workers tell them from keys the user set), then the job.
  fs::path defaults = config::default_keys_path(path.string());
  fs::path defaults_tmp = defaults.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(defaults_tmp);
    out << config::default_keys_text(loaded);
    if (!out) throw RunError("cannot write " + defaults_tmp.string());
  }
  fs::rename(defaults_tmp, defaults);
  {
    std::ofstream out(tmp);
    out << "# the job as accel launch resolved it (defaults, file, ACCEL_* environment, --set); "
           "workers read this file\n"
        << config::dump_job(loaded.job, loaded.sources, config::DumpStyle::Full);
    if (!out) throw RunError("cannot write " + tmp.string());
  }
  fs::rename(tmp, path);
  return path.string();
}

}  // namespace

void launch_job(const config::LoadedJob& loaded, const std::vector<std::string>& worker_argv,
                const std::map<std::string, std::string>& extra_env) {
  const auto& j = loaded.job;
  launch::LaunchPlan plan;
  plan.worker_argv = worker_argv;
  plan.world_size = j.num_processes;
  plan.num_machines = j.num_machines;
  plan.machine_rank = j.machine_rank;
  plan.local_world_size = j.num_processes / j.num_machines;
  plan.rank_offset = j.machine_rank * plan.local_world_size;
  plan.master_addr = j.main_process_ip;
  plan.master_port = j.main_process_port;
  plan.log_dir = (fs::absolute(j.training.output_dir) / "logs").string();
  plan.flight_dir = (fs::absolute(j.training.output_dir) / "flight").string();
  plan.max_restarts = j.max_restarts;
  plan.shutdown_grace = std::chrono::milliseconds(int64_t(j.shutdown_grace_s * 1000));
  plan.extra_env = extra_env;
  // How workers show the progress of long work (runtime/common/progress.hpp): drawn in place when
  // the launcher's stdout is a terminal (the relay redraws their status lines), else a start and
  // an end line. A value the user set is kept.
  if (!std::getenv("ACCEL_PROGRESS")) plan.extra_env["ACCEL_PROGRESS"] = isatty(STDOUT_FILENO) == 1 ? "tty" : "lines";
  fill_elastic_plan(loaded, plan);

  // Under srun or mpirun the scheduler chose the layout: follow it (or say why it cannot work).
  std::string cluster_error;
  auto cluster = launch::detect_cluster(launch::environment_map(environ), j.num_processes, j.num_machines, &cluster_error);
  if (!cluster_error.empty()) throw UsageError(cluster_error);
  if (cluster) {
    if (plan.min_machines > 0 && cluster->layout == launch::ClusterLayout::TaskPerProcess)
      throw UsageError("min_machines: an elastic job needs one launcher per machine, but " +
                       std::string(launch::scheduler_name(cluster->scheduler)) +
                       " started one task per process; start one task per machine (e.g. srun --ntasks-per-node=1)");
    launch::apply_cluster_adjustment(*cluster, plan);
    std::cerr << "accel launch: " << cluster->description << "\n";
  }
  // Held until the launch ends: no other launch that runs one of this launcher's ranks writes into
  // this output_dir (a scheduler's tasks of one job each hold their own rank).
  launch::OutputDirLock output_dir_lock(j.training.output_dir, plan.rank_offset, plan.local_world_size);
  plan.job_file = write_resolved_job(loaded);

  auto result = launch::run_launch(plan);
  if (result.exit_code == 2) throw UsageError(result.summary);  // an elastic rendezvous refused this machine
  if (result.exit_code != 0) throw RunError(result.summary);
}

void launch_worker_task(const config::LoadedJob& job, const std::string& task, const std::string& options) {
  std::map<std::string, std::string> env = {{"ACCEL_WORKER_TASK", task}};
  if (!options.empty()) env["ACCEL_WORKER_OPTIONS"] = options;
  launch_job(job, {launch::worker_program_path(), "run"}, env);
}

}  // namespace accel::cli

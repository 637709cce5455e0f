#include "cli/launch_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <vector>

#include <unistd.h>

#include "cli/elastic_plan.hpp"
#include "runtime/common/safe_file.hpp"
#include "runtime/config/default_keys.hpp"
#include "runtime/config/dump.hpp"
#include "runtime/launch/cluster_env.hpp"
#include "runtime/launch/launch_plan.hpp"
#include "runtime/launch/launch_secret.hpp"
#include "runtime/launch/output_dir_lock.hpp"
#include "runtime/launch/worker_env.hpp"
#include "runtime/launch/worker_program.hpp"
#include "runtime/tracking/event_file.hpp"
#include "runtime/tracking/trackers.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace accel::cli {
namespace {

// The files of output_dir a launch (its launcher and its workers) writes at fixed names, each
// refused when it is a symbolic link, before anything is written: another user who can write the
// directory may have planted it to make the launch overwrite a file of the user's. Every writer
// also opens its file never through a link (runtime/common/safe_file.hpp), so one planted while
// the job runs fails that writer instead. Directories (checkpoints/ on another disk, ...) may be links.
void refuse_planted_links(const config::LoadedJob& loaded, const fs::path& dir, const fs::path& resolved) {
  const auto& j = loaded.job;
  std::vector<fs::path> files = {resolved, config::default_keys_path(resolved.string()),
                                 dir / "metrics.jsonl", dir / "metrics.jsonl.tmp",
                                 dir / "flight" / (j.machine_rank == 0 ? std::string("diagnosis.txt")
                                                                       : "diagnosis.machine" +
                                                                             std::to_string(j.machine_rank) + ".txt"),
                                 fs::path(tracking::Trackers::tensorboard_dir(dir.string())) /
                                     tracking::EventFile::kFileName};
  if (j.training.save_weights) files.push_back(dir / "weights.safetensors");
  for (int rank = 0; rank < j.num_processes; ++rank) {
    files.push_back(dir / "logs" / ("rank_" + std::to_string(rank) + ".log"));
    files.push_back(dir / "report" / ("rank_" + std::to_string(rank) + ".json"));
    files.push_back(dir / "flight" / ("rank" + std::to_string(rank) + ".json"));
  }
  for (const fs::path& file : files) files::refuse_link(file.string());
}

// Machine 0 writes <output_dir>/job.resolved.yaml, machine k job.resolved.machine<k>.yaml: the
// launchers of one job may share the output directory (loopback, or a shared filesystem), and
// their resolved jobs differ (machine_rank). The temporary names are the process's own, so two
// launchers never rename each other's file, and created afresh (files::write_file_replacing).
std::string write_resolved_job(const config::LoadedJob& loaded) {
  fs::path dir = fs::absolute(loaded.job.training.output_dir);
  fs::create_directories(dir);
  const int machine = loaded.job.machine_rank;
  fs::path path = dir / (machine == 0 ? std::string("job.resolved.yaml")
                                      : "job.resolved.machine" + std::to_string(machine) + ".yaml");
  refuse_planted_links(loaded, dir, path);
  // First the keys that kept their default (workers tell them from keys the user set), then the job.
  files::write_file_replacing(config::default_keys_path(path.string()), config::default_keys_text(loaded));
  files::write_file_replacing(path.string(),
                              "# the job as accel launch resolved it (defaults, file, ACCEL_* environment, --set); "
                              "workers read this file\n" +
                                  config::dump_job(loaded.job, loaded.sources, config::DumpStyle::Full));
  return path.string();
}

}  // namespace

namespace {

// This launcher's share of the job: its ranks, the elastic keys, and the layout srun/mpirun chose
// (`cluster`, the scheduler's description, is set when one did).
launch::LaunchPlan plan_of_this_launcher(const config::LoadedJob& loaded, std::string* cluster_description) {
  const auto& j = loaded.job;
  launch::LaunchPlan plan;
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
  plan.allow_unauthenticated = j.allow_unauthenticated;
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
    if (cluster_description) *cluster_description = cluster->description;
  }
  return plan;
}

}  // namespace

std::string launch_secret_problem(const config::LoadedJob& loaded) {
  try {
    (void)launch::launch_secret(plan_of_this_launcher(loaded, nullptr), launch::environment_map(environ));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

void launch_job(const config::LoadedJob& loaded, const std::vector<std::string>& worker_argv,
                const std::map<std::string, std::string>& extra_env) {
  const auto& j = loaded.job;
  std::string cluster;
  launch::LaunchPlan plan = plan_of_this_launcher(loaded, &cluster);
  if (!cluster.empty()) std::cerr << "accel launch: " << cluster << "\n";
  plan.worker_argv = worker_argv;
  plan.extra_env = extra_env;
  // How workers show the progress of long work (runtime/common/progress.hpp): drawn in place when
  // the launcher's stdout is a terminal (the relay redraws their status lines), else a start and
  // an end line. A value the user set is kept.
  if (!std::getenv("ACCEL_PROGRESS")) plan.extra_env["ACCEL_PROGRESS"] = isatty(STDOUT_FILENO) == 1 ? "tty" : "lines";
  // The job secret, before anything is written or listened on: a multi-launcher job without
  // ACCEL_SECRET_FILE (unless allow_unauthenticated) or a refused file ends here with exit 2.
  plan.secret = launch::launch_secret(plan, launch::environment_map(environ)).secret;
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

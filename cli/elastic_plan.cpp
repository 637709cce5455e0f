#include "cli/elastic_plan.hpp"

#include <filesystem>

#include "runtime/checkpoint/checkpoint_store.hpp"
#include "runtime/config/elastic_rules.hpp"
#include "runtime/config/schema.hpp"

namespace accel::cli {
namespace {

std::string env_name(const char* key) { return config::find_field(key)->env_var(); }

// The job at `machines` machines, `machine_rank` among them: the world keys, and the accumulation
// the batch rule gives (the workers read ACCEL_* over the resolved job, which stays as written),
// with a few words on what that changed.
launch::RoundJob round_job(const config::JobConfig& j, int machines, int machine_rank) {
  launch::RoundJob r;
  const int per_machine = j.num_processes / j.num_machines;
  r.env[env_name("num_machines")] = std::to_string(machines);
  r.env[env_name("num_processes")] = std::to_string(machines * per_machine);
  r.env[env_name("machine_rank")] = std::to_string(machine_rank);
  const int g = j.training.gradient_accumulation_steps;
  const auto at = config::accumulation_at(g, j.num_machines, machines, j.elastic_batch);
  if (!at) {
    r.error = "elastic_batch keep_global cannot keep the global batch at " + std::to_string(machines) +
              " machines (gradient_accumulation_steps " + std::to_string(g) + " x " + std::to_string(j.num_machines) +
              " is not a multiple of " + std::to_string(machines) + ")";
    return r;
  }
  r.env[env_name("training.gradient_accumulation_steps")] = std::to_string(*at);
  const long long rows = (long long)j.training.micro_batch_size * per_machine;
  if (machines == j.num_machines)  // back at full size (the launcher prints it only after a restart)
    r.change = "gradient_accumulation_steps " + std::to_string(g) + " as the job sets it (global batch of " +
               std::to_string(rows * j.num_machines * g) + " rows)";
  else if (*at != g)
    r.change = "gradient_accumulation_steps " + std::to_string(g) + " -> " + std::to_string(*at) + " (global batch of " +
               std::to_string(rows * j.num_machines * g) + " rows kept)";
  else
    r.change = "micro batch and accumulation kept (global batch " + std::to_string(rows * j.num_machines * g) +
               " -> " + std::to_string(rows * machines * g) + " rows)";
  return r;
}

// "checkpoint step 4 (<dir>)" as this machine sees `latest` now. A round of one machine resumes from
// it; in a round of several, the workers take the oldest of the machines' latest steps (node-local
// checkpoints: a machine back from a partition lacks the steps written without it,
// CheckpointEngine::agree_on_latest), which this launcher cannot see, so the line says so.
std::string resume_point(const std::string& output_dir, const std::string& resume, int machines) {
  if (resume == "never") return "the start (training.resume: never)";
  if (resume != "auto") return resume;
  std::optional<std::string> dir;
  try {
    dir = checkpoint::find_latest_checkpoint(checkpoint::checkpoints_root(output_dir));
  } catch (const std::exception&) {
  }
  if (!dir) return "the start (no checkpoint yet)";
  const std::string name = std::filesystem::path(*dir).filename().string();  // step_<N, zero-padded>
  const size_t digits = name.find_first_not_of('0', 5);
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return *dir;
  const std::string here =
      "checkpoint step " + (digits == std::string::npos ? "0" : name.substr(digits)) + " (" + *dir + ")";
  return machines > 1 ? "the newest checkpoint every machine holds (this machine's latest is " + here + ")" : here;
}

}  // namespace

void fill_elastic_plan(const config::LoadedJob& loaded, launch::LaunchPlan& plan) {
  const config::JobConfig& j = loaded.job;
  if (!config::is_elastic(j)) return;
  plan.min_machines = j.min_machines;
  plan.join_window = std::chrono::milliseconds(int64_t(j.elastic_join_window_s * 1000));
  plan.peer_timeout = std::chrono::seconds(j.elastic_peer_timeout_s);
  plan.rendezvous_timeout = std::chrono::milliseconds(int64_t(j.rendezvous_timeout_s) * 1000);
  plan.round_job = [j](int machines, int machine_rank) { return round_job(j, machines, machine_rank); };
  if (j.rdzv_backend == config::RdzvBackend::etcd) {
    plan.rdzv_etcd = j.rdzv_endpoint;
    plan.rdzv_lease_s = j.rdzv_lease_s;
  }
  const std::string output_dir = std::filesystem::absolute(j.training.output_dir).string();
  plan.resume_point = [output_dir, resume = j.training.resume](int machines) {
    return resume_point(output_dir, resume, machines);
  };
}

}  // namespace accel::cli

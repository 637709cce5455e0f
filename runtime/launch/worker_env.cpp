// The environment contract of one worker; see worker_env.hpp.
#include "runtime/launch/worker_env.hpp"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace accel::launch {

EnvMap environment_map(char** envp) {
  EnvMap env;
  for (char** entry = envp; entry && *entry; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (!eq || eq == *entry) continue;
    env.emplace(std::string(*entry, static_cast<size_t>(eq - *entry)), std::string(eq + 1));  // first definition wins, like getenv
  }
  return env;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int machine_local_world_size(const LaunchPlan& plan) {
  return plan.machine_local_world_size > 0 ? plan.machine_local_world_size : plan.local_world_size;
}

EnvMap worker_environment(const LaunchPlan& plan, int local_rank, int restart_count, int master_port,
                          const EnvMap& base, int cores) {
  EnvMap env = base;
  const int machine_workers = machine_local_world_size(plan);
  if (!base.count("OMP_NUM_THREADS") && !plan.extra_env.count("OMP_NUM_THREADS"))
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, cores / std::max(1, machine_workers)));
  for (const auto& [name, value] : plan.extra_env) env[name] = value;

  env["RANK"] = std::to_string(plan.rank_offset + local_rank);
  env["LOCAL_RANK"] = std::to_string(plan.local_rank_offset + local_rank);
  env["WORLD_SIZE"] = std::to_string(plan.world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(machine_workers);
  env["GROUP_RANK"] = std::to_string(plan.machine_rank);
  env["MASTER_ADDR"] = plan.master_addr;
  env["MASTER_PORT"] = std::to_string(master_port);
  if (plan.job_file.empty())
    env.erase("ACCEL_JOB");  // an inherited ACCEL_JOB would point a worker at someone else's job
  else
    env["ACCEL_JOB"] = plan.job_file;
  env["ACCEL_RESTART_COUNT"] = std::to_string(restart_count);
  if (plan.flight_dir.empty())
    env.erase("ACCEL_FLIGHT_DIR");  // an inherited one would collect this run's records into another's directory
  else
    env["ACCEL_FLIGHT_DIR"] = plan.flight_dir;
  return env;
}

std::vector<std::string> environment_strings(const EnvMap& env) {
  std::vector<std::string> strings;
  strings.reserve(env.size());
  for (const auto& [name, value] : env) strings.push_back(name + "=" + value);
  return strings;
}

}  // namespace accel::launch

#include "runtime/launch/elastic_launch.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "runtime/common/errors.hpp"
#include "runtime/launch/elastic_client.hpp"
#include "runtime/launch/elastic_host.hpp"
#include "runtime/launch/launch_summary.hpp"
#include "runtime/launch/line_relay.hpp"
#include "runtime/launch/rank_logs.hpp"
#include "runtime/launch/rendezvous_listener.hpp"
#include "runtime/launch/worker_process.hpp"

namespace accel::launch {
namespace {

LaunchResult ended(int exit_code, std::string summary, int restarts) {
  LaunchResult result;
  result.exit_code = exit_code;
  result.summary = std::move(summary);
  result.restarts = restarts;
  return result;
}

void say(const std::string& line) { write_all(STDERR_FILENO, "[launcher] " + line + "\n"); }

ElasticMessage join_message(int machine) {
  char name[256] = {};
  ElasticMessage m;
  m.kind = ElasticKind::Join;
  m.machine = machine;
  m.text = gethostname(name, sizeof name - 1) == 0 ? name : "?";
  return m;
}

std::string ranks_text(int first, int count) {
  return count == 1 ? "rank " + std::to_string(first)
                    : "ranks " + std::to_string(first) + "-" + std::to_string(first + count - 1);
}

// The one line a launcher prints when a round starts: on a restart who left or came back, the new
// world, what the batch rule changed and where the workers resume.
std::string round_line(const LaunchPlan& plan, const ElasticMessage& round, const std::vector<int>& previous,
                       int previous_world, const RoundJob& job) {
  const int k = static_cast<int>(round.machines.size());
  const int world = k * plan.local_world_size;
  std::vector<int> joined;
  if (!previous.empty())
    for (int m : round.machines)
      if (std::find(previous.begin(), previous.end(), m) == previous.end()) joined.push_back(m);
  auto machines = [](const std::vector<int>& list) {
    return "machine" + std::string(list.size() > 1 ? "s " : " ") + machines_text(list);
  };
  std::string line;
  if (round.round == 0) {
    line = "elastic round 0: " + machines(round.machines) + " of " + std::to_string(plan.num_machines) + " joined";
  } else {
    line = "elastic restart " + std::to_string(round.round) + " of " + std::to_string(plan.max_restarts) + ": " +
           round.text;
    if (!round.left.empty()) line += "; " + machines(round.left) + " left the job";
    if (!joined.empty()) line += "; " + machines(joined) + " joined";
    line += "; continuing on " + machines(round.machines) + " (" + std::to_string(k) + " of " +
            std::to_string(plan.num_machines) + ")";
  }
  line += ", world " + (previous_world > 0 && previous_world != world ? std::to_string(previous_world) + " -> " : "") +
          std::to_string(world) + " (" + ranks_text(round.rank * plan.local_world_size, plan.local_world_size) +
          " here)";
  if (!job.change.empty() && (round.round > 0 || k < plan.num_machines)) line += ", " + job.change;
  if (round.round > 0 && plan.resume_point) line += ", resuming from " + plan.resume_point();
  return line;
}

}  // namespace

bool is_elastic(const LaunchPlan& plan) { return plan.min_machines >= 1 && plan.min_machines < plan.num_machines; }

LaunchResult run_elastic_launch(const LaunchPlan& plan, GroupSetup setup, SignalGuard& guard,
                                const secret::JobSecret& secret) {
  try {
    auto path = setup.base_env.count("PATH") ? setup.base_env.at("PATH") : "";
    setup.program_path = resolve_program(plan.worker_argv[0], path);
  } catch (const SpawnError& e) {
    return ended(1, std::string("cannot start the workers: ") + e.what(), 0);
  }
  // Machine 0 holds the workers' store port from start to end (a free one: rank 0 accepts on it,
  // docs/design/0002) and serves the rounds on master_port.
  std::optional<RendezvousListener> store_port;
  std::optional<ElasticHost> host;
  if (plan.machine_rank == 0) {
    try {
      store_port.emplace(0, plan.master_addr);
      RoundLimits limits;
      limits.min_machines = plan.min_machines;
      limits.max_machines = plan.num_machines;
      limits.max_restarts = plan.max_restarts;
      limits.join_window = plan.join_window;
      limits.gather_timeout = plan.rendezvous_timeout;
      limits.worker_port = store_port->port();
      host.emplace(plan.master_port, plan.master_addr, limits, secret);
    } catch (const std::runtime_error& e) {
      return ended(1, e.what(), 0);
    }
  }
  std::optional<ElasticClient> client;
  try {
    client.emplace(plan.master_addr, plan.master_port, plan.rendezvous_timeout, guard, secret);
  } catch (const std::runtime_error& e) {
    return ended(1, "machine " + std::to_string(plan.machine_rank) + ": " + e.what(), 0);
  }
  auto interrupted = [&](int restarts) {
    return ended(1, "interrupted by " + std::string(guard.interrupt_signal() == SIGTERM ? "SIGTERM" : "SIGINT"),
                 restarts);
  };
  if (!client->connected()) return interrupted(0);
  const std::string me = "machine " + std::to_string(plan.machine_rank);
  client->send(join_message(plan.machine_rank));

  std::vector<int> previous;  // the machines of this launcher's last round
  int previous_world = 0;
  int rounds_run = 0;
  bool finished_here = false;                // this machine's group of the last round exited 0
  std::optional<std::string> last_failure;  // the summary of this machine's last failed group
  for (;;) {
    std::optional<ElasticMessage> message = client->next(guard);
    if (!message) {
      if (guard.interrupt_signal()) return interrupted(rounds_run);
      if (finished_here) return ended(0, "all workers exited with code 0 (machine 0 closed the rendezvous)", rounds_run);
      return ended(1, me + ": lost machine 0's rendezvous at " + client->address() +
                          ": machine 0 hosts the rendezvous and rank 0's store, so the job cannot go on without it; "
                          "this machine's workers were stopped. Rerun `accel launch` on every machine to continue "
                          "from the last checkpoint" + (last_failure ? "\n" + *last_failure : ""),
                   rounds_run);
    }
    switch (message->kind) {
      case ElasticKind::Wait:
        say(me + " joined while round " + std::to_string(message->round) +
            " runs without it: it joins the job at the next restart round");
        continue;
      case ElasticKind::Stop:  // the round this launcher ran has ended: back for the next one
        finished_here = false;
        client->send(join_message(plan.machine_rank));
        continue;
      case ElasticKind::End: {
        if (message->exit_code == 0)
          return ended(0, finished_here ? "all workers exited with code 0" + std::string(rounds_run > 1 ? " after " +
                                                  std::to_string(rounds_run - 1) + " elastic restart(s)" : "")
                                        : me + " did not join: " + message->text + " before a restart round let it in",
                       rounds_run);
        std::string summary = "the elastic job ended: " + message->text;
        if (last_failure) summary += "\n" + *last_failure;
        return ended(message->exit_code == 2 ? 2 : 1, summary, rounds_run);
      }
      case ElasticKind::Round: break;
      default: continue;  // a launcher's message kind: not sent by a host
    }
    const ElasticMessage& round = *message;
    const int machines = static_cast<int>(round.machines.size());
    LaunchPlan here = plan;
    here.num_machines = machines;
    here.machine_rank = round.rank;
    here.world_size = machines * plan.local_world_size;
    here.rank_offset = round.rank * plan.local_world_size;
    here.master_port = round.worker_port;
    RoundJob job = plan.round_job ? plan.round_job(machines, round.rank) : RoundJob{};
    if (!job.error.empty()) return ended(1, me + ": " + job.error, rounds_run);  // checked at validation
    for (const auto& [name, value] : job.env) here.extra_env[name] = value;
    say(round_line(plan, round, previous, previous_world, job));
    previous = round.machines;
    previous_world = here.world_size;
    ++rounds_run;
    finished_here = false;
    if (client->has_buffered_message()) continue;  // the round ended before it started here

    std::vector<int> ranks;
    for (int i = 0; i < here.local_world_size; ++i) ranks.push_back(here.rank_offset + i);
    std::optional<RankLogs> logs;
    try {
      logs.emplace(plan.log_dir, ranks, round.round);
    } catch (const UsageError& e) {  // a link planted at a log's name: exit 2, as before a launch
      return ended(2, e.what(), rounds_run);
    } catch (const std::runtime_error& e) {
      return ended(1, e.what(), rounds_run);
    }
    setup.restart_count = round.round;
    setup.master_port = round.worker_port;
    setup.rendezvous_fd = store_port ? store_port->fd() : -1;
    setup.stop_fd = client->fd();
    setup.log_fds.clear();
    for (size_t i = 0; i < ranks.size(); ++i) setup.log_fds.push_back(logs->fd(i));

    GroupResult group = run_worker_group(here, setup, guard);
    switch (group.end) {
      case GroupEnd::Succeeded:
        finished_here = true;
        client->send(elastic_message(ElasticKind::Done, round.round));
        break;
      case GroupEnd::WorkerFailed: {
        const std::string failure = describe_failure_line(group);
        last_failure = launch_summary(here, group, round.round);
        say(me + ": " + failure + "; machine 0 decides on a restart round");
        client->send(elastic_message(ElasticKind::Failed, round.round, failure));
        break;
      }
      case GroupEnd::StopRequested: break;  // the message that stopped it is read next
      case GroupEnd::Interrupted:
      case GroupEnd::SpawnFailed: return ended(1, launch_summary(here, group, round.round), round.round);
    }
  }
}

}  // namespace accel::launch

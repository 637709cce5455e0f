#include "runtime/launch/elastic_launch.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <stdexcept>

#include "runtime/common/errors.hpp"
#include "runtime/launch/elastic_client.hpp"
#include "runtime/launch/elastic_host.hpp"
#include "runtime/launch/etcd_rendezvous.hpp"
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
  if (round.round > 0 && plan.resume_point) line += ", resuming from " + plan.resume_point(k);
  return line;
}

std::string hostname() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "?";
}

// What hosts a job's rounds on this machine: the workers' store port, the membership listener and,
// with etcd, the lease the host key lives under (destroyed first: the key goes before the host).
struct HostSide {
  std::optional<RendezvousListener> store_port;
  std::optional<ElasticHost> host;
  std::optional<HostLease> lease;

  void start(const LaunchPlan& plan, const std::string& address, int port, RoundLimits limits,
             const secret::JobSecret& secret) {
    store_port.emplace(0, address);
    limits.min_machines = plan.min_machines;
    limits.max_machines = plan.num_machines;
    limits.max_restarts = plan.max_restarts;
    limits.join_window = plan.join_window;
    limits.peer_timeout = plan.peer_timeout;
    limits.gather_timeout = plan.rendezvous_timeout;
    limits.worker_port = store_port->port();
    host.emplace(port, address, limits, secret);
  }
  void stop() {
    lease.reset();
    host.reset();
    store_port.reset();
  }
};

// Where this launcher's rounds are hosted for one host's term.
struct HostChoice {
  std::string address;  // the rendezvous host's address (the workers' MASTER_ADDR)
  int port = 0;         // its membership listener
  int machine = 0;      // its machine_rank
};

// etcd (docs/design/0034): finds the job's host, or becomes it when there is none and this launcher
// may campaign (machine 0 at the start; any survivor once `lost` is gone from etcd; a `lost` host
// still in etcd after two TTLs is rejoined). Polls every 250 ms until `deadline`. Returns the host,
// or nullopt with *failure set (or an interrupt).
std::optional<HostChoice> elect(const LaunchPlan& plan, EtcdRendezvous& etcd, HostSide& side, RoundLimits limits,
                                const std::optional<HostRecord>& lost, std::chrono::steady_clock::time_point deadline,
                                SignalGuard& guard, const secret::JobSecret& secret, std::string* failure) {
  std::string last_error;
  // A lost host whose lease is still renewed after two TTLs is alive (this machine was cut off from
  // it, not it from etcd): go back to it, as a launcher that joins while a round runs.
  const int two_leases = 2 * plan.rdzv_lease_s;
  const auto alive_after = std::chrono::steady_clock::now() + std::chrono::seconds(two_leases);
  const std::string me = "machine " + std::to_string(plan.machine_rank);
  for (;;) {
    if (guard.interrupt_signal()) return std::nullopt;
    try {
      const auto h = etcd.host();
      const bool the_lost_one = h && lost && h->address == lost->address && h->rendezvous_port == lost->rendezvous_port;
      if (h && (!the_lost_one || std::chrono::steady_clock::now() >= alive_after)) {
        if (the_lost_one)
          say(me + ": machine " + std::to_string(h->machine) + "'s lease in etcd is still renewed " +
              std::to_string(two_leases) + " s after the connection broke: the host is alive (the network between "
              "the machines broke, not the host); going back to it, no host is elected");
        else if (lost)
          say("machine " + std::to_string(h->machine) + " at " + h->rendezvous() +
              " hosts the job's rendezvous now, elected in etcd; " + me + " joins it");
        return HostChoice{h->address, h->rendezvous_port, h->machine};
      }
      if (!h && (plan.machine_rank == 0 || lost)) {
        const std::string address = etcd.etcd().local_address();  // routes to etcd, so the others route to it
        limits.host_machine = plan.machine_rank;
        side.start(plan, address, 0, limits, secret);
        ElasticHost* host = &*side.host;
        const std::string endpoints = etcd.etcd().endpoints_text();
        side.lease.emplace(etcd.etcd(), plan.rdzv_lease_s, [host, endpoints](const std::string& why) {
          host->abandon("the etcd rendezvous at " + endpoints + " did not keep the host's lease: " + why +
                        "; the job stops rather than risk two hosts. Rerun `accel launch` on every machine when etcd "
                        "is healthy: the job resumes from the last checkpoint");
        });
        HostRecord mine{plan.machine_rank, address, side.host->port(), side.store_port->port()};
        if (etcd.claim(mine, side.lease->id())) return HostChoice{address, mine.rendezvous_port, plan.machine_rank};
        side.stop();  // another survivor was elected first: join it on the next pass
        continue;
      }
    } catch (const EtcdError& e) {
      side.stop();
      last_error = e.what();
    } catch (const std::runtime_error& e) {  // a host record without the job's MAC, a port that will not bind
      side.stop();
      *failure = e.what();
      return std::nullopt;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      *failure = "no host of the job's rendezvous " + std::string(lost ? "was elected" : "appeared") +
                 " in the etcd cluster at " + etcd.etcd().endpoints_text() + " within rendezvous_timeout_s (" +
                 std::to_string(plan.rendezvous_timeout.count() / 1000) + " s)" +
                 (last_error.empty() ? std::string(lost ? "" : ": start `accel launch` on machine 0")
                                     : ": " + last_error);
      return std::nullopt;
    }
    pollfd p{guard.wake_fd(), POLLIN, 0};
    if (poll(&p, 1, 250) > 0) guard.drain();
  }
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
  const std::string me = "machine " + std::to_string(plan.machine_rank);
  std::optional<EtcdRendezvous> etcd;
  if (!plan.rdzv_etcd.empty()) {
    try {
      etcd.emplace(plan.rdzv_etcd, secret, plan.master_port, plan.rdzv_lease_s);
    } catch (const std::runtime_error& e) {
      return ended(1, me + ": " + e.what(), 0);
    }
  }
  auto interrupted = [&](int restarts) {
    return ended(1, "interrupted by " + std::string(guard.interrupt_signal() == SIGTERM ? "SIGTERM" : "SIGINT"),
                 restarts);
  };

  std::vector<int> previous;  // the machines of this launcher's last round
  int previous_world = 0;
  int rounds_run = 0;
  int last_round = -1;
  bool finished_here = false;                // this machine's group of the last round exited 0
  std::optional<std::string> last_failure;  // the summary of this machine's last failed group
  std::optional<HostRecord> lost;           // etcd: the host this launcher lost, while electing the next
  std::string lost_cause;                   // etcd: why the next host's first round starts
  // One pass per host: the static rendezvous has one (machine 0's launcher); with etcd, a host that
  // is lost is followed by the one the survivors elect (docs/design/0034).
  for (;;) {
    HostSide side;
    HostChoice chosen{plan.master_addr, plan.master_port, 0};
    if (!etcd) {
      // Machine 0 holds the workers' store port from start to end (a free one: rank 0 accepts on it,
      // docs/design/0002) and serves the rounds on master_port.
      if (plan.machine_rank == 0) {
        try {
          side.start(plan, plan.master_addr, plan.master_port, RoundLimits{}, secret);
        } catch (const std::runtime_error& e) {
          return ended(1, e.what(), 0);
        }
      }
    } else {
      RoundLimits limits;
      limits.first_round = last_round + 1;
      limits.first_cause = lost_cause;
      limits.previous = previous;
      std::string failure;
      const auto deadline = std::chrono::steady_clock::now() + plan.rendezvous_timeout;
      auto found = elect(plan, *etcd, side, limits, lost, deadline, guard, secret, &failure);
      if (!found) {
        if (guard.interrupt_signal()) return interrupted(rounds_run);
        return ended(1, me + ": " + failure + (last_failure ? "\n" + *last_failure : ""), rounds_run);
      }
      chosen = *found;
      if (lost && side.host) say(me + " (" + hostname() + ") hosts the job's rendezvous now, elected in etcd");
    }
    std::optional<ElasticClient> client;
    try {
      // With etcd a host that does not answer is a stale record: back to the election after 2 TTLs.
      const auto connect_timeout =
          etcd ? std::min<std::chrono::milliseconds>(plan.rendezvous_timeout, std::chrono::seconds(2 * plan.rdzv_lease_s))
               : plan.rendezvous_timeout;
      client.emplace(chosen.address, chosen.port, connect_timeout, guard, secret, plan.peer_timeout);
    } catch (const std::runtime_error& e) {
      if (etcd && !side.host) {
        lost = HostRecord{chosen.machine, chosen.address, chosen.port, 0};
        continue;
      }
      return ended(1, me + ": " + e.what(), 0);
    }
    if (!client->connected()) return interrupted(rounds_run);
    client->send(join_message(plan.machine_rank));

    for (;;) {
      std::optional<ElasticMessage> message = client->next(guard);
      if (!message) {
        if (guard.interrupt_signal()) return interrupted(rounds_run);
        if (finished_here) return ended(0, "all workers exited with code 0 (machine 0 closed the rendezvous)", rounds_run);
        if (etcd && !side.host) break;  // the host was lost: elect the next one
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
      here.master_addr = chosen.address;
      here.master_port = round.worker_port;
      RoundJob job = plan.round_job ? plan.round_job(machines, round.rank) : RoundJob{};
      if (!job.error.empty()) return ended(1, me + ": " + job.error, rounds_run);  // checked at validation
      for (const auto& [name, value] : job.env) here.extra_env[name] = value;
      // The workers' job names the elected host as machine 0 (Gloo binds the address routed toward it).
      if (etcd) here.extra_env["ACCEL_MAIN_PROCESS_IP"] = chosen.address;
      say(round_line(plan, round, previous, previous_world, job));
      if (etcd && side.lease) {
        try {
          etcd->record_round(round.round, round.machines, side.lease->id());
        } catch (const EtcdError&) {  // a record for operators: the lease's renewals decide about etcd's health
        }
      }
      previous = round.machines;
      previous_world = here.world_size;
      last_round = round.round;
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
      setup.rendezvous_fd = side.store_port ? side.store_port->fd() : -1;
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
          // The host decides: machine 0, or the machine elected in its place (etcd).
          say(me + ": " + failure + "; machine " + std::to_string(chosen.machine) + " decides on a restart round");
          client->send(elastic_message(ElasticKind::Failed, round.round, failure));
          break;
        }
        case GroupEnd::StopRequested: break;  // the message that stopped it is read next
        case GroupEnd::Interrupted:
        case GroupEnd::SpawnFailed: return ended(1, launch_summary(here, group, round.round), round.round);
      }
    }
    // etcd: the host's launcher is gone (its connection closed). Its lease lapses within the TTL;
    // then the survivors elect the next host, which goes on from the next round.
    lost = HostRecord{chosen.machine, chosen.address, chosen.port, 0};
    if (last_round + 1 > plan.max_restarts)
      return ended(1, me + ": lost the job's rendezvous host, machine " + std::to_string(chosen.machine) + " at " +
                          client->address() + ", and no restart is left (max_restarts " +
                          std::to_string(plan.max_restarts) + ")" + (last_failure ? "\n" + *last_failure : ""),
                   rounds_run);
    lost_cause = "machine " + std::to_string(chosen.machine) + ", which hosted the rendezvous, was lost: its launcher's "
                 "connection closed and its lease in etcd expired";
    // Whether the host died or only this machine's connection to it broke, etcd tells: its lease
    // lapses, or it is still renewed two leases later (elect() says which it was).
    say(me + ": lost the job's rendezvous host, machine " + std::to_string(chosen.machine) + " at " + client->address() +
        "; waiting to see whether its lease in etcd lapses (then the survivors elect the next host, within " +
        std::to_string(plan.rdzv_lease_s) + " s) or is still renewed after " + std::to_string(2 * plan.rdzv_lease_s) +
        " s (then the host is alive and this machine goes back to it)");
  }
}

}  // namespace accel::launch

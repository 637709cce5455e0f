// The rounds of an elastic job's membership, as machine 0's rendezvous host keeps them
// (docs/design/0027). Pure: no sockets, no clock of its own; the host feeds it the launchers'
// messages, their lost connections and the time, and sends what take_outgoing() returns.
//
// A round gathers launchers (join), then closes: at once when num_machines have joined, or when
// min_machines have (machine 0 among them), no member of the previous round is still on its way
// back, and the join window has passed since. It then numbers the members densely by machine_rank
// (machine 0 stays rank 0: its rank 0 hosts the workers' store) and runs. A member that reports a
// failed group, or whose connection closes, ends the round: every member is told to stop, and the
// next round gathers whoever rejoins, after at most max_restarts such restarts. A launcher that
// joins while a round runs waits for the next one; one that joins twice with a machine_rank in use
// is refused. When every member reports done, every launcher, waiting ones too, is told the job ended.
// Invariant: at most one round runs at a time, and every member of a round hears of its end (stop
// or end) exactly once.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launch/elastic_messages.hpp"

namespace accel::launch {

struct RoundLimits {
  int min_machines = 1;
  int max_machines = 1;  // num_machines
  int max_restarts = 0;
  std::chrono::milliseconds join_window{10000};     // elastic_join_window_s
  std::chrono::seconds peer_timeout{15};            // elastic_peer_timeout_s: a silent connection's life
  std::chrono::milliseconds gather_timeout{300000};  // rendezvous_timeout_s: how long a round may gather
  int worker_port = 0;                               // the workers' store port on machine 0
  // A host elected in etcd after the last one was lost (docs/design/0034): its machine is rank 0 of
  // every round in place of machine 0, and its rounds go on from the lost host's numbering.
  int host_machine = 0;          // the machine_rank of the launcher that hosts (and must be in a round)
  int first_round = 0;           // the first round's number (the lost host's last round + 1)
  std::string first_cause;       // why the first round starts ("" for the job's round 0)
  std::vector<int> previous;     // the machines of the lost host's last round
};

class MembershipRounds {
 public:
  using Clock = std::chrono::steady_clock;
  struct Outgoing {
    int client = -1;
    ElasticMessage message;
    bool close_after = false;  // a refused launcher: its connection is closed after the message
  };

  MembershipRounds(const RoundLimits& limits, Clock::time_point now);

  void received(int client, const ElasticMessage& message, Clock::time_point now);
  void closed(int client, Clock::time_point now);
  void tick(Clock::time_point now);

  // When tick() next has something to decide (a window or a timeout ends), while a round gathers.
  std::optional<Clock::time_point> deadline() const;
  std::vector<Outgoing> take_outgoing();
  bool over() const { return phase_ == Phase::Over; }
  // Ends the job for every launcher with `exit_code` and `why` (the host can no longer serve).
  void end_job(int exit_code, const std::string& why) {
    if (phase_ != Phase::Over) end_all(exit_code, why);
  }
  int round() const { return round_; }

 private:
  enum class Phase { Gathering, Running, Over };
  enum class State { Joined, Member, Pending, Waiting, Done };
  struct Launcher {
    int machine = -1;
    std::string host;
    State state = State::Joined;
  };

  void join(int client, const ElasticMessage& message, Clock::time_point now);
  void try_close(Clock::time_point now);
  void close_round();
  void restart(const std::string& cause, Clock::time_point now, std::vector<int> members);
  std::vector<int> round_machines() const;  // the machines of the running round, sorted
  void end_all(int exit_code, const std::string& why);
  void send(int client, ElasticMessage message, bool close_after = false);
  bool in_round(const Launcher& l) const { return l.state == State::Member || l.state == State::Done; }
  static std::string name(const Launcher& l);

  RoundLimits limits_;
  Phase phase_ = Phase::Gathering;
  int round_ = 0;
  Clock::time_point opened_at_;
  std::optional<Clock::time_point> enough_since_;  // min_machines (with machine 0) joined since then
  std::string cause_;                              // why the current round was started, "" for round 0
  std::vector<int> previous_;                      // the machines of the round before
  std::map<int, Launcher> launchers_;              // by client
  std::vector<Outgoing> outgoing_;
};

}  // namespace accel::launch

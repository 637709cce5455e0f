#include "runtime/launch/membership_rounds.hpp"

#include <algorithm>

namespace accel::launch {
namespace {

ElasticMessage wait_for(int round) {
  ElasticMessage m;
  m.kind = ElasticKind::Wait;
  m.round = round;
  return m;
}

std::string seconds_text(std::chrono::milliseconds t) {
  const auto ms = t.count();
  return std::to_string(ms / 1000) + (ms % 1000 ? "." + std::to_string(ms % 1000 / 100) : "") + " s";
}

}  // namespace

MembershipRounds::MembershipRounds(const RoundLimits& limits, Clock::time_point now)
    : limits_(limits), round_(limits.first_round), opened_at_(now), cause_(limits.first_cause), previous_(limits.previous) {}

std::string MembershipRounds::name(const Launcher& l) {
  return "machine " + std::to_string(l.machine) + (l.host.empty() ? "" : " (" + l.host + ")");
}

void MembershipRounds::send(int client, ElasticMessage message, bool close_after) {
  outgoing_.push_back(Outgoing{client, std::move(message), close_after});
}

std::vector<MembershipRounds::Outgoing> MembershipRounds::take_outgoing() {
  std::vector<Outgoing> out;
  out.swap(outgoing_);
  return out;
}

void MembershipRounds::received(int client, const ElasticMessage& m, Clock::time_point now) {
  if (m.kind == ElasticKind::Join) return join(client, m, now);
  auto it = launchers_.find(client);
  if (it == launchers_.end() || phase_ != Phase::Running || m.round != round_ || it->second.state != State::Member)
    return;  // late news of an earlier round: that round has already ended
  if (m.kind == ElasticKind::Failed) return restart(name(it->second) + ": " + m.text, now, round_machines());
  if (m.kind == ElasticKind::Done) {
    it->second.state = State::Done;
    const bool all_done = std::none_of(launchers_.begin(), launchers_.end(),
                                       [](const auto& e) { return e.second.state == State::Member; });
    if (all_done) end_all(0, "the job finished in round " + std::to_string(round_));
  }
}

void MembershipRounds::join(int client, const ElasticMessage& m, Clock::time_point now) {
  auto known = launchers_.find(client);
  if (known != launchers_.end()) {  // a member told to stop, back for the next round
    if (known->second.state != State::Pending) return;
    if (phase_ == Phase::Gathering) {
      known->second.state = State::Joined;
      try_close(now);
    } else if (phase_ == Phase::Running) {
      known->second.state = State::Waiting;
      send(client, wait_for(round_));
    }
    return;
  }
  ElasticMessage refusal;
  refusal.kind = ElasticKind::End;
  refusal.exit_code = 2;
  if (m.machine < 0 || m.machine >= limits_.max_machines) {
    refusal.text = "machine_rank " + std::to_string(m.machine) + " is outside 0.." +
                   std::to_string(limits_.max_machines - 1) + " (num_machines " + std::to_string(limits_.max_machines) +
                   " on machine 0); give every machine the same num_machines and its own machine_rank";
    return send(client, refusal, true);
  }
  for (const auto& [other, l] : launchers_)
    if (l.machine == m.machine) {
      refusal.text = "machine_rank " + std::to_string(m.machine) + " is already in the job (" + name(l) +
                     "); give every machine its own machine_rank";
      return send(client, refusal, true);
    }
  if (phase_ == Phase::Over) {
    refusal.exit_code = 1;
    refusal.text = "the job has already ended";
    return send(client, refusal, true);
  }
  Launcher l;
  l.machine = m.machine;
  l.host = m.text;
  l.state = phase_ == Phase::Gathering ? State::Joined : State::Waiting;
  launchers_[client] = l;
  if (l.state == State::Waiting) send(client, wait_for(round_));
  try_close(now);
}

void MembershipRounds::closed(int client, Clock::time_point now) {
  auto it = launchers_.find(client);
  if (it == launchers_.end()) return;
  const Launcher gone = it->second;
  const std::vector<int> members = round_machines();  // the lost one among them
  launchers_.erase(it);
  if (phase_ == Phase::Running && gone.state == State::Member)
    return restart(name(gone) + " was lost: its launcher's connection to machine 0 closed", now, members);
  if (phase_ == Phase::Running && gone.state == State::Done) {
    const bool all_done = std::none_of(launchers_.begin(), launchers_.end(),
                                       [](const auto& e) { return e.second.state == State::Member; });
    if (all_done) end_all(0, "the job finished in round " + std::to_string(round_));
    return;
  }
  try_close(now);
}

void MembershipRounds::tick(Clock::time_point now) { try_close(now); }

std::optional<MembershipRounds::Clock::time_point> MembershipRounds::deadline() const {
  if (phase_ != Phase::Gathering) return std::nullopt;
  Clock::time_point t = opened_at_ + limits_.gather_timeout;
  if (enough_since_) t = std::min(t, *enough_since_ + limits_.join_window);
  return t;
}

void MembershipRounds::try_close(Clock::time_point now) {
  if (phase_ != Phase::Gathering) return;
  int joined = 0;
  bool with_zero = false, pending = false;
  std::vector<int> present;
  for (const auto& [client, l] : launchers_) {
    if (l.state == State::Joined) {
      ++joined;
      with_zero = with_zero || l.machine == limits_.host_machine;
      present.push_back(l.machine);
    }
    pending = pending || l.state == State::Pending;
  }
  const bool enough = with_zero && joined >= limits_.min_machines;
  if (!enough) enough_since_.reset();
  else if (!enough_since_) enough_since_ = now;
  if (joined == limits_.max_machines) return close_round();
  if (enough && !pending && now >= *enough_since_ + limits_.join_window) return close_round();
  if (now < opened_at_ + limits_.gather_timeout) return;
  if (enough) return close_round();  // a member still stopping its workers joins the round after
  std::sort(present.begin(), present.end());
  end_all(1, "round " + std::to_string(round_) + ": within rendezvous_timeout_s (" +
                 seconds_text(limits_.gather_timeout) + ") only " +
                 (present.empty() ? std::string("no machine") : "machine" + std::string(present.size() > 1 ? "s " : " ") +
                                                                  machines_text(present)) +
                 " joined; the job needs min_machines " + std::to_string(limits_.min_machines) +
                 ", machine " + std::to_string(limits_.host_machine) +
                 " among them. Start `accel launch` on the missing machines, or lower min_machines");
}

void MembershipRounds::close_round() {
  std::vector<std::pair<int, int>> members;  // (machine, client)
  for (const auto& [client, l] : launchers_)
    if (l.state == State::Joined) members.emplace_back(l.machine, client);
  // The host's machine first (rank 0: its rank 0 holds the store), the others by machine_rank.
  std::sort(members.begin(), members.end(), [host = limits_.host_machine](const auto& a, const auto& b) {
    return std::make_pair(a.first != host, a.first) < std::make_pair(b.first != host, b.first);
  });
  ElasticMessage m;
  m.kind = ElasticKind::Round;
  m.round = round_;
  m.worker_port = limits_.worker_port;
  m.text = cause_;
  for (const auto& [machine, client] : members) m.machines.push_back(machine);
  for (int machine : previous_)
    if (std::find(m.machines.begin(), m.machines.end(), machine) == m.machines.end()) m.left.push_back(machine);
  for (size_t i = 0; i < members.size(); ++i) {
    launchers_[members[i].second].state = State::Member;
    m.rank = static_cast<int>(i);
    send(members[i].second, m);
  }
  phase_ = Phase::Running;
  enough_since_.reset();
}

std::vector<int> MembershipRounds::round_machines() const {
  std::vector<int> machines;
  for (const auto& [client, l] : launchers_)
    if (in_round(l)) machines.push_back(l.machine);
  std::sort(machines.begin(), machines.end());
  return machines;
}

void MembershipRounds::restart(const std::string& cause, Clock::time_point now, std::vector<int> members) {
  previous_ = std::move(members);
  if (round_ + 1 > limits_.max_restarts)
    return end_all(1, cause + "; no restart left (max_restarts " + std::to_string(limits_.max_restarts) + ")");
  ++round_;
  phase_ = Phase::Gathering;
  opened_at_ = now;
  enough_since_.reset();
  cause_ = cause;
  for (auto& [client, l] : launchers_) {
    if (in_round(l)) {
      l.state = State::Pending;
      ElasticMessage stop;
      stop.kind = ElasticKind::Stop;
      stop.round = round_;
      stop.text = cause;
      send(client, stop);
    } else if (l.state == State::Waiting) {
      l.state = State::Joined;
    }
  }
  try_close(now);
}

void MembershipRounds::end_all(int exit_code, const std::string& why) {
  phase_ = Phase::Over;
  enough_since_.reset();
  ElasticMessage end;
  end.kind = ElasticKind::End;
  end.exit_code = exit_code;
  end.text = why;
  for (const auto& [client, l] : launchers_) send(client, end);
}

}  // namespace accel::launch

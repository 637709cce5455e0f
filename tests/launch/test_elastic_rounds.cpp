// The elastic rendezvous without sockets (docs/design/0027): the message lines, and the rounds
// machine 0's host keeps: when a round closes, who is told to stop, who waits, who is refused.
#include <catch2/catch.hpp>

#include "runtime/launch/elastic_messages.hpp"
#include "runtime/launch/membership_rounds.hpp"

using namespace accel::launch;
using RoundClock = MembershipRounds::Clock;
using std::chrono::milliseconds;

namespace {

ElasticMessage join(int machine) {
  ElasticMessage m;
  m.kind = ElasticKind::Join;
  m.machine = machine;
  m.text = "host" + std::to_string(machine);
  return m;
}

ElasticMessage news(ElasticKind kind, int round, std::string text = "") {
  return accel::launch::elastic_message(kind, round, std::move(text));
}

RoundLimits limits(int min, int max, int restarts) {
  RoundLimits l;
  l.min_machines = min;
  l.max_machines = max;
  l.max_restarts = restarts;
  l.join_window = milliseconds(1000);
  l.gather_timeout = milliseconds(60000);
  l.worker_port = 4321;
  return l;
}

// The messages of one take_outgoing(), by client.
std::map<int, ElasticMessage> sent(MembershipRounds& rounds) {
  std::map<int, ElasticMessage> by_client;
  for (auto& out : rounds.take_outgoing()) by_client[out.client] = out.message;
  return by_client;
}

}  // namespace

TEST_CASE("elastic messages: every kind reads back the same; unreadable lines are refused") {
  ElasticMessage round = news(ElasticKind::Round, 2, "machine 1 (n1) was lost");
  round.rank = 1;
  round.worker_port = 29501;
  round.machines = {0, 2};
  round.left = {1};
  ElasticMessage end;
  end.kind = ElasticKind::End;
  end.exit_code = 1;
  end.text = "no restart left";
  for (const ElasticMessage& m : {join(3), news(ElasticKind::Failed, 1, "rank 2 exited with code 1"),
                                  news(ElasticKind::Done, 4), round, news(ElasticKind::Stop, 2, "why"),
                                  news(ElasticKind::Wait, 0), end}) {
    const std::string line = encode(m);
    INFO(line);
    REQUIRE(line.back() == '\n');
    CHECK(line.find('\n') == line.size() - 1);
    auto back = decode(line.substr(0, line.size() - 1));
    REQUIRE(back);
    CHECK(*back == m);
  }
  ElasticMessage tabs = news(ElasticKind::Failed, 0, "a\tb\nc");
  CHECK(decode(encode(tabs).substr(0, encode(tabs).size() - 1))->text == "a b c");
  for (const char* bad : {"", "hello", "join\tx\th", "round\t1\t0\t1\t-\t-\t", "done", "end\t1", "wait\t-1x"})
    CHECK_FALSE(decode(bad));
  CHECK(machines_text({0, 2, 3}) == "0, 2 and 3");
}

TEST_CASE("a round closes at once when num_machines joined, machine 0 as rank 0") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 2, 1), t0);
  rounds.received(11, join(1), t0);
  CHECK(sent(rounds).empty());
  rounds.received(10, join(0), t0);
  auto out = sent(rounds);
  REQUIRE(out.size() == 2);
  CHECK(out[10].kind == ElasticKind::Round);
  CHECK(out[10].rank == 0);
  CHECK(out[11].rank == 1);
  CHECK(out[11].machines == std::vector<int>{0, 1});
  CHECK(out[11].worker_port == 4321);
  CHECK(out[11].round == 0);
  CHECK_FALSE(rounds.deadline());
}

TEST_CASE("with min_machines joined the round waits the join window, then starts without the rest") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 3, 1), t0);
  rounds.received(10, join(0), t0);
  rounds.tick(t0 + milliseconds(999));
  CHECK(sent(rounds).empty());
  REQUIRE(rounds.deadline());
  CHECK(*rounds.deadline() == t0 + milliseconds(1000));
  rounds.received(12, join(2), t0 + milliseconds(500));
  rounds.tick(t0 + milliseconds(1000));
  auto out = sent(rounds);
  REQUIRE(out.size() == 2);
  CHECK(out[12].rank == 1);  // dense: machine 2 is rank 1 of 2
  CHECK(out[12].machines == std::vector<int>{0, 2});
}

TEST_CASE("a round never closes without machine 0, and gives up after rendezvous_timeout_s") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 2, 1), t0);
  rounds.received(11, join(1), t0);
  rounds.tick(t0 + milliseconds(5000));
  CHECK(sent(rounds).empty());
  rounds.tick(t0 + milliseconds(60000));
  auto out = sent(rounds);
  REQUIRE(out.size() == 1);
  CHECK(out[11].kind == ElasticKind::End);
  CHECK(out[11].exit_code == 1);
  CHECK_THAT(out[11].text, Catch::Contains("only machine 1 joined; the job needs min_machines 1, machine 0 among them"));
  CHECK(rounds.over());
}

TEST_CASE("a lost machine stops the round; the survivors rejoin and run the smaller world") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 2, 3), t0);
  rounds.received(10, join(0), t0);
  rounds.received(11, join(1), t0);
  sent(rounds);
  rounds.closed(11, t0 + milliseconds(100));
  auto out = sent(rounds);
  REQUIRE(out.size() == 1);
  CHECK(out[10].kind == ElasticKind::Stop);
  CHECK(out[10].round == 1);
  CHECK(out[10].text == "machine 1 (host1) was lost: its launcher's connection to machine 0 closed");
  // Machine 0 is still stopping its workers: nothing closes before it is back, however long.
  rounds.tick(t0 + milliseconds(5000));
  CHECK(sent(rounds).empty());
  rounds.received(10, join(0), t0 + milliseconds(5000));
  rounds.tick(t0 + milliseconds(6000));
  out = sent(rounds);
  REQUIRE(out.size() == 1);
  CHECK(out[10].kind == ElasticKind::Round);
  CHECK(out[10].round == 1);
  CHECK(out[10].machines == std::vector<int>{0});
  CHECK(out[10].left == std::vector<int>{1});
  CHECK(out[10].text == "machine 1 (host1) was lost: its launcher's connection to machine 0 closed");
}

TEST_CASE("a machine that comes back waits for the next round, and joins it") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 2, 3), t0);
  rounds.received(10, join(0), t0);
  rounds.tick(t0 + milliseconds(1000));
  CHECK(sent(rounds)[10].machines == std::vector<int>{0});
  rounds.received(12, join(1), t0 + milliseconds(2000));
  auto out = sent(rounds);
  CHECK(out[12].kind == ElasticKind::Wait);
  CHECK(out[12].round == 0);
  rounds.received(10, news(ElasticKind::Failed, 0, "rank 0 exited with code 1"), t0 + milliseconds(3000));
  out = sent(rounds);
  REQUIRE(out.size() == 1);  // the waiting one is already joined for the next round
  CHECK(out[10].kind == ElasticKind::Stop);
  CHECK(out[10].text == "machine 0 (host0): rank 0 exited with code 1");
  rounds.received(10, join(0), t0 + milliseconds(3500));
  out = sent(rounds);  // both machines: no window to wait
  REQUIRE(out.size() == 2);
  CHECK(out[12].machines == std::vector<int>{0, 1});
  CHECK(out[12].left.empty());
}

TEST_CASE("the end: every member done ends the job for all, waiting launchers too") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 3, 1), t0);
  rounds.received(10, join(0), t0);
  rounds.received(11, join(1), t0);
  rounds.tick(t0 + milliseconds(1000));
  sent(rounds);
  rounds.received(12, join(2), t0 + milliseconds(1500));
  sent(rounds);
  rounds.received(10, news(ElasticKind::Done, 0), t0 + milliseconds(2000));
  CHECK(sent(rounds).empty());
  rounds.received(11, news(ElasticKind::Done, 0), t0 + milliseconds(2000));
  auto out = sent(rounds);
  REQUIRE(out.size() == 3);
  for (auto& [client, m] : out) {
    CHECK(m.kind == ElasticKind::End);
    CHECK(m.exit_code == 0);
  }
  CHECK(rounds.over());
}

TEST_CASE("no restart left, a stale report and a machine_rank in use") {
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(limits(1, 2, 0), t0);
  rounds.received(10, join(0), t0);
  rounds.received(11, join(1), t0);
  sent(rounds);
  rounds.received(13, join(1), t0);
  auto out = rounds.take_outgoing();
  REQUIRE(out.size() == 1);
  CHECK(out[0].client == 13);
  CHECK(out[0].close_after);
  CHECK(out[0].message.exit_code == 2);
  CHECK(out[0].message.text == "machine_rank 1 is already in the job (machine 1 (host1)); give every machine its own "
                               "machine_rank");
  rounds.received(14, join(5), t0);
  CHECK_THAT(sent(rounds)[14].text, Catch::Contains("machine_rank 5 is outside 0..1"));
  rounds.received(11, news(ElasticKind::Failed, 7, "old news"), t0);
  CHECK(sent(rounds).empty());
  rounds.closed(11, t0);
  out = rounds.take_outgoing();
  REQUIRE(out.size() == 1);
  CHECK(out[0].message.kind == ElasticKind::End);
  CHECK(out[0].message.exit_code == 1);
  CHECK_THAT(out[0].message.text, Catch::EndsWith("; no restart left (max_restarts 0)"));
}

TEST_CASE("rounds of a host elected in etcd: its machine is rank 0 and must be in, numbering goes on") {
  // Machine 2 was elected after machine 0 (the host of rounds 0-1) was lost (docs/design/0034).
  RoundLimits l = limits(1, 3, 3);
  l.host_machine = 2;
  l.first_round = 2;
  l.first_cause = "machine 0, which hosted the rendezvous, was lost";
  l.previous = {0, 1, 2};
  const auto t0 = RoundClock::now();
  MembershipRounds rounds(l, t0);
  rounds.received(11, join(1), t0);  // machine 1 alone: not enough without the host's machine
  rounds.tick(t0 + milliseconds(5000));
  CHECK(sent(rounds).empty());
  rounds.received(12, join(2), t0 + milliseconds(5000));
  rounds.tick(t0 + milliseconds(6001));  // the join window after the host's machine joined
  auto out = sent(rounds);
  REQUIRE(out.size() == 2);
  CHECK(out[12].kind == ElasticKind::Round);
  CHECK(out[12].round == 2);
  CHECK(out[12].rank == 0);  // the host's machine holds the store
  CHECK(out[11].rank == 1);
  CHECK(out[12].machines == std::vector<int>{2, 1});
  CHECK(out[12].left == std::vector<int>{0});
  CHECK(out[12].text == "machine 0, which hosted the rendezvous, was lost");
  // The host ends the job for everyone (its lease could not be kept).
  rounds.end_job(1, "lease lost");
  out = sent(rounds);
  REQUIRE(out.size() == 2);
  CHECK(out[11].kind == ElasticKind::End);
  CHECK(out[11].exit_code == 1);
  CHECK(out[11].text == "lease lost");
  CHECK(rounds.over());
}

// The flight recorder's diagnosis (runtime/diag/flight_diagnosis.hpp) over synthetic records, one
// case per fault kind: a rank that skips a collective, issues another op, size or group, stops, is
// slow, arrives late, or dies; and the records' JSON form.
#include <catch2/catch.hpp>

#include "runtime/diag/flight_diagnosis.hpp"
#include "runtime/diag/flight_records.hpp"

using namespace accel::flight;

namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 1'800'000'000 * kSecond;  // the records' epoch: any fixed time

// Op `seq` of a history where op k is issued at k s and (when completed) takes 0.1 s.
OpRecord op(uint64_t seq, const std::string& name, int64_t count, OpState state = OpState::Completed,
            const std::string& dtype = "float32") {
  OpRecord r;
  r.seq = seq;
  r.order = seq;
  r.op = name;
  r.dtype = name == "barrier" ? "" : dtype;
  r.count = name == "barrier" ? 0 : count;
  r.bytes = r.count * (dtype == "float64" ? 8 : 4);
  r.issued_ns = kT0 + static_cast<int64_t>(seq) * kSecond;
  r.started_ns = r.issued_ns;
  r.ended_ns = state == OpState::Running ? 0 : r.started_ns + (state == OpState::Failed ? 5 * kSecond : kSecond / 10);
  r.state = state;
  return r;
}

// Five ops every rank completed: gradients (1064 float32) and a loss (1 float64), alternating.
std::vector<OpRecord> history() {
  std::vector<OpRecord> ops;
  for (uint64_t s = 1; s <= 5; ++s) ops.push_back(s % 2 ? op(s, "all_reduce", 1064) : op(s, "all_reduce", 1, OpState::Completed, "float64"));
  return ops;
}

std::vector<OpRecord> history_then(std::vector<OpRecord> more) {
  std::vector<OpRecord> ops = history();
  for (auto& r : more) ops.push_back(std::move(r));
  return ops;
}

GroupRecords group(std::vector<OpRecord> records, int rank, const std::string& name = "world",
                   std::vector<int> members = {0, 1, 2}) {
  GroupRecords g;
  g.name = name;
  g.members = members;
  g.group_rank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  g.timeout_ms = 5000;
  g.issued = records.empty() ? 0 : records.back().seq;
  g.records = std::move(records);
  return g;
}

RankDump dump(int rank, std::vector<GroupRecords> groups, int world = 3) {
  RankDump d;
  d.rank = rank;
  d.world = world;
  d.pid = 1000 + rank;
  d.host = "node0";
  d.reason = "signal";
  d.dumped_at_ns = kT0 + 20 * kSecond;
  d.groups = std::move(groups);
  return d;
}

RankDump dump(int rank, std::vector<OpRecord> world_records, int world = 3) {
  std::vector<int> members;
  for (int r = 0; r < world; ++r) members.push_back(r);
  return dump(rank, {group(std::move(world_records), rank, "world", members)}, world);
}

RankFacts facts(int rank, RankFacts::Process process, const std::string& how) {
  RankFacts f;
  f.rank = rank;
  f.process = process;
  f.how = how;
  return f;
}

// The failure was seen 12 s into the history: after op 6 was issued at 6 s and timed out at 11 s.
DiagnosisInput input(std::vector<RankDump> dumps, std::vector<RankFacts> f = {}) {
  DiagnosisInput in;
  in.detected_at_ns = kT0 + 12 * kSecond;
  in.dumps = std::move(dumps);
  in.facts = std::move(f);
  return in;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("flight diagnosis: a rank that skipped a collective diverges where the sizes first differ") {
  // Rank 1 skipped op 6 (gradients): its op 6 is the loss the others issue next.
  const OpRecord grads = op(6, "all_reduce", 1064, OpState::Failed);
  const OpRecord loss = op(6, "all_reduce", 1, OpState::Failed, "float64");
  Diagnosis d = diagnose(input({dump(0, history_then({grads})), dump(1, history_then({loss})), dump(2, history_then({grads}))}));
  CHECK(d.finding == Finding::Diverged);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "all_reduce");
  CHECK(d.group == "world");
  CHECK(d.first_disagreement == 6);
  INFO(render(d));
  CHECK(contains(d.headline, "rank 1 diverged at seq 6 of group world (another dtype): it issued all_reduce of 1 float64 "
                             "(8 B) where ranks 0 and 2 issued all_reduce of 1064 float32 (4.16 KiB)"));
  CHECK(contains(render(d), "first disagreement: seq 6 of group world: rank 0 all_reduce of 1064 float32 (4.16 KiB); "
                            "rank 1 all_reduce of 1 float64 (8 B); rank 2 all_reduce of 1064 float32 (4.16 KiB)"));
}

TEST_CASE("flight diagnosis: a skip is named as one when the ranks went on past it") {
  // Ops 6, 7, 8 on ranks 0 and 2 are A, B, C; rank 1 skipped A, so its 6 and 7 are B and C.
  auto a = [](uint64_t s) { return op(s, "all_reduce", 1064); };
  auto b = [](uint64_t s) { return op(s, "all_gather", 512); };
  auto c = [](uint64_t s) { return op(s, "reduce_scatter", 256); };
  Diagnosis d = diagnose(input({dump(0, history_then({a(6), b(7), c(8)})), dump(1, history_then({b(6), c(7)})),
                                dump(2, history_then({a(6), b(7), c(8)}))}));
  CHECK(d.finding == Finding::Diverged);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "all_gather");
  CHECK(contains(d.headline, "(it looks to have skipped 1 collective: its seq 6 is their seq 7)"));
}

TEST_CASE("flight diagnosis: a rank that issued another op") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)})),
                                dump(1, history_then({op(6, "barrier", 0, OpState::Failed)})),
                                dump(2, history_then({op(6, "all_reduce", 1064, OpState::Failed)}))}));
  CHECK(d.finding == Finding::Diverged);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "barrier");
  CHECK(d.seq == 6);
  CHECK(contains(d.headline, "rank 1 diverged at seq 6 of group world (another op): it issued barrier where ranks 0 and 2 "
                             "issued all_reduce of 1064 float32"));
}

TEST_CASE("flight diagnosis: a rank that issued another size") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)})),
                                dump(1, history_then({op(6, "all_reduce", 1064, OpState::Failed)})),
                                dump(2, history_then({op(6, "all_reduce", 532, OpState::Failed)}))}));
  CHECK(d.finding == Finding::Diverged);
  CHECK(d.ranks == std::vector<int>{2});
  CHECK(d.op == "all_reduce");
  CHECK(contains(d.headline, "rank 2 diverged at seq 6 of group world (another size): it issued all_reduce of 532 float32"));
}

TEST_CASE("flight diagnosis: two ranks that disagree with no majority are both named") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)}), 2),
                                dump(1, history_then({op(6, "all_reduce", 532, OpState::Failed)}), 2)}));
  CHECK(d.finding == Finding::Diverged);
  CHECK(d.ranks == std::vector<int>{0, 1});
  CHECK(contains(d.headline, "no majority"));
}

TEST_CASE("flight diagnosis: a rank that issued the op on another group") {
  // Ranks 0 and 2 wait in op 6 on the world; rank 1 issued it on its split group {1, 2}, where rank 2
  // never goes.
  const OpRecord waiting = op(6, "all_reduce", 1064, OpState::Running);
  OpRecord elsewhere = op(3, "all_reduce", 1064, OpState::Running);
  elsewhere.order = 6;
  const std::vector<int> pair = {1, 2};
  const std::vector<OpRecord> split_history = {op(1, "all_reduce", 8), op(2, "all_reduce", 8)};
  Diagnosis d = diagnose(input({
      dump(0, history_then({waiting})),
      dump(1, {group(history(), 1), group({split_history[0], split_history[1], elsewhere}, 1, "world/split0/color1", pair)}),
      dump(2, {group(history_then({waiting}), 2), group(split_history, 2, "world/split0/color1", pair)}),
  }));
  CHECK(d.finding == Finding::OtherGroup);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.group == "world/split0/color1");
  CHECK(d.op == "all_reduce");
  CHECK(contains(d.headline, "rank 1 issued all_reduce of 1064 float32 (4.16 KiB) on another group: seq 3 of group "
                             "world/split0/color1, where ranks 0 and 2 issued it on group world (seq 6)"));
}

TEST_CASE("flight diagnosis: a stopped rank is behind; what it issued after the failure was seen does not count") {
  OpRecord after_continue = op(6, "all_reduce", 1064, OpState::Running);
  after_continue.issued_ns = after_continue.started_ns = kT0 + 13 * kSecond;  // SIGCONT for its dump, then it went on
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)})),
                                dump(1, history_then({after_continue})),
                                dump(2, history_then({op(6, "all_reduce", 1064, OpState::Failed)}))},
                               {facts(0, RankFacts::Process::Exited, "exited with code 1"),
                                facts(1, RankFacts::Process::Stopped, "stopped (process state T: SIGSTOP or SIGTSTP)"),
                                facts(2, RankFacts::Process::Running, "running")}));
  CHECK(d.finding == Finding::Behind);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "all_reduce");
  CHECK(d.seq == 6);
  INFO(render(d));
  CHECK(contains(d.headline, "rank 1 is behind: it never issued seq 6 of group world, all_reduce of 1064 float32 (4.16 KiB), "
                             "which ranks 0 and 2 issued and waited in for 5.0 s; it was stopped (process state T"));
  CHECK(contains(d.headline, "its last op there is seq 5, all_reduce of 1064 float32 (4.16 KiB) (completed)"));
  const std::string text = render(d);
  CHECK(contains(text, "rank 1 (pid 1001) stopped (process state T: SIGSTOP or SIGTSTP): not in a collective; last "
                       "completed seq 5 of group world, all_reduce of 1064 float32 (4.16 KiB), 6.9 s before"));
  CHECK(contains(text, "rank 0 (pid 1000) exited with code 1: failed in all_reduce of 1064 float32 (4.16 KiB) (seq 6 of "
                       "group world) after 5.0 s; last completed seq 5"));
}

TEST_CASE("flight diagnosis: a stopped rank the launcher could not ask: its peers' records name the op") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)})),
                                dump(2, history_then({op(6, "all_reduce", 1064, OpState::Running)}))},
                               {facts(1, RankFacts::Process::Stopped, "stopped (process state T: SIGSTOP or SIGTSTP)")}));
  CHECK(d.finding == Finding::Missing);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "all_reduce");
  CHECK(d.seq == 6);
  CHECK(contains(d.headline, "rank 1 was stopped (process state T: SIGSTOP or SIGTSTP) and left no records (a stopped "
                             "process cannot write them); ranks 0 and 2 were in all_reduce of 1064 float32 (4.16 KiB) (seq "
                             "6 of group world), waiting for it; the last op they completed is seq 5, all_reduce of 1064 "
                             "float32 (4.16 KiB)"));
}

TEST_CASE("flight diagnosis: a slow rank is behind, running outside any collective") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Running)})),
                                dump(1, history()), dump(2, history_then({op(6, "all_reduce", 1064, OpState::Running)}))},
                               {facts(1, RankFacts::Process::Running, "running")}));
  CHECK(d.finding == Finding::Behind);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "all_reduce");
  CHECK(contains(d.headline, "which ranks 0 and 2 issued and have been in for 6.0 s; it is running outside any collective: "
                             "slow, or stuck in its own code"));
}

TEST_CASE("flight diagnosis: at world 2 the rank that has not issued the op is the one behind") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)}), 2), dump(1, history(), 2)}));
  CHECK(d.finding == Finding::Behind);
  CHECK(d.ranks == std::vector<int>{1});
}

TEST_CASE("flight diagnosis: one rank ahead of two idle ones issued an extra collective") {
  Diagnosis d = diagnose(input({dump(0, history()), dump(1, history_then({op(6, "broadcast", 16, OpState::Running)})),
                                dump(2, history())}));
  CHECK(d.finding == Finding::Behind);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "broadcast");
  CHECK(contains(d.headline, "rank 1 is ahead: it issued broadcast of 16 float32 (64 B) (seq 6 of group world), which ranks 0 "
                             "and 2 never issued"));
}

TEST_CASE("flight diagnosis: a rank that started the op seconds after the others arrived late") {
  OpRecord late = op(6, "all_reduce", 1064, OpState::Failed);
  late.started_ns += 4 * kSecond;
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Failed)})), dump(1, history_then({late})),
                                dump(2, history_then({op(6, "all_reduce", 1064, OpState::Failed)}))}));
  CHECK(d.finding == Finding::Late);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(contains(d.headline, "rank 1 arrived late at seq 6 of group world, all_reduce of 1064 float32 (4.16 KiB): up to 4.0 s "
                             "after ranks 0 and 2"));
}

TEST_CASE("flight diagnosis: a killed rank left no records; the others wait for it") {
  Diagnosis d = diagnose(input({dump(0, history_then({op(6, "all_reduce", 1064, OpState::Running)})),
                                dump(2, history_then({op(6, "all_reduce", 1064, OpState::Running)}))},
                               {facts(1, RankFacts::Process::Killed, "was killed by signal 9 (SIGKILL)")}));
  CHECK(d.finding == Finding::Missing);
  CHECK(d.ranks == std::vector<int>{1});
  CHECK(d.op == "all_reduce");
  CHECK(contains(d.headline, "rank 1 was killed by signal 9 (SIGKILL) and left no records; ranks 0 and 2 were in all_reduce "
                             "of 1064 float32 (4.16 KiB) (seq 6 of group world), waiting for it"));
  CHECK(contains(render(d), "rank 1 was killed by signal 9 (SIGKILL): no records"));
}

TEST_CASE("flight diagnosis: every rank in the same op, none late, and ranks that agree") {
  const OpRecord in_op = op(6, "all_reduce", 1064, OpState::Running);
  Diagnosis stuck = diagnose(input({dump(0, history_then({in_op})), dump(1, history_then({in_op})), dump(2, history_then({in_op}))}));
  CHECK(stuck.finding == Finding::InFlight);
  CHECK(stuck.ranks.empty());
  CHECK(contains(stuck.headline, "none missing or late"));

  Diagnosis agree = diagnose(input({dump(0, history()), dump(1, history()), dump(2, history())}));
  CHECK(agree.finding == Finding::Agree);
  CHECK(agree.ranks.empty());
  CHECK(contains(agree.headline, "the ranks' collectives agree: ranks 0, 1 and 2 completed seq 5 of group world, "
                                 "all_reduce of 1064 float32 (4.16 KiB), and none is in a collective"));
  CHECK(agree.lines.size() == 3);

  CHECK(diagnose(input({})).finding == Finding::NoRecords);
}

TEST_CASE("flight diagnosis: ranks on another machine, whose records it cannot read, are named with their host") {
  // Machine 0's launcher reads ranks 0 and 1 (in op 6 of a world of 4); ranks 2 and 3 run on host-b,
  // as the host table the ranks read at rendezvous says. Without the table, no host is named.
  const OpRecord in_op = op(6, "all_reduce", 1, OpState::Running, "float64");
  std::vector<RankDump> here = {dump(0, history_then({in_op}), 4), dump(1, history_then({in_op}), 4)};
  for (RankDump& d : here) d.hosts = {"host-a", "host-a", "host-b", "host-b"};
  Diagnosis d = diagnose(input(here));
  CHECK(d.finding == Finding::InFlight);
  CHECK(d.ranks == std::vector<int>{2, 3});
  CHECK(contains(d.headline, "ranks 0 and 1 are in seq 6 of group world, all_reduce of 1 float64 (8 B); no records "
                             "from ranks 2 and 3 on host-b (not supervised here, or no answer)"));
  for (RankDump& dmp : here) dmp.hosts.clear();
  CHECK(contains(diagnose(input(here)).headline, "no records from ranks 2 and 3 (not supervised here"));
}

TEST_CASE("flight diagnosis: a rank behind because it waits on another machine's rank says so, naming its host") {
  // Machine 1 (ranks 2, 3 of 4) during a partition: rank 2 waits in its shard group (2, 3) for rank 3,
  // which is in an all_reduce of its replica group (1, 3) with rank 1, on host-a: no records here.
  std::vector<OpRecord> shard = history_then({op(6, "reduce_scatter", 64, OpState::Failed)});
  std::vector<OpRecord> rank3_shard = history();
  RankDump r2 = dump(2, {group(shard, 2, "world/split0/color1", {2, 3})}, 4);
  RankDump r3 = dump(3, {group(rank3_shard, 3, "world/split0/color1", {2, 3}),
                         group({op(1, "all_reduce", 32, OpState::Failed)}, 3, "world/split1/color1", {1, 3})}, 4);
  for (RankDump* d : {&r2, &r3}) d->hosts = {"host-a", "host-a", "host-b", "host-b"};
  Diagnosis d = diagnose(input({r2, r3}));
  CHECK(d.finding == Finding::Behind);
  CHECK(d.ranks == std::vector<int>{3});
  CHECK(contains(d.headline, "rank 3 is behind: it never issued seq 6 of group world/split0/color1"));
  CHECK(contains(d.headline, "; it failed in seq 1 of group world/split1/color1, all_reduce of 32 float32 (128 B), with "
                             "rank 1 on host-a, whose records are not here: look at them first"));
}

TEST_CASE("flight diagnosis: rings that hold different windows are compared where they overlap") {
  // Rank 0 kept ops 1-5, rank 1 only 4-5 (its ring wrapped): nothing to compare below 4, no divergence.
  std::vector<OpRecord> tail = history();
  tail.erase(tail.begin(), tail.begin() + 3);
  std::vector<OpRecord> full = history();
  full[0].count = 99;  // rank 1 has no op 1 to compare it with
  Diagnosis d = diagnose(input({dump(0, full, 2), dump(1, tail, 2)}));
  CHECK(d.finding == Finding::Agree);
}

TEST_CASE("flight records: JSON round trip and a clear error for a file that is not a dump") {
  RankDump d = dump(1, {group(history_then({op(6, "barrier", 0, OpState::Running)}), 1),
                        group({op(1, "broadcast", 4)}, 1, "world/split0/color0", {0, 1})});
  d.groups[1].records[0].root = 0;
  d.groups[1].closed = true;
  d.groups[1].torn = 2;
  CHECK(rank_dump_from_json(to_json(d), "rank1.json") == d);
  d.hosts = {"node0", "node0", "node1"};
  CHECK(rank_dump_from_json(to_json(d), "rank1.json") == d);
  CHECK(describe_op(d.groups[1].records[0]) == "broadcast of 4 float32 (16 B) from rank 0");
  CHECK_THROWS_WITH(rank_dump_from_json("{\"format\": \"other\"}", "x/rank1.json"),
                    Catch::Contains("x/rank1.json: not a flight record dump"));
  CHECK_THROWS_WITH(rank_dump_from_json("{", "x/rank2.json"), Catch::StartsWith("x/rank2.json: "));
}

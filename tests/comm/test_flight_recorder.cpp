// The collective flight recorder on the worker's side (runtime/comm/flight_ring.hpp,
// flight_registry.hpp): what a ring keeps, that a copy taken while its writer hammers it is never
// torn, that a queue stuck inside an op can still be read, and the dumps on a failed op and on
// SIGUSR2.
#include "tests/support/catch_with_torch.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "runtime/comm/fake_communicator.hpp"
#include "runtime/comm/flight_registry.hpp"
#include "runtime/comm/flight_ring.hpp"
#include "runtime/comm/op_queue.hpp"
#include "runtime/diag/flight_records.hpp"
#include "support/temp_dir.hpp"

using namespace accel::comm;
using accel::flight::OpState;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

FlightGroup world_of(int size, int rank) {
  FlightGroup g;
  for (int r = 0; r < size; ++r) g.members.push_back(r);
  g.group_rank = rank;
  g.timeout_ms = 1000;
  return g;
}

// An op whose fields all follow from `n`, so a copy mixing two writes shows.
FlightOp numbered(uint64_t n) {
  FlightOp op;
  op.op = "all_reduce";
  op.dtype = "float32";
  op.count = static_cast<int64_t>(n) * 3;
  op.bytes = static_cast<int64_t>(n) * 12;
  op.root = static_cast<int>(n % 7);
  return op;
}

// The dump a signal or a failure wrote, once it is there (a dump takes milliseconds; 10 s is the
// bound for a loaded machine, not a timing goal).
std::string wait_for_file(const std::string& path, std::chrono::seconds within = 10s) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (std::filesystem::exists(path)) return accel::test::read_file(path);
    std::this_thread::sleep_for(10ms);
  }
  return "";
}

// Sets the dump target for the scope of a test; dumps are off again afterwards.
struct DumpTarget {
  DumpTarget(const std::string& dir, int rank, int world) { set_flight_dump_target(dir, rank, world); }
  ~DumpTarget() { set_flight_dump_target("", 0, 0); }
};

}  // namespace

TEST_CASE("flight ring: numbers ops at issue, keeps the newest `capacity`, states and times") {
  FlightRing ring(world_of(2, 0), 4);
  std::vector<FlightOp> ops;
  for (uint64_t n = 1; n <= 6; ++n) {
    FlightOp op = numbered(n);
    ring.issue(op);
    ops.push_back(op);
  }
  CHECK(ops[0].seq == 1);
  CHECK(ops[5].seq == 6);
  CHECK(ops[5].order > ops[0].order);
  for (size_t i = 0; i < 5; ++i) {
    ring.start(ops[i]);
    ring.finish(ops[i], i != 3);
  }
  ring.start(ops[5]);  // op 6 starts and is still running
  auto g = ring.snapshot();
  CHECK(g.issued == 6);
  CHECK(g.torn == 0);
  REQUIRE(g.records.size() == 4);  // ops 3..6: the ring holds 4
  CHECK(g.records.front().seq == 3);
  CHECK(g.records[1].state == OpState::Failed);      // op 4
  CHECK(g.records[2].state == OpState::Completed);   // op 5
  CHECK(g.records[3].state == OpState::Running);     // op 6
  CHECK(g.records[3].ended_ns == 0);
  CHECK(g.records[3].count == 18);
  CHECK(g.records[2].started_ns >= g.records[2].issued_ns);
  CHECK(g.records[2].ended_ns >= g.records[2].started_ns);
  CHECK(g.members == std::vector<int>{0, 1});
}

TEST_CASE("flight ring: a reader racing the writer never gets a torn record") {
  // A ring of 2 slots rewritten as fast as one thread can, copied as fast as another can: every
  // record copied must be one whole write (all fields from the same op).
  FlightRing ring(world_of(1, 0), 2);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t n = 1; !stop.load(std::memory_order_relaxed); ++n) {
      FlightOp op = numbered(n);
      ring.issue(op);
      ring.start(op);
      ring.finish(op, true);
    }
  });
  size_t copies = 0, bad = 0;
  uint64_t torn = 0;
  const auto until = std::chrono::steady_clock::now() + 300ms;
  while (std::chrono::steady_clock::now() < until) {
    auto g = ring.snapshot();
    torn += g.torn;
    for (const auto& r : g.records) {
      ++copies;
      const bool whole = r.count == static_cast<int64_t>(r.seq) * 3 && r.bytes == static_cast<int64_t>(r.seq) * 12 &&
                         r.root == static_cast<int>(r.seq % 7) && (r.state != OpState::Completed || r.ended_ns >= r.started_ns);
      if (!whole) ++bad;
    }
  }
  stop = true;
  writer.join();
  INFO(copies << " records copied, " << torn << " slots skipped as torn");
  CHECK(copies > 0);
  CHECK(bad == 0);
}

TEST_CASE("flight ring: a queue stuck inside an op can still be read from another thread") {
  auto ring = std::make_shared<FlightRing>(world_of(2, 1));
  OpQueue queue(1, 2, ring);
  std::promise<void> release;
  auto released = release.get_future().share();
  queue.submit(numbered(1), [] {})->wait();
  WorkPtr stuck = queue.submit(numbered(2), [released] { released.wait(); });
  queue.submit(numbered(3), [] {});  // queued behind it: issued, not started
  const auto until = std::chrono::steady_clock::now() + 10s;
  accel::flight::GroupRecords g;
  do {
    g = ring->snapshot();
  } while ((g.records.size() < 2) && std::chrono::steady_clock::now() < until);
  release.set_value();
  stuck->wait();
  REQUIRE(g.records.size() == 2);
  CHECK(g.records[0].state == OpState::Completed);
  CHECK(g.records[1].seq == 2);
  CHECK(g.records[1].state == OpState::Running);
  CHECK(g.issued == 3);
}

TEST_CASE("flight recorder: a failed collective dumps the records before its Work fails") {
  accel::test::TempDir dir;
  DumpTarget target(dir.path().string(), 0, 2);
  FakeWorld world(2, 300ms);
  auto rank0 = world.communicator(0);
  auto rank1 = world.communicator(1);
  at::Tensor t = at::ones({16});
  WorkPtr first0 = rank0->all_reduce(t, ReduceOp::Sum);
  WorkPtr first1 = rank1->all_reduce(t.clone(), ReduceOp::Sum);
  first0->wait();
  first1->wait();
  WorkPtr lonely = rank0->all_reduce(t, ReduceOp::Sum);  // rank 1 never joins: a timeout
  CHECK_THROWS_AS(lonely->wait(), CommError);
  // Written before the Work failed: there now, without waiting.
  const std::string path = (dir.path() / "rank0.json").string();
  REQUIRE(std::filesystem::exists(path));
  auto dump = accel::flight::rank_dump_from_json(accel::test::read_file(path), path);
  CHECK_THAT(dump.reason, Contains("collective failed: "));
  bool found = false;
  for (const auto& g : dump.groups) {
    if (g.group_rank != 0 || g.records.size() != 2) continue;  // rank 1's ring is in this process too
    found = true;
    CHECK(g.records[1].op == "all_reduce");
    CHECK(g.records[1].dtype == "float32");
    CHECK(g.records[1].count == 16);
    CHECK(g.records[1].bytes == 64);
    CHECK(g.records[1].state == OpState::Failed);
  }
  CHECK(found);
}

TEST_CASE("flight recorder: SIGUSR2 dumps every ring, through the watcher thread") {
  accel::test::TempDir dir;
  DumpTarget target(dir.path().string(), 5, 8);
  auto ring = open_flight_ring(world_of(2, 1));
  REQUIRE(ring);
  OpQueue queue(1, 2, ring);
  std::promise<void> release;
  auto released = release.get_future().share();
  WorkPtr stuck = queue.submit(numbered(1), [released] { released.wait(); });
  while (ring->snapshot().records.empty()) std::this_thread::sleep_for(1ms);
  ::raise(kFlightDumpSignal);  // the handler only writes to a pipe; the watcher writes the file
  const std::string path = (dir.path() / "rank5.json").string();
  const std::string text = wait_for_file(path);
  release.set_value();
  stuck->wait();
  REQUIRE_FALSE(text.empty());
  auto dump = accel::flight::rank_dump_from_json(text, path);
  CHECK(dump.reason == "signal");
  CHECK(dump.rank == 5);
  CHECK(dump.world == 8);
  bool running = false;
  for (const auto& g : dump.groups)
    for (const auto& r : g.records) running = running || (r.count == 3 && r.state == OpState::Running);
  CHECK(running);  // the op the queue thread was stuck in
}

TEST_CASE("flight recorder: ACCEL_FLIGHT_RECORDER=0's switch leaves communicators without a ring") {
  set_flight_recording(false);
  CHECK(open_flight_ring(world_of(1, 0)) == nullptr);
  set_flight_recording(true);
  auto ring = open_flight_ring(world_of(1, 0));
  CHECK(ring != nullptr);
  close_flight_ring(ring);
}

// Run by the case below in a fresh process (exec of this binary): with the launcher's variables set,
// record one op and abort, as a rank does when Gloo aborts on a peer's mismatched message.
TEST_CASE("flight recorder: the crashing child of the fatal-signal case", "[.][flight_crash_child]") {
  if (!std::getenv("ACCEL_FLIGHT_DIR")) return;  // only as that case's child
  std::signal(SIGABRT, SIG_DFL);  // Catch's own handler would keep the recorder's away (it keeps a program's)
  auto ring = open_flight_ring(world_of(4, 3));
  OpQueue queue(3, 4, ring);
  queue.submit(numbered(5), [] {})->wait();
  std::abort();
}

TEST_CASE("flight recorder: a fatal signal dumps the records, then the process dies of it") {
  accel::test::TempDir dir;
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv("ACCEL_FLIGHT_DIR", dir.path().c_str(), 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    execl("/proc/self/exe", "test_comm", "[flight_crash_child]", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT));
  const std::string path = (dir.path() / "rank3.json").string();
  REQUIRE(std::filesystem::exists(path));  // written before the process died
  auto dump = accel::flight::rank_dump_from_json(accel::test::read_file(path), path);
  CHECK(dump.reason == "fatal signal 6 (SIGABRT)");
  CHECK(dump.rank == 3);
  REQUIRE(dump.groups.size() == 1);
  REQUIRE(dump.groups[0].records.size() == 1);
  CHECK(dump.groups[0].records[0].count == 15);
  CHECK(dump.groups[0].records[0].state == OpState::Completed);
}

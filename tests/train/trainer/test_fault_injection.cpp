// ACCEL_FAULT's collective points (hang_in_collective, die_in_collective) through FaultCommunicator
// over the fake world: the fault fires in the first collective of the armed step, once, and nowhere
// else. Each case runs in a forked child, since the fault stops or kills the process it fires in.
#include "tests/support/catch_with_torch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "runtime/comm/fake_communicator.hpp"
#include "trainer/fault_communicator.hpp"
#include "trainer/fault_injection.hpp"

using accel::train::FaultInjector;
using accel::train::make_fault_communicator;
namespace comm = accel::comm;

namespace {

struct Child {
  int status = 0;
  bool was_stopped = false;  // seen stopped by SIGSTOP (then continued)
  std::string err;
};

// Runs `body` in a forked child with ACCEL_FAULT=`fault`; a child that stops is continued once.
Child run_child(const std::string& fault, const std::function<int()>& body) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  std::fflush(nullptr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    setenv("ACCEL_FAULT", fault.c_str(), 1);
    unsetenv("ACCEL_RESTART_COUNT");
    int code = 90;
    try {
      code = body();
    } catch (...) {
    }
    _exit(code);
  }
  close(pipe_fds[1]);
  Child child;
  for (;;) {
    REQUIRE(waitpid(pid, &child.status, WUNTRACED) == pid);
    if (!WIFSTOPPED(child.status)) break;
    child.was_stopped = WSTOPSIG(child.status) == SIGSTOP;
    kill(pid, SIGCONT);
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof buf)) > 0) child.err.append(buf, static_cast<size_t>(n));
  close(pipe_fds[0]);
  return child;
}

// Steps 0..2 of one rank of a world of 1: an all_reduce, a barrier and an all_gather per step.
// Exit 0 when every op completed and the wrapper's stats match the fake's (9 ops).
int three_steps(int rank) {
  FaultInjector faults(rank);
  comm::FakeWorld world(1);
  auto inner = world.communicator(0);
  auto c = make_fault_communicator(*inner, faults);
  at::Tensor t = at::ones({4});
  for (int64_t step = 0; step < 3; ++step) {
    faults.begin_step(step);
    c->all_reduce(t, comm::ReduceOp::Sum)->wait();
    c->barrier()->wait();
    c->all_gather(t, at::empty({4}))->wait();
  }
  int64_t calls = 0, inner_calls = 0;
  for (const auto& k : c->stats().per_kind) calls += k.calls;
  for (const auto& k : inner->stats().per_kind) inner_calls += k.calls;
  return calls == 9 && inner_calls == 9 ? 0 : 3;
}

}  // namespace

TEST_CASE("hang_in_collective stops the rank in the first collective of its step, once", "[trainer][fault]") {
  Child child = run_child("0:hang_in_collective:1", [] { return three_steps(0); });
  INFO(child.err);
  CHECK(child.was_stopped);
  // continued, it finishes the step's other collectives without stopping again
  CHECK((WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0));
  CHECK(child.err == "ACCEL_FAULT: stopping this worker (SIGSTOP) in all_reduce of step 1\n");
}

TEST_CASE("die_in_collective kills the rank in the first collective of its step", "[trainer][fault]") {
  Child child = run_child("0:die_in_collective:2", [] { return three_steps(0); });
  INFO(child.err);
  CHECK(!child.was_stopped);
  CHECK((WIFSIGNALED(child.status) && WTERMSIG(child.status) == SIGKILL));
  CHECK(child.err == "ACCEL_FAULT: killing this worker (SIGKILL) in all_reduce of step 2\n");
}

TEST_CASE("collective faults fire only on their rank, in the first attempt", "[trainer][fault]") {
  Child other_rank = run_child("1:die_in_collective:0", [] { return three_steps(0); });
  CHECK((WIFEXITED(other_rank.status) && WEXITSTATUS(other_rank.status) == 0));
  CHECK(other_rank.err.empty());
  Child restarted = run_child("0:hang_in_collective:0", [] {
    setenv("ACCEL_RESTART_COUNT", "1", 1);
    return FaultInjector(0).watches_collectives() ? 4 : three_steps(0);
  });
  CHECK((WIFEXITED(restarted.status) && WEXITSTATUS(restarted.status) == 0));
  CHECK(!restarted.was_stopped);
  // a non-collective point arms no communicator wrapper
  Child after_step = run_child("0:after_step:0", [] { return FaultInjector(0).watches_collectives() ? 4 : 0; });
  CHECK((WIFEXITED(after_step.status) && WEXITSTATUS(after_step.status) == 0));
}

namespace {

// One step of one rank of a world of 1 with a 100 ms timeout: an all_reduce of 4 floats, then a
// barrier. Exit code: 10 * (all_reduces the inner communicator counted) + (barriers it counted),
// or 99 when the step took less than twice the timeout (asked for by `slow`).
int one_step(bool slow) {
  FaultInjector faults(0);
  comm::FakeWorld world(1, std::chrono::milliseconds(100));
  auto inner = world.communicator(0);
  auto c = make_fault_communicator(*inner, faults);
  faults.begin_step(0);
  const auto start = std::chrono::steady_clock::now();
  c->all_reduce(at::ones({4}), comm::ReduceOp::Sum)->wait();
  c->barrier()->wait();
  if (slow && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) return 99;
  const auto& s = inner->stats();
  return static_cast<int>(10 * s.of(comm::CollectiveKind::AllReduce).calls + s.of(comm::CollectiveKind::Barrier).calls);
}

int exit_code(const Child& c) { return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1; }

}  // namespace

TEST_CASE("the flight recorder's faults change what the rank issues at the step's first all_reduce", "[trainer][fault]") {
  Child skip = run_child("0:skip_collective:0", [] { return one_step(false); });
  CHECK(exit_code(skip) == 1);  // no all_reduce reached the communicator, the barrier did
  CHECK(skip.err == "ACCEL_FAULT: skipping all_reduce of step 0\n");
  Child other_op = run_child("0:other_op_in_collective:0", [] { return one_step(false); });
  CHECK(exit_code(other_op) == 2);  // a barrier instead of the all_reduce, then the step's own
  CHECK(other_op.err == "ACCEL_FAULT: issuing a barrier instead of all_reduce of step 0\n");
  Child other_size = run_child("0:other_size_in_collective:0", [] {
    FaultInjector faults(0);
    comm::FakeWorld world(1);
    auto inner = world.communicator(0);
    auto c = make_fault_communicator(*inner, faults);
    faults.begin_step(0);
    c->all_reduce(at::ones({4}), comm::ReduceOp::Sum)->wait();
    return static_cast<int>(inner->stats().of(comm::CollectiveKind::AllReduce).payload_bytes);  // 2 floats
  });
  CHECK(exit_code(other_size) == 8);
  CHECK(other_size.err == "ACCEL_FAULT: issuing half the elements of all_reduce of step 0\n");
  Child slow = run_child("0:slow_collective:0", [] { return one_step(true); });
  CHECK(exit_code(slow) == 11);  // issued unchanged, twice the timeout late
  CHECK(slow.err == "ACCEL_FAULT: delaying (twice the collective timeout) all_reduce of step 0\n");
}

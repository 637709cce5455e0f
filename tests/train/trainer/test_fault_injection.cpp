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

#include "trainer/fault_injection.hpp"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "runtime/common/errors.hpp"

namespace accel::train {
namespace {

constexpr std::array<const char*, 9> kPoints = {
    "after_step",      "checkpoint_write", "checkpoint_background_write", "die_in_collective",
    "hang_in_collective", "slow_collective", "skip_collective",           "other_op_in_collective",
    "other_size_in_collective"};

bool is_collective_point(const std::string& point) {
  return point != "after_step" && point != "checkpoint_write" && point != "checkpoint_background_write";
}

// The points that change what is issued fire at an all_reduce (whose size can be halved).
bool mutates_all_reduce(const std::string& point) {
  return point == "skip_collective" || point == "other_op_in_collective" || point == "other_size_in_collective";
}

std::string usage() {
  std::string points;
  for (const char* p : kPoints) points += std::string(points.empty() ? "" : "|") + p;
  return "expected <rank>:<" + points + ">:<step>";
}

}  // namespace

FaultInjector::FaultInjector(int rank) {
  const char* spec = std::getenv("ACCEL_FAULT");
  if (!spec || !*spec) return;
  std::string text = spec;
  std::istringstream in(text);
  std::string rank_s, point, step_s;
  bool known = false;
  if (std::getline(in, rank_s, ':') && std::getline(in, point, ':') && std::getline(in, step_s))
    for (const char* p : kPoints) known = known || point == p;
  if (!known) throw RunError("ACCEL_FAULT='" + text + "': " + usage());
  int fault_rank = 0;
  try {
    fault_rank = std::stoi(rank_s);
    step_ = std::stoll(step_s);
  } catch (const std::exception&) {
    throw RunError("ACCEL_FAULT='" + text + "': rank and step must be integers");
  }
  const char* restart = std::getenv("ACCEL_RESTART_COUNT");
  bool first_attempt = !restart || std::string(restart) == "0" || !*restart;
  armed_ = first_attempt && fault_rank == rank;
  point_ = point;
}

void FaultInjector::at(const std::string& point, int64_t step) const {
  if (!armed_ || point != point_ || step != step_ || fired_.exchange(true)) return;
  if (point == "checkpoint_background_write") {
    // Proof that the save returned: the training thread starts step + 2 (so it applied step + 1)
    // while this checkpoint is still being written. Bounded, for a run that ends sooner.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (current_step_.load() < step + 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::fprintf(stderr,
                 "ACCEL_FAULT: killing this worker inside the background write of the checkpoint of step %lld, "
                 "while its training thread runs step %lld\n",
                 static_cast<long long>(step), static_cast<long long>(current_step_.load()));
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
    return;
  }
  std::fprintf(stderr, "ACCEL_FAULT: killing this worker at %s of step %lld\n", point.c_str(),
               static_cast<long long>(step));
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

bool FaultInjector::watches_collectives() const { return armed_ && is_collective_point(point_); }

FaultInjector::Action FaultInjector::in_collective(const char* op) const {
  if (!watches_collectives() || current_step_ != step_) return Action::Issue;
  if (mutates_all_reduce(point_) && std::string(op) != "all_reduce") return Action::Issue;
  if (fired_.exchange(true)) return Action::Issue;
  const auto step = static_cast<long long>(step_);
  if (point_ == "die_in_collective" || point_ == "hang_in_collective") {
    const bool hang = point_ == "hang_in_collective";
    // The line reaches the launcher before the signal: tests time the exit from it.
    std::fprintf(stderr, "ACCEL_FAULT: %s this worker (%s) in %s of step %lld\n", hang ? "stopping" : "killing",
                 hang ? "SIGSTOP" : "SIGKILL", op, step);
    std::fflush(stderr);
    ::kill(::getpid(), hang ? SIGSTOP : SIGKILL);
    return Action::Issue;
  }
  const char* what = point_ == "slow_collective"          ? "delaying (twice the collective timeout)"
                     : point_ == "skip_collective"        ? "skipping"
                     : point_ == "other_op_in_collective" ? "issuing a barrier instead of"
                                                          : "issuing half the elements of";
  std::fprintf(stderr, "ACCEL_FAULT: %s %s of step %lld\n", what, op, step);
  std::fflush(stderr);
  if (point_ == "slow_collective") return Action::IssueLate;
  if (point_ == "skip_collective") return Action::Skip;
  return point_ == "other_op_in_collective" ? Action::IssueBarrier : Action::IssueHalf;
}

}  // namespace accel::train

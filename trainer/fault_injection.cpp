#include "trainer/fault_injection.hpp"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "runtime/common/errors.hpp"

namespace accel::train {
namespace {

constexpr std::array<const char*, 4> kPoints = {"after_step", "checkpoint_write", "die_in_collective",
                                                "hang_in_collective"};

bool is_collective_point(const std::string& point) {
  return point == "die_in_collective" || point == "hang_in_collective";
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
  std::fprintf(stderr, "ACCEL_FAULT: killing this worker at %s of step %lld\n", point.c_str(),
               static_cast<long long>(step));
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

bool FaultInjector::watches_collectives() const { return armed_ && is_collective_point(point_); }

void FaultInjector::in_collective(const char* op) const {
  if (!watches_collectives() || current_step_ != step_ || fired_.exchange(true)) return;
  const bool hang = point_ == "hang_in_collective";
  // The line reaches the launcher before the signal: tests time the exit from it.
  std::fprintf(stderr, "ACCEL_FAULT: %s this worker (%s) in %s of step %lld\n", hang ? "stopping" : "killing",
               hang ? "SIGSTOP" : "SIGKILL", op, static_cast<long long>(step_));
  std::fflush(stderr);
  ::kill(::getpid(), hang ? SIGSTOP : SIGKILL);
}

}  // namespace accel::train

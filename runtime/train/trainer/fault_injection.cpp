#include "runtime/train/trainer/fault_injection.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <sstream>

#include "runtime/common/errors.hpp"

namespace accel::train {

FaultInjector::FaultInjector(int rank) {
  const char* spec = std::getenv("ACCEL_FAULT");
  if (!spec || !*spec) return;
  std::string text = spec;
  std::istringstream in(text);
  std::string rank_s, point, step_s;
  if (!std::getline(in, rank_s, ':') || !std::getline(in, point, ':') || !std::getline(in, step_s) ||
      (point != "after_step" && point != "checkpoint_write"))
    throw RunError("ACCEL_FAULT='" + text + "': expected <rank>:<after_step|checkpoint_write>:<step>");
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
  if (!armed_ || point != point_ || step != step_) return;
  std::fprintf(stderr, "ACCEL_FAULT: killing this worker at %s of step %lld\n", point.c_str(),
               static_cast<long long>(step));
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace accel::train

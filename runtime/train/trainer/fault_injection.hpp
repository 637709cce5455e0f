// Deterministic fault injection for crash and restart tests (docs/design/0004):
// ACCEL_FAULT=<rank>:<point>:<step> makes that rank kill itself with SIGKILL when it reaches the named
// point of optimizer step <step> (0-based), in the first attempt only (ACCEL_RESTART_COUNT 0 or
// unset), so a restarted group runs through. Points: after_step (the optimizer step is applied,
// nothing of it recorded yet), checkpoint_write (files of the checkpoint written after step <step>
// are in the staging directory, the manifest and the rename are not done).
// Invariant: with ACCEL_FAULT unset this does nothing; a malformed value is a RunError at start.
#pragma once

#include <cstdint>
#include <string>

namespace accel::train {

class FaultInjector {
 public:
  // Reads ACCEL_FAULT and ACCEL_RESTART_COUNT for `rank`.
  explicit FaultInjector(int rank);
  void at(const std::string& point, int64_t step) const;

 private:
  bool armed_ = false;
  std::string point_;
  int64_t step_ = -1;
};

}  // namespace accel::train

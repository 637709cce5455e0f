// Deterministic fault injection for crash, hang and restart tests (docs/design/0004):
// ACCEL_FAULT=<rank>:<point>:<step> makes that rank fail at the named point of optimizer step <step>
// (0-based), in the first attempt only (ACCEL_RESTART_COUNT 0 or unset), so a restarted group runs
// through. Points:
//  - after_step: SIGKILL once the optimizer step is applied, nothing of it recorded yet;
//  - checkpoint_write: SIGKILL once the files of the checkpoint written after step <step> are in the
//    staging directory, before the manifest and the rename (with training.async_checkpoint, on
//    the background thread);
//  - checkpoint_background_write (training.async_checkpoint only): SIGKILL inside the background
//    write of that checkpoint, once this rank's files are written and its training thread has
//    started step <step> + 2 (the save returned and training went on), before the commit;
//  - die_in_collective: SIGKILL as the rank issues its first collective of step <step> (its peers
//    are inside that collective, waiting for it);
//  - hang_in_collective: SIGSTOP there instead: the rank stays alive but never takes part, as a
//    deadlocked or frozen process would; its peers fail after collective_timeout_s;
//  - slow_collective: the rank sleeps for twice the collective timeout there before it issues the
//    collective: alive and running, but later than its peers wait;
//  - skip_collective: the rank does not issue the first all_reduce of step <step> (its Work is
//    complete at once), so it is one collective short of its peers;
//  - other_op_in_collective: it issues a barrier instead of that all_reduce;
//  - other_size_in_collective: it issues that all_reduce on half of the tensor (numel / 2).
// The collective points fire through FaultCommunicator (fault_communicator.hpp), which the trainer
// puts in front of its communicator only when one of them is armed. Each prints an "ACCEL_FAULT: "
// line before it acts (tests time the launcher's reaction from it).
// Invariant: with ACCEL_FAULT unset this does nothing; a malformed value is a RunError at start; a
// fault fires at most once per process.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace accel::train {

class FaultInjector {
 public:
  // Reads ACCEL_FAULT and ACCEL_RESTART_COUNT for `rank`.
  explicit FaultInjector(int rank);
  // Fires the after_step / checkpoint_write / checkpoint_background_write fault armed for `point`
  // of `step` (the last from a checkpoint's background thread: it waits for the training thread).
  void at(const std::string& point, int64_t step) const;

  // True when a collective point is armed on this rank (the trainer then wraps its communicator).
  bool watches_collectives() const;
  // The trainer starts optimizer step `step`; the collectives issued from now on belong to it.
  void begin_step(int64_t step) { current_step_ = step; }
  // What the communicator in front does with the collective being issued.
  enum class Action { Issue, Skip, IssueBarrier, IssueHalf, IssueLate };
  // A collective `op` ("all_reduce", ...) is being issued: fires a collective fault armed for the
  // current step (die, hang: here; the others: the returned action), once per process.
  Action in_collective(const char* op) const;

 private:
  bool armed_ = false;
  std::string point_;
  int64_t step_ = -1;
  std::atomic<int64_t> current_step_{-1};
  mutable std::atomic<bool> fired_{false};  // a SIGCONT-ed hang must not stop again
};

}  // namespace accel::train

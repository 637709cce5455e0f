// The built-in trainer: `accel launch` runs it in every worker when the job has no `program:`.
// One optimizer step (spec/training.md): G micro-steps, each a forward of this rank's micro batch
// and a backward of (micro loss / G); the backend averages gradients over ranks on the last
// micro-step; then the pre-clip global norm, clipping, the scheduled lr and the optimizer update.
// Rank 0 writes metrics.jsonl and the log; evaluation, checkpoints and the weights export follow
// training.eval_every, checkpoint_every and save_weights.
// Invariant: metrics depend only on the job (not on timing, thread count aside, or restarts).
#pragma once

#include <string>

#include "runtime/worker/worker_context.hpp"
#include "trainer/step_profiler.hpp"

namespace accel::train {

struct TrainerOptions {
  bool progress_bar = false;  // the launcher's stdout is a terminal
  std::string trace_path;     // `accel launch --trace FILE` (absolute); empty: no trace
  ProfileWindow profile;      // `accel launch --profile DIR [--profile-steps A:B]`
};

// Runs the job of `ctx` to training.max_steps, resuming per training.resume. Throws RunError
// (or ConfigError for a job the trainer cannot run) on failure.
void run_training(worker::WorkerContext& ctx, const TrainerOptions& options);

}  // namespace accel::train

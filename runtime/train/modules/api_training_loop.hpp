// The built-in trainer's loop written against the public API (include/accel), as a user would write
// it: the job's model (builtin_module.hpp), data, optimizer and param groups, lr schedule, gradient
// accumulation, clipping, checkpoints and weights export, every step through accel::Accelerator.
// It is the loop the trainer moves to (docs/design/0017, issue 16 item 3); until then
// tests/numerics/test_builtin_on_api.py runs it beside the trainer and compares them.
// Not yet here: fp16's loss scaler (refused), fault injection and --trace (the trainer's).
#pragma once

#include <accel/accelerator.hpp>

#include "runtime/config/job.hpp"

namespace accel::train {

// Trains the built-in model of `job` to training.max_steps through `acc` (already constructed for
// this job), resuming per training.resume. Rank 0 writes <output_dir>/metrics.jsonl with the
// trainer's step, loss, lr, grad_norm and eval_loss fields. Its checkpoints carry the trainer's
// record (trainer_record.hpp): the trainer resumes them, and it resumes the trainer's. Throws accel::RunError on failure.
void run_builtin_training_on_api(Accelerator& acc, const config::JobConfig& job);

}  // namespace accel::train

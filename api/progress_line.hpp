// The progress line of an optimizer step, the built-in trainer's and acc.print_progress()'s:
// "step 12/60 | loss 4.1234 | lr 1.00e-03 | grad_norm 0.532 | 12.3k tok/s | 85.1 ms | peak 312 MiB",
// with " | eval_loss 4.2" on evaluation steps and " | loss_scale 65536" (", skipped: overflow")
// under fp16. With a progress bar, "[####....]  20% " first. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace accel::api {

struct StepProgress {
  int64_t done = 0;   // optimizer steps done, this one included
  int64_t total = 0;  // training.max_steps
  double loss = 0;
  double lr = 0;
  std::optional<double> grad_norm;  // before clipping; absent when the step computed none
  double tokens_per_s = 0;
  double step_time_s = 0;
  int64_t peak_mem_bytes = 0;
  std::optional<double> eval_loss;
  std::optional<double> loss_scale;  // fp16 only
  bool skipped = false;              // fp16 only: the gradients overflowed
};

std::string format_progress_line(const StepProgress& p, bool progress_bar);

}  // namespace accel::api

// The learning-rate schedule of spec/training.md as a pure function of the step.
// Invariant: learning_rate depends only on its arguments (no state), so every rank, every backend
// and a resumed run compute the same value for the same step.
#pragma once

#include <cstdint>

#include "runtime/config/job.hpp"

namespace accel::train {

// Learning rate for optimizer step `step` (0-based) of a run of `total_steps` steps.
//   s < W_u:   peak_lr * (s + 1) / W_u                                   (linear warmup)
//   cosine:    lr_min + 0.5 * (1 + cos(pi * p)) * (peak_lr - lr_min),
//              p = (s - W_u) / max(1, S - W_u), lr_min = peak_lr * min_lr_ratio
//   constant:  peak_lr
// warmup_steps == 0 disables warmup (step 0 already runs at peak_lr).
// Where the spec is silent: p is clamped to 1 for s > S (the rate stays at lr_min instead of
// rising again along the cosine), as nanoGPT/llm.c do past their decay horizon.
// Throws std::invalid_argument for a negative step, total_steps or warmup_steps.
double learning_rate(const config::SchedulerSection& scheduler, double peak_lr, int64_t step, int64_t total_steps);

}  // namespace accel::train

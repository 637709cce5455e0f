// The learning-rate schedule: linear warmup, then cosine decay to a floor or a constant rate.
// Invariant: the arithmetic follows spec/training.md term by term (same operation order), so a
// reference script that writes the formula literally gets bit-identical doubles.
#include "trainer/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace accel::train {

double learning_rate(const config::SchedulerSection& scheduler, double peak_lr, int64_t step, int64_t total_steps) {
  if (step < 0) throw std::invalid_argument("learning_rate: step must be >= 0, got " + std::to_string(step));
  if (total_steps < 0)
    throw std::invalid_argument("learning_rate: total_steps must be >= 0, got " + std::to_string(total_steps));
  const int64_t warmup = scheduler.warmup_steps;
  if (warmup < 0) throw std::invalid_argument("learning_rate: warmup_steps must be >= 0, got " + std::to_string(warmup));

  if (step < warmup) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (scheduler.name == config::SchedulerName::constant) return peak_lr;

  const double lr_min = peak_lr * scheduler.min_lr_ratio;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup));
  const double p = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double pi = std::acos(-1.0);
  return lr_min + 0.5 * (1.0 + std::cos(pi * p)) * (peak_lr - lr_min);
}

}  // namespace accel::train

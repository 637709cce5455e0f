// Loss scaling for fp16 training (docs/design/0011): the loss is multiplied by a scale before
// backward so that small gradients survive fp16, and the gradients are divided by it before the
// optimizer. A step whose gradients overflowed (a non-finite global norm) is skipped.
// Dynamic scaling follows DeepSpeed's DynamicLossScaler, the settings of `deepspeed.fp16`:
//   - start at 2^initial_scale_power;
//   - on an overflow, spend one unit of hysteresis; when none is left, halve the scale (not below
//     min_loss_scale). Hysteresis is restored when the scale next grows (DeepSpeed's default,
//     consecutive_hysteresis false);
//   - after loss_scale_window steps without an overflow, double the scale;
//   - an overflow at the minimum scale with no hysteresis left ends the run with an error, as
//     DeepSpeed's raise_error_at_min_scale does: the run has diverged.
// A static scale (deepspeed.loss_scale > 0) never changes, and its overflow steps are skipped too.
// Under backend fsdp, the settings are those of torch's GradScaler (2^16, window 2000, no
// hysteresis, no lower bound), as Accelerate uses for FSDP.
// Invariant: the state is a pure function of the sequence of overflow flags, so every rank (which
// sees the same global norm) holds the same scale; it is saved in checkpoints.
#pragma once

#include <cstdint>

#include <optional>

#include <nlohmann/json.hpp>

#include "runtime/config/job.hpp"
#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::engine {

// The scaler's settings are the resolved plan's (runtime/config/plan/resolved_plan.hpp).
using LossScalerSettings = accel::plan::LossScaling;

// The loss scaler a job asks for: none unless mixed_precision is fp16. deepspeed: its fp16 keys
// (a static scale when loss_scale > 0); fsdp and ddp: torch GradScaler's defaults.
std::optional<LossScalerSettings> loss_scaler_settings(const config::JobConfig& job);

class LossScaler {
 public:
  explicit LossScaler(const LossScalerSettings& settings);

  double scale() const { return scale_; }
  // Records one step's outcome. Returns true when the step must be skipped (it overflowed).
  // Throws RunError on an overflow that cannot lower the scale any more (see above).
  bool update(bool overflow);
  int64_t overflows() const { return overflows_; }

  nlohmann::json state() const;
  // Restores state() output; throws RunError when `state` is not one.
  void restore(const nlohmann::json& state);

 private:
  LossScalerSettings settings_;
  double scale_;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
  int hysteresis_left_;
  int64_t overflows_ = 0;
};

}  // namespace accel::engine

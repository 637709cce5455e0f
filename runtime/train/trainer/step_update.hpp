// The end of a training step, once the gradients are reduced: unscale and clip, the overflow check,
// then the optimizer step or its skip (docs/design/0011). Without fp16 this is clip then step.
// With fp16 a LossScaler sets the factor the loss is multiplied by before backward; a step whose
// global gradient norm is not finite is skipped: the gradients are dropped, the optimizer and
// the learning-rate schedule do not advance (DeepSpeed and Megatron skip the scheduler step too),
// and the next batch is the next step's as usual.
// Invariant: every rank sees the same global norm, so every rank takes the same decision.
// Not wired into a run today: fp16 needs the CUDA engine (the CPU refuses it), and the trainer
// now steps through the public API. It moves into Accelerator::backward / step with that engine
// (docs/design/0017, "fp16"); tests/backends/test_loss_scaling.cpp keeps it exercised until then.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "runtime/config/job.hpp"
#include "runtime/train/optim/loss_scaler.hpp"

namespace accel::train {

// The loss scaler a job asks for: none unless mixed_precision is fp16. deepspeed: its fp16 keys
// (a static scale when loss_scale > 0); fsdp and ddp: torch GradScaler's defaults.
std::optional<LossScalerSettings> loss_scaler_settings(const config::JobConfig& job);

struct StepOutcome {
  double grad_norm = 0;  // the true pre-clip norm (not finite on an overflow)
  double lr = 0;         // the learning rate applied (or that would have been, when skipped)
  bool skipped = false;
  double loss_scale = 1;  // the scale this step's loss was multiplied by
};

class StepUpdater {
 public:
  StepUpdater(const config::JobConfig& job, std::optional<LossScalerSettings> scaler);

  // Multiply the loss by this before backward (1 without loss scaling).
  double loss_multiplier() const { return scaler_ ? scaler_->scale() : 1.0; }
  bool scaling() const { return scaler_.has_value(); }
  int64_t skipped_steps() const { return skipped_; }

  // Finishes training step `step` (0-based) on `backend`. Collective (the norm).
  StepOutcome finish_step(backends::Backend& backend, int64_t step);

  // For checkpoints: the scaler's state and the skipped-step count (an empty object without fp16).
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  const config::JobConfig& job_;
  std::optional<LossScaler> scaler_;
  int64_t skipped_ = 0;
};

}  // namespace accel::train

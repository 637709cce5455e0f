// fp16's loss scaling inside the Accelerator (docs/design/0011; 0017 "fp16"): backward()
// differentiates (loss / G) x scale in fp32, the boundary unscales the gradient shards by the scale
// (and clips), and a step whose global norm is not finite is skipped: the gradients are dropped, the
// optimizer's state does not move, the scale falls (LossScaler: DeepSpeed's rules under backend
// deepspeed, torch GradScaler's otherwise). Without fp16 it is the plain path: loss / G, clip, step.
// Invariant: every rank sees the same global norm, so every rank skips the same steps and holds the
// same scale; the scale and the skipped count are saved in checkpoints (the state record's
// "loss_scaling", state_io.hpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "runtime/config/job.hpp"

namespace accel::engine {

class GradScaling {
 public:
  explicit GradScaling(const config::JobConfig& job);  // loss_scaler_settings(job)
  explicit GradScaling(std::optional<LossScalerSettings> settings);

  bool active() const { return scaler_.has_value(); }
  double scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  int64_t skipped_steps() const { return skipped_; }

  // What backward() differentiates for one micro-step's `loss` with `accumulation` micro-steps.
  at::Tensor objective(const at::Tensor& loss, int accumulation) const;
  // At a boundary: unscales the gradients (fp16) and clips them to max_norm when > 0. Returns the
  // global pre-clip norm of the true gradients (not finite after an fp16 overflow). Collective.
  double unscale_and_clip(Backend& engine, double max_norm);
  // At a boundary, before the update: whether this step is skipped (an fp16 overflow). Unscales
  // first when the program did not clip. Updates the scale; throws RunError when the run diverged
  // (an overflow at the minimum scale). Collective.
  bool skip_step(Backend& engine);

  // For the checkpoint's state record: the scaler's state and the skipped count (an empty object
  // without fp16). restore() takes what state() gave; a record without it (written without fp16)
  // leaves the scaler as it starts.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  std::optional<LossScaler> scaler_;
  bool unscaled_ = false;  // this boundary's gradients are unscaled (norm_ is theirs)
  double norm_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace accel::engine

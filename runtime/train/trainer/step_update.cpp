// The end of a training step (see step_update.hpp).
#include "runtime/train/trainer/step_update.hpp"

#include <cmath>

#include "runtime/common/errors.hpp"
#include "runtime/train/optim/lr_schedule.hpp"

namespace accel::train {

std::optional<LossScalerSettings> loss_scaler_settings(const config::JobConfig& job) {
  if (job.mixed_precision != config::MixedPrecision::fp16) return std::nullopt;
  LossScalerSettings s;
  if (job.backend == config::Backend::deepspeed) {
    const auto& ds = job.deepspeed;
    s.static_scale = ds.loss_scale;
    s.initial_scale_power = ds.initial_scale_power;
    s.window = ds.loss_scale_window;
    s.hysteresis = ds.hysteresis;
    s.min_scale = ds.min_loss_scale;
  } else {  // torch.cuda.amp.GradScaler(): init_scale 2^16, growth_interval 2000, no hysteresis or floor
    s.initial_scale_power = 16;
    s.window = 2000;
    s.hysteresis = 1;
    s.min_scale = 0;
  }
  return s;
}

StepUpdater::StepUpdater(const config::JobConfig& job, std::optional<LossScalerSettings> scaler) : job_(job) {
  if (scaler) scaler_.emplace(*scaler);
}

StepOutcome StepUpdater::finish_step(backends::Backend& backend, int64_t step) {
  StepOutcome out;
  out.loss_scale = loss_multiplier();
  out.grad_norm = backend.unscale_and_clip(job_.training.max_grad_norm, out.loss_scale);
  // The schedule counts applied steps: a skipped step does not advance it.
  out.lr = learning_rate(job_.scheduler, job_.optimizer.lr, step - skipped_, job_.training.max_steps);
  const bool overflow = !std::isfinite(out.grad_norm);
  if (scaler_) out.skipped = scaler_->update(overflow);
  if (out.skipped) {
    backend.skip_step();
    ++skipped_;
  } else {
    // Without a scaler a non-finite norm is stepped on, as torch does: the run's loss shows it.
    backend.optimizer_step(out.lr);
  }
  return out;
}

nlohmann::json StepUpdater::state() const {
  if (!scaler_) return nlohmann::json::object();
  return {{"loss_scaler", scaler_->state()}, {"skipped_steps", skipped_}};
}

void StepUpdater::restore(const nlohmann::json& state) {
  if (!scaler_) return;  // a checkpoint of an fp16 run resumed without fp16: nothing to restore
  if (!state.contains("loss_scaler")) return;  // written without fp16: the scaler starts afresh
  scaler_->restore(state["loss_scaler"]);
  skipped_ = state.value("skipped_steps", int64_t(0));
}

}  // namespace accel::train

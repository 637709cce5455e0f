// fp16 loss scaling in the Accelerator (see grad_scaling.hpp).
#include "engine/grad_scaling.hpp"

#include <cmath>

namespace accel::engine {

GradScaling::GradScaling(const config::JobConfig& job) : GradScaling(loss_scaler_settings(job)) {}

GradScaling::GradScaling(std::optional<LossScalerSettings> settings) {
  if (settings) scaler_.emplace(*settings);
}

at::Tensor GradScaling::objective(const at::Tensor& loss, int accumulation) const {
  if (!scaler_) return accumulation > 1 ? loss / double(accumulation) : loss;
  // In fp32: an fp16 loss times 2^16 would overflow before backward starts.
  return loss.to(at::kFloat) / double(accumulation) * scaler_->scale();
}

double GradScaling::unscale_and_clip(Backend& engine, double max_norm) {
  // A second call at the same boundary (clipping twice) must not divide by the scale again.
  norm_ = engine.unscale_and_clip(max_norm, unscaled_ ? 1.0 : scale());
  unscaled_ = true;
  return norm_;
}

bool GradScaling::skip_step(Backend& engine) {
  if (!scaler_) return false;  // without a scaler a non-finite norm is stepped on, as torch does
  if (!unscaled_) unscale_and_clip(engine, 0.0);
  unscaled_ = false;
  const bool skipped = scaler_->update(!std::isfinite(norm_));
  if (skipped) ++skipped_;
  return skipped;
}

nlohmann::json GradScaling::state() const {
  if (!scaler_) return nlohmann::json::object();
  return {{"loss_scaler", scaler_->state()}, {"skipped_steps", skipped_}};
}

void GradScaling::restore(const nlohmann::json& state) {
  if (!scaler_ || !state.is_object() || !state.contains("loss_scaler")) return;
  scaler_->restore(state["loss_scaler"]);
  skipped_ = state.value("skipped_steps", int64_t(0));
}

}  // namespace accel::engine

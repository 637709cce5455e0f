// Loss scaler state machine (see loss_scaler.hpp).
#include "engine/optim/loss_scaler.hpp"

#include "runtime/config/plan/resolve_plan.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/common/errors.hpp"

namespace accel::engine {

std::optional<LossScalerSettings> loss_scaler_settings(const config::JobConfig& job) {
  return plan::resolve_plan(job).loss_scaling;
}

LossScaler::LossScaler(const LossScalerSettings& settings)
    : settings_(settings),
      scale_(settings.static_scale > 0 ? settings.static_scale : std::ldexp(1.0, settings.initial_scale_power)),
      hysteresis_left_(std::max(settings.hysteresis, 1)) {
  if (settings.window < 1) throw RunError("loss scaler: the window must be at least 1 step");
}

bool LossScaler::update(bool overflow) {
  const bool dynamic = settings_.static_scale <= 0;
  if (overflow) {
    ++overflows_;
    if (dynamic) {
      if (hysteresis_left_ <= 1) {
        if (settings_.min_scale > 0 && scale_ <= settings_.min_scale)
          throw RunError("fp16: the gradients overflowed at the minimum loss scale (" + std::to_string(scale_) +
                         ", deepspeed.min_loss_scale) at step " + std::to_string(iteration_) +
                         ": the run has diverged; lower the learning rate, or use mixed_precision: bf16");
        scale_ = std::max(scale_ / 2, settings_.min_scale);
      } else {
        --hysteresis_left_;
      }
    }
    last_overflow_iteration_ = iteration_;
  } else if (dynamic && (iteration_ - last_overflow_iteration_) % settings_.window == 0) {
    hysteresis_left_ = std::max(settings_.hysteresis, 1);
    scale_ *= 2;
  }
  ++iteration_;
  return overflow;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"iteration", iteration_},
          {"last_overflow_iteration", last_overflow_iteration_},
          {"hysteresis_left", hysteresis_left_},
          {"overflows", overflows_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  try {
    scale_ = state.at("scale").get<double>();
    iteration_ = state.at("iteration").get<int64_t>();
    last_overflow_iteration_ = state.at("last_overflow_iteration").get<int64_t>();
    hysteresis_left_ = state.at("hysteresis_left").get<int>();
    overflows_ = state.at("overflows").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw RunError(std::string("checkpoint: the loss scaler state is malformed (") + e.what() + ")");
  }
  if (!(scale_ > 0) || !std::isfinite(scale_)) throw RunError("checkpoint: the loss scale is not a positive number");
}

}  // namespace accel::engine

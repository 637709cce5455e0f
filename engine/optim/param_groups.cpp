#include "engine/optim/param_groups.hpp"

namespace accel::engine {

AdamWHyper GroupHyper::adamw() const {
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps;
  h.weight_decay = weight_decay;
  return h;
}

SgdHyper GroupHyper::sgd() const {
  SgdHyper h;
  h.lr = lr;
  h.momentum = momentum;
  h.weight_decay = weight_decay;
  return h;
}

bool OptimizerSetup::keeps_momentum() const {
  if (kind != config::OptimizerName::sgd) return false;
  for (const auto& g : groups)
    if (g.momentum != 0) return true;
  return false;
}

std::vector<GroupHyper> OptimizerSetup::at_lr(double lr) const {
  std::vector<GroupHyper> out = groups;
  for (auto& g : out) g.lr = lr;
  return out;
}

OptimizerSetup builtin_optimizer_setup(const config::OptimizerSection& section) {
  OptimizerSetup setup;
  setup.kind = section.name;
  GroupHyper decay;
  decay.lr = section.lr;
  decay.weight_decay = section.weight_decay;
  decay.eps = section.eps;
  decay.momentum = section.momentum;
  if (section.name == config::OptimizerName::adamw) {
    const AdamWHyper h = AdamWHyper::from(section, section.lr);  // validates betas
    decay.beta1 = h.beta1;
    decay.beta2 = h.beta2;
  }
  GroupHyper no_decay = decay;
  no_decay.weight_decay = 0.0;
  setup.groups = {decay, no_decay};
  setup.fused = section.fused == config::FusedKernel::yes;
  return setup;
}

}  // namespace accel::engine

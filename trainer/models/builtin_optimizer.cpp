#include "trainer/models/builtin_optimizer.hpp"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <vector>

#include "engine/optim/param_groups.hpp"

namespace accel::train {

std::unique_ptr<torch::optim::Optimizer> make_builtin_optimizer(const config::OptimizerSection& section,
                                                                const engine::NamedTensors& parameters) {
  const engine::OptimizerSetup setup = engine::builtin_optimizer_setup(section);
  std::vector<std::vector<at::Tensor>> members(setup.groups.size());
  for (const auto& [name, p] : parameters) members[size_t(engine::builtin_param_group(p.dim()))].push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (size_t g = 0; g < setup.groups.size(); ++g) {
    if (members[g].empty()) continue;
    const engine::GroupHyper& h = setup.groups[g];
    if (setup.kind == config::OptimizerName::adamw) {
      groups.emplace_back(members[g], std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(h.lr)
                                                                                       .betas({h.beta1, h.beta2})
                                                                                       .eps(h.eps)
                                                                                       .weight_decay(h.weight_decay)));
    } else {
      groups.emplace_back(members[g], std::make_unique<torch::optim::SGDOptions>(
                                          torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weight_decay)));
    }
  }
  if (setup.kind == config::OptimizerName::adamw)
    return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(section.lr));
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(section.lr));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace accel::train

// A user's torch optimizer as the engines see it: its kind (AdamW, Adam with weight_decay 0, SGD:
// what accel's kernels implement), its param groups as the engines' OptimizerSetup, and each
// group's current hyper-parameters, read again at every step so a user's scheduler acts.
// Invariant: every trainable parameter of the prepared model is in exactly one group, and every
// tensor of the groups is a parameter of the model (prepared_groups refuses anything else).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "engine/optim/param_groups.hpp"

namespace accel::api {

enum class TorchOptimizerKind { adamw, adam, sgd };

// Throws RunError for any other optimizer.
TorchOptimizerKind torch_optimizer_kind(torch::optim::Optimizer& optimizer);

struct PreparedGroups {
  engine::OptimizerSetup setup;                   // kind and groups as they stand (fused: the caller's)
  std::unordered_map<const void*, int> group_of;  // a parameter's TensorImpl -> its group
};
// Throws RunError for a parameter in two groups, a trainable parameter in none, a group tensor
// that is not the model's, or options accel does not implement (amsgrad, Adam's L2, nesterov).
PreparedGroups prepared_groups(TorchOptimizerKind kind, torch::optim::Optimizer& optimizer, torch::nn::Module& model);

// Every group's hyper-parameters now; `prepared` is the number of groups prepare() saw.
std::vector<engine::GroupHyper> current_group_hypers(TorchOptimizerKind kind, torch::optim::Optimizer& optimizer,
                                                    size_t prepared);

}  // namespace accel::api

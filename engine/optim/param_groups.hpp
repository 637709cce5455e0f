// Parameter groups: the optimizer hyper-parameters that apply to each group of parameters, as
// torch.optim's param_groups. accel's built-in trainer uses two groups (the spec's weight-decay
// rule: 2-D and larger parameters decay, the rest do not); a user program prepared through the
// public API (docs/design/0015) brings its torch optimizer's groups, read again at every step so
// the user's learning-rate schedulers stay in force.
// Invariant: both optimizers (replicated, sharded) give a parameter the hyper-parameters of its
// group at each step; weight decay applies where the group's weight_decay is non-zero.
#pragma once

#include <vector>

#include "engine/optim/adamw_step.hpp"
#include "engine/optim/sgd_step.hpp"
#include "runtime/config/job.hpp"

namespace accel::engine {

// One group's hyper-parameters. AdamW reads lr, betas, eps and weight_decay (decoupled); SGD reads
// lr, momentum and weight_decay (coupled L2).
struct GroupHyper {
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;

  AdamWHyper adamw() const;
  SgdHyper sgd() const;
};

// The optimizer a backend builds: its kind and its groups as they stand at construction (the
// learning rates are the initial ones; each step passes the current hyper-parameters).
struct OptimizerSetup {
  config::OptimizerName kind = config::OptimizerName::adamw;
  std::vector<GroupHyper> groups;
  // AdamW through the fused multi-tensor kernel (adamw_fused.hpp) where the tensors allow it.
  bool fused = false;

  // SGD keeps a momentum buffer when some group uses momentum.
  bool keeps_momentum() const;
  // Every group's hyper-parameters with the learning rate replaced by `lr` (the built-in schedule).
  std::vector<GroupHyper> at_lr(double lr) const;
};

// The built-in trainer's groups from the job's optimizer section: group 0 takes
// optimizer.weight_decay, group 1 none (spec/training.md); fused only for optimizer.fused: true
// (auto needs the device: the Accelerator resolves it). Throws ConfigError for betas that are
// not two values.
OptimizerSetup builtin_optimizer_setup(const config::OptimizerSection& section);
// The built-in group of a parameter of `dim` dimensions: 0 (decays) for 2 or more, else 1.
inline int builtin_param_group(int64_t dim) { return dim >= 2 ? 0 : 1; }

}  // namespace accel::engine

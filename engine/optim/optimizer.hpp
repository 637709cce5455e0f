// The replicated optimizer: AdamW or SGD over a named parameter list, with checkpointable state.
// Invariant: every parameter owns its state (moments or momentum buffer, in its math dtype) and a
// per-parameter step count, exactly like torch.optim; each parameter belongs to one parameter group
// (param_groups.hpp) whose hyper-parameters it is updated with. The built-in groups follow the
// spec: weight decay on parameters with 2 or more dimensions only (spec/training.md). The sharded
// optimizer reuses adamw_step/sgd_step on shard segments instead of whole tensors.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/named_tensors.hpp"
#include "engine/optim/param_groups.hpp"
#include "runtime/config/job.hpp"

namespace accel::engine {

// The spec's rule: weights and embeddings decay, biases and LayerNorm parameters do not.
inline bool applies_weight_decay(const at::Tensor& param) { return param.dim() >= 2; }

class Optimizer {
 public:
  // Builds the optimizer named by section.name over `named_params` (the model's tensors, updated in
  // place; names must be unique). State is allocated now, zero-filled, on each parameter's device.
  // Throws std::invalid_argument for an empty list, an undefined or non-floating tensor or a
  // duplicate name; accel::ConfigError for unusable hyperparameters (optimizer.betas not two values).
  // The built-in groups (builtin_optimizer_setup, builtin_param_group).
  static std::unique_ptr<Optimizer> make(const config::OptimizerSection& section, NamedTensors named_params);
  // `setup`'s groups; group_of[i] is the group of named_params[i] (an index into setup.groups).
  static std::unique_ptr<Optimizer> make(const OptimizerSetup& setup, NamedTensors named_params,
                                         const std::vector<int>& group_of);

  // One update of every parameter whose grad() is defined, each with its group's hyper-parameters
  // (one entry per group of the setup); a parameter without a gradient is skipped and its step
  // count does not advance (torch's behaviour).
  void step(const std::vector<GroupHyper>& groups);
  // The same with every group at learning rate `lr` and its other hyper-parameters as built.
  void step(double lr) { step(setup_.at_lr(lr)); }

  // Zeroes every defined gradient in place (buffers are kept: a sharding engine may hold views).
  void zero_grad();

  // Number of step() calls so far (restored by load_state).
  int64_t step_count() const { return step_count_; }
  config::OptimizerName kind() const { return setup_.kind; }
  const OptimizerSetup& setup() const { return setup_; }
  const NamedTensors& params() const;

  // The state for a checkpoint. Keys:
  //   "step_count"            0-dim int64, the number of step() calls
  //   "step.<name>"           0-dim int64, the updates that parameter has received
  //   "exp_avg.<name>", "exp_avg_sq.<name>"   (adamw)
  //   "momentum.<name>"                      (sgd with momentum != 0)
  // Moment tensors alias the live state: serialise (or clone) them before the next step().
  NamedTensors state_tensors() const;

  // Restores state saved by state_tensors() of an optimizer of the same kind over the same names
  // and shapes. The key set must match exactly and every tensor must have the expected shape and
  // dtype; everything is checked before anything is changed. Throws accel::RunError otherwise.
  void load_state(const NamedTensors& state);

 private:
  struct Slot {
    std::string name;
    at::Tensor param;
    int group = 0;
    int64_t step = 0;
    at::Tensor exp_avg, exp_avg_sq;  // adamw
    at::Tensor momentum;             // sgd with momentum != 0
  };

  Optimizer(const OptimizerSetup& setup, NamedTensors named_params, const std::vector<int>& group_of);
  // (key, live state tensor) for the moment tensors, in parameter order (handles alias the state).
  NamedTensors moment_tensors() const;

  OptimizerSetup setup_;
  NamedTensors params_;
  std::vector<Slot> slots_;
  int64_t step_count_ = 0;
};

}  // namespace accel::engine

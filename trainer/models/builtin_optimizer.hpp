// The torch optimizer the job's optimizer section describes for the built-in model, with the
// trainer's two param groups (param_groups.hpp: 2-D and larger parameters decay, the rest do not).
// The trainer prepares it through the public API, which reads the groups' options at every step,
// so the schedule acts by setting each group's lr.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>

#include "runtime/config/job.hpp"
#include "engine/named_tensors.hpp"

namespace accel::train {

// AdamW or SGD over `parameters` (spec order), empty groups left out.
std::unique_ptr<torch::optim::Optimizer> make_builtin_optimizer(const config::OptimizerSection& section,
                                                                const engine::NamedTensors& parameters);

// Sets every param group's learning rate (the scheduled lr of this step).
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace accel::train

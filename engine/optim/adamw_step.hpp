// One AdamW update of one tensor, with torch.optim.AdamW semantics (amsgrad off, maximize off).
// Invariant: the tensor can be a whole parameter or any segment of a flat buffer (a ZeRO shard
// slice): the update is elementwise, so updating segments one by one equals updating the whole.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "runtime/config/job.hpp"

namespace accel::engine {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * weight_decay

  // optimizer.betas/eps/weight_decay from the job, at learning rate `lr` (from the schedule).
  // Throws accel::ConfigError if optimizer.betas does not hold exactly two values.
  static AdamWHyper from(const config::OptimizerSection& section, double lr);
};

// Updates `param`, `exp_avg` and `exp_avg_sq` in place for step `step` (1-based, the number of
// updates this element has received including this one). In torch's exact op order:
//   if apply_decay: p.mul_(1 - lr*wd)
//   m.mul_(b1).add_(g, 1 - b1);  v.mul_(b2).addcmul_(g, g, 1 - b2)
//   denom = (v.sqrt() / sqrt(1 - b2^step)).add_(eps);  p.addcdiv_(m, denom, -lr / (1 - b1^step))
// Precision (math_precision.hpp): fp32/fp64 parameters are updated in their dtype; bf16/fp16
// parameters through an fp32 copy, rounded back once. exp_avg and exp_avg_sq must have the
// parameter's shape and its math dtype (fp32 for bf16/fp16). `grad` may be of any floating dtype;
// it is converted to the math dtype. Runs without autograd recording, so leaf parameters are fine.
// Throws std::invalid_argument on a shape or dtype mismatch or step < 1.
void adamw_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq, int64_t step,
                const AdamWHyper& hyper, bool apply_decay);

}  // namespace accel::engine

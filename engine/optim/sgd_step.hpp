// One SGD-with-momentum update of one tensor, with torch.optim.SGD semantics (dampening 0,
// nesterov off). Invariant: elementwise, so a whole parameter and a flat-shard segment update alike.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "runtime/config/job.hpp"

namespace accel::engine {

struct SgdHyper {
  double lr = 1e-3;
  double momentum = 0.0;      // 0 disables the momentum buffer
  double weight_decay = 0.0;  // L2, coupled: d = g + weight_decay * p (torch.optim.SGD)

  // optimizer.momentum/weight_decay from the job, at learning rate `lr` (from the schedule).
  static SgdHyper from(const config::OptimizerSection& section, double lr);
};

// Updates `param` (and `momentum_buf` when hyper.momentum != 0) in place:
//   d = g;  if apply_decay: d = d + wd * p          (torch.optim.SGD's L2 decay, not decoupled)
//   if momentum: buf = (step == 1) ? d : momentum * buf + d;  d = buf
//   p.add_(d, -lr)
// `step` is 1-based: the first update copies d into the buffer, as torch does when it creates it.
// `momentum_buf` may be undefined when momentum is 0; otherwise it must have the parameter's shape
// and math dtype. Precision as in adamw_step (math_precision.hpp). The gradient is not modified.
// Throws std::invalid_argument on a shape or dtype mismatch or step < 1.
void sgd_step(at::Tensor param, const at::Tensor& grad, at::Tensor momentum_buf, int64_t step, const SgdHyper& hyper,
              bool apply_decay);

}  // namespace accel::engine

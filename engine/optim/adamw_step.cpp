// AdamW on one tensor, written op for op like torch 2.11's _single_tensor_adam (decoupled decay).
// Invariant: for fp32 inputs the same ATen kernels run on the same values in the same order as in
// torch, so results agree with torch's optimizer to the last bit (up to kernel vectorisation).
#include "engine/optim/adamw_step.hpp"

#include <ATen/core/grad_mode.h>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/optim/math_precision.hpp"
#include "runtime/common/errors.hpp"

namespace accel::engine {

AdamWHyper AdamWHyper::from(const config::OptimizerSection& section, double lr) {
  if (section.betas.size() != 2) {
    Diagnostic d;
    d.key_path = "optimizer.betas";
    d.message = "AdamW needs exactly two betas, got " + std::to_string(section.betas.size());
    d.allowed = "[beta1, beta2], each in [0, 1)";
    throw ConfigError(d);
  }
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = section.betas[0];
  h.beta2 = section.betas[1];
  h.eps = section.eps;
  h.weight_decay = section.weight_decay;
  return h;
}

void adamw_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq, int64_t step,
                const AdamWHyper& hyper, bool apply_decay) {
  if (!param.defined()) throw std::invalid_argument("adamw_step: parameter is undefined");
  if (step < 1) throw std::invalid_argument("adamw_step: step is 1-based, got " + std::to_string(step));
  check_grad(grad, param);
  check_state("adamw_step: exp_avg", exp_avg, param);
  check_state("adamw_step: exp_avg_sq", exp_avg_sq, param);

  at::NoGradGuard no_grad;
  MathCopy p(param);
  const at::Tensor g = grad_in(grad, exp_avg.scalar_type());

  // Decoupled weight decay first, on the parameter before this step's update (torch order).
  if (apply_decay && hyper.weight_decay != 0) p.work().mul_(1 - hyper.lr * hyper.weight_decay);

  const double bias_correction1 = 1 - std::pow(hyper.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(hyper.beta2, static_cast<double>(step));

  // torch 2.x's torch.optim.AdamW (the spec's reference) moves the first moment with lerp, not
  // mul-then-add (torch 1.13's order, which libtorch's C++ AdamW still uses): one rounding fewer.
  exp_avg.lerp_(g, 1 - hyper.beta1);
  exp_avg_sq.mul_(hyper.beta2).addcmul_(g, g, 1 - hyper.beta2);

  const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(hyper.eps);
  const double step_size = hyper.lr / bias_correction1;
  p.work().addcdiv_(exp_avg, denom, -step_size);
  p.write_back();
}

}  // namespace accel::engine

// SGD with momentum on one tensor, written op for op like torch 1.13's torch::optim::SGD::step.
// Invariant: fp32 inputs see exactly torch's ops in torch's order.
#include "engine/optim/sgd_step.hpp"

#include <ATen/core/grad_mode.h>
#include <stdexcept>
#include <string>

#include "engine/optim/math_precision.hpp"

namespace accel::engine {

SgdHyper SgdHyper::from(const config::OptimizerSection& section, double lr) {
  SgdHyper h;
  h.lr = lr;
  h.momentum = section.momentum;
  h.weight_decay = section.weight_decay;
  return h;
}

void sgd_step(at::Tensor param, const at::Tensor& grad, at::Tensor momentum_buf, int64_t step, const SgdHyper& hyper,
              bool apply_decay) {
  if (!param.defined()) throw std::invalid_argument("sgd_step: parameter is undefined");
  if (step < 1) throw std::invalid_argument("sgd_step: step is 1-based, got " + std::to_string(step));
  check_grad(grad, param);
  if (hyper.momentum != 0) check_state("sgd_step: momentum buffer", momentum_buf, param);

  at::NoGradGuard no_grad;
  MathCopy p(param);
  at::Tensor d = grad_in(grad, p.work().scalar_type());
  if (apply_decay && hyper.weight_decay != 0) d = d.add(p.work(), hyper.weight_decay);  // new tensor: grad kept
  if (hyper.momentum != 0) {
    if (step == 1)
      momentum_buf.copy_(d);
    else
      momentum_buf.mul_(hyper.momentum).add_(d, 1);  // dampening 0: alpha = 1 - dampening
    d = momentum_buf;
  }
  p.work().add_(d, -1 * hyper.lr);
  p.write_back();
}

}  // namespace accel::engine

#include "engine/optim/adamw_fused.hpp"

#include <ATen/core/grad_mode.h>

#include <map>
#include <stdexcept>
#include <string>

namespace accel::engine {

void AdamWBatch::add(at::Tensor param, at::Tensor grad, at::Tensor exp_avg, at::Tensor exp_avg_sq, int64_t step) {
  params.push_back(std::move(param));
  grads.push_back(std::move(grad));
  exp_avgs.push_back(std::move(exp_avg));
  exp_avg_sqs.push_back(std::move(exp_avg_sq));
  steps.push_back(step);
}

bool fused_adamw_applies(const at::Tensor& param, const at::Tensor& exp_avg) {
  return param.defined() && exp_avg.defined() && param.is_floating_point() &&
         param.scalar_type() == exp_avg.scalar_type() && param.device() == exp_avg.device() &&
         param.scalar_type() != at::kHalf && param.scalar_type() != at::kBFloat16 &&
         param.is_contiguous() && exp_avg.is_contiguous();  // the kernel walks each tensor as flat memory
}

void adamw_fused_step(const AdamWBatch& batch, const AdamWHyper& hyper) {
  const size_t n = batch.params.size();
  if (batch.grads.size() != n || batch.exp_avgs.size() != n || batch.exp_avg_sqs.size() != n || batch.steps.size() != n)
    throw std::invalid_argument("adamw_fused_step: the batch's lists differ in length");
  if (n == 0) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  grads.reserve(n);
  // The kernel reads each entry's step from a float tensor on the parameters' device; entries of
  // one step share one tensor (a unit's segments, a model's parameters: usually all of them).
  std::map<int64_t, at::Tensor> step_tensors;
  std::vector<at::Tensor> steps;
  steps.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = batch.params[i];
    if (!fused_adamw_applies(p, batch.exp_avgs[i]) || !fused_adamw_applies(p, batch.exp_avg_sqs[i]))
      throw std::invalid_argument("adamw_fused_step: entry " + std::to_string(i) +
                                  " is not one dtype on one device (use adamw_step)");
    if (batch.steps[i] < 1) throw std::invalid_argument("adamw_fused_step: steps are 1-based");
    const at::Tensor& g = batch.grads[i];
    if (!g.sizes().equals(p.sizes())) throw std::invalid_argument("adamw_fused_step: gradient shape differs");
    grads.push_back((g.scalar_type() == p.scalar_type() && g.device() == p.device() ? g : g.to(p.options())).contiguous());
    auto [it, fresh] = step_tensors.try_emplace(batch.steps[i]);
    if (fresh) it->second = at::full({}, double(batch.steps[i]), p.options().dtype(at::kFloat));
    steps.push_back(it->second);
  }
  at::_fused_adamw_(batch.params, grads, batch.exp_avgs, batch.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, hyper.lr,
                    hyper.beta1, hyper.beta2, hyper.weight_decay, hyper.eps, /*amsgrad=*/false, /*maximize=*/false);
}

}  // namespace accel::engine

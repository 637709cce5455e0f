// AdamW through torch's fused multi-tensor kernel (at::_fused_adamw_): one launch updates a whole
// list of tensors, where the elementwise reference (adamw_step.hpp) issues five ops per tensor.
// On a GPU that is the difference between a step bound by kernel launches and one bound by memory
// bandwidth (DeepSpeed's FusedAdam, torch.optim.AdamW(fused=True)); on the CPU it is torch's
// vectorised fused kernel (the counterpart of DeepSpeedCPUAdam for offloaded states).
// Semantics: torch.optim.AdamW (decoupled decay, bias corrections, amsgrad and maximize off). The
// kernel evaluates the same formula in another order, so a step differs from the elementwise
// reference by about an ulp; that is why the CPU default stays elementwise (the spec's bit-for-bit
// reference) and optimizer.fused chooses.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "engine/optim/adamw_step.hpp"
#include "runtime/config/enums.hpp"

namespace accel::engine {

// Tensors updated together: same hyper-parameters, entry i of each list belongs together, steps[i]
// is the 1-based step of entry i (the updates it has received, this one included).
struct AdamWBatch {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<int64_t> steps;

  void add(at::Tensor param, at::Tensor grad, at::Tensor exp_avg, at::Tensor exp_avg_sq, int64_t step);
  bool empty() const { return params.empty(); }
};

// Whether the fused kernel can update `param` with states `exp_avg` in place: the kernel keeps
// parameters and states in one dtype on one device (fp32 masters; not bf16 parameters with fp32
// states, which go through the elementwise path's fp32 working copy), both contiguous (the kernel
// walks every tensor of the lists as flat memory, so their layouts must agree).
bool fused_adamw_applies(const at::Tensor& param, const at::Tensor& exp_avg);

// Updates every entry of `batch` in place. Gradients in another dtype are converted first.
// Throws std::invalid_argument when an entry is not fused_adamw_applies or the lists disagree.
void adamw_fused_step(const AdamWBatch& batch, const AdamWHyper& hyper);

// optimizer.fused resolved for ranks computing on `device`: auto means fused on a GPU.
inline bool use_fused_adamw(config::FusedKernel setting, bool on_gpu) {
  return setting == config::FusedKernel::yes || (setting == config::FusedKernel::auto_ && on_gpu);
}

}  // namespace accel::engine

// accel::SyncBatchNorm: batch normalisation whose batch is the global one of a data-parallel run,
// as torch.nn.SyncBatchNorm in PyTorch. A drop-in for torch::nn::BatchNorm2d (the same options and
// the same parameter and buffer names: weight, bias, running_mean, running_var,
// num_batches_tracked), for inputs [N, C, ...] of two or more dimensions:
//
//   torch::nn::BatchNorm2d norm{64};   ->   accel::SyncBatchNorm norm{64};
//
// Training mode: each channel's mean and biased variance are those of the batch summed over every
// rank of the current accel::Accelerator's world (one all-reduce of per-channel sums in forward,
// one in backward), so a world of W ranks with micro batch B normalises, updates running_mean and
// running_var (momentum, unbiased variance) and back-propagates as one rank with W x B rows would,
// to fp32 rounding. Collective: every rank must run the same SyncBatchNorm forwards and backwards in the same
// order. Eval mode (train(false)): no communication, the running statistics (without
// track_running_stats, this rank's batch's, as PyTorch). With no Accelerator alive, or a world of
// one, it is plain batch normalisation.
// Plain torch::nn::BatchNorm2d under accel normalises over each rank's own micro batch instead
// (examples/README.md).
// Only torch and the standard library are included here.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <ostream>

namespace accel {

class SyncBatchNormImpl : public torch::nn::BatchNormImplBase<2, SyncBatchNormImpl> {
 public:
  // SyncBatchNormImpl(64) or SyncBatchNormImpl(torch::nn::BatchNormOptions(64).momentum(0.01)).
  using torch::nn::BatchNormImplBase<2, SyncBatchNormImpl>::BatchNormImplBase;

  // Hides BatchNormImplBase::forward (not virtual): the global batch's statistics in training.
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

 protected:
  void _check_input_dim(const torch::Tensor& input) override;
};
TORCH_MODULE(SyncBatchNorm);

}  // namespace accel

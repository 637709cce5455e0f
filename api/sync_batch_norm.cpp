// accel::SyncBatchNorm (include/accel/sync_batch_norm.hpp): batch normalisation over the global
// batch. Forward all-reduces per-channel sums; the normalisation is a custom autograd Function
// whose backward all-reduces the two per-channel sums its input gradient needs. The affine part
// (weight, bias) is plain autograd on top, so its gradients are each rank's own and the backend
// averages them like any other.
#include "accel/sync_batch_norm.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "api/current_world.hpp"

namespace accel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every dimension but the channel one (1): what a channel's statistics reduce over.
std::vector<int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// [1, C, 1, ...]: a per-channel vector broadcast against x.
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(size_t(x.dim()), 1);
  shape[1] = x.size(1);
  return v.view(shape);
}

// xhat = (x - mean) * invstd, with mean and invstd of the global batch of `count` values per channel.
//
// Backward. Rank r's loss L_r reads only its own outputs, but every rank's xhat depends on every
// rank's x through mean and invstd. With g = dL_r/dxhat on each rank, the derivative of the summed
// loss sum_r L_r with respect to an input x_i on any rank is
//   dx_i = invstd * (g_i - mean(g) - xhat_i * mean(g * xhat)),
// the means taken over the global batch: the two per-channel sums are all-reduced (PyTorch's
// SyncBatchNorm does the same). World 1's loss is the mean of the W ranks' losses, so dx_i is W
// times world 1's gradient; the backend divides every parameter gradient by W when it averages
// them over ranks, so each parameter ends with exactly world 1's gradient. weight and bias act on
// each rank's own outputs, so their local gradients averaged by the backend are world 1's too.
struct GlobalNormalize : torch::autograd::Function<GlobalNormalize> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& invstd,
                            double count) {
    at::Tensor xhat = (x - per_channel(mean, x)) * per_channel(invstd, x);
    ctx->save_for_backward({xhat, invstd});
    ctx->saved_data["count"] = count;
    return xhat;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& xhat = saved[0];
    const at::Tensor& invstd = saved[1];
    const double count = ctx->saved_data["count"].toDouble();
    const at::Tensor& g = grads[0];  // materialised: zeros when the output was unused
    const auto dims = reduced_dims(g);
    const int64_t channels = g.size(1);
    // The sums in fp32 whatever the compute dtype (bf16 partial sums rounded per rank would make
    // the result depend on how the batch is split), then dx in the input's dtype.
    const at::Tensor gf = g.to(at::kFloat), xf = xhat.to(at::kFloat);
    at::Tensor sums = at::cat({gf.sum(dims), (gf * xf).sum(dims)});
    detail::all_reduce_sum(sums);  // one collective for both sums
    const at::Tensor mean_g = (sums.slice(0, 0, channels) / count).to(g.scalar_type());
    const at::Tensor mean_gx = (sums.slice(0, channels) / count).to(g.scalar_type());
    at::Tensor dx = (g - per_channel(mean_g, g) - xhat * per_channel(mean_gx, g)) * per_channel(invstd, g);
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void SyncBatchNormImpl::_check_input_dim(const torch::Tensor& input) {
  if (input.dim() < 2)
    throw std::invalid_argument("accel::SyncBatchNorm: expected an input of two or more dimensions [N, C, ...], got " +
                                std::to_string(input.dim()));
  if (input.size(1) != options.num_features())
    throw std::invalid_argument("accel::SyncBatchNorm: the input has " + std::to_string(input.size(1)) +
                                " channels (dimension 1), the module " + std::to_string(options.num_features()));
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  _check_input_dim(input);
  // Evaluation: no communication (ranks may evaluate different amounts of data), as PyTorch's
  // SyncBatchNorm; the running statistics, or this rank's batch's when none are tracked.
  if (!is_training()) {
    // Under bf16 the parameters are bf16 and the running statistics stay fp32; libtorch's CPU batch
    // norm wants one dtype, so it reads copies in the input's (momentum 0: nothing is written back).
    auto as_input = [&](const at::Tensor& t) { return t.defined() ? t.to(input.scalar_type()) : t; };
    return torch::batch_norm(input, as_input(weight), as_input(bias), as_input(running_mean), as_input(running_var),
                             /*training=*/!options.track_running_stats(), /*momentum=*/0.0, options.eps(),
                             /*cudnn_enabled=*/true);
  }

  double factor = options.momentum().value_or(0.0);
  if (options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();  // cumulative average
  }

  // Per-channel sum, sum of squares and count of this rank, summed over the world. In double: the
  // variance as E[x^2] - E[x]^2 would lose digits in fp32, and the sums then hardly depend on how
  // the batch is split across ranks.
  const int64_t channels = input.size(1);
  const auto dims = reduced_dims(input);
  at::Tensor mean, var;
  double count = 0;
  {
    torch::NoGradGuard no_grad;
    const at::Tensor x = input.detach().to(at::kDouble);
    at::Tensor stats = at::cat({x.sum(dims), (x * x).sum(dims),
                                at::full({1}, double(input.numel() / channels), x.options())});
    detail::all_reduce_sum(stats);
    count = stats[2 * channels].item<double>();
    if (count <= 1)
      throw std::invalid_argument("accel::SyncBatchNorm: expected more than 1 value per channel when training, got " +
                                  std::to_string(int64_t(count)) + " over the world");
    mean = stats.slice(0, 0, channels) / count;
    var = (stats.slice(0, channels, 2 * channels) / count - mean * mean).clamp_min(0);  // biased
    if (options.track_running_stats()) {
      // torch's update: (1 - factor) * running + factor * batch, with the unbiased variance.
      running_mean.copy_(running_mean.to(at::kDouble) * (1 - factor) + mean * factor);
      running_var.copy_(running_var.to(at::kDouble) * (1 - factor) + var * (count / (count - 1)) * factor);
    }
  }
  const at::Tensor invstd = (var + options.eps()).rsqrt().to(input.scalar_type());
  at::Tensor y = GlobalNormalize::apply(input, mean.to(input.scalar_type()), invstd, count);
  if (options.affine()) y = y * per_channel(weight, y) + per_channel(bias, y);
  return y;
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << std::boolalpha << "accel::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum()) stream << *options.momentum();
  else stream << "None";
  stream << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats() << ')';
}

}  // namespace accel

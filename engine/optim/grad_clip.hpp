// Global gradient L2 norm and clipping (spec/training.md; torch.nn.utils.clip_grad_norm_).
// Invariant: the norm is a function of the multiset of gradient elements only, accumulated in
// fp64, so any split of the gradients (whole tensors, flat shards, across ranks) gives the same
// norm to ~1e-15 relative, and hence the same clipping decision on every rank.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace accel::engine {

// Combines this rank's sum of squares into the global one (e.g. an all-reduce SUM over ranks).
// An empty function is the identity (one rank holding every gradient).
using SumOfSquaresReduce = std::function<double(double)>;

// sqrt(reduce(sum of g^2 over all elements of all defined grads)). Undefined grads are skipped
// (torch skips parameters without a gradient). `reduce` is always called exactly once, even with
// no local gradients, so every rank takes part in the collective.
// Precision: each element is squared and summed in fp64. torch computes per-tensor norms in the
// gradient dtype and then the norm of those norms in that dtype; for fp32 gradients the two agree
// to ~1e-7 relative. For bf16 gradients torch's per-tensor norms are rounded to bf16 (~4e-3); we
// deliberately do better, because the sharded paths must not depend on how tensors are split.
double global_grad_norm(const std::vector<at::Tensor>& grads, const SumOfSquaresReduce& reduce = {});

// Clipping per spec: if norm > max_norm (and max_norm > 0), every defined grad is multiplied in
// place by max_norm / (norm + 1e-6). Returns the factor applied (1.0 when nothing was scaled).
// Differs from torch only in the last 1e-6: torch multiplies by min(1, max_norm / (norm + 1e-6))
// whenever it is called, which also scales (by at least 1 - 1e-6/max_norm) when
// max_norm - 1e-6 < norm <= max_norm; the spec's rule leaves those gradients untouched.
// A non-finite norm is not special-cased (NaN compares false: no scaling); detecting overflow is
// the loss scaler's job.
double clip_gradients(const std::vector<at::Tensor>& grads, double norm, double max_norm);

// global_grad_norm, then clip_gradients when max_norm > 0 (0 disables clipping, per
// training.max_grad_norm). Returns the norm before clipping, the value the metrics report.
double clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, const SumOfSquaresReduce& reduce = {});

// fp16 loss scaling: the gradients hold grad_scale x the true ones. Returns the true norm (the
// scaled norm / grad_scale). Non-finite (an overflow): nothing is touched. Otherwise the gradients
// are unscaled and clipped in one multiply by (1 / grad_scale) x the clip factor. For a power-of-two
// scale every step is exact, so the result is bitwise that of unscaled gradients (barring
// underflow, which the scale exists to prevent, and overflow, which is detected).
double unscale_and_clip_grad_norm(const std::vector<at::Tensor>& grads, double grad_scale, double max_norm,
                                  const SumOfSquaresReduce& reduce = {});

}  // namespace accel::engine

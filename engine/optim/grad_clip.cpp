// Gradient norm in fp64 chunks and in-place clipping.
// Invariant: peak extra memory is one fp64 chunk (kChunk elements), not an fp64 copy of a gradient;
// the chunk is allocated once per norm and reused (a fresh pair of 8 MiB temporaries per chunk
// cost a page fault per 4 KiB every step), with the same values and summation as to().square().
#include "engine/optim/grad_clip.hpp"

#include <ATen/core/grad_mode.h>
#include <cmath>

namespace accel::engine {

namespace {

constexpr int64_t kChunk = int64_t{1} << 20;  // elements converted to fp64 at a time (8 MiB)

// The squares of `values` in fp64, in `scratch` (grown to fit; a prefix is used).
at::Tensor squares_in(at::Tensor& scratch, const at::Tensor& values) {
  if (!scratch.defined() || scratch.numel() < values.numel() || scratch.device() != values.device())
    scratch = at::empty({std::min(kChunk, std::max<int64_t>(values.numel(), 1))}, values.options().dtype(at::kDouble));
  return scratch.narrow(0, 0, values.numel()).copy_(values).square_();
}

// Sum of squares of one tensor's elements, as a 0-dim fp64 tensor on the tensor's device.
at::Tensor sum_of_squares(const at::Tensor& g, at::Tensor& scratch) {
  const at::Tensor flat = g.reshape({-1});  // a view when contiguous
  if (flat.numel() <= kChunk) return squares_in(scratch, flat).sum();
  at::Tensor total = at::zeros({}, flat.options().dtype(at::kDouble));
  for (int64_t start = 0; start < flat.numel(); start += kChunk) {
    const int64_t len = std::min(kChunk, flat.numel() - start);
    total.add_(squares_in(scratch, flat.narrow(0, start, len)).sum());
  }
  return total;
}

}  // namespace

double global_grad_norm(const std::vector<at::Tensor>& grads, const SumOfSquaresReduce& reduce) {
  at::NoGradGuard no_grad;
  at::Tensor local;  // fp64 on the first gradient's device: one host sync at the end
  at::Tensor scratch;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    at::Tensor s = sum_of_squares(g, scratch);
    if (!local.defined())
      local = s;
    else
      local = local + s.to(local.device());
  }
  const double local_sum = local.defined() ? local.item<double>() : 0.0;
  const double global_sum = reduce ? reduce(local_sum) : local_sum;
  return std::sqrt(global_sum);
}

double clip_gradients(const std::vector<at::Tensor>& grads, double norm, double max_norm) {
  if (!(max_norm > 0) || !(norm > max_norm)) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  at::NoGradGuard no_grad;
  for (const auto& g : grads)
    if (g.defined()) g.mul_(coef);
  return coef;
}

double clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, const SumOfSquaresReduce& reduce) {
  return unscale_and_clip_grad_norm(grads, 1.0, max_norm, reduce);
}

double unscale_and_clip_grad_norm(const std::vector<at::Tensor>& grads, double grad_scale, double max_norm,
                                  const SumOfSquaresReduce& reduce) {
  const double norm = global_grad_norm(grads, reduce) / grad_scale;
  if (!std::isfinite(norm)) return norm;  // overflow: the caller skips the step and drops the gradients
  double coef = 1.0 / grad_scale;
  if (max_norm > 0 && norm > max_norm) coef *= max_norm / (norm + 1e-6);
  if (coef == 1.0) return norm;
  at::NoGradGuard no_grad;
  for (const auto& g : grads)
    if (g.defined()) g.mul_(coef);
  return norm;
}

}  // namespace accel::engine

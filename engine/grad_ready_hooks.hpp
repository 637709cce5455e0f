// Gradient readiness without forward boundaries: one hook pair on each parameter's AccumulateGrad
// node, the autograd node that adds a backward pass's gradient into `.grad` (c10d's Reducer finds
// "gradient ready" the same way). before(i) runs when parameter i's gradient of this backward pass
// is complete, before it is added into `.grad` (so `.grad` may be pointed at a flat buffer there);
// after(i) runs once it has been added. Autograd sums every use of a parameter (tied weights, a
// module called twice) before its AccumulateGrad runs, so each fires once per backward pass (a
// nested backward, as activation checkpointing's recompute runs, is a pass of its own).
// Invariants: hooks are registered after the parameters' final set_data (a dtype or device change
// replaces the accumulator); the accumulators are kept alive here and the hooks removed on
// destruction, so a model that outlives its engine runs backward without them. Parameters that
// do not require grad get no hooks.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace accel::engine {

// A `.grad` for a parameter of shape `sizes` that lives in `flat` at element `offset` (contiguous):
// it shares flat's storage but is not an autograd view of it. libtorch's Optimizer::zero_grad
// detach_()es every defined .grad before resetting or zeroing it, and detach_() throws for views;
// on this alias it works, so a user's zero_grad() on a prepared module does what it does in torch
// to .grad (Backend::rearm_grads points a dropped one back at the buffer).
at::Tensor grad_alias(const at::Tensor& flat, int64_t offset, at::IntArrayRef sizes);

// Points every parameter's .grad back at its alias `grad_views[i]` (Backend::rearm_grads). A .grad
// zero_grad(set_to_none) dropped keeps its values (accel's until the step zeroes them); one the
// user assigned is copied in, so the next backward accumulates on top of it, as in torch.
void rearm_grad_aliases(std::vector<std::pair<std::string, at::Tensor>>& params, const std::vector<at::Tensor>& grad_views);

class GradReadyHooks {
 public:
  GradReadyHooks(const std::vector<at::Tensor>& params, std::function<void(int)> before, std::function<void(int)> after);
  ~GradReadyHooks();
  GradReadyHooks(const GradReadyHooks&) = delete;
  GradReadyHooks& operator=(const GradReadyHooks&) = delete;

 private:
  struct Registered {
    std::shared_ptr<torch::autograd::Node> accumulator;
    const void* pre_hook = nullptr;
    uintptr_t post_hook = 0;
  };
  std::vector<Registered> hooks_;
};

}  // namespace accel::engine

// The engine's side of a unit boundary (docs/design/0003, 0015): a forward calls
// x = pre_forward(unit, x) before a unit runs and y = post_forward(unit, y) after it, where `unit`
// is the module the engine's UnitSpec names (an accel::Unit<> wrapper; the UnitSink of
// api/ routes the wrappers' calls here). A hook may return its argument wrapped in a
// custom autograd Function: wrapping pre_forward's x gives a backward that runs after the unit's
// backward (post-backward reduce); wrapping post_forward's y gives one that runs before it
// (pre-backward gather). The defaults are the identity.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace accel::engine {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual at::Tensor pre_forward(torch::nn::Module& /*unit*/, at::Tensor x) { return x; }
  virtual at::Tensor post_forward(torch::nn::Module& /*unit*/, at::Tensor y) { return y; }
};

}  // namespace accel::engine

// A hook into autograd at a unit boundary: signal_after_backward(x, listener, tag) returns x unchanged
// in forward, and calls listener->on_backward(tag) when the gradient with respect to x has been
// computed, i.e. right after the backward of everything that consumed x. Wrapped around a unit's
// input (UnitHooks::pre_forward) it fires once that unit's parameter gradients are complete: the
// post-backward point where DDP launches a bucket's all-reduce and ZeRO/FSDP launch a reduce-scatter.
// Invariant: the gradient passes through unchanged; if x does not require grad nothing is wrapped and
// nothing will fire (the caller must handle that use after backward() returns).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace accel::engine {

class BackwardListener {
 public:
  virtual ~BackwardListener() = default;
  // Runs on the autograd engine's thread, inside backward(); an exception propagates out of backward().
  virtual void on_backward(int64_t tag) = 0;
};

// Returns x (wrapped) when x.requires_grad(), else x itself.
at::Tensor signal_after_backward(const at::Tensor& x, BackwardListener* listener, int64_t tag);

}  // namespace accel::engine

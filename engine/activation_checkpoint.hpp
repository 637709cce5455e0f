// Activation checkpointing (FSDP's activation_checkpointing, torch.utils.checkpoint's reentrant
// variant), which libtorch's C++ API lacks: recompute_in_backward(body, x) returns body(x), computed
// without recording an autograd graph, and keeps only x. When the gradient of the result arrives,
// body(x) is run again with grad enabled and back-propagated: the parameters body uses accumulate
// their gradients into their existing .grad tensors (in place, as a plain backward does), and the
// gradient of x flows on. docs/design/0010-activation-checkpointing.md has the decisions.
// Invariants:
//  - Same ops on the same values: the gradients equal those of a plain body(x) bit for bit on CPU.
//  - The recompute sees the random-number state the first run saw (the default generator of x's
//    device is saved and restored around it), so a random op (dropout) draws the same values; the
//    generator's state after the recompute is what it was before it. The swap is on the
//    process-wide generator, as torch's checkpoint does: other threads drawing meanwhile would see
//    it (a rank is one process with one backward thread; accel's models draw nothing in forward).
//  - body must not depend on anything that changes between forward and backward other than the
//    parameters' storage (a sharding engine may free it and gather it back before the backward).
//  - Without grad mode, or when x does not require grad, this is body(x): a graph whose only
//    input needs no gradient would give the parameters none (torch's reentrant checkpoint has
//    the same limit and warns); storing that one use is the correct fallback.
#pragma once

#include <functional>

#include <ATen/ATen.h>

namespace accel::engine {

using UnitBody = std::function<at::Tensor(const at::Tensor&)>;

at::Tensor recompute_in_backward(UnitBody body, const at::Tensor& x);

}  // namespace accel::engine

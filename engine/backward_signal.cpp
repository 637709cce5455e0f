#include "engine/backward_signal.hpp"

#include <torch/csrc/autograd/custom_function.h>

namespace accel::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct BackwardSignal : torch::autograd::Function<BackwardSignal> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t listener, int64_t tag) {
    ctx->saved_data["listener"] = listener;
    ctx->saved_data["tag"] = tag;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* listener = reinterpret_cast<BackwardListener*>(ctx->saved_data["listener"].toInt());
    listener->on_backward(ctx->saved_data["tag"].toInt());
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor signal_after_backward(const at::Tensor& x, BackwardListener* listener, int64_t tag) {
  if (!x.requires_grad()) return x;
  // The listener travels as an integer: autograd's saved_data holds IValues, not raw pointers.
  return BackwardSignal::apply(x, reinterpret_cast<int64_t>(listener), tag);
}

}  // namespace accel::engine

// The precision optimizer arithmetic runs in, and the working copy that realises it.
// Invariant: fp32 and fp64 tensors are updated in place in their own dtype (so the ops are exactly
// torch.optim's); bf16 and fp16 parameters are upcast to an fp32 working copy, updated there and
// rounded back once per step, and their optimizer state is always fp32. (Keeping bf16 parameters
// between steps still loses small updates; fp32 master weights, added by the sharding core, are the
// real fix. This path is what a `low` precision run gets.)
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace accel::engine {

// The dtype of optimizer state and arithmetic for a parameter of dtype `param`.
inline at::ScalarType optimizer_math_dtype(at::ScalarType param) {
  switch (param) {
    case at::kFloat:
    case at::kDouble:
      return param;
    case at::kBFloat16:
    case at::kHalf:
      return at::kFloat;
    default:
      throw std::invalid_argument(std::string("optimizer: parameters must be floating point, got ") +
                                  c10::toString(param));
  }
}

// A parameter seen in its math dtype: `work` aliases the parameter when the dtypes agree, otherwise
// it is an upcast copy that write_back() rounds into the parameter.
class MathCopy {
 public:
  explicit MathCopy(at::Tensor param)
      : param_(std::move(param)),
        work_(param_.scalar_type() == optimizer_math_dtype(param_.scalar_type())
                  ? param_
                  : param_.to(optimizer_math_dtype(param_.scalar_type()))) {}
  at::Tensor& work() { return work_; }
  void write_back() {
    if (!work_.is_same(param_)) param_.copy_(work_);
  }

 private:
  at::Tensor param_;
  at::Tensor work_;
};

// `grad` in the math dtype (no copy when it already is).
inline at::Tensor grad_in(const at::Tensor& grad, at::ScalarType math) {
  return grad.scalar_type() == math ? grad : grad.to(math);
}

// Throws std::invalid_argument unless `state` has the parameter's shape and its math dtype.
inline void check_state(const char* what, const at::Tensor& state, const at::Tensor& param) {
  if (!state.defined()) throw std::invalid_argument(std::string("optimizer: ") + what + " is undefined");
  if (state.sizes() != param.sizes())
    throw std::invalid_argument(std::string("optimizer: ") + what + " has shape " + c10::str(state.sizes()) +
                                " but the parameter has " + c10::str(param.sizes()));
  if (state.scalar_type() != optimizer_math_dtype(param.scalar_type()))
    throw std::invalid_argument(std::string("optimizer: ") + what + " must be " +
                                c10::toString(optimizer_math_dtype(param.scalar_type())) + ", got " +
                                c10::toString(state.scalar_type()));
}

// Throws std::invalid_argument unless `grad` is defined, dense and shaped like the parameter.
inline void check_grad(const at::Tensor& grad, const at::Tensor& param) {
  if (!grad.defined()) throw std::invalid_argument("optimizer: gradient is undefined");
  if (grad.is_sparse()) throw std::invalid_argument("optimizer: sparse gradients are not supported");
  if (grad.sizes() != param.sizes())
    throw std::invalid_argument("optimizer: gradient has shape " + c10::str(grad.sizes()) + " but the parameter has " +
                                c10::str(param.sizes()));
}

}  // namespace accel::engine

// The position-wise feed-forward network of a gpt Block (module "mlp"): c_fc Linear(C, 4C),
// GELU with the tanh approximation, c_proj Linear(4C, C). Invariant: parameters register as
// c_fc.{weight,bias} then c_proj.{weight,bias}, the spec order.
#pragma once

#include <cstdint>
#include <memory>

#include "trainer/models/layers.hpp"

namespace accel::train {

class FeedForward : public torch::nn::Module {
 public:
  FeedForward(int64_t n_embd, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x) const;  // [B, T, C] -> [B, T, C]

 private:
  std::shared_ptr<LinearLayer> c_fc_;
  std::shared_ptr<LinearLayer> c_proj_;
};

}  // namespace accel::train

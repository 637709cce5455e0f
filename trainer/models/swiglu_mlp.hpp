// The SwiGLU feed-forward network of a llama decoder layer (module "mlp"):
//   down_proj(silu(gate_proj(x)) * up_proj(x)), gate/up [I, C], down [C, I], biases with mlp_bias.
// Invariant: parameters register as gate_proj, up_proj, down_proj (transformers' LlamaMLP order).
#pragma once

#include <memory>

#include "trainer/models/layers.hpp"
#include "trainer/models/llama_shape.hpp"

namespace accel::train {

class SwigluMlp : public torch::nn::Module {
 public:
  explicit SwigluMlp(const LlamaShape& shape);
  at::Tensor forward(const at::Tensor& x) const;  // [B, T, C] -> [B, T, C]

 private:
  std::shared_ptr<LinearLayer> gate_proj_, up_proj_, down_proj_;
};

}  // namespace accel::train

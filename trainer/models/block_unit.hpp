// One pre-LayerNorm transformer Block of the gpt model (GptModule's h.{i}, wrapped in accel::Unit<>),
//   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x)).
// Module::name() is "Block", the class fsdp.transformer_layer_cls_to_wrap names.
// Invariant: parameters are ln_1.*, attn.c_attn.*, attn.c_proj.*, ln_2.*, mlp.c_fc.*, mlp.c_proj.*
// (weight before bias), the spec order.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/nn/module.h>

#include "trainer/models/causal_self_attention.hpp"
#include "trainer/models/feed_forward.hpp"
#include "trainer/models/layers.hpp"

namespace accel::train {

class BlockUnit : public torch::nn::Module {
 public:
  BlockUnit(int64_t n_embd, int64_t n_head, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x) const;  // [B, T, C] -> [B, T, C]

 private:
  std::shared_ptr<LayerNormLayer> ln_1_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<LayerNormLayer> ln_2_;
  std::shared_ptr<FeedForward> mlp_;
};

}  // namespace accel::train

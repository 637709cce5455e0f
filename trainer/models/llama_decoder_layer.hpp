// One llama decoder layer (LlamaModule's layers.{i}, wrapped in accel::Unit<>), pre-RMSNorm:
//   x = x + self_attn(input_layernorm(x));  x = x + mlp(post_attention_layernorm(x)).
// Module::name() is "LlamaDecoderLayer", transformers' class, the one fsdp.transformer_layer_cls_to_wrap
// names in Accelerate configs for Llama. Invariant: parameters are self_attn.*, mlp.*,
// input_layernorm, post_attention_layernorm: transformers' names (below "model.layers.{i}.") and order.
#pragma once

#include <memory>

#include "trainer/models/layers.hpp"
#include "trainer/models/llama_attention.hpp"
#include "trainer/models/llama_shape.hpp"
#include "trainer/models/swiglu_mlp.hpp"

namespace accel::train {

class LlamaDecoderLayer : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayer(const LlamaShape& shape);
  // x [B, T, C]; cos/sin [T, head_dim] float32 (not trained: the unit's other arguments).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;

 private:
  std::shared_ptr<RmsNormLayer> input_layernorm_;
  std::shared_ptr<LlamaAttention> self_attn_;
  std::shared_ptr<RmsNormLayer> post_attention_layernorm_;
  std::shared_ptr<SwigluMlp> mlp_;
};

}  // namespace accel::train

// Grouped-query self-attention of a llama decoder layer (module "self_attn"): q_proj [H*hd, C],
// k_proj and v_proj [KV*hd, C], o_proj [C, H*hd] (biases with attention_bias); RoPE on q and k;
// query head h reads key/value head h / (H / KV); causal softmax(q k^T * hd^-0.5) v with the
// softmax in float32 (transformers' eager attention); the heads concatenated through o_proj.
// Invariant: parameters register as q_proj, k_proj, v_proj, o_proj (weight before bias), the
// order of transformers' LlamaAttention.
#pragma once

#include <memory>

#include "trainer/models/layers.hpp"
#include "trainer/models/llama_shape.hpp"

namespace accel::train {

class LlamaAttention : public torch::nn::Module {
 public:
  explicit LlamaAttention(const LlamaShape& shape);
  // x [B, T, C], cos/sin [T, hd] (rotary_embedding.hpp) -> [B, T, C]
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;

 private:
  LlamaShape shape_;
  std::shared_ptr<LinearLayer> q_proj_, k_proj_, v_proj_, o_proj_;
};

}  // namespace accel::train

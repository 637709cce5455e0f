// Causal multi-head self-attention (module "attn" of a gpt Block): c_attn Linear(C, 3C) gives
// q, k, v in that order along the last dim; per head softmax(q k^T / sqrt(head_dim)) v with
// position t attending to positions <= t only; heads are concatenated and c_proj Linear(C, C)
// projects back. Invariant: output at position t depends on inputs at positions <= t only.
#pragma once

#include <cstdint>
#include <memory>

#include "trainer/models/layers.hpp"

namespace accel::train {

class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x) const;  // [B, T, C] -> [B, T, C]

 private:
  // softmax(q k^T / sqrt(hd) + causal mask) v, written out (the CPU path).
  static at::Tensor explicit_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t head_dim);
  int64_t n_embd_;
  int64_t n_head_;
  std::shared_ptr<LinearLayer> c_attn_;
  std::shared_ptr<LinearLayer> c_proj_;
};

}  // namespace accel::train

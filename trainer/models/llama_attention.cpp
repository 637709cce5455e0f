// Grouped-query self-attention with RoPE (see llama_attention.hpp).
#include "trainer/models/llama_attention.hpp"

#include <cmath>
#include <limits>

#include "trainer/models/rotary_embedding.hpp"

namespace accel::train {

namespace {

// [B, KV, T, hd] -> [B, KV * n_rep, T, hd], each key/value head repeated for its n_rep query heads
// (transformers' repeat_kv).
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), t = x.size(2), hd = x.size(3);
  return x.unsqueeze(2).expand({b, kv, n_rep, t, hd}).reshape({b, kv * n_rep, t, hd});
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaShape& s) : shape_(s) {
  const int64_t q_width = s.n_head * s.head_dim, kv_width = s.n_kv_head * s.head_dim;
  q_proj_ = register_module("q_proj", std::make_shared<LinearLayer>(s.n_embd, q_width, s.dtype, s.attention_bias));
  k_proj_ = register_module("k_proj", std::make_shared<LinearLayer>(s.n_embd, kv_width, s.dtype, s.attention_bias));
  v_proj_ = register_module("v_proj", std::make_shared<LinearLayer>(s.n_embd, kv_width, s.dtype, s.attention_bias));
  o_proj_ = register_module("o_proj", std::make_shared<LinearLayer>(q_width, s.n_embd, s.dtype, s.attention_bias));
}

at::Tensor LlamaAttention::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  const int64_t batch = x.size(0), seq_len = x.size(1), hd = shape_.head_dim;
  auto to_heads = [&](const at::Tensor& t) { return t.view({batch, seq_len, -1, hd}).transpose(1, 2); };
  const at::Tensor q = apply_rope(to_heads(q_proj_->forward(x)), cos, sin);
  const at::Tensor k = repeat_kv(apply_rope(to_heads(k_proj_->forward(x)), cos, sin), shape_.n_head / shape_.n_kv_head);
  const at::Tensor v = repeat_kv(to_heads(v_proj_->forward(x)), shape_.n_head / shape_.n_kv_head);
  const double scale = std::pow(double(hd), -0.5);  // transformers' head_dim**-0.5
  at::Tensor y;
  if (!x.is_cpu()) {
    // On a GPU: libtorch's fused kernel (never materialises the [T, T] scores); the CPU keeps the
    // explicit form below, the one the parity tests pin against transformers.
    y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true, scale);
  } else {
    at::Tensor scores = at::matmul(q, k.transpose(2, 3)) * scale;
    const at::Tensor future = at::ones({seq_len, seq_len}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    y = at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), v);
  }
  return o_proj_->forward(y.transpose(1, 2).contiguous().view({batch, seq_len, shape_.n_head * hd}));
}

}  // namespace accel::train

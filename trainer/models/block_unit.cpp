// The gpt model's transformer Block (see block_unit.hpp).
#include "trainer/models/block_unit.hpp"

namespace accel::train {

BlockUnit::BlockUnit(int64_t n_embd, int64_t n_head, at::ScalarType dtype) : torch::nn::Module("Block") {
  ln_1_ = register_module("ln_1", std::make_shared<LayerNormLayer>(n_embd, dtype));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(n_embd, n_head, dtype));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNormLayer>(n_embd, dtype));
  mlp_ = register_module("mlp", std::make_shared<FeedForward>(n_embd, dtype));
}

at::Tensor BlockUnit::forward(const at::Tensor& x) const {
  at::Tensor h = x + attn_->forward(ln_1_->forward(x));
  return h + mlp_->forward(ln_2_->forward(h));
}

}  // namespace accel::train

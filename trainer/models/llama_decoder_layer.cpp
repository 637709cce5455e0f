// One llama decoder layer (see llama_decoder_layer.hpp).
#include "trainer/models/llama_decoder_layer.hpp"

namespace accel::train {

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaShape& s) : torch::nn::Module("LlamaDecoderLayer") {
  // Registration order is transformers' (self_attn, mlp, then the norms) and the spec init's draw order.
  self_attn_ = register_module("self_attn", std::make_shared<LlamaAttention>(s));
  mlp_ = register_module("mlp", std::make_shared<SwigluMlp>(s));
  input_layernorm_ = register_module("input_layernorm", std::make_shared<RmsNormLayer>(s.n_embd, s.norm_eps, s.dtype));
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", std::make_shared<RmsNormLayer>(s.n_embd, s.norm_eps, s.dtype));
}

at::Tensor LlamaDecoderLayer::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const {
  const at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), cos, sin);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

}  // namespace accel::train

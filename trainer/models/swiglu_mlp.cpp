// The SwiGLU feed-forward network (see swiglu_mlp.hpp).
#include "trainer/models/swiglu_mlp.hpp"

namespace accel::train {

SwigluMlp::SwigluMlp(const LlamaShape& s) {
  gate_proj_ = register_module("gate_proj", std::make_shared<LinearLayer>(s.n_embd, s.intermediate_size, s.dtype, s.mlp_bias));
  up_proj_ = register_module("up_proj", std::make_shared<LinearLayer>(s.n_embd, s.intermediate_size, s.dtype, s.mlp_bias));
  down_proj_ = register_module("down_proj", std::make_shared<LinearLayer>(s.intermediate_size, s.n_embd, s.dtype, s.mlp_bias));
}

at::Tensor SwigluMlp::forward(const at::Tensor& x) const {
  return down_proj_->forward(at::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
}

}  // namespace accel::train

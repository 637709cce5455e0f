// The `gpt` model as a module (see gpt_module.hpp).
#include "trainer/models/gpt_module.hpp"

#include "trainer/models/builtin_ops.hpp"

namespace accel::train {

GptModule::GptModule(const config::ModelSection& s) : BuiltinModule(s.n_layer) {
  const at::ScalarType dtype = to_scalar_type(s.dtype);
  // Registration order is spec order.
  wte_ = register_module("wte", std::make_shared<TableLayer>(s.vocab_size, s.n_embd, dtype));
  wpe_ = register_module("wpe", std::make_shared<TableLayer>(s.block_size, s.n_embd, dtype));
  for (int i = 0; i < s.n_layer; ++i) h_->push_back(blocks_.emplace_back(int64_t(s.n_embd), int64_t(s.n_head), dtype));
  register_module("h", h_);
  ln_f_ = register_module("ln_f", std::make_shared<LayerNormLayer>(s.n_embd, dtype));
}

at::Tensor GptModule::hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) {
  at::Tensor x = embed_tokens(wte_->weight, wpe_->weight, idx, tied);
  for (auto& block : blocks_) x = block(x);
  return ln_f_->forward(x);
}

at::Tensor GptModule::head_weight() const { return wte_->weight; }

}  // namespace accel::train

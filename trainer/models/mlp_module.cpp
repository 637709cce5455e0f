// The `mlp` model as a module (see mlp_module.hpp).
#include "trainer/models/mlp_module.hpp"

#include "trainer/models/builtin_ops.hpp"

namespace accel::train {

MlpModule::MlpModule(const config::ModelSection& s) : BuiltinModule(s.n_layer) {
  const at::ScalarType dtype = to_scalar_type(s.dtype);
  wte_ = register_module("wte", std::make_shared<TableLayer>(s.vocab_size, s.n_embd, dtype));
  for (int i = 0; i < s.n_layer; ++i)
    layer_->push_back(layers_.emplace_back(int64_t(s.n_embd), /*apply_gelu=*/i + 1 < s.n_layer, dtype));
  register_module("layer", layer_);
}

at::Tensor MlpModule::hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) {
  at::Tensor x = embed_tokens(wte_->weight, at::Tensor(), idx, tied);
  for (auto& layer : layers_) x = layer(x);
  return x;
}

at::Tensor MlpModule::head_weight() const { return wte_->weight; }

}  // namespace accel::train

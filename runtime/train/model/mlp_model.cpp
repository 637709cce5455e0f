// The `mlp` model (see mlp_model.hpp).
#include "runtime/train/model/mlp_model.hpp"

namespace accel::train {

MlpModel::MlpModel(const config::ModelSection& s) : Model(s) {
  embedding_ = add_unit(std::make_shared<EmbeddingUnit>(s.vocab_size, s.n_embd, /*block_size=*/0, dtype()));
  for (int i = 0; i < s.n_layer; ++i)
    layers_.push_back(add_layer_unit(std::make_shared<MlpLayerUnit>(i, s.n_embd, /*apply_gelu=*/i + 1 < s.n_layer, dtype())));
}

at::Tensor MlpModel::forward(const at::Tensor& idx, UnitHooks* hooks) {
  at::Tensor x = run_unit(*embedding_, hooks, idx, [&](const at::Tensor& in) { return embedding_->embed(in); });
  for (auto& layer : layers_)
    x = run_unit(*layer, hooks, x, [layer](const at::Tensor& in) { return layer->forward(in); });
  return run_unit(*embedding_, hooks, x, [&](const at::Tensor& in) { return embedding_->unembed(in); });
}

}  // namespace accel::train

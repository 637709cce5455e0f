// The `gpt` model (see gpt_model.hpp).
#include "runtime/train/model/gpt_model.hpp"

namespace accel::train {

GptModel::GptModel(const config::ModelSection& s) : Model(s) {
  embedding_ = add_unit(std::make_shared<EmbeddingUnit>(s.vocab_size, s.n_embd, s.block_size, dtype()));
  for (int i = 0; i < s.n_layer; ++i)
    blocks_.push_back(add_layer_unit(std::make_shared<BlockUnit>(i, s.n_embd, s.n_head, dtype())));
  final_ = add_unit(std::make_shared<FinalNormUnit>(s.n_embd, dtype()));
}

at::Tensor GptModel::forward(const at::Tensor& idx, UnitHooks* hooks) {
  at::Tensor x = run_unit(*embedding_, hooks, idx, [&](const at::Tensor& in) { return embedding_->embed(in); });
  for (auto& block : blocks_)
    x = run_unit(*block, hooks, x, [block](const at::Tensor& in) { return block->forward(in); });
  x = run_unit(*final_, hooks, x, [&](const at::Tensor& in) { return final_->forward(in); });
  return run_unit(*embedding_, hooks, x, [&](const at::Tensor& in) { return embedding_->unembed(in); });
}

}  // namespace accel::train

// The `llama` model as a module (see llama_module.hpp).
#include "trainer/models/llama_module.hpp"

#include <stdexcept>
#include <string>

#include "trainer/models/builtin_ops.hpp"
#include "trainer/models/rotary_embedding.hpp"

namespace accel::train {

LlamaModule::LlamaModule(const config::ModelSection& s) : BuiltinModule(s.n_layer), block_size_(s.block_size) {
  const LlamaShape shape = LlamaShape::of(s);
  // Registration order is the spec order the seeded init draws in: transformers' order, except that
  // lm_head comes right after embed_tokens. The root unit (embed_tokens, lm_head, norm) is built
  // first, and the init's stream hands out each parameter's values only in that order
  // (spec_init_stream.hpp): lm_head last would put every layer's draw before the root's.
  embed_tokens_ = register_module("embed_tokens", std::make_shared<TableLayer>(s.vocab_size, s.n_embd, shape.dtype));
  if (!s.tie_word_embeddings)
    lm_head_ = register_module("lm_head", std::make_shared<LinearLayer>(s.n_embd, s.vocab_size, shape.dtype, false));
  for (int i = 0; i < s.n_layer; ++i) layers_list_->push_back(layers_.emplace_back(shape));
  register_module("layers", layers_list_);
  norm_ = register_module("norm", std::make_shared<RmsNormLayer>(s.n_embd, s.norm_eps, shape.dtype));
  inv_freq_ = rope_inverse_frequencies(s, shape.head_dim);
}

at::Tensor LlamaModule::hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) {
  at::Tensor x = embed_tokens(embed_tokens_->weight, /*wpe=*/at::Tensor(), idx, tied);
  if (idx.size(1) > block_size_)
    throw std::invalid_argument("llama: sequence length " + std::to_string(idx.size(1)) +
                                " exceeds model.block_size " + std::to_string(block_size_));
  const RopeTables rope = rope_tables(inv_freq_, idx.size(1), x.device());
  for (auto& layer : layers_) x = layer(x, rope.cos, rope.sin);
  return norm_->forward(x);
}

at::Tensor LlamaModule::head_weight() const { return lm_head_ ? lm_head_->weight : embed_tokens_->weight; }

}  // namespace accel::train

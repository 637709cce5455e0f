// The `llama` model (docs/models.md, docs/spec/training.md) as a module: embed_tokens, layers.{i}
// (accel::Unit<LlamaDecoderLayer>), norm, lm_head (absent when tie_word_embeddings: logits then go
// through embed_tokens). Parameter names are transformers' LlamaForCausalLM names without the
// leading "model." (embed_tokens.weight, lm_head.weight, layers.0.self_attn.q_proj.weight, ...,
// norm.weight), in its order except lm_head, right after embed_tokens (the spec init's order). The RoPE tables are computed per forward, outside the units, and
// passed to each layer: they hold no parameters, so nothing of them is sharded or saved.
#pragma once

#include <memory>
#include <vector>

#include <accel/unit.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "trainer/models/builtin_module.hpp"
#include "trainer/models/layers.hpp"
#include "trainer/models/llama_decoder_layer.hpp"

namespace accel::train {

class LlamaModule : public BuiltinModule {
 public:
  explicit LlamaModule(const config::ModelSection& section);
  at::Tensor hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) override;
  at::Tensor head_weight() const override;
  bool ties_head() const override { return !lm_head_; }

 private:
  std::shared_ptr<TableLayer> embed_tokens_;
  torch::nn::ModuleList layers_list_;
  std::vector<accel::Unit<LlamaDecoderLayer>> layers_;
  std::shared_ptr<RmsNormLayer> norm_;
  std::shared_ptr<LinearLayer> lm_head_;  // null when tied
  at::Tensor inv_freq_;                   // [head_dim / 2] float32, on the CPU
  int64_t block_size_;
};

}  // namespace accel::train

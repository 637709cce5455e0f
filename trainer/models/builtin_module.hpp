// The built-in models of spec/training.md (gpt, llama, mlp) as torch::nn::Modules, which the built-in
// trainer prepares through the public API (include/accel; docs/design/0017). Each layer (BlockUnit,
// LlamaDecoderLayer, MlpLayerUnit) is wrapped in accel::Unit<>, so stage 3 and FULL_SHARD see its boundary; the
// embedding tables and gpt's final norm are registered on the root, which stays gathered.
// Invariant: named_parameters() lists the spec names in spec order (wte, wpe, h.0..., ln_f), the
// order the seeded spec init draws in.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/nn/module.h>

#include "runtime/config/job.hpp"
#include "engine/named_tensors.hpp"
#include "trainer/models/chunked_cross_entropy.hpp"

namespace accel::train {

class BuiltinModule : public torch::nn::Module {
 public:
  explicit BuiltinModule(int n_layer) : n_layer_(n_layer) {}
  // idx [B, T] int64 -> logits [B, T, vocab]: hidden_states(idx) @ head_weight()^T.
  at::Tensor forward(const at::Tensor& idx);
  // idx [B, T] int64 -> the hidden states the head reads, [B, T, C] (after the final norm).
  // `tied` (only when ties_head()): the token table's lookup adds its gradient into the chunked
  // loss's head gradient (tied_table_gradient.hpp): no [V, C] of its own, nor one for their sum.
  virtual at::Tensor hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) = 0;
  // The head's weight [V, C]: the token table when the model ties them (ties_head()).
  virtual at::Tensor head_weight() const = 0;
  virtual bool ties_head() const = 0;
  // The mean token cross-entropy of idx's next-token logits against targets [B, T] (fp32, 0-dim):
  // token_cross_entropy(forward(idx), targets) when chunk_tokens is 0 (training.loss_chunk_tokens),
  // else chunked_token_cross_entropy over the hidden states, a tied table's gradient in one [V, C].
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, int64_t chunk_tokens, double gradient_scale = 1.0);
  // (spec name, parameter) in spec order.
  engine::NamedTensors spec_parameters() const;
  // The spec initialisation from `seed` (spec_init.hpp).
  void initialize(uint64_t seed);

 private:
  int n_layer_;
};

// The module `section` names, with zero parameters until initialize(). Throws accel::ConfigError
// naming the key for a section it cannot build (config::check_model_section).
std::shared_ptr<BuiltinModule> make_builtin_module(const config::ModelSection& section);

}  // namespace accel::train

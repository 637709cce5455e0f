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

namespace accel::train {

class BuiltinModule : public torch::nn::Module {
 public:
  explicit BuiltinModule(int n_layer) : n_layer_(n_layer) {}
  // idx [B, T] int64 -> logits [B, T, vocab].
  virtual at::Tensor forward(const at::Tensor& idx) = 0;
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

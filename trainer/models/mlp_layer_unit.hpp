// One layer of the mlp model (MlpModule's layer.{i}, wrapped in accel::Unit<>): Linear(C, C)
// followed by GELU (tanh approximation), except the last layer, whose output feeds the tied
// unembedding directly (no activation). Module::name() is "MlpLayer", the class
// fsdp.transformer_layer_cls_to_wrap names.
// Invariant: its parameters are weight [C, C] then bias [C].
#pragma once

#include <cstdint>

#include <torch/nn/module.h>

namespace accel::train {

class MlpLayerUnit : public torch::nn::Module {
 public:
  MlpLayerUnit(int64_t n_embd, bool apply_gelu, at::ScalarType dtype);
  at::Tensor forward(const at::Tensor& x) const;  // [B, T, C] -> [B, T, C]

 private:
  bool apply_gelu_;
  at::Tensor weight_;  // [C, C], stored [out, in]
  at::Tensor bias_;    // [C]
};

}  // namespace accel::train

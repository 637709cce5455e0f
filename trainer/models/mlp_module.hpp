// The `mlp` model of spec/training.md as a module: wte, then layer.{i} (accel::Unit<MlpLayerUnit>),
// then the tied unembedding (logits = x @ wte^T).
#pragma once

#include <memory>
#include <vector>

#include <accel/unit.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "trainer/models/builtin_module.hpp"
#include "trainer/models/layers.hpp"
#include "trainer/models/mlp_layer_unit.hpp"

namespace accel::train {

class MlpModule : public BuiltinModule {
 public:
  explicit MlpModule(const config::ModelSection& section);
  at::Tensor hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) override;
  at::Tensor head_weight() const override;
  bool ties_head() const override { return true; }

 private:
  std::shared_ptr<TableLayer> wte_;
  torch::nn::ModuleList layer_;
  std::vector<accel::Unit<MlpLayerUnit>> layers_;
};

}  // namespace accel::train

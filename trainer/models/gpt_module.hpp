// The `gpt` model of spec/training.md as a module: wte, wpe, h.{i} (accel::Unit<BlockUnit>), ln_f;
// logits = ln_f(x) @ wte^T (the head tied with wte).
#pragma once

#include <memory>
#include <vector>

#include <accel/unit.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "trainer/models/block_unit.hpp"
#include "trainer/models/builtin_module.hpp"
#include "trainer/models/layers.hpp"

namespace accel::train {

class GptModule : public BuiltinModule {
 public:
  explicit GptModule(const config::ModelSection& section);
  at::Tensor hidden_states(const at::Tensor& idx, const TiedTableGradientPtr& tied) override;
  at::Tensor head_weight() const override;
  bool ties_head() const override { return true; }

 private:
  std::shared_ptr<TableLayer> wte_, wpe_;
  torch::nn::ModuleList h_;
  std::vector<accel::Unit<BlockUnit>> blocks_;
  std::shared_ptr<LayerNormLayer> ln_f_;
};

}  // namespace accel::train

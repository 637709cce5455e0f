// The model interface's shared parts (see model.hpp).
#include "runtime/train/model/model.hpp"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "runtime/train/model/spec_init.hpp"

namespace accel::train {

at::ScalarType to_scalar_type(config::ParamDtype dtype) {
  switch (dtype) {
    case config::ParamDtype::fp32: return at::kFloat;
    case config::ParamDtype::bf16: return at::kBFloat16;
  }
  throw std::invalid_argument("unknown model dtype");
}

Model::Model(const config::ModelSection& section) : section_(section), dtype_(to_scalar_type(section.dtype)) {}

std::vector<Unit*> Model::units() {
  std::vector<Unit*> out;
  for (auto& unit : units_) out.push_back(unit.get());
  return out;
}

NamedTensors Model::named_parameters() {
  NamedTensors out;
  for (auto& unit : units_)
    for (auto& named : unit->named_parameters_in_order()) out.push_back(std::move(named));
  return out;
}

int64_t Model::num_parameters() {
  int64_t total = 0;
  for (const auto& named : named_parameters()) total += named.second.numel();
  return total;
}

at::Tensor Model::loss(const at::Tensor& logits, const at::Tensor& targets) const {
  return token_cross_entropy(logits, targets);
}

at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  if (logits.dim() != 3 || targets.dim() != 2 || logits.size(0) != targets.size(0) ||
      logits.size(1) != targets.size(1))
    throw std::invalid_argument("loss: expected logits [B, T, V] and targets [B, T], got " +
                                std::to_string(logits.dim()) + "-d logits and " + std::to_string(targets.dim()) +
                                "-d targets of mismatched sizes");
  if (targets.scalar_type() != at::kLong) throw std::invalid_argument("loss: targets must be int64");
  const int64_t vocab = logits.size(2);
  return at::cross_entropy_loss(logits.reshape({-1, vocab}).to(at::kFloat), targets.reshape({-1}));
}

void Model::set_activation_checkpointing(bool on) {
  activation_checkpointing_ = on;
  for (auto& unit : layer_units_) unit->set_recompute_in_backward(on);
}

std::vector<std::string> Model::layer_unit_names() const {
  std::vector<std::string> out;
  for (const auto& unit : layer_units_) out.push_back(unit->unit_name());
  return out;
}

void Model::initialize(uint64_t seed) { initialize_in_spec_order(named_parameters(), section_.n_layer, seed); }

}  // namespace accel::train

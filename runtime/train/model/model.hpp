// The model interface the trainer and the sharding backends see: an ordered list of units
// (docs/design/0003-model-units.md), the parameters under their spec names, a forward that calls
// UnitHooks at every unit boundary, the micro-batch loss and the seeded spec initialisation.
// Invariant: named_parameters() is the concatenation of the units' parameters in unit order,
// which is spec order, and lists every parameter exactly once (the tied wte once, in `embedding`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/job.hpp"
#include "runtime/train/model/unit.hpp"

namespace accel::train {

class Model {
 public:
  explicit Model(const config::ModelSection& section);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The units in forward order ("embedding", "h.0", ..., "final" for gpt).
  std::vector<Unit*> units();

  // (spec name, parameter) in spec order. The tensors are the parameters themselves (no copies):
  // a backend that moves or shards storage must keep their identity (Tensor::set_data).
  NamedTensors named_parameters();
  int64_t num_parameters();

  // idx [B, T] int64 (T <= block_size for gpt) -> logits [B, T, vocab_size] in the model dtype.
  // With hooks, calls pre_forward/post_forward around every use of a unit; the embedding unit is
  // used twice: embed at the start and the tied unembed at the end.
  virtual at::Tensor forward(const at::Tensor& idx, UnitHooks* hooks = nullptr) = 0;

  // Mean token cross-entropy of logits [B, T, V] against targets [B, T] int64, computed in fp32
  // (a 0-dim fp32 tensor). Global-batch scaling is the trainer's job.
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets) const;

  // Spec initialisation from `seed`; deterministic, RNG order documented in spec_init.hpp.
  // Until then (or a weights load) every parameter is zero.
  void initialize(uint64_t seed);

  // Activation checkpointing (FSDP's activation_checkpointing): the layer units (gpt's Blocks,
  // mlp's layers) keep only their input and recompute their forward in backward. The embedding
  // (used twice, tied with the head) and gpt's final norm store theirs: they are a small part of
  // the activations. Off by default; a backend turns it on (fsdp.activation_checkpointing).
  void set_activation_checkpointing(bool on);
  bool activation_checkpointing() const { return activation_checkpointing_; }
  // Names of the units that recompute when activation checkpointing is on ("h.0", ...).
  std::vector<std::string> layer_unit_names() const;

  const config::ModelSection& section() const { return section_; }
  at::ScalarType dtype() const { return dtype_; }

 protected:
  // Subclass constructors add their units in forward order.
  template <class U>
  std::shared_ptr<U> add_unit(std::shared_ptr<U> unit) {
    units_.push_back(unit);
    return unit;
  }
  // The same, for a layer unit (one whose forward activation checkpointing recomputes).
  template <class U>
  std::shared_ptr<U> add_layer_unit(std::shared_ptr<U> unit) {
    layer_units_.push_back(unit);
    return add_unit(std::move(unit));
  }

 private:
  config::ModelSection section_;
  at::ScalarType dtype_;
  std::vector<std::shared_ptr<Unit>> units_;
  std::vector<std::shared_ptr<Unit>> layer_units_;
  bool activation_checkpointing_ = false;
};

// Mean token cross-entropy of logits [B, T, V] against targets [B, T] int64, in fp32 (Model::loss).
at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

// The torch dtype of a model.dtype value (fp32 -> Float, bf16 -> BFloat16).
at::ScalarType to_scalar_type(config::ParamDtype dtype);

// Throws accel::ConfigError naming the key for a section whose shapes no model can be built with.
void check_model_section(const config::ModelSection& section);

// Builds the model `section` names, with zero parameters (call initialize or load weights).
// Throws accel::ConfigError naming the key for a section it cannot build.
std::unique_ptr<Model> make_model(const config::ModelSection& section);

}  // namespace accel::train

// Units and unit hooks: the seam between a model and a sharding backend (docs/design/0003).
// A Unit is a torch::nn::Module that owns a disjoint set of the model's parameters and knows their
// full spec names ("h.3.attn.c_attn.weight"). Invariant: named_parameters_in_order() lists every
// parameter of the unit exactly once, in spec order, under its full spec name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "runtime/train/model/activation_checkpoint.hpp"

namespace accel::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Unit : public torch::nn::Module {
 public:
  // unit_name: "embedding", "h.0", "final", "layer.2". param_prefix: what precedes the
  // module-relative parameter names to form spec names ("h.0" -> "h.0.ln_1.weight"; "" keeps
  // "wte.weight" as is).
  // class_name: the torch module name (Module::name()), which FSDP's transformer_layer_cls_to_wrap
  // matches when the unit is a layer of a prepared module ("Block"); empty: the unit name.
  Unit(std::string unit_name, std::string param_prefix, std::string class_name = "");

  const std::string& unit_name() const { return unit_name_; }

  // (full spec name, parameter) in spec order: the module tree's registration order, which each
  // unit's constructor builds to follow spec/training.md.
  NamedTensors named_parameters_in_order() const;

  // Activation checkpointing: run_unit recomputes this unit's forward in backward instead of
  // storing its activations (activation_checkpoint.hpp). Model::set_activation_checkpointing sets it.
  void set_recompute_in_backward(bool on) { recompute_in_backward_ = on; }
  bool recomputes_in_backward() const { return recompute_in_backward_; }

 private:
  std::string unit_name_;
  std::string param_prefix_;
  bool recompute_in_backward_ = false;
};

// Called by a model's forward at every unit boundary: x = pre_forward(unit, x) before the unit
// runs and y = post_forward(unit, y) after. A hook may return its argument wrapped in a custom
// autograd Function: wrapping pre_forward's x gives a backward that runs after the unit's backward
// (post-backward reduce); wrapping post_forward's y gives one that runs before it (pre-backward
// gather). The defaults are the identity.
// Caveats (pinned by tests/train/model/test_unit_hooks.cpp): `embedding` is used twice per
// forward, first with x = the int64 token ids (no gradient, so a Function wrapped around them
// never runs backward), then for the tied unembedding. Nothing therefore fires after the
// embedding's last backward: reduce its gradients after backward() returns, or from a gradient
// hook on wte/wpe. A hook tells the two uses apart by call order or by x's dtype.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual at::Tensor pre_forward(Unit& unit, at::Tensor x);
  virtual at::Tensor post_forward(Unit& unit, at::Tensor y);
  // The same boundaries around a module that is not a train::Unit: an accel::Unit<M> wrapper in a
  // module prepared through the public API (include/accel/unit.hpp, design B).
  virtual at::Tensor pre_forward_module(torch::nn::Module& /*module*/, at::Tensor x) { return x; }
  virtual at::Tensor post_forward_module(torch::nn::Module& /*module*/, at::Tensor y) { return y; }
};

// Runs `body` as one use of `unit`, with the hooks (if any) around it:
// post_forward(unit, body(pre_forward(unit, x))). A unit that recomputes in backward runs body
// again there, between the hooks' backward Functions (after post_forward's, before pre_forward's),
// so the hooks run once per use and a sharding backend has gathered the parameters by then. The
// graph keeps a copy of body until that backward: capture by value.
template <class Body>
at::Tensor run_unit(Unit& unit, UnitHooks* hooks, at::Tensor x, Body&& body) {
  if (hooks) x = hooks->pre_forward(unit, std::move(x));
  at::Tensor y = unit.recomputes_in_backward() ? recompute_in_backward(UnitBody(body), x) : body(x);
  if (hooks) y = hooks->post_forward(unit, std::move(y));
  return y;
}

}  // namespace accel::train

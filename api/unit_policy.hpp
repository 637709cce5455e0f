// A UnitPolicy applied to a module tree (docs/design/0015, design A): which of the module's
// trainable parameters form which unit. Units claim bottom-up (a matching inner module first, as
// FSDP2's fully_shard is applied), in the order of their first parameter in the root's
// named_parameters(); what no unit claims forms the unit "root", listed first (FSDP's root).
// Invariants: each trainable parameter (requires_grad) is in exactly one unit, once, under its
// first name in root.named_parameters() (a tied parameter is kept once, by identity); parameters
// within a unit keep the root's order; frozen parameters are in no unit.
// Design B (the tree holds accel::Unit<> wrappers, include/accel/unit.hpp): every wrapper below the
// root is a unit with a boundary (its parameters not in an inner wrapper: nested wrappers split as
// FSDP2 does); the policy then only picks further units among the modules outside every wrapper
// (an empty policy picks none: the rest is the root); a wrapper's parameter that is also
// registered outside it (tied) goes to the root, which is never released.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "accel/accelerator.hpp"

namespace accel::api {

struct PolicyUnit {
  std::string name;                                      // the module path, or "root"
  std::vector<std::pair<std::string, at::Tensor>> params;
  torch::nn::Module* boundary = nullptr;                 // the accel::Unit<> wrapper, if the unit is one
};

// `policy` empty: every child of the root that holds trainable parameters is a unit.
std::vector<PolicyUnit> apply_unit_policy(torch::nn::Module& root, const UnitPolicy& policy);

// Module::name() (RTTI-demangled, with namespace) against a wanted class name: equal, or equal with
// "Impl" appended (TORCH_MODULE's convention), compared with or without the namespace. A wrapper
// (accel::UnitImpl<BlockImpl, ...>) is compared as the class it wraps.
bool class_matches(const std::string& module_name, const std::string& wanted);
// Whole-string match; '*' stands for any characters (dots included).
bool glob_matches(const std::string& text, const std::string& pattern);
// The distinct class names of the root's descendants, for error messages.
std::vector<std::string> module_classes(torch::nn::Module& root);

}  // namespace accel::api

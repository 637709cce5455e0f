// What the engines see of a model: an ordered list of units, each a name and its parameters in
// flat order with each parameter's optimizer group. Torch-only: a torch::nn::Module prepared through
// the public API (docs/design/0015, units chosen by a policy: api/prepared_units.hpp),
// accel's built-in models included, is described this way.
// Invariants (check_unit_specs): every parameter tensor is in exactly one unit (by identity), its
// full name is unique, and it has a group of the optimizer setup; unit names are unique.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "engine/named_tensors.hpp"

namespace torch::nn {
class Module;
}

namespace accel::engine {

struct UnitSpec {
  std::string name;        // "h.3", a module path, "root"
  NamedTensors params;     // (full name, the parameter itself) in flat order
  std::vector<int> groups; // per parameter: its group in the optimizer setup (param_groups.hpp)
  // The module a hooked forward passes to UnitHooks at this unit's boundaries (docs/design/0003);
  // nullptr when the model has none (a module prepared as it is: no forward boundaries, so only
  // strategies that keep parameters gathered can run it).
  const torch::nn::Module* module = nullptr;
  // A hooked forward uses this unit first and last (the tied embedding and head, FSDP's root): it
  // stays gathered from its first use to the end of the micro-step and is not counted in live
  // limits; its uses alternate between starting a forward and ending it. Pinned with no module (the
  // root of a module with accel::Unit<> wrappers, design B): no boundaries at all, so it is never
  // released (gathered at every point of the forward and backward, like a persistent unit).
  bool pinned = false;
};

// Every unit has forward boundaries (a module) or needs none (pinned): strategies that free
// parameters between uses can run the model.
bool has_unit_boundaries(const std::vector<UnitSpec>& units);

// Throws RunError naming `who` if the invariants above do not hold for `groups` parameter groups.
void check_unit_specs(const std::vector<UnitSpec>& units, size_t groups, const std::string& who);

// Every parameter of every unit, in unit order (the engines' parameter indices).
NamedTensors all_parameters(const std::vector<UnitSpec>& units);

}  // namespace accel::engine

// The engine's units for a module being prepared (docs/design/0015): the job's unit policy, applied
// to the module tree (unit_policy.hpp) and described as the engines' UnitSpecs. Accelerator::prepare
// builds its engine from them, and so do the engine tests over the built-in models
// (tests/support/prepared_builtin.hpp), so both run the same units.
// Invariant: with accel::Unit<> wrappers every unit without a boundary ("root", and
// policy units outside the wrappers) is pinned, so it is never released.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accel/accelerator.hpp"
#include "engine/unit_spec.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::api {

// The job's unit policy: the plan's wrap policy (fsdp), else none (every child of the root). Throws
// RunError when transformer_layer_cls_to_wrap, set by the user, names no class of the model.
UnitPolicy job_unit_policy(const config::LoadedJob& job, const plan::ResolvedPlan& resolved, torch::nn::Module& model);

struct PreparedUnits {
  std::vector<engine::UnitSpec> specs;                               // "root" first, then the policy's units
  std::vector<std::pair<std::string, torch::nn::Module*>> boundaries;  // the wrappers that are units, by path
};

// The units `policy` makes of `model` (frozen parameters in none), each parameter in the optimizer
// group `group_of` gives its TensorImpl. Throws RunError for a parameter that is not on `device`.
PreparedUnits prepared_units(torch::nn::Module& model, const UnitPolicy& policy,
                             const std::unordered_map<const void*, int>& group_of, const at::Device& device);

}  // namespace accel::api

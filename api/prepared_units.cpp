// The engine's units for a prepared module (see prepared_units.hpp).
#include "api/prepared_units.hpp"

#include "api/unit_policy.hpp"
#include "api/unit_sink.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/strings.hpp"

namespace accel::api {

UnitPolicy job_unit_policy(const config::LoadedJob& loaded, const plan::ResolvedPlan& resolved, torch::nn::Module& model) {
  UnitPolicy policy;
  if (resolved.grouping != plan::Grouping::wrap_policy) return policy;
  switch (resolved.wrap) {
    case config::AutoWrapPolicy::NO_WRAP:
      policy.predicate = [](const std::string&, const torch::nn::Module&) { return false; };
      return policy;
    case config::AutoWrapPolicy::SIZE_BASED_WRAP:
      policy.min_params = resolved.group_numel;
      return policy;
    case config::AutoWrapPolicy::TRANSFORMER_BASED_WRAP:
      break;
  }
  std::vector<std::string> present = module_classes(model);
  std::vector<std::string> found;
  for (const auto& wanted : resolved.wrap_classes)
    for (const auto& name : present)
      if (class_matches(name, wanted)) {
        found.push_back(wanted);
        break;
      }
  if (!found.empty()) {
    policy.classes = found;
    return policy;
  }
  // The key's default (Block) names no class of this model: each child of the root is a unit.
  // Set by the user, it is a mistake worth stopping for.
  if (loaded.is_explicit("fsdp.transformer_layer_cls_to_wrap"))
    throw RunError("accel: fsdp.transformer_layer_cls_to_wrap: no module of class " + join(resolved.wrap_classes) +
                   " in the model (its classes: " + join(present) + ")");
  return policy;
}

PreparedUnits prepared_units(torch::nn::Module& model, const UnitPolicy& policy,
                             const std::unordered_map<const void*, int>& group_of, const at::Device& device) {
  const bool wrapped = has_unit_wrappers(model);
  PreparedUnits out;
  for (auto& unit : apply_unit_policy(model, policy)) {
    if (unit.boundary) out.boundaries.emplace_back(unit.name, unit.boundary);
    engine::UnitSpec spec;
    spec.name = unit.name;
    spec.module = unit.boundary;
    spec.pinned = wrapped && !unit.boundary;  // the root (and policy units outside the wrappers): never released
    for (auto& [name, p] : unit.params) {
      if (p.device() != device)
        throw RunError("accel: parameter '" + name + "' is on " + p.device().str() + ", but this rank computes on " +
                       device.str() + "; move the model there before prepare(): model->to(acc.device())");
      spec.groups.push_back(group_of.at(p.unsafeGetTensorImpl()));
      spec.params.emplace_back(std::move(name), p);
    }
    out.specs.push_back(std::move(spec));
  }
  return out;
}

}  // namespace accel::api

#include "model_backend.hpp"

#include "backends/fsdp/fsdp_policy.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/train/optim/param_groups.hpp"

namespace accel::test {

std::vector<backends::UnitSpec> model_unit_specs(train::Model& model) {
  std::vector<backends::UnitSpec> out;
  size_t count = 0;
  for (train::Unit* unit : model.units()) {
    backends::UnitSpec spec;
    spec.name = unit->unit_name();
    spec.params = unit->named_parameters_in_order();
    for (const auto& [name, p] : spec.params) spec.groups.push_back(train::builtin_param_group(p.dim()));
    spec.module = unit;
    spec.pinned = out.empty();  // the embedding: embeds the tokens first, is the tied head last
    count += spec.params.size();
    out.push_back(std::move(spec));
  }
  if (count != model.named_parameters().size()) throw RunError("model: its units do not list every parameter once");
  return out;
}

std::unique_ptr<backends::Backend> make_model_backend(const config::JobConfig& job, comm::Communicator& comm,
                                                      train::Model& model) {
  if (job.backend == config::Backend::fsdp) {
    const backends::FsdpPlan plan = backends::plan_fsdp(job, /*user_module=*/false, /*unit_boundaries=*/true);
    if (!plan.refusals.empty()) throw RunError("backend fsdp: " + backends::describe_issue(plan.refusals.front()));
    model.set_activation_checkpointing(plan.activation_checkpointing);
  }
  return backends::make_backend(job, comm, model_unit_specs(model), train::builtin_optimizer_setup(job.optimizer));
}

}  // namespace accel::test

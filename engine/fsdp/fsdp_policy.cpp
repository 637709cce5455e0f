// The fsdp block -> the sharding engine's policy: the fsdp dialect's resolved plan
// (runtime/config/dialects/fsdp/resolve_fsdp.cpp) in the form the fsdp readers take.
#include "engine/fsdp/fsdp_policy.hpp"

#include "runtime/config/plan/resolve_plan.hpp"

namespace accel::engine {

FsdpPlan plan_fsdp(const config::JobConfig& job, bool user_module, bool unit_boundaries) {
  const plan::ModelFacts facts = user_module ? plan::ModelFacts::user(unit_boundaries) : plan::ModelFacts{false, unit_boundaries};
  config::JobConfig fsdp_job = job;
  fsdp_job.backend = config::Backend::fsdp;
  const plan::ResolvedPlan r = plan::resolve_plan(fsdp_job, facts);
  FsdpPlan p;
  p.label = r.label;
  p.replicated = r.shards == plan::Shards::none;
  p.shard_grads = r.shards == plan::Shards::gradients || r.shards == plan::Shards::parameters;
  p.shard_params = r.frees_parameters();
  p.shard_group_size = r.shard_group_size;
  p.wrap = r.wrap;
  p.min_num_params = r.group_numel;
  p.wrap_classes = r.wrap_classes;
  p.prefetch = r.prefetch;
  p.low_precision_masters = r.master != plan::Dtype::fp32;
  p.activation_checkpointing = r.activation_checkpointing;
  p.notes = r.notes;
  p.warnings = r.warnings;
  p.refusals = r.refusals;
  return p;
}

std::string describe_issue(const FsdpIssue& issue) { return plan::describe(issue); }

}  // namespace accel::engine

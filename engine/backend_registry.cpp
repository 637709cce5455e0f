// The engine registry: a resolved plan (runtime/config/plan) -> an engine. One rule for every
// dialect: the replicated engine (bucketed all-reduce) for a plan that shards nothing in fp32, the
// sharding engine with the plan's policy (engine_settings.hpp) otherwise. A new dialect is a folder
// under runtime/config/dialects and one line in its registry; nothing here changes.
#include "engine/backend.hpp"

#include <algorithm>

#include "engine/engine_settings.hpp"
#include "engine/replicated/ddp_backend.hpp"
#include "engine/sharded/sharded_engine.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/strings.hpp"
#include "runtime/config/plan/resolve_plan.hpp"

namespace accel::engine {

at::ScalarType compute_dtype(const config::JobConfig& job) { return to_scalar_type(plan::resolve_plan(job).compute); }

std::string prepared_module_refusal(const config::JobConfig& job, bool unit_boundaries) {
  const plan::ResolvedPlan resolved = plan::resolve_plan(job, plan::ModelFacts::user(unit_boundaries));
  return resolved.refusals.empty() ? "" : plan::describe(resolved.refusals.front());
}

std::unique_ptr<Backend> make_backend(const plan::ResolvedPlan& plan, comm::Communicator& comm,
                                      std::vector<UnitSpec> units, const OptimizerSetup& optimizer,
                                      std::shared_ptr<UnitSource> source) {
  if (!plan.refusals.empty()) throw RunError("backend " + plan.dialect + ": " + plan::describe(plan.refusals.front()));
  if (plan.engine == plan::Engine::replicated) {
    if (source) throw RunError(plan.label + ": the replicated engine takes the model's own values, not a unit source");
    auto ddp = std::make_unique<DdpBackend>(comm, std::move(units), optimizer, plan.bucket_mb);
    ddp->set_label(plan.label);
    ddp->set_notes(join(plan.notes, "; "));
    return ddp;
  }
  std::vector<int64_t> numels;
  for (const auto& unit : units) {
    int64_t n = 0;
    for (const auto& named : unit.params) n += named.second.numel();
    numels.push_back(n);
  }
  const bool wrapped = std::any_of(units.begin(), units.end(), [](const UnitSpec& u) { return u.module != nullptr; });
  ShardingPolicy policy = sharding_policy(plan, numels, wrapped, comm.size());
  return std::make_unique<ShardedEngine>(comm, std::move(units), optimizer, std::move(policy), std::move(source));
}

std::unique_ptr<Backend> make_backend(const config::JobConfig& job, comm::Communicator& comm,
                                      std::vector<UnitSpec> units, const OptimizerSetup& optimizer) {
  const plan::ResolvedPlan resolved = plan::resolve_plan(job, plan::ModelFacts::user(has_unit_boundaries(units)));
  return make_backend(resolved, comm, std::move(units), optimizer);
}

}  // namespace accel::engine

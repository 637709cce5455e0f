// The fsdp plan -> an engine (see fsdp_backend.hpp; decisions in docs/design/0007).
#include "backends/fsdp/fsdp_backend.hpp"

#include <algorithm>

#include "backends/core/model_replicas.hpp"
#include "backends/core/sharded_engine.hpp"
#include "backends/core/unit_grouping.hpp"
#include "backends/ddp/ddp_backend.hpp"
#include "backends/fsdp/fsdp_policy.hpp"
#include "runtime/common/errors.hpp"
#include "runtime/common/strings.hpp"

namespace accel::backends {
namespace {

std::vector<int64_t> unit_numels(const std::vector<UnitSpec>& units) {
  std::vector<int64_t> numels;
  for (const auto& unit : units) {
    int64_t n = 0;
    for (const auto& [name, p] : unit.params) n += p.numel();
    numels.push_back(n);
  }
  return numels;
}

// The largest engine unit's flat buffer, padded to a multiple of the shard count: the gradients
// one unit holds while they are reduce-scattered.
int64_t largest_padded_unit(const UnitGroups& groups, const std::vector<int64_t>& numels, int shards) {
  int64_t largest = 0;
  for (const auto& group : groups) {
    int64_t n = 0;
    for (int u : group) n += numels[size_t(u)];
    largest = std::max(largest, (n + shards - 1) / shards * shards);
  }
  return largest;
}

std::unique_ptr<Backend> build_fsdp(const config::JobConfig& job, comm::Communicator& comm, std::vector<UnitSpec> units,
                                    const train::OptimizerSetup& optimizer) {
  FsdpPlan plan = plan_fsdp(job, /*user_module=*/true, /*unit_boundaries=*/has_unit_boundaries(units));
  if (!plan.refusals.empty()) throw RunError("backend fsdp: " + describe_issue(plan.refusals.front()));
  const at::ScalarType compute = compute_dtype(job);  // as deepspeed: backend.hpp
  if (plan.replicated && compute == at::kFloat) {
    // FSDP NO_SHARD all-reduces each unit's gradients; the ddp engine's buckets (ddp.bucket_cap_mb)
    // do the same with fewer, larger messages.
    auto ddp = std::make_unique<DdpBackend>(comm, std::move(units), optimizer, job.ddp.bucket_cap_mb);
    ddp->set_label(plan.label);
    ddp->set_notes(join(plan.notes, "; "));
    return ddp;
  }
  ShardingPolicy policy;
  policy.label = plan.label;
  policy.shard_optimizer = !plan.replicated;
  policy.shard_grads = plan.shard_grads;
  policy.shard_params = plan.shard_params;
  policy.overlap_comm = true;  // FSDP reduce-scatters from the post-backward hook, always
  policy.prefetch = plan.prefetch;
  policy.persistence_threshold = 0;  // FSDP gathers and frees every wrapped unit
  policy.compute_dtype = compute;
  policy.master_dtype = plan.low_precision_masters ? compute : at::kFloat;
  // One unit's reduce-scatter in flight while the next unit computes its gradients (FSDP overlaps
  // them on its own stream): room for the two largest full-gradient buffers.
  policy.shard_group_size = plan.shard_group_size;
  const std::vector<int64_t> numels = unit_numels(units);
  // The wrap policy groups consecutive units: the built-in model's, and a prepared module's when
  // accel::Unit<> wrappers make its units (they are the finest grain, as the built-in layers are;
  // without wrappers the policy already chose the units from the module tree).
  const bool wrapped = std::any_of(units.begin(), units.end(), [](const UnitSpec& u) { return u.module != nullptr; });
  policy.unit_groups = wrapped ? groups_for_wrap_policy(plan.wrap, plan.min_num_params, numels)
                                        : one_group_per_unit(int(units.size()));
  policy.reduce_bucket_numel = 2 * largest_padded_unit(
      policy.unit_groups, numels, plan.shard_group_size > 0 ? plan.shard_group_size : comm.size());
  policy.offloads = job.fsdp.offload_params;
  policy.param_host_offload = job.fsdp.offload_params;  // FSDP's CPUOffload: parameters and optimizer
  policy.notes = join(plan.notes, "; ");
  return std::make_unique<ShardedEngine>(comm, std::move(units), optimizer, policy);
}

}  // namespace

std::unique_ptr<Backend> make_fsdp_backend(const config::JobConfig& job, comm::Communicator& comm,
                                           std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer) {
  return build_fsdp(job, comm, std::move(units), optimizer);
}

}  // namespace accel::backends

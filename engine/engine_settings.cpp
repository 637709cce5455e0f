// The plan in the engines' terms (see engine_settings.hpp).
#include "engine/engine_settings.hpp"

#include "runtime/common/strings.hpp"
#include "runtime/config/plan/engine_units.hpp"

namespace accel::engine {

at::ScalarType to_scalar_type(plan::Dtype dtype) {
  switch (dtype) {
    case plan::Dtype::fp32: return at::kFloat;
    case plan::Dtype::bf16: return at::kBFloat16;
    case plan::Dtype::fp16: return at::kHalf;
  }
  return at::kFloat;
}

ShardingPolicy sharding_policy(const plan::ResolvedPlan& plan, const std::vector<int64_t>& unit_numels, bool wrapped,
                               int world) {
  ShardingPolicy p;
  p.label = plan.label;
  p.shard_optimizer = plan.shards != plan::Shards::none;
  p.shard_grads = plan.shards == plan::Shards::gradients || plan.shards == plan::Shards::parameters;
  p.shard_params = plan.frees_parameters();
  p.overlap_comm = plan.overlap_comm;
  p.prefetch = plan.prefetch;
  p.persistence_threshold = plan.persistence_threshold;
  p.compute_dtype = to_scalar_type(plan.compute);
  p.master_dtype = to_scalar_type(plan.master);
  p.shard_group_size = plan.shard_group_size;
  const plan::EngineUnits units = plan::engine_units(plan, unit_numels, wrapped, world);
  p.unit_groups = units.groups;
  p.reduce_bucket_numel = units.reduce_bucket_numel;
  if (plan.optimizer_states == plan::Where::nvme) p.nvme_dir = plan.optimizer_nvme_dir;
  if (plan.parameters == plan::Where::nvme) p.param_nvme_dir = plan.param_nvme_dir;
  p.nvme_buffer_count = plan.nvme_buffer_count;
  p.offloads = plan.offloads();
  p.param_host_offload = plan.parameters == plan::Where::cpu;
  p.notes = join(plan.notes, "; ");
  return p;
}

}  // namespace accel::engine

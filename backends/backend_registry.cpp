// The backend registry: `backend:` value -> engine. A new backend is one folder and one line here.
// deepspeed maps zero_stage onto the engines: 0 is plain data parallelism (the ddp engine, with
// reduce_bucket_size as its bucket), 1-3 the sharding engine with DeepSpeed's partitioning.
// fsdp is its own folder (fsdp/fsdp_policy.hpp: the fsdp block onto the same engines).
#include "backends/backend.hpp"
#include "backends/core/model_replicas.hpp"
#include "backends/core/sharded_engine.hpp"
#include "backends/core/unit_grouping.hpp"
#include "backends/ddp/ddp_backend.hpp"
#include "backends/fsdp/fsdp_backend.hpp"
#include "backends/fsdp/fsdp_policy.hpp"
#include "runtime/common/errors.hpp"

#include <limits>

namespace accel::backends {

// Parameters, gradients and their communication are bf16 when mixed precision asks for it or the
// model is loaded in bf16, fp16 under mixed_precision fp16 (with loss scaling in the trainer); the
// masters and optimizer states stay fp32 (DeepSpeed's rule).
at::ScalarType compute_dtype(const config::JobConfig& job) {
  if (job.mixed_precision == config::MixedPrecision::bf16 || job.model.dtype == config::ParamDtype::bf16)
    return at::kBFloat16;
  if (job.mixed_precision == config::MixedPrecision::fp16) return at::kHalf;
  return at::kFloat;
}

std::string prepared_module_refusal(const config::JobConfig& job, bool unit_boundaries) {
  if (job.backend == config::Backend::deepspeed && job.deepspeed.zero_stage >= 3 && !unit_boundaries)
    return "deepspeed.zero_stage 3: the prepared module has no unit boundaries in its forward (no accel::Unit<> in "
           "it), and stage 3 frees the parameters between uses, which needs them; fix: wrap the blocks in "
           "accel::Unit<> (accel::Unit<Block> instead of Block; design B, docs/design/0015), or use zero_stage 2 "
           "(gradients and optimizer states stay partitioned)";
  if (job.backend == config::Backend::fsdp) {
    const FsdpPlan plan = plan_fsdp(job, /*user_module=*/true, unit_boundaries);
    if (!plan.refusals.empty()) return describe_issue(plan.refusals.front());
  }
  return "";
}

namespace {

// Data parallelism with low-precision compute: replicated fp32 masters and optimizer states in the
// sharding engine (the ddp engine keeps one copy of each parameter, in the model's dtype).
std::unique_ptr<Backend> make_replicated_mixed(const config::JobConfig& job, comm::Communicator& comm,
                                               std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer,
                                               const std::string& label) {
  ShardingPolicy policy;
  policy.label = label;
  policy.shard_optimizer = false;
  policy.compute_dtype = compute_dtype(job);
  return std::make_unique<ShardedEngine>(comm, std::move(units), optimizer, policy);
}

std::unique_ptr<Backend> make_deepspeed(const config::JobConfig& job, comm::Communicator& comm,
                                        std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer) {
  const auto& ds = job.deepspeed;
  const bool offload = ds.offload_optimizer_device != config::OffloadDevice::none ||
                       ds.offload_param_device != config::OffloadDevice::none;
  if (offload && ds.zero_stage == 0)
    throw RunError("deepspeed offload needs zero_stage 1 or more (the offloaded states are the partitioned ones)");
  if (ds.zero_stage >= 3 && !has_unit_boundaries(units)) throw RunError(prepared_module_refusal(job));
  std::string label = "deepspeed zero_stage " + std::to_string(ds.zero_stage);
  if (ds.zero_stage == 0 && compute_dtype(job) != at::kFloat)
    return make_replicated_mixed(job, comm, std::move(units), optimizer, label);
  if (ds.zero_stage == 0) {
    // reduce_bucket_size counts elements (DeepSpeed's unit); fp32 gradients are 4 bytes each.
    auto ddp = std::make_unique<DdpBackend>(comm, std::move(units), optimizer,
                                            double(ds.reduce_bucket_size) * 4.0 / (1024.0 * 1024.0));
    ddp->set_label(label);
    return ddp;
  }
  ShardingPolicy policy;
  policy.label = label;
  policy.shard_grads = ds.zero_stage >= 2;
  policy.shard_params = ds.zero_stage >= 3;
  policy.overlap_comm = ds.overlap_comm;
  policy.compute_dtype = compute_dtype(job);
  policy.reduce_bucket_numel = ds.reduce_bucket_size;
  if (ds.offload_optimizer_device == config::OffloadDevice::nvme) policy.nvme_dir = ds.offload_optimizer_nvme_path;
  // Stage 3 (validation requires it): partitioned units' compute shards in files, staged for gathers.
  if (ds.offload_param_device == config::OffloadDevice::nvme) policy.param_nvme_dir = ds.offload_param_nvme_path;
  policy.nvme_buffer_count = ds.buffer_count;
  policy.offloads = offload;
  policy.param_host_offload = ds.offload_param_device == config::OffloadDevice::cpu;
  // Stage 3's knobs, in DeepSpeed's element counts. accel partitions whole units, so the
  // persistence threshold applies to a unit's size (DeepSpeed: each parameter's).
  policy.persistence_threshold = ds.stage3_param_persistence_threshold;
  policy.prefetch.forward = ds.stage3_prefetch_bucket_size > 0;
  policy.prefetch.backward =
      ds.stage3_prefetch_bucket_size > 0 ? PrefetchPolicy::Backward::pre : PrefetchPolicy::Backward::none;
  policy.prefetch.max_prefetch_units = std::numeric_limits<int>::max();
  policy.prefetch.max_prefetch_numel = ds.stage3_prefetch_bucket_size;
  policy.prefetch.max_live_numel = ds.stage3_max_live_parameters;
  // Stages 1-2 keep every parameter gathered, so units only set the grain of reductions: pack them
  // into reduce_bucket_size buckets (one reduce-scatter and one all-gather per bucket). Stage 3's
  // units are release boundaries and stay as they are.
  if (ds.zero_stage < 3) {
    std::vector<int64_t> numels;
    for (const auto& unit : units) {
      int64_t n = 0;
      for (const auto& named : unit.params) n += named.second.numel();
      numels.push_back(n);
    }
    policy.unit_groups = group_by_bucket(numels, ds.reduce_bucket_size);
  }
  return std::make_unique<ShardedEngine>(comm, std::move(units), optimizer, policy);
}

std::unique_ptr<Backend> build(const config::JobConfig& job, comm::Communicator& comm, std::vector<UnitSpec> units,
                               const train::OptimizerSetup& optimizer) {
  switch (job.backend) {
    case config::Backend::ddp:
      if (compute_dtype(job) != at::kFloat) return make_replicated_mixed(job, comm, std::move(units), optimizer, "ddp");
      return std::make_unique<DdpBackend>(comm, std::move(units), optimizer, job.ddp.bucket_cap_mb);
    case config::Backend::deepspeed:
      return make_deepspeed(job, comm, std::move(units), optimizer);
    case config::Backend::fsdp:
      return make_fsdp_backend(job, comm, std::move(units), optimizer);
  }
  throw RunError("backend: " + std::string(config::to_string(job.backend)) + " is not implemented");
}

}  // namespace

std::unique_ptr<Backend> make_backend(const config::JobConfig& job, comm::Communicator& comm,
                                      std::vector<UnitSpec> units, const train::OptimizerSetup& optimizer) {
  return build(job, comm, std::move(units), optimizer);
}

}  // namespace accel::backends

// backend: deepspeed, ZeRO's dialect: zero_stage 0 is plain data parallelism (reduce_bucket_size
// its bucket), stages 1-3 partition optimizer states, then gradients, then parameters, with
// DeepSpeed's knobs (reduce buckets, stage 3's prefetch, persistence and live-parameter bounds),
// CPU/NVMe offload and fp16 loss-scaling keys.
#include <algorithm>
#include <limits>

#include "runtime/config/dialects/builtin_dialects.hpp"
#include "runtime/config/job_checker.hpp"
#include "runtime/config/job_loader.hpp"
#include "runtime/config/schema.hpp"

namespace accel::config::dialects {
namespace {

plan::Where placement(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::none: return plan::Where::device;
    case OffloadDevice::cpu: return plan::Where::cpu;
    case OffloadDevice::nvme: return plan::Where::nvme;
  }
  return plan::Where::device;
}

// Accepted keys the engine does not act on (yet), said rather than ignored. A value translated
// from the fsdp block that equals DeepSpeed's default asks for nothing: no warning.
void warn_inert_keys(const plan::DialectInput& in, plan::ResolvedPlan& plan) {
  if (!in.loaded) return;
  const JobConfig& j = in.job;
  auto asks_for_something = [&](const std::string& key) {
    if (!in.is_explicit(key)) return false;
    static const JobConfig defaults;
    const auto* field = find_field(key);
    return in.loaded->sources.at(key).origin != Location::Origin::Derived ||
           !values_equal(field->get(j), field->get(defaults));
  };
  // reduce_bucket_size bounds stage 0's buckets and the gradients stages 2-3 hold in flight.
  for (const char* key : {"deepspeed.allgather_bucket_size", "deepspeed.zero_hpz_partition_size", "deepspeed.reduce_bucket_size"})
    if (asks_for_something(key) && !(std::string(key) == "deepspeed.reduce_bucket_size" && j.deepspeed.zero_stage != 1))
      plan.warnings.push_back({key, "has no effect yet in the deepspeed backend (communication is per unit)", "", ""});
  if (j.deepspeed.zero_stage < 3)
    for (const char* key : {"deepspeed.stage3_prefetch_bucket_size", "deepspeed.stage3_param_persistence_threshold",
                            "deepspeed.stage3_max_live_parameters"})
      if (asks_for_something(key)) plan.warnings.push_back({key, "acts at zero_stage 3 only", "", ""});
}

// The block's own cross-key rules (offload against the stage, hpZ, fp16-only keys).
void check_deepspeed_block(const JobConfig& j, JobChecker& c) {
  const auto& ds = j.deepspeed;
  if (ds.offload_param_device != OffloadDevice::none && ds.zero_stage != 3)
    c.error("deepspeed.offload_param_device", "parameter offload needs ZeRO stage 3 (only stage 3 partitions "
            "parameters)", "none when zero_stage < 3", "set deepspeed.zero_stage: 3, or offload_param_device: none; " +
            c.about("deepspeed.zero_stage"));
  if (ds.offload_optimizer_device != OffloadDevice::none && ds.zero_stage == 0)
    c.error("deepspeed.offload_optimizer_device", "optimizer offload needs ZeRO stage 1, 2 or 3",
            "none when zero_stage is 0", "set deepspeed.zero_stage: 1 or higher; " + c.about("deepspeed.zero_stage"));
  if (ds.offload_optimizer_device == OffloadDevice::nvme && ds.offload_optimizer_nvme_path.empty())
    c.error("deepspeed.offload_optimizer_device", "nvme offload needs a directory for its files", "",
            "set deepspeed.offload_optimizer_nvme_path");
  if (ds.offload_param_device == OffloadDevice::nvme && ds.offload_param_nvme_path.empty())
    c.error("deepspeed.offload_param_device", "nvme offload needs a directory for its files", "",
            "set deepspeed.offload_param_nvme_path");
  int per_machine = j.num_processes / std::max(1, j.num_machines);
  if (ds.zero_hpz_partition_size > 1 && (per_machine % ds.zero_hpz_partition_size != 0 || ds.zero_stage != 3))
    c.error("deepspeed.zero_hpz_partition_size", "hierarchical partitioning needs zero_stage 3 and must divide the "
            "processes per machine (" + std::to_string(per_machine) + ")", "1, or a divisor of " +
            std::to_string(per_machine), c.about("deepspeed.zero_stage"));
  if (j.backend == Backend::deepspeed && j.mixed_precision != MixedPrecision::fp16) {
    for (const char* key : {"deepspeed.loss_scale", "deepspeed.initial_scale_power", "deepspeed.loss_scale_window",
                            "deepspeed.hysteresis", "deepspeed.min_loss_scale"})
      if (c.is_set(key)) c.warning(key, "has no effect: loss scaling applies to fp16 only", c.about("mixed_precision"));
  }
}

void resolve_deepspeed(const plan::DialectInput& in, plan::ResolvedPlan& plan) {
  const auto& ds = in.job.deepspeed;
  plan.label = "deepspeed zero_stage " + std::to_string(ds.zero_stage);
  plan.estimate_row = ds.zero_stage == 0 ? "ddp / zero-0" : "zero-" + std::to_string(ds.zero_stage);
  if (plan.loss_scaling) *plan.loss_scaling = {ds.loss_scale, ds.initial_scale_power, ds.loss_scale_window, ds.hysteresis,
                                               ds.min_loss_scale};
  warn_inert_keys(in, plan);
  const bool offload = ds.offload_optimizer_device != OffloadDevice::none || ds.offload_param_device != OffloadDevice::none;
  if (offload && ds.zero_stage == 0)
    plan.refusals.push_back({"deepspeed.offload_optimizer_device", "offload needs zero_stage 1 or more (the offloaded "
                             "states are the partitioned ones)", "none when zero_stage is 0",
                             "set deepspeed.zero_stage: 1 or higher"});
  if (ds.zero_stage >= 3 && !in.model.unit_boundaries)
    plan.refusals.push_back({"deepspeed.zero_stage", "the prepared module has no unit boundaries in its forward (no "
                             "accel::Unit<> in it), and stage 3 frees the parameters between uses, which needs them",
                             "0, 1, 2", "wrap the blocks in accel::Unit<> (accel::Unit<Block> instead of Block; design "
                             "B, docs/design/0015), or use zero_stage 2 (gradients and optimizer states stay partitioned)",
                             std::to_string(ds.zero_stage)});
  if (ds.zero_stage == 0) {
    plan.shards = plan::Shards::none;
    // reduce_bucket_size counts elements (DeepSpeed's unit); fp32 gradients are 4 bytes each.
    plan.bucket_mb = double(ds.reduce_bucket_size) * 4.0 / (1024.0 * 1024.0);
    return;
  }
  plan.shards = ds.zero_stage >= 3 ? plan::Shards::parameters
                : ds.zero_stage == 2 ? plan::Shards::gradients
                                     : plan::Shards::optimizer;
  plan.overlap_comm = ds.overlap_comm;
  plan.reduce_bucket = plan::ReduceBucket::numel;
  plan.reduce_bucket_numel = ds.reduce_bucket_size;
  plan.optimizer_states = placement(ds.offload_optimizer_device);
  plan.parameters = placement(ds.offload_param_device);
  if (plan.optimizer_states == plan::Where::nvme) plan.optimizer_nvme_dir = ds.offload_optimizer_nvme_path;
  // Stage 3 (validation requires it): partitioned units' compute shards in files, staged for gathers.
  if (plan.parameters == plan::Where::nvme) plan.param_nvme_dir = ds.offload_param_nvme_path;
  plan.nvme_buffer_count = ds.buffer_count;
  // Stage 3's knobs, in DeepSpeed's element counts. accel partitions whole units, so the
  // persistence threshold applies to a unit's size (DeepSpeed: each parameter's).
  plan.persistence_threshold = ds.stage3_param_persistence_threshold;
  plan.prefetch.forward = ds.stage3_prefetch_bucket_size > 0;
  plan.prefetch.backward =
      ds.stage3_prefetch_bucket_size > 0 ? plan::PrefetchPolicy::Backward::pre : plan::PrefetchPolicy::Backward::none;
  plan.prefetch.max_prefetch_units = std::numeric_limits<int>::max();
  plan.prefetch.max_prefetch_numel = ds.stage3_prefetch_bucket_size;
  plan.prefetch.max_live_numel = ds.stage3_max_live_parameters;
  // Stages 1-2 keep every parameter gathered, so units only set the grain of reductions: pack them
  // into reduce_bucket_size buckets (one reduce-scatter and one all-gather per bucket). Stage 3's
  // units are release boundaries and stay as they are.
  if (ds.zero_stage < 3) {
    plan.grouping = plan::Grouping::by_bucket;
    plan.group_numel = ds.reduce_bucket_size;
  }
}

}  // namespace

plan::Dialect deepspeed_dialect() {
  using J = const JobConfig&;
  plan::Dialect d{"deepspeed", resolve_deepspeed, check_deepspeed_block};
  d.strategy_questions = {
      {"deepspeed.zero_stage", "Which ZeRO stage?"},
      {"deepspeed.offload_optimizer_device", "Where should optimizer states be offloaded?",
       [](J j) { return j.deepspeed.zero_stage >= 1; }},
      {"deepspeed.offload_optimizer_nvme_path", "Which directory holds the offloaded optimizer states?",
       [](J j) { return j.deepspeed.offload_optimizer_device == OffloadDevice::nvme; }},
      {"deepspeed.offload_param_device", "Where should parameters be offloaded?",
       [](J j) { return j.deepspeed.zero_stage == 3; }},
      {"deepspeed.offload_param_nvme_path", "Which directory holds the offloaded parameters?",
       [](J j) { return j.deepspeed.offload_param_device == OffloadDevice::nvme; }},
  };
  return d;
}

}  // namespace accel::config::dialects

// The deepspeed -> fsdp mapping rows (Accelerate's "FSDP vs DeepSpeed" concept guide; decisions
// where the two do not match are in docs/design/0005-backend-switch.md). Each row reads the
// deepspeed block's effective values and proposes fsdp values through the TranslationBuilder.
// Invariant: every deepspeed key is either a row's source or listed as having no equivalent.
#include <algorithm>

#include "runtime/config/translation_builder.hpp"

namespace accel::config {
namespace {

const char* kStrategy = "fsdp.sharding_strategy";

Value strategy(ShardingStrategy s) { return Value{to_string(s)}; }

// zero_stage (and ZeRO++ hpZ) -> sharding_strategy.
void sharding(TranslationBuilder& b) {
  const auto& j = b.in();
  const auto& ds = j.deepspeed;
  const int per_machine = j.num_processes / std::max(1, j.num_machines);
  const std::string hpz_key = "deepspeed.zero_hpz_partition_size";
  const int hpz = ds.zero_hpz_partition_size;

  if (ds.zero_stage == 3 && hpz > 1 && j.num_machines > 1) {
    // ZeRO++ hpZ keeps a secondary parameter partition inside each machine: FSDP's HYBRID_SHARD.
    bool exact = hpz == per_machine;
    std::string note = exact ? "ZeRO++ hpZ partitions parameters within each machine (" + std::to_string(hpz) +
                                   " ranks), as HYBRID_SHARD does; HYBRID_SHARD also keeps optimizer states per "
                                   "machine, where ZeRO++ shards them over all ranks"
                             : "HYBRID_SHARD shards within a whole machine (" + std::to_string(per_machine) +
                                   " ranks), hpZ within groups of " + std::to_string(hpz);
    b.translate(b.from_key("deepspeed.zero_stage"), kStrategy, strategy(ShardingStrategy::HYBRID_SHARD),
                "with zero_hpz_partition_size " + std::to_string(hpz));
    b.translate(b.from_key(hpz_key), kStrategy, strategy(ShardingStrategy::HYBRID_SHARD), note, exact);
    return;
  }

  ShardingStrategy s = ShardingStrategy::FULL_SHARD;
  std::string note;
  bool exact = true;
  switch (ds.zero_stage) {
    case 0: s = ShardingStrategy::NO_SHARD; break;
    case 1:
      s = ShardingStrategy::SHARD_GRAD_OP;
      exact = false;
      note = "ZeRO-1 shards only optimizer states and fp32 master weights; FSDP has no optimizer-only sharding, "
             "SHARD_GRAD_OP also shards gradients (less memory, the same communication volume)";
      break;
    case 2: s = ShardingStrategy::SHARD_GRAD_OP; break;
    default: s = ShardingStrategy::FULL_SHARD; break;
  }
  b.translate(b.from_key("deepspeed.zero_stage"), kStrategy, strategy(s), note, exact);
  if (hpz > 1)
    b.no_equivalent(hpz_key, j.num_machines > 1
                                 ? "ZeRO++ hpZ needs zero_stage 3"
                                 : "HYBRID_SHARD groups ranks by machine, and on one machine it shards like "
                                   "FULL_SHARD: hpZ's smaller secondary partition has no FSDP equivalent");
  else if (b.is_explicit(hpz_key))
    b.translate(b.from_key(hpz_key), kStrategy, strategy(s), "1 disables hpZ, so no HYBRID_SHARD");
}

// offload_param_device / offload_optimizer_device -> offload_params.
void offload(TranslationBuilder& b) {
  const auto& ds = b.in().deepspeed;
  const auto p = ds.offload_param_device, o = ds.offload_optimizer_device;
  const bool on = p != OffloadDevice::none || o != OffloadDevice::none;
  std::string note;
  bool exact = true;
  if (p == OffloadDevice::nvme || o == OffloadDevice::nvme) {
    exact = false;
    note = "FSDP has no NVMe offload: offloaded state lives in host memory instead of files";
  } else if (p == OffloadDevice::cpu && o == OffloadDevice::none) {
    exact = false;
    note = "FSDP's CPU offload also runs the optimizer step on the CPU, which DeepSpeed kept on the device";
  } else if (o == OffloadDevice::cpu && p == OffloadDevice::none) {
    exact = false;
    note = "FSDP has no optimizer-only offload: offload_params also keeps parameters and gradients on the CPU";
  }
  for (const char* key : {"deepspeed.offload_optimizer_device", "deepspeed.offload_param_device"}) {
    bool this_on = (std::string(key) == "deepspeed.offload_param_device" ? p : o) != OffloadDevice::none;
    if (this_on || b.is_explicit(key)) b.translate(b.from_key(key), "fsdp.offload_params", Value{on}, note, exact);
  }
  const std::string no_nvme = "FSDP has no NVMe offload (offload_params keeps offloaded state in host memory)";
  b.no_equivalent("deepspeed.offload_optimizer_nvme_path", no_nvme);
  b.no_equivalent("deepspeed.offload_param_nvme_path", no_nvme);
  b.no_equivalent("deepspeed.buffer_count", no_nvme);
  b.no_equivalent("deepspeed.pin_memory", "FSDP's CPU offload has no pinned-memory switch");
}

// Keys DeepSpeed acts on under ZeRO-3 only: loading, saving, prefetch, live-parameter bound.
void stage3(TranslationBuilder& b) {
  const auto& ds = b.in().deepspeed;
  const char* stage3_keys[] = {"deepspeed.zero3_init_flag", "deepspeed.zero3_save_16bit_model",
                               "deepspeed.stage3_prefetch_bucket_size", "deepspeed.stage3_max_live_parameters",
                               "deepspeed.stage3_param_persistence_threshold"};
  if (ds.zero_stage != 3) {
    for (const char* key : stage3_keys)
      b.no_equivalent(key, "DeepSpeed acts on it under zero_stage 3 only; zero_stage is " +
                               std::to_string(ds.zero_stage));
    return;
  }
  b.translate(b.from_key("deepspeed.zero3_init_flag"), "fsdp.cpu_ram_efficient_loading", Value{ds.zero3_init_flag});
  b.translate(b.from_key("deepspeed.zero3_save_16bit_model"), "fsdp.state_dict_type",
              Value{to_string(ds.zero3_save_16bit_model ? StateDictType::FULL_STATE_DICT
                                                        : StateDictType::SHARDED_STATE_DICT)},
              ds.zero3_save_16bit_model ? "" : "DeepSpeed ZeRO-3 checkpoints are per-rank shards unless "
                                               "zero3_save_16bit_model gathers the full model");

  const bool prefetch = ds.stage3_prefetch_bucket_size > 0;
  auto bucket = b.from_key("deepspeed.stage3_prefetch_bucket_size");
  b.translate(bucket, "fsdp.backward_prefetch",
              Value{to_string(prefetch ? BackwardPrefetch::BACKWARD_PRE : BackwardPrefetch::NO_PREFETCH)},
              prefetch ? "FSDP prefetches one whole unit ahead; the element count has no equivalent"
                       : "0 disables prefetch");
  b.translate(bucket, "fsdp.forward_prefetch", Value{prefetch},
              prefetch ? "DeepSpeed ZeRO-3 prefetches in forward as well as in backward" : "0 disables prefetch");
  b.translate(b.from_key("deepspeed.stage3_max_live_parameters"), "fsdp.limit_all_gathers", Value{true},
              "both bound the gathered parameters alive at once: FSDP by units (at most two), DeepSpeed by "
              "elements; the element count has no equivalent");
  b.no_equivalent("deepspeed.stage3_param_persistence_threshold",
                  "FSDP shards every parameter of a unit; no size keeps small parameters whole");
}

// DeepSpeed always keeps fp32 master weights: FSDP's mixed precision mode.
void precision(TranslationBuilder& b) {
  b.translate(b.builtin("deepspeed", "fp32 master weights, always"), "fsdp.precision_mode",
              Value{to_string(PrecisionMode::mixed)},
              "FSDP's mixed mode keeps fp32 copies of the sharded parameters for the optimizer; low has no DeepSpeed "
              "equivalent");
}

void communication_and_scaling(TranslationBuilder& b) {
  b.no_equivalent("deepspeed.overlap_comm", "FSDP always overlaps communication with compute; there is no switch");
  b.no_equivalent("deepspeed.reduce_bucket_size",
                  "FSDP reduce-scatters each unit's gradients as one bucket; element-count buckets have no equivalent");
  b.no_equivalent("deepspeed.allgather_bucket_size",
                  "FSDP all-gathers each unit's parameters as one bucket; element-count buckets have no equivalent");
  b.no_equivalent("deepspeed.config_file",
                  "a DeepSpeed JSON: its values were read into the deepspeed keys and translated from there");
  for (const char* key : {"deepspeed.loss_scale", "deepspeed.initial_scale_power", "deepspeed.loss_scale_window",
                          "deepspeed.hysteresis", "deepspeed.min_loss_scale"})
    b.no_equivalent(key, "fp16 loss-scaler setting: accel's fsdp block has no loss-scaler keys");
}

}  // namespace

void translate_deepspeed_to_fsdp(TranslationBuilder& b) {
  sharding(b);
  offload(b);
  stage3(b);
  precision(b);
  communication_and_scaling(b);
}

}  // namespace accel::config

// The fsdp -> deepspeed mapping rows (Accelerate's "FSDP vs DeepSpeed" concept guide; decisions
// where the two do not match are in docs/design/0005-backend-switch.md). Each row reads the fsdp
// block's effective values and proposes deepspeed values through the TranslationBuilder. Rows that
// depend on the ZeRO stage use the *resulting* stage, so an explicit deepspeed.zero_stage is honoured.
// Invariant: every fsdp key is either a row's source or listed as having no equivalent.
#include <algorithm>

#include "runtime/config/translation_builder.hpp"

namespace accel::config {
namespace {

// sharding_strategy -> zero_stage (and ZeRO++ hpZ for HYBRID_SHARD across machines).
void sharding(TranslationBuilder& b) {
  const auto& j = b.in();
  const int per_machine = j.num_processes / std::max(1, j.num_machines);
  auto from = b.from_key("fsdp.sharding_strategy");
  int stage = 3;
  std::string note;
  const bool hybrid = j.fsdp.sharding_strategy == ShardingStrategy::HYBRID_SHARD;
  const bool hpz = hybrid && j.num_machines > 1 && per_machine > 1;
  switch (j.fsdp.sharding_strategy) {
    case ShardingStrategy::FULL_SHARD: stage = 3; break;
    case ShardingStrategy::SHARD_GRAD_OP: stage = 2; break;
    case ShardingStrategy::NO_SHARD: stage = 0; break;
    case ShardingStrategy::HYBRID_SHARD:
      stage = 3;
      note = hpz ? "with ZeRO++ hpZ, zero_hpz_partition_size " + std::to_string(per_machine)
                 : "on one machine HYBRID_SHARD shards like FULL_SHARD";
      break;
  }
  b.translate(from, "deepspeed.zero_stage", Value{int64_t(stage)}, note);
  if (!hpz) return;
  if (b.out().deepspeed.zero_stage == 3)
    b.translate(from, "deepspeed.zero_hpz_partition_size", Value{int64_t(per_machine)},
                "ZeRO++ hpZ partitions parameters within each machine (" + std::to_string(per_machine) +
                    " ranks), as HYBRID_SHARD does; it keeps optimizer states sharded over all ranks, where "
                    "HYBRID_SHARD keeps them per machine");
  else
    b.no_equivalent("fsdp.sharding_strategy", "its machine-level partition (ZeRO++ hpZ) needs zero_stage 3, and "
                                              "deepspeed.zero_stage is set explicitly to " +
                                                  std::to_string(b.out().deepspeed.zero_stage));
}

// offload_params -> offload_optimizer_device and (stage 3) offload_param_device.
void offload(TranslationBuilder& b) {
  const auto& f = b.in().fsdp;
  const int stage = b.out().deepspeed.zero_stage;
  auto from = b.from_key("fsdp.offload_params");
  const Value none{to_string(OffloadDevice::none)}, cpu{to_string(OffloadDevice::cpu)};
  if (!f.offload_params) {
    b.translate(from, "deepspeed.offload_optimizer_device", none);
    b.translate(from, "deepspeed.offload_param_device", none);
    return;
  }
  if (stage == 0) {
    b.no_equivalent("fsdp.offload_params", "ZeRO stage 0 cannot offload (offload needs zero_stage 1 or higher)");
    return;
  }
  b.translate(from, "deepspeed.offload_optimizer_device", cpu);
  if (stage == 3)
    b.translate(from, "deepspeed.offload_param_device", cpu);
  else
    b.translate(from, "deepspeed.offload_param_device", none,
                "ZeRO stage " + std::to_string(stage) + " keeps parameters on the device; only stage 3 offloads them",
                /*exact=*/false);
}

// Keys DeepSpeed acts on under ZeRO-3 only: loading, saving, prefetch, live-parameter bound.
void stage3(TranslationBuilder& b) {
  const auto& f = b.in().fsdp;
  const int stage = b.out().deepspeed.zero_stage;
  if (stage != 3) {
    const std::string why = "its DeepSpeed counterpart acts under zero_stage 3 only; zero_stage is " +
                            std::to_string(stage);
    b.no_equivalent("fsdp.cpu_ram_efficient_loading", why);
    b.no_equivalent("fsdp.state_dict_type",
                    why + " (below stage 3 DeepSpeed checkpoints hold the full model and per-rank optimizer shards)");
    for (const char* key : {"fsdp.backward_prefetch", "fsdp.forward_prefetch", "fsdp.limit_all_gathers"})
      b.no_equivalent(key, "ZeRO stage " + std::to_string(stage) +
                               " does not partition parameters: nothing is gathered ahead of use");
    return;
  }
  b.translate(b.from_key("fsdp.cpu_ram_efficient_loading"), "deepspeed.zero3_init_flag",
              Value{f.cpu_ram_efficient_loading});
  const bool full = f.state_dict_type == StateDictType::FULL_STATE_DICT;
  b.translate(b.from_key("fsdp.state_dict_type"), "deepspeed.zero3_save_16bit_model", Value{full},
              full ? "" : "DeepSpeed ZeRO-3 checkpoints are per-rank shards");

  // DeepSpeed prefetches by size, in forward and backward alike; 0 turns it off.
  const bool backward = f.backward_prefetch != BackwardPrefetch::NO_PREFETCH;
  const bool on = backward || f.forward_prefetch;
  const Value bucket{on ? DeepSpeedSection{}.stage3_prefetch_bucket_size : int64_t(0)};
  const char* bucket_key = "deepspeed.stage3_prefetch_bucket_size";
  std::string note_b = "DeepSpeed prefetches up to stage3_prefetch_bucket_size elements ahead of use (its default)";
  bool exact_b = true;
  if (f.backward_prefetch == BackwardPrefetch::BACKWARD_POST) {
    exact_b = false;
    note_b = "DeepSpeed has no BACKWARD_POST; it prefetches ahead of use, by size";
  } else if (!backward) {
    exact_b = on ? false : true;
    note_b = on ? "DeepSpeed has no forward-only prefetch: it prefetches in backward too" : "0 disables prefetch";
  }
  b.translate(b.from_key("fsdp.backward_prefetch"), bucket_key, bucket, note_b, exact_b);
  std::string note_f = f.forward_prefetch ? "DeepSpeed prefetches in forward as well as in backward"
                                          : (on ? "DeepSpeed has no backward-only prefetch: it prefetches in "
                                                  "forward too"
                                                : "0 disables prefetch");
  b.translate(b.from_key("fsdp.forward_prefetch"), bucket_key, bucket, note_f, f.forward_prefetch || !on);

  const Value live{DeepSpeedSection{}.stage3_max_live_parameters};
  if (f.limit_all_gathers)
    b.translate(b.from_key("fsdp.limit_all_gathers"), "deepspeed.stage3_max_live_parameters", live,
                "both bound the gathered parameters alive at once: DeepSpeed by elements (its default bound), "
                "FSDP by units");
  else
    b.translate(b.from_key("fsdp.limit_all_gathers"), "deepspeed.stage3_max_live_parameters", live,
                "DeepSpeed always bounds the gathered parameters alive at once; its default bound is kept",
                /*exact=*/false);
}

void precision(TranslationBuilder& b) {
  if (b.in().fsdp.precision_mode == PrecisionMode::mixed)
    b.translate_builtin(b.from_key("fsdp.precision_mode"), "fp32 master weights, always",
                        "DeepSpeed always keeps fp32 master weights, as FSDP's mixed mode does");
  else
    b.no_equivalent("fsdp.precision_mode", "DeepSpeed always keeps fp32 master weights: the run keeps them in fp32 "
                                           "(more memory than low)");
}

// How the model is cut into units, and start-up behaviour.
void units_and_startup(TranslationBuilder& b) {
  const std::string units = "DeepSpeed has no wrapping policy: accel's deepspeed backend always shards by the "
                            "model's own units (embedding, each transformer block, final)";
  b.no_equivalent("fsdp.auto_wrap_policy", units);
  b.no_equivalent("fsdp.transformer_layer_cls_to_wrap", units);
  b.no_equivalent("fsdp.min_num_params", units);
  if (b.in().fsdp.sync_module_states) {
    if (b.is_explicit("fsdp.sync_module_states"))
      b.translate_builtin(b.from_key("fsdp.sync_module_states"), "rank 0's initial parameters broadcast, always");
  } else {
    b.no_equivalent("fsdp.sync_module_states", "DeepSpeed always broadcasts rank 0's initial parameters");
  }
  b.no_equivalent("fsdp.activation_checkpointing",
                  "accel's deepspeed block has no activation checkpointing key (DeepSpeed configures it outside ZeRO): "
                  "the deepspeed backend stores every unit's activations");
}

}  // namespace

void translate_fsdp_to_deepspeed(TranslationBuilder& b) {
  sharding(b);
  offload(b);
  stage3(b);
  precision(b);
  units_and_startup(b);
}

}  // namespace accel::config

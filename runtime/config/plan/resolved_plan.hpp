// The strategy a job resolves to (docs/design/0022-layers-and-resolved-plan.md, decision 2): how
// parameters, gradients and optimizer states are kept and moved, in which dtypes, in what units,
// what is offloaded, and what the job asks for that this path refuses or ignores. resolve_plan
// decides it once from the job; validation, the launcher, the estimator, the engine registry and
// the Accelerator read it. Plain values, no torch.
// Invariant: a plan without refusals is exactly what the engine registry builds, and its label and
// notes are what the start-up log prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/enums.hpp"
#include "runtime/config/plan/prefetch_policy.hpp"

namespace accel::plan {

// The replicated engine keeps one copy of each parameter and all-reduces bucketed gradients; the
// sharded engine keeps flat unit buffers, fp32 masters and whatever the plan shards.
enum class Engine { replicated, sharded };
// What is partitioned over the ranks, each level including the ones before it (ZeRO's stages).
enum class Shards { none, optimizer, gradients, parameters };
enum class Dtype { fp32, bf16, fp16 };
enum class Where { device, cpu, nvme };
// How the model's units are packed into engine units (unit_grouping.hpp). per_unit: one each;
// by_bucket: DeepSpeed stages 1-2's reduce buckets; wrap_policy: FSDP's auto_wrap_policy, applied
// when the units are accel::Unit<> boundaries (without them the module tree was already cut).
enum class Grouping { per_unit, by_bucket, wrap_policy };
// How many full-gradient values may wait for their reduce-scatter: DeepSpeed's reduce_bucket_size
// (numel), FSDP's two largest engine units (one in flight while the next is computed), or none.
enum class ReduceBucket { none, numel, two_largest_units };

// One refused or ineffective key: what, where (key path), the allowed values and a fix.
struct PlanIssue {
  std::string key;      // "fsdp.auto_wrap_policy"
  std::string message;  // one line
  std::string allowed;  // allowed values, if any
  std::string hint;     // how to fix it
  std::string value = {};  // the value at fault, when the message reads after it ("deepspeed.zero_stage 3: ...")
  friend bool operator==(const PlanIssue&, const PlanIssue&) = default;
};
// "fsdp.auto_wrap_policy: NO_WRAP ... (allowed: ...); fix: ...", "deepspeed.zero_stage 3: ...".
std::string describe(const PlanIssue& issue);

// fp16's loss scaling: DeepSpeed's keys under deepspeed, torch GradScaler's defaults otherwise.
struct LossScaling {
  double static_scale = 0;  // > 0: a static scale; 0: dynamic
  int initial_scale_power = 16;
  int64_t window = 1000;    // clean steps before the scale doubles
  int hysteresis = 2;       // overflows tolerated before the scale halves
  double min_scale = 1.0;   // the dynamic scale never goes below this (0: no bound)
  friend bool operator==(const LossScaling&, const LossScaling&) = default;
};

struct ResolvedPlan {
  std::string dialect;       // the `backend:` value that made it: "ddp", "deepspeed", "fsdp"
  std::string label;         // "deepspeed zero_stage 2": logs, describe(), the checkpoint's layout record
  std::string estimate_row;  // the row of `accel estimate-memory` that is this job: "zero-2", "FULL_SHARD"
  std::string estimate_note;  // why that row, when its name is not the job's own strategy

  Engine engine = Engine::replicated;
  Shards shards = Shards::none;
  // HYBRID_SHARD across machines: one machine's ranks shard, machines replicate; 0: every rank.
  int shard_group_size = 0;
  bool frees_parameters() const { return shards == Shards::parameters; }

  Dtype compute = Dtype::fp32;  // parameters, gradients and their communication
  Dtype master = Dtype::fp32;   // masters and gradient shards (compute under fsdp precision_mode low)
  std::optional<LossScaling> loss_scaling;

  bool overlap_comm = true;      // reduce from the post-backward hook (false: after backward returns)
  double bucket_mb = 25.0;       // the replicated engine's gradient buckets, in MiB
  ReduceBucket reduce_bucket = ReduceBucket::none;
  int64_t reduce_bucket_numel = 0;  // ReduceBucket::numel

  Grouping grouping = Grouping::per_unit;
  int64_t group_numel = 0;  // by_bucket: the bucket; wrap_policy SIZE_BASED_WRAP: min_num_params
  config::AutoWrapPolicy wrap = config::AutoWrapPolicy::TRANSFORMER_BASED_WRAP;
  std::vector<std::string> wrap_classes;  // TRANSFORMER_BASED_WRAP's class names
  int64_t persistence_threshold = 0;      // units with fewer values stay gathered (stage 3)
  PrefetchPolicy prefetch;                // acts when frees_parameters()
  bool activation_checkpointing = false;  // each unit boundary recomputes its forward in backward

  Where optimizer_states = Where::device;  // the masters, gradient shards and optimizer states
  Where parameters = Where::device;        // stage 3 / FULL_SHARD's compute shards
  std::string optimizer_nvme_dir;          // Where::nvme
  std::string param_nvme_dir;              // Where::nvme
  int nvme_buffer_count = 5;
  // Any offload is configured (the masters live apart from the parameters).
  bool offloads() const { return optimizer_states != Where::device || parameters != Where::device; }

  std::vector<std::string> notes;     // decisions worth a word in the start-up log
  std::vector<PlanIssue> warnings;    // set, accepted, and of no effect on this path
  std::vector<PlanIssue> refusals;    // not built: the job cannot run as written

  // Field for field: two dialects that build the same engine compare equal but for dialect and label.
  friend bool operator==(const ResolvedPlan&, const ResolvedPlan&) = default;
};

const char* to_string(Engine e);
const char* to_string(Shards s);
const char* to_string(Dtype d);
const char* to_string(Where w);
const char* to_string(Grouping g);
const char* to_string(ReduceBucket r);

}  // namespace accel::plan

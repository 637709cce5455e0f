// The fsdp dialect's resolved plan (runtime/config/dialects/fsdp, docs/design/0007) in the form the
// fsdp tests read: which states are sharded, the prefetch schedule, the dtype of the masters, the
// wrap policy; refusals and warnings as the plan has them. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "engine/sharded/prefetch_policy.hpp"
#include "runtime/config/job.hpp"
#include "runtime/config/plan/resolved_plan.hpp"

namespace accel::engine {

using FsdpIssue = plan::PlanIssue;

struct FsdpPlan {
  std::string label;         // "fsdp FULL_SHARD": logs, describe(), the checkpoint's layout record
  bool replicated = false;   // NO_SHARD: plain data parallelism
  bool shard_grads = false;  // SHARD_GRAD_OP and FULL_SHARD
  bool shard_params = false; // FULL_SHARD and HYBRID_SHARD
  // HYBRID_SHARD across machines: the processes of one machine (shard within, replicate across);
  // 0: shard over every rank.
  int shard_group_size = 0;
  // auto_wrap_policy: TRANSFORMER_BASED_WRAP (the model's units), NO_WRAP (one unit) or
  // SIZE_BASED_WRAP (units of at least min_num_params values); fsdp_backend groups the units.
  config::AutoWrapPolicy wrap = config::AutoWrapPolicy::TRANSFORMER_BASED_WRAP;
  int64_t min_num_params = 0;
  // TRANSFORMER_BASED_WRAP: the class names listed in transformer_layer_cls_to_wrap.
  std::vector<std::string> wrap_classes;
  PrefetchPolicy prefetch;   // acts when shard_params
  // precision_mode low with a model loaded in bf16: the masters (and gradient shards) stay in the
  // parameters' dtype; mixed: fp32 masters (DeepSpeed's rule too).
  bool low_precision_masters = false;
  // activation_checkpointing: the model's layer units recompute their forward in backward
  // (through the accel::Unit<> wrappers' unit sink; docs/design/0010).
  bool activation_checkpointing = false;
  std::vector<std::string> notes;     // mapping decisions worth a word in the start-up log
  std::vector<FsdpIssue> warnings;    // set, accepted, and of no effect on this path
  std::vector<FsdpIssue> refusals;    // not built: the job cannot run as written
};

// `user_module`: the plan for a module prepared through the public API (docs/design/0015) rather than
// the built-in model: the wrap classes are the user's (resolved against the module tree by the
// caller, not checked here). FULL_SHARD, HYBRID_SHARD and activation_checkpointing need unit
// boundaries in the forward: refused unless `unit_boundaries` (accel::Unit<> wrappers).
FsdpPlan plan_fsdp(const config::JobConfig& job, bool user_module = false, bool unit_boundaries = false);

// "fsdp.auto_wrap_policy: NO_WRAP ... (allowed: ...); fix: ...", for errors outside the launcher.
std::string describe_issue(const FsdpIssue& issue);

}  // namespace accel::engine

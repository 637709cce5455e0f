// backend: fsdp, PyTorch FSDP's dialect (Accelerate's fsdp_config names; decisions in
// docs/design/0007-fsdp-policy.md): the sharding strategy, the wrap policy over the model's units,
// prefetch, precision_mode, CPU offload and activation checkpointing; what the job asks for that is
// not built (refusals: the launcher reports them as configuration errors before spawning anything)
// and accepted keys with no effect on this path (warnings).
#include <algorithm>
#include <sstream>

#include "runtime/common/strings.hpp"
#include "runtime/config/dialects/builtin_dialects.hpp"
#include "runtime/config/job_checker.hpp"

namespace accel::config::dialects {
namespace {

// The layer classes TRANSFORMER_BASED_WRAP may name for the built-in models: their units are one
// per layer (the embeddings and gpt's final norm stay in the root), so the only class to wrap is
// the model's layer class. mlp also accepts the key's default, Block, so a default fsdp job runs it.
std::vector<std::string> layer_classes(ModelName model) {
  if (model == ModelName::gpt) return {"Block"};
  if (model == ModelName::llama) return {"LlamaDecoderLayer", "Block"};  // transformers' class name
  return {"MlpLayer", "Block"};
}

// The built-in model's layer units: their path prefix and what the start-up log calls them.
struct LayerNaming {
  std::string prefix, layer, outside;
};
LayerNaming layer_naming(ModelName model) {
  switch (model) {
    case ModelName::gpt: return {"h.", "Block", "the embedding and the final norm store their"};
    case ModelName::llama: return {"layers.", "LlamaDecoderLayer", "the embedding, the final norm and the head store their"};
    case ModelName::mlp: break;
  }
  return {"layer.", "layer", "the embedding stores its"};
}

void check_wrap(const JobConfig& job, plan::ResolvedPlan& plan, bool user_module) {
  const auto& f = job.fsdp;
  plan.wrap = f.auto_wrap_policy;
  if (f.auto_wrap_policy == AutoWrapPolicy::NO_WRAP) {
    plan.notes.push_back("NO_WRAP: the whole model is one unit, gathered for each micro-step");
    if (f.min_num_params != FsdpSection{}.min_num_params)
      plan.warnings.push_back({"fsdp.min_num_params", "acts with auto_wrap_policy SIZE_BASED_WRAP only; it has no "
                               "effect under NO_WRAP", "", "remove it"});
    return;
  }
  if (f.auto_wrap_policy == AutoWrapPolicy::SIZE_BASED_WRAP) {
    if (f.min_num_params < 1) {
      plan.refusals.push_back({"fsdp.min_num_params", "must be at least 1 under SIZE_BASED_WRAP, got " +
                                                          std::to_string(f.min_num_params),
                               "an integer >= 1", "set min_num_params to the smallest unit size to wrap, e.g. 1000000"});
      return;
    }
    plan.group_numel = f.min_num_params;
    plan.notes.push_back("SIZE_BASED_WRAP: consecutive layers are wrapped together once they hold at least " +
                         std::to_string(f.min_num_params) + " parameters; the embedding and any smaller tail "
                         "form the root unit");
    return;
  }
  const auto allowed = layer_classes(job.model.name);
  std::stringstream names(f.transformer_layer_cls_to_wrap);
  std::string name;
  bool any = false;
  while (std::getline(names, name, ',')) {
    name = trim(name);
    if (name.empty()) continue;
    any = true;
    plan.wrap_classes.push_back(name);
    if (user_module) continue;  // the user's classes: the caller finds them in the module tree
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == name;
    if (!ok) {
      plan.refusals.push_back({"fsdp.transformer_layer_cls_to_wrap",
                               "'" + name + "' is not a layer class of the " + to_string(job.model.name) +
                                   " model: accel wraps the model's units, one per layer (" + allowed.front() + ")",
                               join(allowed), "set transformer_layer_cls_to_wrap: " + allowed.front()});
      return;
    }
  }
  if (!any && user_module)
    plan.refusals.push_back({"fsdp.transformer_layer_cls_to_wrap", "names no module class", "",
                             "name your model's block class, e.g. transformer_layer_cls_to_wrap: Block"});
  else if (!any)
    plan.refusals.push_back({"fsdp.transformer_layer_cls_to_wrap", "names no layer class", join(allowed),
                             "set transformer_layer_cls_to_wrap: " + allowed.front()});
  if (f.min_num_params != FsdpSection{}.min_num_params)
    plan.warnings.push_back({"fsdp.min_num_params", "acts with auto_wrap_policy SIZE_BASED_WRAP only; it has no "
                             "effect under TRANSFORMER_BASED_WRAP", "", "remove it"});
}

void plan_sharding(const JobConfig& job, plan::ResolvedPlan& plan) {
  const auto& f = job.fsdp;
  ShardingStrategy s = f.sharding_strategy;
  plan.label = "fsdp " + to_string(s);
  if (s == ShardingStrategy::HYBRID_SHARD) {
    if (job.num_machines > 1) {
      // FSDP's HYBRID_SHARD: FULL_SHARD within each machine, a full copy of the states per machine.
      plan.shard_group_size = job.num_processes / job.num_machines;
      plan.notes.push_back("HYBRID_SHARD: FULL_SHARD within each machine (" + std::to_string(plan.shard_group_size) +
                           " ranks), replicated across " + std::to_string(job.num_machines) +
                           " machines; gradient shards are all-reduced across machines");
    } else {
      plan.notes.push_back("HYBRID_SHARD on one machine is FULL_SHARD (nothing to replicate across machines)");
    }
    s = ShardingStrategy::FULL_SHARD;
  }
  plan.shards = s == ShardingStrategy::FULL_SHARD      ? plan::Shards::parameters
                : s == ShardingStrategy::SHARD_GRAD_OP ? plan::Shards::gradients
                                                       : plan::Shards::none;

  // Prefetch: FSDP reaches one unit ahead, with no element bound; limit_all_gathers is its rate
  // limiter (at most two units' gathered parameters alive). The pinned embedding unit (the root,
  // tied with the head and gathered through a micro-step) is not counted, as FSDP's root is not.
  plan::PrefetchPolicy& p = plan.prefetch;
  p.forward = f.forward_prefetch;
  p.backward = f.backward_prefetch == BackwardPrefetch::BACKWARD_PRE    ? plan::PrefetchPolicy::Backward::pre
               : f.backward_prefetch == BackwardPrefetch::BACKWARD_POST ? plan::PrefetchPolicy::Backward::post
                                                                        : plan::PrefetchPolicy::Backward::none;
  p.max_prefetch_units = 1;
  p.max_prefetch_numel = 0;
  p.max_live_units = f.limit_all_gathers ? 2 : 0;
  p.max_live_numel = 0;
  if (plan.frees_parameters()) {
    plan.notes.push_back(std::string("prefetch one unit ahead: backward ") + to_string(f.backward_prefetch) +
                         ", forward " + (f.forward_prefetch ? "on" : "off") +
                         (f.limit_all_gathers ? "; limit_all_gathers: at most 2 units gathered (the pinned "
                                                "embedding not counted)"
                                              : "; limit_all_gathers off"));
  } else {
    const FsdpSection defaults;
    for (auto [key, changed] : {std::pair<const char*, bool>{"fsdp.backward_prefetch", f.backward_prefetch != defaults.backward_prefetch},
                                {"fsdp.forward_prefetch", f.forward_prefetch != defaults.forward_prefetch},
                                {"fsdp.limit_all_gathers", f.limit_all_gathers != defaults.limit_all_gathers}})
      if (changed)
        plan.warnings.push_back({key, "acts with FULL_SHARD only: under " + to_string(s) +
                                          " the parameters stay gathered between steps, so nothing is prefetched",
                                 "", "remove it, or use sharding_strategy: FULL_SHARD"});
  }
}

void plan_precision(const JobConfig& job, plan::ResolvedPlan& plan) {
  if (job.fsdp.precision_mode != PrecisionMode::low) return;
  if (job.model.dtype == ParamDtype::bf16) {
    plan.master = plan.compute;
    plan.notes.push_back("precision_mode low: masters and gradient shards stay bf16 (no fp32 upcast); AdamW "
                         "moments are fp32, accel's optimizer rule for bf16 parameters");
    return;
  }
  plan.warnings.push_back({"fsdp.precision_mode", "low has no effect with model.dtype fp32: the parameters are fp32, "
                           "so the masters are fp32 either way (low keeps a bf16-loaded model in bf16)",
                           "mixed, low", "set model.dtype: bf16 for low-precision training, or remove the key"});
}

void plan_other_keys(const JobConfig& job, plan::ResolvedPlan& plan) {
  const auto& f = job.fsdp;
  if (f.state_dict_type == StateDictType::FULL_STATE_DICT)
    plan.notes.push_back("state_dict_type FULL_STATE_DICT: checkpoints hold per-rank shards (resumable at any world "
                         "size and under deepspeed); the full weights are weights.safetensors at the end, or "
                         "`accel merge-weights CHECKPOINT` at any checkpoint");
  if (!f.sync_module_states)
    plan.warnings.push_back({"fsdp.sync_module_states", "false has no effect: accel always broadcasts rank 0's "
                             "initial parameters, so every rank starts equal", "true", "remove the key"});
  if (f.activation_checkpointing) {
    // The layer units' boundaries recompute; the rest store their activations.
    const LayerNaming naming = layer_naming(job.model.name);
    const std::string& prefix = naming.prefix;
    const std::string last = prefix + std::to_string(std::max(job.model.n_layer - 1, 0));
    plan.activation_checkpointing = true;
    plan.notes.push_back("activation_checkpointing: each " + naming.layer + " (" + prefix + "0" +
                         (last == prefix + "0" ? "" : " .. " + last) +
                         ") keeps only its input and recomputes its forward in backward (about one more forward "
                         "per step); " + naming.outside + " activations");
  }
  if (f.cpu_ram_efficient_loading)
    plan.warnings.push_back({"fsdp.cpu_ram_efficient_loading", "true has no effect: every rank builds the full model, "
                             "then rank 0's values are broadcast", "false", "remove the key"});
}

// A module prepared as it is has no unit boundaries in its forward (docs/design/0015); one with
// accel::Unit<> wrappers has them: each wrapper can recompute its forward.
void check_user_module(const JobConfig& job, plan::ResolvedPlan& plan, bool unit_boundaries) {
  if (plan.frees_parameters() && !unit_boundaries)
    plan.refusals.push_back({"fsdp.sharding_strategy", "the prepared module has no unit boundaries in its forward (no "
                             "accel::Unit<> in it), and " + to_string(job.fsdp.sharding_strategy) +
                             " frees the parameters between uses, which needs them", "NO_SHARD, SHARD_GRAD_OP",
                             "wrap the blocks in accel::Unit<> (accel::Unit<Block> instead of Block; design B, "
                             "docs/design/0015), or use SHARD_GRAD_OP (gradients and optimizer states stay sharded)"});
  if (plan.activation_checkpointing && !unit_boundaries)
    plan.refusals.push_back({"fsdp.activation_checkpointing", "the prepared module has no unit boundaries in its "
                             "forward (no accel::Unit<> in it), and recomputing a unit's forward in backward needs "
                             "them", "false", "wrap the blocks in accel::Unit<> (design B, docs/design/0015), or "
                             "remove the key"});
  // With NO_SHARD and SHARD_GRAD_OP, readiness comes from AccumulateGrad hooks and each recompute
  // is a backward pass of its own: the unit sink refuses a wrapper's second call in a micro-step
  // (api/unit_sink.hpp), where FULL_SHARD's boundaries count the uses.
}

// The block's own cross-key rules.
void check_fsdp_block(const JobConfig& j, JobChecker& c) {
  const auto& f = j.fsdp;
  if (f.auto_wrap_policy == AutoWrapPolicy::TRANSFORMER_BASED_WRAP && f.transformer_layer_cls_to_wrap.empty())
    c.error("fsdp.transformer_layer_cls_to_wrap", "TRANSFORMER_BASED_WRAP needs the layer class to wrap",
            j.model.name == ModelName::mlp ? "Layer" : layer_classes(j.model.name).front(), "name the unit class, or choose another auto_wrap_policy");
  if (j.backend == Backend::fsdp && f.sharding_strategy == ShardingStrategy::HYBRID_SHARD && j.num_machines == 1)
    c.warning("fsdp.sharding_strategy", "HYBRID_SHARD on one machine shards like FULL_SHARD (nothing to replicate "
              "across)", c.about("num_machines"));
}

void resolve_fsdp(const plan::DialectInput& in, plan::ResolvedPlan& plan) {
  const JobConfig& job = in.job;
  plan_sharding(job, plan);
  plan.estimate_row = to_string(job.fsdp.sharding_strategy);
  if (job.fsdp.sharding_strategy == ShardingStrategy::HYBRID_SHARD && job.num_machines == 1) {
    plan.estimate_row = "FULL_SHARD";
    plan.estimate_note = "HYBRID_SHARD on one machine shards like FULL_SHARD; the FULL_SHARD row is this job.";
  }
  check_wrap(job, plan, in.model.user_module);
  plan_precision(job, plan);
  plan_other_keys(job, plan);
  if (in.model.user_module) check_user_module(job, plan, in.model.unit_boundaries);
  // FSDP reduce-scatters from the post-backward hook, always, with one unit's reduction in flight
  // while the next unit computes its gradients (on its own stream): room for the two largest
  // full-gradient buffers. Every wrapped unit is gathered and freed (no persistence threshold).
  plan.overlap_comm = true;
  plan.reduce_bucket = plan::ReduceBucket::two_largest_units;
  plan.grouping = plan::Grouping::wrap_policy;
  plan.persistence_threshold = 0;
  // FSDP's CPUOffload: parameters and optimizer states.
  if (job.fsdp.offload_params) plan.optimizer_states = plan.parameters = plan::Where::cpu;
  // NO_SHARD in fp32 runs on the replicated engine, whose buckets are ddp.bucket_cap_mb: fewer,
  // larger messages than FSDP's per-unit all-reduce.
  plan.bucket_mb = job.ddp.bucket_cap_mb;
}

}  // namespace

plan::Dialect fsdp_dialect() {
  using J = const JobConfig&;
  plan::Dialect d{"fsdp", resolve_fsdp, check_fsdp_block};
  d.strategy_questions = {
      {"fsdp.sharding_strategy", "Which FSDP sharding strategy?"},
      {"fsdp.offload_params", "Offload parameters, gradients and the optimizer step to the CPU?"},
      {"fsdp.auto_wrap_policy", "How should the model be split into units?"},
      {"fsdp.transformer_layer_cls_to_wrap", "Which layer class is one unit?",
       [](J j) { return j.fsdp.auto_wrap_policy == AutoWrapPolicy::TRANSFORMER_BASED_WRAP; }},
      {"fsdp.min_num_params", "How many parameters per unit at least?",
       [](J j) { return j.fsdp.auto_wrap_policy == AutoWrapPolicy::SIZE_BASED_WRAP; }},
      {"fsdp.backward_prefetch", "Which backward prefetch policy?"},
      {"fsdp.forward_prefetch", "Prefetch the next unit during forward?"},
      // Not fsdp.state_dict_type: accel's checkpoints hold per-rank shards whatever it says, and an
      // answered default would be carried into a switched job (deepspeed.zero3_save_16bit_model).
      {"fsdp.activation_checkpointing", "Recompute activations in backward (activation checkpointing)?"},
  };
  d.precision_questions = {
      {"fsdp.precision_mode", "With bf16 parameters: upcast shards to fp32 for the optimizer (mixed) or stay in bf16 (low)?",
       [](J j) { return j.model.dtype == ParamDtype::bf16; }},
  };
  return d;
}

}  // namespace accel::config::dialects

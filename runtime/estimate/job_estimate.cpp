// A job's memory estimate (see job_estimate.hpp).
#include "runtime/estimate/job_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "runtime/common/errors.hpp"
#include "runtime/config/plan/engine_units.hpp"
#include "runtime/config/plan/resolve_plan.hpp"
#include "runtime/config/plan/unit_grouping.hpp"
#include "runtime/estimate/model_shape.hpp"

namespace accel::estimate {
namespace {

Placement placement_of(config::OffloadDevice device) {
  switch (device) {
    case config::OffloadDevice::none: return Placement::device;
    case config::OffloadDevice::cpu: return Placement::cpu;
    case config::OffloadDevice::nvme: return Placement::nvme;
  }
  return Placement::device;
}

int state_bytes(const config::OptimizerSection& o) {
  if (o.name == config::OptimizerName::adamw) return 8;  // exp_avg, exp_avg_sq
  return o.momentum != 0 ? 4 : 0;                        // sgd: a momentum buffer when momentum != 0
}

std::string optimizer_text(const config::OptimizerSection& o) {
  if (o.name == config::OptimizerName::adamw) return "adamw: 2 fp32 states per parameter (exp_avg, exp_avg_sq)";
  return o.momentum != 0 ? "sgd: 1 fp32 state per parameter (momentum)" : "sgd without momentum: no optimizer state";
}

// Which row is the job's own, and how to name it: the plan's.
std::string configured_row(const plan::ResolvedPlan& resolved, std::string& label, std::vector<std::string>& notes) {
  label = resolved.label;
  if (!resolved.estimate_note.empty()) notes.push_back(resolved.estimate_note);
  return resolved.estimate_row;
}

// The FSDP rows' units: the engine units the job's auto_wrap_policy makes of the model's units
// (each group's sizes summed; the group holding the tied unit is the tied one). Under
// SIZE_BASED_WRAP the model's units are those of the size rule (model_shape.hpp). Other backends'
// jobs translate to TRANSFORMER_BASED_WRAP, one engine unit per model unit.
MemoryInput fsdp_units(const config::JobConfig& job, const plan::ResolvedPlan& resolved, const MemoryInput& in,
                       std::vector<std::string>& notes) {
  const auto policy = resolved.wrap;
  if (resolved.grouping != plan::Grouping::wrap_policy || !in.units_known() ||
      policy == config::AutoWrapPolicy::TRANSFORMER_BASED_WRAP)
    return in;
  const ModelShape shape = model_shape(job.model, policy, job.fsdp.min_num_params);
  const std::vector<int64_t> numels = shape.unit_numels();
  const plan::UnitGroups groups = plan::groups_for_wrap_policy(policy, job.fsdp.min_num_params, numels);
  MemoryInput grouped = in;
  grouped.unit_numels.clear();
  grouped.tied_unit = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    int64_t numel = 0;
    for (int u : groups[g]) {
      numel += numels[size_t(u)];
      if (u == shape.tied_unit) grouped.tied_unit = int(g);
    }
    grouped.unit_numels.push_back(numel);
  }
  notes.push_back("FSDP rows: fsdp.auto_wrap_policy " + config::to_string(policy) + " makes " +
                  std::to_string(groups.size()) + " engine unit(s) of the model's " + std::to_string(numels.size()) +
                  "; live buffers count those units.");
  return grouped;
}

// The job as it would run under one row's strategy: the same keys, the row's backend and stage.
// Rows in estimate_job's order: ddp, zero 1-3, NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD.
config::JobConfig job_for_row(const config::JobConfig& job, size_t row) {
  config::JobConfig v = job;
  using config::Backend;
  using config::ShardingStrategy;
  switch (row) {
    case 0: v.backend = Backend::ddp; break;
    case 1: case 2: case 3:
      v.backend = Backend::deepspeed;
      v.deepspeed.zero_stage = int(row);
      break;
    default:
      v.backend = Backend::fsdp;
      v.fsdp.sharding_strategy = row == 4   ? ShardingStrategy::NO_SHARD
                                 : row == 5 ? ShardingStrategy::SHARD_GRAD_OP
                                 : row == 6 ? ShardingStrategy::FULL_SHARD
                                            : ShardingStrategy::HYBRID_SHARD;
  }
  return v;
}

// A micro-step of row `row` replayed on the plan its strategy resolves to (step_replay.hpp), over
// the engine units that plan makes of the model's units.
StepReplay replay_row(const config::JobConfig& job, size_t row, const JobEstimate& e, int shards) {
  const plan::ResolvedPlan resolved = plan::resolve_plan(job_for_row(job, row));
  const plan::EngineUnits units = plan::engine_units(resolved, e.input.unit_numels, /*wrapped=*/true, shards);
  StepInput step;
  step.shards = shards;
  step.compute_bytes = e.input.param_bytes;
  step.tied_weight_numel = e.input.tied_unit >= 0 ? e.tied_weight_numel : 0;
  step.head_activation_bytes = e.head_activation_bytes;
  step.chunked_loss = job.training.loss_chunk_tokens > 0;
  step.device_allocator = e.input.device_allocator;
  for (size_t g = 0; g < units.groups.size(); ++g) {
    int64_t numel = 0, saved = 0;
    for (int u : units.groups[g]) {
      numel += e.input.unit_numels[size_t(u)];
      if (u == e.input.tied_unit) step.token_unit = int(g);
      else saved += e.layer_activation_bytes;
    }
    step.unit_numels.push_back(numel);
    step.unit_activation_bytes.push_back(saved);
  }
  return replay_step(resolved, step, units.reduce_bucket_numel);
}

// The head's activations, alive from its forward to its backward (the step replay holds them there).
// The plain loss: the [tokens, V] logits, their fp32 log-softmax and its gradient, 4 bytes each.
// The chunked loss (training.loss_chunk_tokens; trainer/models/chunked_cross_entropy.hpp) keeps the
// gradients it forms in forward, [tokens, C] and [V, C] in the compute dtype, and at its last chunk
// also that chunk's fp32 logits and logsumexp's fp32 temporary ([rows, V], 8 bytes per entry; the
// compute-dtype logits and gradient casts come and go beside one of them, never both).
int64_t head_activation_bytes(const config::JobConfig& job, int param_bytes) {
  const int64_t tokens = int64_t(job.training.micro_batch_size) * job.training.seq_len;
  const int64_t V = job.model.vocab_size, C = job.model.n_embd;
  if (job.training.loss_chunk_tokens <= 0) return 3 * tokens * V * 4;
  const int64_t rows = std::min<int64_t>(job.training.loss_chunk_tokens, tokens);
  return rows * V * 8 + (tokens + V) * C * param_bytes;
}

}  // namespace

ActivationHint activation_hint(const config::JobConfig& job) {
  ActivationHint a;
  if (job.model.name != config::ModelName::gpt) return a;
  a.available = true;
  a.seq_len = job.training.seq_len;
  a.micro_batch_size = job.training.micro_batch_size;
  a.n_embd = job.model.n_embd;
  a.n_head = job.model.n_head;
  a.n_layer = job.model.n_layer;
  const double s = double(a.seq_len), b = double(a.micro_batch_size), h = double(a.n_embd), heads = double(a.n_head);
  a.fused_attention = job.device == config::Device::cuda;
  a.per_layer_bytes = a.fused_attention ? int64_t(std::llround(s * b * h * 34.0 + 4.0 * b * heads * s))
                                        : int64_t(std::llround(s * b * h * (34.0 + 5.0 * heads * s / h)));
  a.total_bytes = a.per_layer_bytes * a.n_layer;
  a.recomputed = plan::resolve_plan(job).activation_checkpointing;
  if (a.recomputed) a.recomputed_total_bytes = int64_t(std::llround(2.0 * s * b * h)) * a.n_layer + a.per_layer_bytes;
  return a;
}

JobEstimate estimate_job(const config::JobConfig& job, const JobEstimateOptions& options) {
  if (options.world < 0) throw UsageError("--world must be at least 1 (got " + std::to_string(options.world) + ")");
  if (options.params < 0) throw UsageError("--params must be a positive parameter count (got " + std::to_string(options.params) + ")");
  if (options.unit_params < 0)
    throw UsageError("--unit-params must be a positive parameter count (got " + std::to_string(options.unit_params) + ")");
  if (options.unit_params > 0 && options.params == 0)
    throw UsageError("--unit-params needs --params (with a model from the job, its units are known)");

  JobEstimate e;
  e.world = options.world > 0 ? options.world : job.num_processes;
  e.num_machines = job.num_machines;
  e.device = config::to_string(job.device);
  if (e.world % e.num_machines != 0)
    throw UsageError("world size " + std::to_string(e.world) + " is not a multiple of num_machines (" +
                     std::to_string(e.num_machines) + "); every machine runs the same number of processes");

  MemoryInput& in = e.input;
  if (options.params > 0) {
    in.total_params = options.params;
    in.unit_params = options.unit_params;
    e.model = "a bare parameter count (--params; units unknown)";
    e.notes.push_back("--params replaces the job's model: padding is taken over one flat buffer, not per unit.");
    if (options.unit_params == 0)
      e.notes.push_back("live-unit buffers (and nvme staging buffers) are not estimated without units; pass "
                        "--unit-params N with the largest unit's parameter count to include them.");
  } else {
    ModelShape shape = model_shape(job.model);
    for (const auto& u : shape.units) {
      in.unit_numels.push_back(u.numel);
      e.unit_names.push_back(u.name);
    }
    in.tied_unit = shape.tied_unit;
    e.model = describe_model(job.model);
    e.activations = activation_hint(job);
    e.tied_weight_numel = job.model.vocab_size * job.model.n_embd;
  }

  const bool mixed = job.mixed_precision != config::MixedPrecision::no;
  const bool bf16_params = job.model.dtype == config::ParamDtype::bf16;
  in.param_bytes = (mixed || bf16_params) ? 2 : 4;
  in.replicated_master = mixed;
  in.state_bytes = state_bytes(job.optimizer);
  in.nvme_buffer_count = job.deepspeed.buffer_count;
  in.device_allocator = job.device == config::Device::cuda;
  in.max_live_units = 2;
  e.precision = std::string(in.param_bytes == 2 ? (job.mixed_precision == config::MixedPrecision::fp16 ? "fp16" : "bf16")
                                                : "fp32") +
                " parameters and gradients (mixed_precision " + config::to_string(job.mixed_precision) +
                ", model.dtype " + config::to_string(job.model.dtype) + ")";
  e.optimizer = optimizer_text(job.optimizer);
  const bool fused = job.optimizer.fused == config::FusedKernel::yes ||
                     (job.optimizer.fused == config::FusedKernel::auto_ && job.device == config::Device::cuda);
  in.step_temporary_bytes = job.optimizer.name == config::OptimizerName::adamw && !fused ? 8 : 0;
  if (in.units_known()) {
    // Activations in the compute dtype (the hint's formula counts 16-bit ones); the head's above.
    const ActivationHint& a = e.activations;
    e.layer_activation_bytes = a.available ? (a.recomputed ? a.recomputed_total_bytes - a.per_layer_bytes
                                                           : a.total_bytes) / std::max<int64_t>(1, a.n_layer) * in.param_bytes / 2
                                           : 0;
    e.head_activation_bytes = head_activation_bytes(job, in.param_bytes);
    if (job.training.loss_chunk_tokens > 0)
      e.notes.push_back("training.loss_chunk_tokens " + std::to_string(job.training.loss_chunk_tokens) +
                        ": the head's activations are one chunk's fp32 logits and the gradients the chunked "
                        "loss forms in forward ([tokens, C] and [V, C]), not the [tokens, V] logits three times.");
  }
  check_input(in);

  // Offload as the job configures it for each dialect; validation allows it only where it applies.
  const auto& ds = job.deepspeed;
  Placement ds_offload = placement_of(ds.offload_optimizer_device);
  // offload_param_device moves the masters, states and gradient shard as optimizer offload does,
  // and the compute-dtype shards that gathers read (param_offload): cpu to pinned host memory, nvme
  // to files. FSDP's offload_params does the same as cpu.
  Placement ds_stage3 = ds_offload != Placement::device ? ds_offload
                        : ds.offload_param_device == config::OffloadDevice::cpu ? Placement::cpu
                                                                                 : Placement::device;
  Placement fsdp_offload = job.fsdp.offload_params ? Placement::cpu : Placement::device;
  if (ds.offload_param_device == config::OffloadDevice::cpu)
    e.notes.push_back("offload_param_device cpu (zero-3 row): the masters, gradient shard and optimizer states "
                      "move to host memory as with optimizer offload, and each partitioned unit's shard in the "
                      "compute dtype lives in pinned host memory, copied to the device for each gather; units "
                      "kept gathered (the token unit, persistent ones) gather from their own slice on the device, "
                      "with no shard apart.");
  if (ds.offload_param_device == config::OffloadDevice::nvme)
    e.notes.push_back("offload_param_device nvme (zero-3 row): each unit's parameter shard in the compute dtype "
                      "is in a file (nvme column) and read for each gather into one of buffer_count host buffers; "
                      "with fp32 compute and offload_optimizer_device nvme the gathers read the master's file, "
                      "with fp32 compute and the masters in memory the file is a second copy that saves nothing. "
                      "Units under stage3_param_persistence_threshold stay gathered in memory and gather from their "
                      "own slice (counted with a replay, as parameters).");

  // The remaining fields (bounds, param_offload, step) keep their defaults until set below.
  auto plan = [](std::string name, Sharding sharding, int shards, Placement offload) {
    StrategyPlan p;
    p.name = std::move(name);
    p.sharding = sharding;
    p.shards = shards;
    p.offload = offload;
    return p;
  };
  std::vector<StrategyPlan> plans = {
      plan("ddp / zero-0", Sharding::replicated, 1, Placement::device),
      plan("zero-1", Sharding::optimizer, e.world, ds_offload),
      plan("zero-2", Sharding::gradients, e.world, ds_offload),
      plan("zero-3", Sharding::parameters, e.world, ds_stage3),
      plan("NO_SHARD", Sharding::replicated, 1, fsdp_offload),
      plan("SHARD_GRAD_OP", Sharding::gradients, e.world, fsdp_offload),
      plan("FULL_SHARD", Sharding::parameters, e.world, fsdp_offload),
  };
  if (e.num_machines > 1)
    plans.push_back(plan("HYBRID_SHARD", Sharding::parameters, e.world / e.num_machines, fsdp_offload));

  plans[3].param_offload = placement_of(ds.offload_param_device);
  for (size_t i = 4; i < plans.size(); ++i)
    if (plans[i].sharding == Sharding::parameters) plans[i].param_offload = fsdp_offload;
  // DeepSpeed's knobs bound what accel's engine holds at once under the zero rows.
  for (int i : {1, 2, 3}) {
    plans[size_t(i)].reduce_bucket_numel = ds.reduce_bucket_size;
    plans[size_t(i)].max_live_numel = ds.stage3_max_live_parameters;
  }
  // accel's fsdp policy (docs/design/0007): two units gathered besides the pinned one, and the
  // full gradients of two units in flight.
  for (size_t i = 4; i < plans.size(); ++i)
    if (plans[i].sharding != Sharding::replicated) {
      plans[i].live_units = 2;
      plans[i].reduce_bucket_units = 2;
    }
  const plan::ResolvedPlan resolved = plan::resolve_plan(job);
  std::string own = configured_row(resolved, e.configured_label, e.notes);
  const MemoryInput fsdp_in = fsdp_units(job, resolved, in, e.notes);
  for (size_t i = 0; i < plans.size(); ++i) {
    plans[i].configured = plans[i].name == own;
    if (plans[i].configured) e.configured = int(i);
    if (in.units_known()) plans[i].step = replay_row(job, i, e, plans[i].shards);
    e.strategies.push_back(estimate_memory(i >= 4 ? fsdp_in : in, plans[i]));  // rows 4+: the FSDP strategies
  }

  // Which bound the live gradients of the zero-2/3 and sharded FSDP rows follow (docs/design/0023).
  e.notes.push_back("live gradients (zero-2, zero-3): full-gradient buffers waiting for their reduce-scatter hold "
                    "at most deepspeed.reduce_bucket_size = " + std::to_string(ds.reduce_bucket_size) +
                    " values (at least one unit; a backward waits for older reductions past it), plus the tied "
                    "unit's, which accumulates through the whole backward; FSDP rows: two units plus the tied one.");
  if (resolved.master != plan::Dtype::fp32)
    e.notes.push_back("fsdp.precision_mode low is not modelled: the FSDP rows count fp32 master, gradient and "
                      "state shards, as precision_mode mixed keeps them.");
  if (job.device == config::Device::cuda && in.units_known())
    e.notes.push_back("step peak (device cuda): the GPU's allocated bytes at the step's fullest moment, as "
                      "torch.cuda.max_memory_allocated reports them (CUDA's caching allocator, the layer buffer "
                      "pool's slots): model states on the device, not the offloaded ones in host memory; the CUDA "
                      "context and the allocator's cached but unallocated blocks come on top.");
  if (job.device == config::Device::auto_ && in.units_known())
    e.notes.push_back("step peak (device auto) follows a CPU rank's engine; --set device=cuda gives a GPU's.");
  if (job.device != config::Device::cuda)
    e.notes.push_back("on a CPU-only run (device " + e.device + " without a GPU) device memory and host memory "
                      "are the same RAM: add the offloaded column to the per-rank figure.");
  return e;
}

}  // namespace accel::estimate

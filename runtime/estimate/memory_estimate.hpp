// Per-rank memory of the model states (parameters, gradients, optimizer) under each sharding
// strategy, as accel's own engine lays them out (engine/sharded: flat per-unit buffers padded to a
// multiple of the shard count, fp32 master and state shards). Pure integer arithmetic, no torch:
// the CLI (`accel estimate-memory`) and the trainer (estimate next to measured) call the same code.
//
// Per rank, N = shards, p = bytes of a compute parameter, g = p, s = optimizer state bytes per value;
// per unit u: P_u = N * ceil(numel_u / N) (padded), S_u = P_u / N (the rank's shard):
//   replicated (ddp, zero-0, NO_SHARD): params p*numel, grads g*numel, states s*numel,
//                                       + fp32 master 4*numel with mixed precision
//   zero-1: params p*numel, grads g*sum(P) (one persistent flat buffer per unit),
//           shards: grad 4*sum(S), master 4*sum(S), states s*sum(S); the parameters are
//           refreshed by all-gathers straight into their own storage (no live buffer)
//   zero-2 (SHARD_GRAD_OP): params p*numel; shards as zero-1; no replicated gradients;
//           live: the tied unit's gradient (kept through backward) + the largest other units'
//           gradient buffers that fit reduce_bucket_numel (at least one unit)
//   zero-3 (FULL_SHARD, HYBRID_SHARD): shards only; live: gathered parameters of the tied unit plus
//           the largest other units that fit max_live_numel (at least one), or else the
//           (max_live_units - 1) largest, and the zero-2 gradient buffers
//   replicated with mixed precision also keeps an fp32 gradient (grad_shard 4*numel) beside the
//   fp32 master: the compute-dtype gradients are all-reduced, then accumulated in fp32
// Sharded strategies with p < 4 also keep the rank's shard in the compute dtype (param_shard p*sum(S)),
// the source of every all-gather; fp32 ones gather from the master itself.
// Offload moves the master, the states and the gradient shard off the device to host memory (cpu).
// nvme puts the master and states in files, streamed through min(buffer_count, units) host buffers
// of the largest unit's master + states; the gradient shard and an fp32 param_shard stay in host memory.
// Parameter offload to nvme (zero-3, param_offload) puts param_shard in files instead (counted in
// nvme), read for each gather through min(buffer_count, units) host buffers of the largest shard in
// the compute dtype; fp32 compute with nvme-offloaded masters reads the master's file (no param_shard),
// and fp32 compute with the masters in memory keeps a file beside them (param_shard 4*sum(S) in nvme).
// Parameter offload to cpu (zero-3, FULL_SHARD / HYBRID_SHARD with offload_params) puts param_shard
// in pinned host memory, copied to the device for each gather.
// With a replay of the step (StrategyPlan::step, step_replay.hpp; units known): stage 3's units that
// stay gathered (the tied root, persistent units) are `params`, an fp32 one's master is its own
// slice, and each one's compute shard is its own slice too (it gathers in place), so param_shard
// counts the partitioned units only; the live figures are the replay's, as the engine reports them;
// `peak` is the step's fullest moment (see MemoryEstimate::peak). Offload in any precision keeps a
// compute-dtype copy of the shard (param_shard) beside the masters that live apart.
// Invariants: every figure is a whole number of bytes; with one shard no padding is added; the
// components of a result add up to device + host + nvme (nvme staging buffers excepted).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/estimate/step_replay.hpp"

namespace accel::estimate {

// What a strategy partitions across its shards (ZeRO stage 0..3).
enum class Sharding { replicated = 0, optimizer = 1, gradients = 2, parameters = 3 };
// Where the master weights, optimizer states and gradient shard live.
enum class Placement { device, cpu, nvme };

std::string to_string(Placement placement);  // "none" (on the device), "cpu", "nvme"

struct MemoryInput {
  // The model's units in forward order (their parameter counts). Empty when only the total is
  // known: then padding is taken over the model as one buffer, and live-unit buffers need
  // `unit_params`.
  std::vector<int64_t> unit_numels;
  int tied_unit = -1;            // index into unit_numels of the unit kept gathered through a step; -1 none
  int64_t total_params = 0;      // used when unit_numels is empty (otherwise their sum)
  int64_t unit_params = 0;       // units unknown: the largest unit's size; 0 = live buffers not estimated
  int param_bytes = 4;           // p: 4 fp32, 2 bf16/fp16 (mixed precision or model.dtype bf16)
  bool replicated_master = false;  // mixed precision: replicated strategies keep an fp32 master copy
  int state_bytes = 8;           // fp32 optimizer state per value: adamw 8, sgd with momentum 4, sgd 0
  int max_live_units = 2;        // stage 3: gathered units alive at once (current + one prefetched)
  int nvme_buffer_count = 5;     // nvme offload: host staging buffers
  // The optimizer step's temporaries per value of the largest shard it steps at once (the
  // unfused AdamW: the square root and the denominator, 2 fp32 values; fused or SGD: 0).
  int step_temporary_bytes = 0;
  // The compute device is a GPU: the step's peak counts the device's allocated bytes (states on the
  // device, CUDA's caching allocator), not the host's resident set (StepInput::device_allocator).
  bool device_allocator = false;

  int64_t num_parameters() const;
  bool units_known() const { return !unit_numels.empty(); }
};

struct StrategyPlan {
  std::string name;              // "zero-2", "SHARD_GRAD_OP"
  Sharding sharding = Sharding::replicated;
  int shards = 1;                // N: ranks one copy is split over (processes per machine for HYBRID_SHARD)
  Placement offload = Placement::device;
  bool configured = false;       // the job's own strategy
  // Stage 2-3 full gradients held at once (DeepSpeed reduce_bucket_size, values); 0: one unit.
  int64_t reduce_bucket_numel = 0;
  // Stage 3 gathered values alive at once besides the tied unit (DeepSpeed
  // stage3_max_live_parameters); 0: max_live_units of the input decides.
  int64_t max_live_numel = 0;
  // FSDP's bounds count units: gathered units alive besides the tied one (limit_all_gathers and
  // one-unit prefetch: 2), and units of full gradients in flight (2: one reducing while the next
  // accumulates). 0: the bounds above decide.
  int live_units = 0;
  int reduce_bucket_units = 0;
  // Where the compute-dtype parameter shard lives between gathers (stage 3; DeepSpeed
  // offload_param_device, FSDP offload_params): device, cpu (pinned host memory) or nvme.
  Placement param_offload = Placement::device;
  // The micro-step replayed on this strategy's plan (step_replay.hpp), when units and plan are
  // known: its figures replace the live-buffer bounds above and give the step's peak.
  std::optional<StepReplay> step{};  // {}: aggregate initializations may leave it out without a warning
};

// Bytes per rank, by component, wherever they live, then where they live.
struct MemoryEstimate {
  StrategyPlan plan;
  int64_t params = 0;            // replicated compute parameters
  int64_t param_shard = 0;       // sharded strategies: the compute-dtype copy of the rank's shard
                                 // that gathers read (bf16/fp16 compute; fp32 beside nvme masters),
                                 // in files with param_offload nvme, host memory with cpu; with a
                                 // replay, stage 3's partitioned units' only (kept ones: in params)
  int64_t grads = 0;             // replicated gradients
  int64_t grad_shard = 0;        // fp32 gradient shard (receives the reduce-scatter)
  int64_t master = 0;            // fp32 master weights (a replicated copy or a shard)
  int64_t optimizer_states = 0;  // fp32 optimizer states (moments / momentum)
  int64_t live_params = 0;       // gathered unit parameters (stage 3)
  int64_t live_grads = 0;        // transient unit-sized gradient / gather buffers
  bool unit_buffers_estimated = true;  // false: units unknown and no unit size given, so live
                                       // buffers and nvme staging buffers count as 0
  int64_t device = 0;            // per rank on the compute device
  int64_t host = 0;              // per rank in host memory because of offload
  int64_t nvme = 0;              // per rank in offload files
  int64_t zero_paper = 0;        // the ZeRO paper's figure for this stage (K = 12), per rank
  // The step's fullest moment, per rank, device and host memory together (a CPU run's resident
  // set less the runtime's own): the larger of the backward's fullest moment (model states in
  // memory + the replay's peak: gathered units, gradient buffers, reduce outputs, the tied
  // weight's gradient copies, activations + nvme parameter staging) and the optimizer step (model
  // states in memory + the optimizer's temporaries + the nvme state buffers it touches). Without a
  // replay: device + host. On a GPU (MemoryInput::device_allocator): the device's allocated bytes
  // alone, the device-resident states + the replay's peak under CUDA's caching allocator.
  int64_t peak = 0;
  int64_t transients = 0;        // the part of the peak beyond the model states held in memory
  std::string peak_phase;        // "backward: the embedding's backward", "optimizer step"
};

// Throws accel::UsageError for an input that describes no model (no parameters, a non-positive
// unit, a bad byte count) or a plan with fewer than one shard.
void check_input(const MemoryInput& input);

MemoryEstimate estimate_memory(const MemoryInput& input, const StrategyPlan& plan);

// Rajbhandari et al. 2020 (ZeRO), mixed-precision Adam, K = 12 bytes of optimizer state per
// parameter (fp32 master, momentum, variance), per rank: replicated 16*psi; stage 1 4*psi + 12*psi/N;
// stage 2 2*psi + 14*psi/N; stage 3 16*psi/N. Divisions round up to whole bytes.
int64_t zero_paper_bytes(Sharding sharding, int64_t params, int shards);

// N * ceil(numel / N): a flat buffer's length once padded to equal shards.
int64_t padded_numel(int64_t numel, int shards);

}  // namespace accel::estimate

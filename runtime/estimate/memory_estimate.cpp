// Per-rank model-state memory by strategy (see memory_estimate.hpp for the layout it describes).
#include "runtime/estimate/memory_estimate.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include "runtime/common/errors.hpp"

namespace accel::estimate {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The unit-sized buffers a strategy keeps alive, in padded elements.
struct UnitSizes {
  bool known = false;          // units known, or a unit size given
  int64_t tied = 0;            // P of the tied unit (0: none)
  std::vector<int64_t> others; // P of the other units, largest first
  int64_t max_shard = 0;       // the largest S
  int64_t largest_other() const { return others.empty() ? 0 : others.front(); }
};

UnitSizes unit_sizes(const MemoryInput& in, int shards) {
  UnitSizes sizes;
  if (in.units_known()) {
    sizes.known = true;
    for (size_t u = 0; u < in.unit_numels.size(); ++u) {
      int64_t padded = padded_numel(in.unit_numels[u], shards);
      if (int(u) == in.tied_unit) sizes.tied = padded;
      else sizes.others.push_back(padded);
      sizes.max_shard = std::max(sizes.max_shard, padded / shards);
    }
  } else if (in.unit_params > 0) {
    sizes.known = true;  // every unit taken to be as large as the largest one, none tied
    int64_t padded = padded_numel(in.unit_params, shards);
    sizes.others.assign(size_t(std::max(1, in.max_live_units)), padded);
    sizes.max_shard = padded / shards;
  }
  std::sort(sizes.others.begin(), sizes.others.end(), std::greater<>());
  return sizes;
}

// Elements of gathered parameters alive at once under stage 3: the tied unit (it stays gathered)
// and the largest other units up to max_live_units in all (at least the one computing).
int64_t gathered_numel(const UnitSizes& sizes, int max_live_units) {
  int others = std::max(1, sizes.tied > 0 ? max_live_units - 1 : max_live_units);
  int64_t sum = sizes.tied;
  for (int i = 0; i < others && size_t(i) < sizes.others.size(); ++i) sum += sizes.others[size_t(i)];
  return sum;
}

// The tied unit plus the largest other units whose sum fits `budget` values (at least one unit).
int64_t within_budget(const UnitSizes& sizes, int64_t budget) {
  int64_t sum = 0;
  for (size_t i = 0; i < sizes.others.size(); ++i) {
    if (i > 0 && sum + sizes.others[i] > budget) break;
    sum += sizes.others[i];
  }
  return sizes.tied + sum;
}

// The host memory the optimizer step touches in nvme's buffer pool (nvme_state_store.cpp): unit u
// streams through buffer u % pool, so each buffer holds as many pages as the largest unit it serves
// (master, states and the gradient slot: 4 + s + 4 bytes per shard value).
int64_t nvme_pool_touched(const MemoryInput& in, int shards) {
  const int units = int(in.unit_numels.size());
  const int pool = std::min(std::max(2, in.nvme_buffer_count), units);
  int64_t touched = 0;
  for (int b = 0; b < pool; ++b) {
    int64_t largest = 0;
    for (int u = b; u < units; u += pool) largest = std::max(largest, padded_numel(in.unit_numels[size_t(u)], shards) / shards);
    touched += largest * (4 + in.state_bytes + 4);
  }
  return touched;
}

// The step's peak (MemoryEstimate::peak): the replay's fullest backward moment against the
// optimizer step, each on top of the model states held in memory.
void add_step_peak(const MemoryInput& in, const UnitSizes& sizes, MemoryEstimate& e) {
  const StrategyPlan& plan = e.plan;
  if (!plan.step) {
    e.peak = e.device + e.host;
    return;
  }
  const StepReplay& r = *plan.step;
  // The memory the peak counts: a CPU rank's, all but what is in files; a GPU's, the device's alone
  // (offloaded states, the nvme staging buffers and the optimizer's host work are in host memory).
  const bool gpu = in.device_allocator;
  auto counted = [gpu](Placement where) { return gpu ? where == Placement::device : where != Placement::nvme; };
  // The compute-dtype shards: where parameter offload puts them (host memory, files).
  const Placement shards = plan.sharding == Sharding::parameters ? plan.param_offload : Placement::device;
  const int64_t param_shards = counted(shards) ? e.param_shard : 0;
  const int64_t states = e.params + param_shards + e.grads +
                         (counted(plan.offload) ? e.grad_shard + e.master + e.optimizer_states : 0);
  int64_t param_staging = 0;
  if (!gpu && shards == Placement::nvme && in.units_known()) {
    // The units that free their storage gather from files through buffer_count staging buffers of
    // the largest one's shard.
    param_staging = std::min<int64_t>(in.nvme_buffer_count, int64_t(in.unit_numels.size())) *
                    (r.largest_freed_numel / plan.shards) * in.param_bytes;
  }
  const int64_t backward = states + r.peak + param_staging;
  const bool step_counted = !gpu || plan.offload == Placement::device;
  const int64_t temporaries = step_counted ? int64_t(in.step_temporary_bytes) * sizes.max_shard : 0;
  const int64_t pool = !gpu && plan.offload == Placement::nvme && in.units_known() ? nvme_pool_touched(in, plan.shards) : 0;
  const int64_t step = states + param_staging + temporaries + pool;
  e.peak = std::max(backward, step);
  e.transients = e.peak - states;
  e.peak_phase = backward >= step ? "backward: " + r.peak_when : "optimizer step";
}

}  // namespace

std::string to_string(Placement placement) {
  switch (placement) {
    case Placement::device: return "none";
    case Placement::cpu: return "cpu";
    case Placement::nvme: return "nvme";
  }
  return "?";
}

int64_t MemoryInput::num_parameters() const {
  if (unit_numels.empty()) return total_params;
  return std::accumulate(unit_numels.begin(), unit_numels.end(), int64_t(0));
}

int64_t padded_numel(int64_t numel, int shards) { return shards * ceil_div(numel, shards); }

void check_input(const MemoryInput& in) {
  // 1e15 parameters keep every product below int64's range (16 bytes each).
  constexpr int64_t kMaxParams = 1'000'000'000'000'000;
  if (in.unit_numels.empty() && in.total_params <= 0)
    throw UsageError("memory estimate: the parameter count must be positive (got " + std::to_string(in.total_params) + ")");
  for (size_t u = 0; u < in.unit_numels.size(); ++u)
    if (in.unit_numels[u] <= 0)
      throw UsageError("memory estimate: unit " + std::to_string(u) + " has " + std::to_string(in.unit_numels[u]) +
                       " parameters; every unit needs at least one");
  if (in.num_parameters() > kMaxParams)
    throw UsageError("memory estimate: " + std::to_string(in.num_parameters()) + " parameters is more than this "
                     "estimator handles (at most 1e15)");
  if (in.unit_params < 0 || in.unit_params > in.num_parameters())
    throw UsageError("memory estimate: the unit size (" + std::to_string(in.unit_params) +
                     ") must be between 1 and the parameter count (" + std::to_string(in.num_parameters()) + ")");
  if (in.tied_unit >= int(in.unit_numels.size()) || in.tied_unit < -1)
    throw UsageError("memory estimate: tied unit index " + std::to_string(in.tied_unit) + " is not a unit");
  if (in.param_bytes != 2 && in.param_bytes != 4)
    throw UsageError("memory estimate: parameter bytes must be 2 or 4 (got " + std::to_string(in.param_bytes) + ")");
  if (in.state_bytes < 0) throw UsageError("memory estimate: optimizer state bytes must not be negative");
  if (in.max_live_units < 1) throw UsageError("memory estimate: max_live_units must be at least 1");
  if (in.nvme_buffer_count < 1) throw UsageError("memory estimate: the nvme buffer count must be at least 1");
}

int64_t zero_paper_bytes(Sharding sharding, int64_t params, int shards) {
  switch (sharding) {
    case Sharding::replicated: return 16 * params;
    case Sharding::optimizer: return 4 * params + ceil_div(12 * params, shards);
    case Sharding::gradients: return 2 * params + ceil_div(14 * params, shards);
    case Sharding::parameters: return ceil_div(16 * params, shards);
  }
  return 0;
}

MemoryEstimate estimate_memory(const MemoryInput& in, const StrategyPlan& plan) {
  check_input(in);
  if (plan.shards < 1)
    throw UsageError("memory estimate: " + plan.name + " needs at least one shard (got " + std::to_string(plan.shards) + ")");
  const int N = plan.shards;
  const int64_t p = in.param_bytes, g = in.param_bytes, s = in.state_bytes;
  const int64_t numel = in.num_parameters();

  // Flat buffers: per unit when units are known, else the model as one buffer.
  int64_t padded_sum = 0;
  if (in.units_known())
    for (int64_t n : in.unit_numels) padded_sum += padded_numel(n, N);
  else
    padded_sum = padded_numel(numel, N);
  const int64_t shard_sum = padded_sum / N;
  const UnitSizes sizes = unit_sizes(in, N);

  // Stages 1-2 keep fp32 parameters whole: the master shard is their own slice, stepped in place
  // (sharded_engine.cpp), unless offload keeps the masters apart.
  const bool master_in_params = p == 4 && plan.offload == Placement::device;
  MemoryEstimate e;
  e.plan = plan;
  e.zero_paper = zero_paper_bytes(plan.sharding, numel, N);
  e.unit_buffers_estimated = sizes.known || plan.sharding == Sharding::replicated;
  // Stages 2-3 free each unit's full gradient once it is reduce-scattered; the tied unit's gradient
  // builds up from the first backward op (the output head) to the last (the embedding lookup).
  const int64_t reduce_budget =
      std::max(plan.reduce_bucket_numel, int64_t(plan.reduce_bucket_units) * sizes.largest_other());
  const int64_t unit_grad_buffers = within_budget(sizes, reduce_budget) * g;
  switch (plan.sharding) {
    case Sharding::replicated:
      e.params = numel * p;
      e.grads = numel * g;  // ddp's gradient buckets are the gradients (parameters' .grad are views)
      e.master = in.replicated_master ? numel * 4 : 0;
      e.grad_shard = in.replicated_master ? numel * 4 : 0;  // fp32 gradient the update reads
      e.optimizer_states = numel * s;
      break;
    case Sharding::optimizer:
      e.params = numel * p;
      e.grads = padded_sum * g;  // persistent flat buffer per unit, accumulates over micro-steps
      e.grad_shard = shard_sum * 4;
      e.master = master_in_params ? 0 : shard_sum * 4;
      e.optimizer_states = shard_sum * s;
      break;
    case Sharding::gradients:
      e.params = numel * p;
      e.grad_shard = shard_sum * 4;
      e.master = master_in_params ? 0 : shard_sum * 4;
      e.optimizer_states = shard_sum * s;
      e.live_grads = plan.step ? plan.step->grad_buffers_peak : unit_grad_buffers;
      break;
    case Sharding::parameters:
      e.grad_shard = shard_sum * 4;
      e.master = shard_sum * 4;
      e.optimizer_states = shard_sum * s;
      if (plan.step) {
        // The engine's own layout: units that keep their storage (the token unit, persistent
        // ones) are replicated parameters; an fp32 one without offload steps its parameters'
        // own slice as its master.
        e.params = plan.step->kept;
        if (p == 4 && plan.offload == Placement::device && plan.param_offload == Placement::device)
          e.master -= plan.step->kept_numel / N * 4;
        e.live_params = plan.step->gathered_peak;
        e.live_grads = plan.step->grad_buffers_peak;
        break;
      }
      // Without a replay, bounds: the tied unit and the largest others within the live limits.
      if (plan.live_units > 0)
        e.live_params = gathered_numel(sizes, plan.live_units + (sizes.tied > 0 ? 1 : 0)) * p;
      else
        e.live_params = (plan.max_live_numel > 0 ? within_budget(sizes, plan.max_live_numel)
                                                 : gathered_numel(sizes, in.max_live_units)) * p;
      e.live_grads = unit_grad_buffers;
      break;
  }
  const bool sharded = plan.sharding != Sharding::replicated;
  const bool params_in_files = plan.sharding == Sharding::parameters && plan.param_offload == Placement::nvme;
  // The compute-dtype shards gathers read: their own copy in 16-bit compute, and with offload in
  // any precision (the masters live apart: on the host, or in files).
  if (sharded && (p < 4 || plan.offload != Placement::device)) e.param_shard = shard_sum * p;
  // Parameter files: fp32 with nvme masters reads the master's file; fp32 with the masters in
  // memory writes a file beside them.
  if (params_in_files && p == 4) e.param_shard = plan.offload == Placement::nvme ? 0 : shard_sum * 4;
  // Stage 3's kept units (the token unit, persistent ones: known from the replay) gather in place
  // from their own slice of `params` (sharded_engine.cpp): only the partitioned units' shards are
  // held apart, wherever parameter offload puts them.
  if (plan.sharding == Sharding::parameters && plan.step && e.param_shard > 0) e.param_shard -= plan.step->kept_numel / N * p;
  // Parameter offload to host memory: the partitioned units' shards are pinned host memory.
  const bool params_on_host = plan.sharding == Sharding::parameters && plan.param_offload == Placement::cpu;
  e.device = e.params + (params_in_files || params_on_host ? 0 : e.param_shard) + e.grads + e.live_params + e.live_grads;
  switch (plan.offload) {
    case Placement::device: e.device += e.master + e.optimizer_states + e.grad_shard; break;
    case Placement::cpu: e.host = e.master + e.optimizer_states + e.grad_shard; break;
    case Placement::nvme: {
      // ZeRO-Infinity: the fp32 gradient shard is in the unit's file too (its last slot).
      e.nvme = e.master + e.optimizer_states + e.grad_shard;
      // Staging buffers: each holds one unit's master, states and gradient (4 + s + 4 bytes per
      // shard value).
      const int64_t units = in.units_known() ? int64_t(in.unit_numels.size()) : int64_t(in.nvme_buffer_count);
      e.host = std::min<int64_t>(std::max(2, in.nvme_buffer_count), units) * sizes.max_shard * (4 + s + 4);
      break;
    }
  }
  if (params_on_host) e.host += e.param_shard;
  if (params_in_files) {
    // The shards in files; each gather stages one in a host buffer of the compute dtype.
    e.nvme += e.param_shard;
    const int64_t units = in.units_known() ? int64_t(in.unit_numels.size()) : int64_t(in.nvme_buffer_count);
    e.host += std::min<int64_t>(in.nvme_buffer_count, units) * sizes.max_shard * p;
  }
  add_step_peak(in, sizes, e);
  return e;
}

}  // namespace accel::estimate

// The sharded optimizer: AdamW or SGD over this rank's master shard of every unit
// (ZeRO stage >= 1: optimizer states and master weights are partitioned). The masters and gradient
// shards are fp32 (DeepSpeed, FSDP mixed precision) or bf16 (FSDP precision_mode low); the states
// are in the optimizer's math dtype for the masters (math_precision.hpp: fp32 for both).
// Invariants: each unit's master, gradient and state tensors are flat tensors of the unit's
// shard size; updates run per parameter segment (flat_layout.hpp) with the hyper-parameters of that
// parameter's group (param_groups.hpp), through the same adamw_step/sgd_step as the replicated
// optimizer, so a sharded update equals the unsharded one element for element. Padding elements
// have no segment and are never touched.
#pragma once

#include <ATen/ATen.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/format/tensor_file_sink.hpp"
#include "engine/sharded/flat_layout.hpp"
#include "engine/sharded/nvme_state_store.hpp"
#include "runtime/config/job.hpp"
#include "engine/named_tensors.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/param_groups.hpp"

namespace accel::engine {

struct UnitShardState {
  std::string unit;
  FlatLayout layout;
  std::vector<ShardSegment> segments;  // this rank's
  std::vector<int> groups;             // per parameter of the unit: its parameter group
  at::Tensor master;                   // [S] in the master dtype (fp32 unless precision_mode low)
  at::Tensor grad;                     // [S] in the master dtype, the averaged gradient shard
                                       // (undefined between steps when it lives on NVMe)
  at::Tensor exp_avg, exp_avg_sq;      // adamw
  at::Tensor momentum;                 // sgd with momentum
  int64_t step = 0;
};

class ShardedOptimizer {
 public:
  // The built-in groups of the job's optimizer section (builtin_optimizer_setup).
  ShardedOptimizer(const config::OptimizerSection& section, int rank, at::ScalarType master_dtype = at::kFloat);
  ShardedOptimizer(OptimizerSetup setup, int rank, at::ScalarType master_dtype = at::kFloat);

  at::ScalarType master_dtype() const { return master_dtype_; }
  // Where units added from now on keep their master, gradient shard and states: `device` (the
  // engine's), or the host for a GPU engine with optimizer offload, in page-locked memory (the
  // step then runs on the CPU, as DeepSpeed's offloaded step). Default: the CPU.
  void place_states(at::Device device, at::Device engine_device) {
    device_ = device;
    engine_device_ = engine_device;
  }
  // Adds a unit; `master` is this rank's shard of the unit's flat parameters (copied, converted to
  // the master dtype); groups[k] is the parameter group of the unit's parameter k. `adopt_master`:
  // `master` itself becomes the master (in the master dtype, contiguous, not offloaded), so the
  // step writes the parameters' own shard.
  UnitShardState& add_unit(const std::string& name, const FlatLayout& layout, std::vector<int> groups,
                           const at::Tensor& master,
                           bool adopt_master = false);
  const OptimizerSetup& setup() const { return setup_; }
  std::deque<UnitShardState>& units() { return units_; }  // stable references

  void zero_grads();
  // grad += values for unit `unit` (values: this rank's reduced shard, any float dtype, on the
  // gradient's device). With gradient shards on NVMe: a read-add-write of the unit's file.
  void add_to_grad(int unit, const at::Tensor& values);
  // Where unit `unit`'s gradient shard is added (the CPU when it lives on NVMe).
  at::Device grad_device(int unit) const;
  bool grads_on_nvme() const { return nvme_ != nullptr; }
  // The global gradient norm (fp16: unscaled by grad_scale) and clipping, as
  // unscale_and_clip_grad_norm over every unit's gradient shard. With gradient shards on
  // NVMe, the norm streams them from their files one unit at a time and the factor is applied as
  // each unit is read for the step, so the updates are bitwise those of shards held in memory.
  double unscale_and_clip(double grad_scale, double max_norm, const SumOfSquaresReduce& reduce);
  // Updates every unit, each parameter with its group's hyper-parameters (one entry per group of
  // the setup); `after_unit` (optional) sees each unit right after its update, while its master is
  // in memory (with nvme offload, the only moment it is).
  void step(const std::vector<GroupHyper>& groups, const std::function<void(int, UnitShardState&)>& after_unit = {});
  // Every group at learning rate `lr`, its other hyper-parameters as built.
  void step(double lr, const std::function<void(int, UnitShardState&)>& after_unit = {}) {
    step(setup_.at_lr(lr), after_unit);
  }

  // NVMe offload (offload_optimizer_device: nvme, ZeRO-Infinity): from here on, each unit's master,
  // states and gradient shard (units added later included, as they are added) live in one file
  // under `dir` and are streamed through `buffer_count` buffers during step(); between calls their
  // tensors are undefined. The gradient shard is the file's last slot.
  // materialize() brings all of them back into memory (resharding a checkpoint, the weights
  // export) until the next spill().
  void offload_to_nvme(const std::string& dir, int buffer_count);
  bool offloaded() const { return nvme_ != nullptr; }
  const NvmeStateStore* nvme() const { return nvme_.get(); }
  void materialize();
  void spill();
  // Each unit's master in turn (streamed from its file when offloaded), read-only.
  void visit_masters(const std::function<void(int, const at::Tensor&)>& fn);

  // The optimizer states kept per unit besides the master ("exp_avg", "exp_avg_sq" | "momentum" |
  // none), from the configuration: offloaded units hold no state tensors between steps.
  std::vector<std::string> state_kinds() const;

  // Checkpoint tensors: "<unit>.master", "<unit>.exp_avg", "<unit>.exp_avg_sq" | "<unit>.momentum",
  // "<unit>.step". load_state checks names and shapes first (RunError naming `source`).
  NamedTensors state_tensors() const;
  void load_state(const NamedTensors& state, const std::string& source);
  // The same tensors as one safetensors file. With nvme offload they stream unit by unit between
  // the file and the offload store, so a checkpoint never holds more than one unit's states.
  void save_state_file(TensorFileSink& files, const std::string& file);
  void save_state_file(const std::string& path);
  void load_state_file(const std::string& path);

 private:
  void update(UnitShardState& u, const std::vector<GroupHyper>& groups);
  std::vector<at::Tensor*> state_slots(UnitShardState& u);  // master first, then the moments
  void spill_unit(size_t i);
  int64_t grad_offset(UnitShardState& u) { return int64_t(state_slots(u).size()) * u.layout.shard_numel(); }
  at::Tensor read_grad(size_t i);  // NVMe: the unit's gradient shard (zeros when none landed since zero_grads)
  std::vector<std::string> slot_suffixes() const;  // state_tensors() names after "<unit>", step excluded

  OptimizerSetup setup_;
  int rank_;
  at::ScalarType master_dtype_;
  at::Device device_ = at::kCPU, engine_device_ = at::kCPU;
  at::Tensor state_empty(int64_t numel, at::ScalarType dtype) const;  // on device_
  at::Tensor state_zeros(int64_t numel, at::ScalarType dtype) const { return state_empty(numel, dtype).zero_(); }
  std::unique_ptr<NvmeStateStore> nvme_;
  bool spilled_ = false;
  std::vector<char> grad_landed_;  // NVMe: per unit, whether its file's gradient slot holds this step's values
  double grad_factor_ = 1.0;       // NVMe: unscale_and_clip's factor, applied as each gradient is read for step()
  std::deque<UnitShardState> units_;
};

}  // namespace accel::engine

// The sharding engine both the DeepSpeed-style and the FSDP-style dialects run on ("one engine, two
// dialects", ../../shared/design.md). Per unit, the parameters form one flat buffer (flat_layout.hpp)
// of which each rank owns an equal shard, with a master copy (fp32 unless the policy keeps bf16
// masters) and the optimizer state of that shard only (sharded_optimizer.hpp). The model's parameters are views of the unit's gathered
// buffer in the compute dtype (unit_param_buffers.hpp). A ShardingPolicy says what else is
// partitioned:
//   shard_grads = false  (ZeRO-1): full gradients accumulate locally (no communication on
//                        accumulation micro-steps) and are reduce-scattered on the last one;
//   shard_grads = true   (ZeRO-2, SHARD_GRAD_OP): every micro-step reduce-scatters each unit's
//                        gradients as soon as they are complete and frees the full gradients;
//   shard_params = true  (ZeRO-3, FULL_SHARD): parameters exist only as shards between uses; a unit
//                        is all-gathered before its forward and again before its backward, and its
//                        storage released after each (units below persistence_threshold stay).
// After the optimizer step on the shards, the gathered buffers are stale; units that keep their
// storage (replicated ones) are re-gathered at once, asynchronously, and waited on at first use.
// A unit's gradients are complete when every one of its parameters' AccumulateGrad hooks has fired
// (grad_ready_hooks.hpp); reductions are then issued in reverse unit order, so a model needs no
// forward boundaries for stages 0-2. Stage 3 keeps the BackwardSignal points of the model's unit
// hooks (docs/design/0003): a unit is gathered again before its backward and released after the
// whole of it, which parameter hooks cannot tell.
// Invariants: every rank issues the same collectives in the same order (unit order in backward is
// deterministic, prefetch depends on the schedule only); a unit is gathered whenever the model
// computes with it; the update equals the unsharded one element for element (same adamw_step on
// the same averaged gradients).
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"
#include "engine/backward_signal.hpp"
#include "engine/grad_ready_hooks.hpp"
#include "engine/sharded/host_grad_landing.hpp"
#include "engine/sharded/host_param_store.hpp"
#include "engine/sharded/layer_buffer_pool.hpp"
#include "engine/sharded/nvme_param_store.hpp"
#include "engine/sharded/sharded_optimizer.hpp"
#include "engine/sharded/unit_param_buffers.hpp"
#include "engine/unit_source.hpp"
#include "engine/sharded/unit_trace.hpp"

namespace accel::engine {

struct ShardingPolicy {
  std::string label;          // for logs: "deepspeed zero_stage 2"
  bool shard_optimizer = true;  // false: every rank keeps the whole fp32 master and optimizer state
                                // (DeepSpeed stage 0 / DDP with mixed precision); gradients are all-reduced
  bool shard_grads = false;   // requires shard_optimizer
  bool shard_params = false;  // implies shard_grads
  bool overlap_comm = true;   // reduce from the post-backward hook (false: after backward returns)
  PrefetchPolicy prefetch;    // shard_params: when gathers are issued ahead of use
  int64_t persistence_threshold = 0;  // shard_params: units with fewer values stay gathered
  at::ScalarType compute_dtype = at::kFloat;  // parameters, gradients and their communication
  // The masters and gradient shards: fp32 (DeepSpeed; FSDP precision_mode mixed) or the compute
  // dtype (FSDP precision_mode low with bf16 parameters: no fp32 upcast).
  at::ScalarType master_dtype = at::kFloat;
  // shard_grads: values of full gradients held for reduce-scatters in flight; before a unit's
  // reduction is issued, older ones are finished until it fits (at least one unit always is).
  // DeepSpeed's reduce_bucket_size; 0: one unit at a time.
  int64_t reduce_bucket_numel = 0;
  // Optimizer offload to files (DeepSpeed offload_optimizer_device: nvme): the directory ("" = off)
  // and the number of unit buffers the states stream through. `notes` go into describe().
  // HYBRID_SHARD: 0 shards over every rank; G > 0 (dividing the world) shards within each block of
  // G consecutive ranks (one machine) and replicates across blocks: gradients are reduce-scattered
  // in the block, then the shard is all-reduced across blocks (docs/design/0009).
  int shard_group_size = 0;
  // Model units per engine unit (unit_grouping.hpp: FSDP's wrap policies); empty: one each.
  std::vector<std::vector<int>> unit_groups;
  std::string nvme_dir;
  int nvme_buffer_count = 5;
  // Parameter offload to files (DeepSpeed offload_param_device: nvme; shard_params only): the
  // directory ("" = off). Partitioned units keep no compute shard in memory; each gather reads it
  // into one of nvme_buffer_count staging buffers (nvme_param_store.hpp).
  std::string param_nvme_dir;
  // Any optimizer or parameter offload is configured (cpu or nvme): the masters live apart from the
  // parameters (on a GPU, in host memory), so a kept unit's fp32 master is never its parameters' shard.
  bool offloads = false;
  // Parameter offload to host memory (offload_param_device: cpu; fsdp offload_params; shard_params
  // only): partitioned units keep their compute shards in (pinned) host memory, copied to the
  // device for each gather. On a CPU run the shard stays where it is read from.
  bool param_host_offload = false;
  // YaFSDP's layer buffers (layer_buffer_pool.hpp) for the transient unit buffers of stages 2-3:
  // unset = on a GPU only (the CPU's unit allocator returns memory between phases instead).
  std::optional<bool> layer_buffers;
  std::string notes;
};

class ShardedEngine final : public Backend, private UnitHooks, private BackwardListener {
 public:
  // `units` in forward order (api::prepared_units for a prepared module); their parameters become views
  // of the units' flat buffers (set_data: the tensors keep their identity).
  // With a `source`, the units' values come from it (each rank computes its own; nothing is
  // broadcast) and the parameters may be placeholders; without, from the parameters, rank 0's.
  ShardedEngine(comm::Communicator& comm, std::vector<UnitSpec> units, const OptimizerSetup& optimizer,
                ShardingPolicy policy, std::shared_ptr<UnitSource> source = nullptr);
  ~ShardedEngine() override;

  std::string name() const override { return policy_.label; }
  std::string describe() const override;
  UnitHooks* begin_micro_step(int micro_step, bool sync) override;
  void end_micro_step(bool sync) override;
  double unscale_and_clip(double max_norm, double grad_scale) override;
  using Backend::optimizer_step;
  void optimizer_step(const std::vector<GroupHyper>& groups) override;
  const OptimizerSetup& optimizer_setup() const override { return optimizer_->setup(); }
  void wait_parameters() override;
  void rearm_grads() override;
  void skip_step() override;
  UnitHooks* eval_hooks() override;
  NamedTensors full_parameters() override;
  void visit_full_parameters(const std::function<void(const NamedTensors&)>& visit) override;
  std::vector<std::string> parameter_order() const override;
  nlohmann::json save_state(TensorFileSink& files, const CheckpointStorage& storage) override;
  void load_state(const std::string& dir, const nlohmann::json& layout) override;
  bool start_trace() override;
  nlohmann::json memory_report() const override;
  std::vector<std::pair<std::string, const comm::Communicator*>> group_communicators() const override;
  void write_trace(const std::string& path) override;

 private:
  // malloc_trim at every micro-step and step only with nvme offload, whose staging buffers would
  // otherwise sit on the heap's freed pages (docs/design/0008); elsewhere it costs 10-25% of a step.
  bool trims_heap_each_step() const { return optimizer_->offloaded() || param_store_ != nullptr; }
  struct UnitRuntime {
    std::vector<const torch::nn::Module*> members;  // the model units sharing this engine unit, in forward order
    std::string name;                   // group_name() of the members
    const torch::nn::Module* token_unit = nullptr;  // the pinned member (the embedding), if any
    std::vector<int> params;  // indices into params_
    at::Tensor grad_flat;     // shard_grads == false: persistent [P]; the params' .grad are views
    at::Tensor grad_buffer;   // shard_grads: this micro-step's [P] gradients until reduced (.grad are views)
    at::Tensor compute_shard; // this rank's shard in the compute dtype (the master itself in fp32, or
                              // a view of the kept gathered buffer: shard_in_params); undefined
                              // when the shard is in a file or host store (param_file >= 0)
    int param_file = -1;      // parameter offload: the unit's index in param_store_ or host_params_ (else -1)
    bool master_in_params = false;  // the master is this rank's slice of the kept fp32 parameters
    bool shard_in_params = false;   // stage 3 kept unit: compute_shard is this rank's slice of its gathered buffer
    bool token_input = false; // holds the pinned member: kept gathered from its first use to the tied unembed
    int uses = 0, fired = 0, pre_fired = 0;
    int needed = 0;           // parameters that take gradients
    int arrived = 0;          // of them, those whose gradient of this micro-step is complete
    bool ready = false;       // arrived == needed: the unit may be reduced
    int token_uses = 0;       // uses of token_unit in this forward (2: the unembed)
    bool reduced = false;
  };
  struct PendingReduce {
    int unit;
    at::Tensor input, output;
    bool accumulate;  // add output into the unit's gradient shard when done
    comm::WorkPtr work;
  };

  // The boundaries of an accel::Unit<> wrapper (UnitSpec::module).
  at::Tensor pre_forward(torch::nn::Module& unit, at::Tensor x) override;
  at::Tensor post_forward(torch::nn::Module& unit, at::Tensor y) override;
  void on_backward(int64_t tag) override;
  // AccumulateGrad hooks of parameter i (params_ index): before its gradient is added, after.
  void before_grad(int i);
  void after_grad(int i);
  // Stages 0-2: reduces the ready units in the fixed order (last unit first), up to the first one
  // that is not ready yet: every rank issues the same sequence whatever order autograd ran in.
  void reduce_ready_units();

  void reduce_unit(int u);
  void wait_reductions();
  // Optimizer offload on a GPU: waits for the asynchronous gradient copies and master uploads and
  // adds the landed gradients; before the host reads gradients or writes masters.
  void settle_host_transfers();
  void finish_oldest_reduction();
  void ensure_grad_buffer(int u);
  // Stages 2-3 with policy_.layer_buffers: the pool whose slots the units' transient buffers share.
  void use_layer_buffers();
  // After a step or a load: refresh the compute shards from the masters (when `copy_shards`; the
  // step does it unit by unit) and re-gather the units that keep their storage.
  void masters_changed(bool copy_shards);
  // The unit's gather source from its new master: into the compute shard, or to its file.
  void update_compute_shard(int u, const at::Tensor& master);
  void trace(TraceEvent event, int u) {
    if (trace_) trace_->record(event, units_[size_t(u)].name);
  }
  int shard_rank() const { return policy_.shard_optimizer ? shard_comm().rank() : 0; }
  // The ranks one copy of the model states is split over: every rank, or this rank's machine.
  comm::Communicator& shard_comm() const { return shard_group_ ? *shard_group_ : comm_; }
  // This rank's place among the copies (0 without HYBRID_SHARD).
  int replica_rank() const { return replica_group_ ? replica_group_->rank() : 0; }
  // The ranks holding the same optimizer shard as this one, ascending: this rank alone, its
  // replicas on the other machines (HYBRID_SHARD), or every rank (replicated states).
  std::vector<int> shard_holders() const;
  // The masters' dtype as the layout record (and safetensors) spell it.
  std::string master_dtype_name() const { return policy_.master_dtype == at::kFloat ? "F32" : "BF16"; }
  UnitShardState& shard(int u) { return optimizer_->units()[size_t(u)]; }

  comm::Communicator& comm_;
  // Writes the values `keeps` needs of one unit's flat buffer from `source` (unit_source.hpp).
  void fill_from_source(UnitSource& source, const std::vector<int>& unit_params, const FlatLayout& layout, bool keeps,
                        at::Tensor& flat);

  ShardingPolicy policy_;
  at::Device device_ = at::kCPU;  // the parameters', the communicator's
  std::unique_ptr<comm::Communicator> shard_group_;    // HYBRID_SHARD: this machine's ranks
  std::unique_ptr<comm::Communicator> replica_group_;  // HYBRID_SHARD: one rank per machine, same shard
  NamedTensors params_;
  std::unique_ptr<ShardedOptimizer> optimizer_;
  std::unique_ptr<UnitParamBuffers> buffers_;
  std::unique_ptr<NvmeParamStore> param_store_;  // parameter offload; may read optimizer_'s files (declared after it)
  std::unique_ptr<HostParamStore> host_params_;  // parameter offload to host memory (else null)
  LayerBufferPool* layer_pool_ = nullptr;  // never deleted (layer_buffer_pool.hpp); null when off
  std::unique_ptr<HostGradLanding> grad_landing_;  // optimizer offload on a GPU: async gradient copies (else null)
  std::unique_ptr<UnitTrace> trace_;
  std::vector<UnitRuntime> units_;
  std::unordered_map<const torch::nn::Module*, int> unit_index_;
  std::vector<int> unit_of_param_;      // params_ index -> engine unit
  std::vector<char> param_arrived_;     // this micro-step's gradient of the parameter is complete
  int next_reduce_ = 0;                 // stages 0-2: units_.size() - 1 - next_reduce_ is the next to reduce
  bool reducing_ = false;  // this micro-step reduces gradients
  bool eval_ = false;      // the hooks serve a no-grad forward
  std::deque<PendingReduce> pending_;
  int64_t pending_numel_ = 0;  // full-gradient values held by pending_ (shard_grads)
  int64_t peak_grad_buffer_bytes_ = 0;  // shard_grads: most bytes of unit gradient buffers at once
  std::vector<at::Tensor> grad_views_;  // !shard_grads: per parameter, its .grad (a view of grad_flat)
  std::unique_ptr<GradReadyHooks> grad_hooks_;  // declared last: removed before the state it reads
};

}  // namespace accel::engine

// The sharding engine both the DeepSpeed-style and the FSDP-style dialects run on ("one engine, two
// dialects", ../../shared/design.md). Per unit, the parameters form one flat buffer (flat_layout.hpp)
// of which each rank owns an equal shard, with an fp32 master copy and the optimizer state of that
// shard only (sharded_optimizer.hpp). A ShardingPolicy says what else is partitioned:
//   shard_grads = false  (ZeRO-1): full gradients accumulate locally (no communication on
//                        accumulation micro-steps) and are reduce-scattered on the last one;
//   shard_grads = true   (ZeRO-2, SHARD_GRAD_OP): every micro-step reduce-scatters each unit's
//                        gradients as soon as they are complete and frees the full gradients;
//   shard_params = true  (ZeRO-3, FULL_SHARD): parameters exist only as shards between uses; a unit
//                        is all-gathered before its forward and again before its backward, and its
//                        storage released after each.
// After the optimizer step on the shards, replicated parameters (stages 1-2) are refreshed by an
// all-gather of the master shards.
// Invariants: every rank issues the same collectives in the same order (unit order in backward is
// deterministic); a unit's storage is gathered whenever the model computes with it; the update
// equals the unsharded one element for element (same adamw_step on the same averaged gradients).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"
#include "backends/core/backward_signal.hpp"
#include "backends/core/sharded_optimizer.hpp"

namespace accel::backends {

struct ShardingPolicy {
  std::string label;          // for logs: "deepspeed zero_stage 2"
  bool shard_grads = false;
  bool shard_params = false;  // implies shard_grads
  bool overlap_comm = true;   // reduce from the post-backward hook (false: after backward returns)
};

class ShardedEngine final : public Backend, private train::UnitHooks, private BackwardListener {
 public:
  ShardedEngine(const config::JobConfig& job, comm::Communicator& comm, train::Model& model, ShardingPolicy policy);

  std::string name() const override { return policy_.label; }
  std::string describe() const override;
  train::UnitHooks* begin_micro_step(int micro_step, bool sync) override;
  void end_micro_step(bool sync) override;
  double clip_grad_norm(double max_norm) override;
  void optimizer_step(double lr) override;
  train::UnitHooks* eval_hooks() override;
  train::NamedTensors full_parameters() override;
  nlohmann::json save_state(const std::string& dir) override;
  void load_state(const std::string& dir, const nlohmann::json& layout) override;

 private:
  struct UnitRuntime {
    train::Unit* unit = nullptr;
    std::vector<int> params;  // indices into params_
    at::Tensor grad_flat;     // shard_grads == false: persistent [P]; the params' .grad are views
    at::Tensor full;          // shard_params: [P] gathered parameters; storage released between uses
    bool gathered = false;
    bool token_input = false; // used on integer token ids (the embedding): kept gathered across its two uses
    int uses = 0, fired = 0, eval_uses = 0;
    bool reduced = false;
  };
  struct PendingReduce {
    int unit;
    at::Tensor input, output;
    bool accumulate;  // add output into the unit's gradient shard when done
    comm::WorkPtr work;
  };

  at::Tensor pre_forward(train::Unit& unit, at::Tensor x) override;
  at::Tensor post_forward(train::Unit& unit, at::Tensor y) override;
  void on_backward(int64_t tag) override;

  void gather(int u);
  void release(int u);
  void release_all();
  void reduce_unit(int u);
  void wait_reductions();
  void refresh_replicated_params();  // stages 1-2: params <- all-gather of master shards
  UnitShardState& shard(int u) { return optimizer_->units()[size_t(u)]; }

  comm::Communicator& comm_;
  ShardingPolicy policy_;
  train::NamedTensors params_;
  std::unique_ptr<ShardedOptimizer> optimizer_;
  std::vector<UnitRuntime> units_;
  std::unordered_map<const train::Unit*, int> unit_index_;
  bool reducing_ = false;  // this micro-step reduces gradients
  bool eval_ = false;      // the hooks serve a no-grad forward
  std::vector<PendingReduce> pending_;
};

}  // namespace accel::backends

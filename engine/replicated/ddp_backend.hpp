// backend: ddp, replicated data parallelism (PyTorch DDP semantics) and the unsharded baseline every
// sharded backend is compared with. Every rank holds all parameters, gradients and optimizer states.
// Gradients live in flat buckets (ddp.bucket_cap_mb; parameters' .grad are views into them, so
// autograd accumulates straight into the buffers that are all-reduced). During the backward of the
// last micro-step, each bucket's all-reduce (AVG) is issued as soon as the gradients of every
// parameter in it are complete (each parameter's AccumulateGrad hook, grad_ready_hooks.hpp: no
// forward hooks are needed, so any module runs), while autograd goes on with earlier units;
// accumulation micro-steps communicate nothing.
// Invariants: buckets are issued in a fixed order (ready order, identical on every rank);
// parameters start identical on every rank (broadcast from rank 0 at construction) and stay so,
// because every rank applies the same update to the same averaged gradients.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"
#include "engine/grad_ready_hooks.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/replicated/grad_buckets.hpp"

namespace accel::engine {

class DdpBackend final : public Backend {
 public:
  // bucket_cap_mb: ddp.bucket_cap_mb (or DeepSpeed's reduce_bucket_size for zero_stage 0).
  DdpBackend(comm::Communicator& comm, std::vector<UnitSpec> units, const OptimizerSetup& optimizer,
             double bucket_cap_mb);

  std::string name() const override { return "ddp"; }
  void set_label(std::string label) { label_ = std::move(label); }
  void set_notes(std::string notes) { notes_ = std::move(notes); }  // appended to describe()
  std::string describe() const override;
  UnitHooks* begin_micro_step(int micro_step, bool sync) override;
  void end_micro_step(bool sync) override;
  double unscale_and_clip(double max_norm, double grad_scale) override;
  using Backend::optimizer_step;
  void optimizer_step(const std::vector<GroupHyper>& groups) override;
  const OptimizerSetup& optimizer_setup() const override { return optimizer_->setup(); }
  void rearm_grads() override;
  void skip_step() override;
  nlohmann::json memory_report() const override;
  UnitHooks* eval_hooks() override { return nullptr; }
  NamedTensors full_parameters() override;
  void visit_full_parameters(const std::function<void(const NamedTensors&)>& visit) override;
  std::vector<std::string> parameter_order() const override {
    std::vector<std::string> names;
    for (const auto& [name, p] : params_) names.push_back(name);
    return names;
  }
  nlohmann::json save_state(TensorFileSink& files, const CheckpointStorage& storage) override;
  void load_state(const std::string& dir, const nlohmann::json& layout) override;

 private:
  void check_replicas_agree();  // throws RunError when the replicas differ (a bug)
  // Parameter i's gradient of this backward pass has been added into its bucket.
  void on_grad_ready(int i);
  void mark_param_ready(int i);
  void launch_ready_buckets();

  comm::Communicator& comm_;
  double bucket_cap_mb_;
  std::string label_ = "ddp";
  std::string notes_;
  NamedTensors params_;                 // unit order (the spec order for built-in models)
  std::unique_ptr<Optimizer> optimizer_;

  std::vector<Bucket> buckets_;
  std::vector<at::Tensor> bucket_flats_;       // one flat gradient buffer per bucket
  std::vector<at::Tensor> grad_views_;         // per parameter: its .grad, a view into its bucket
  std::vector<int> bucket_of_param_;

  // Per sync micro-step bookkeeping.
  bool syncing_ = false;
  std::vector<char> ready_;                    // per parameter: its gradient is complete
  std::vector<int> pending_;                   // per bucket: parameters not yet ready
  size_t next_bucket_ = 0;
  std::vector<comm::WorkPtr> works_;
  std::unique_ptr<GradReadyHooks> grad_hooks_;  // declared last: removed before the state it reads
};

}  // namespace accel::engine

// The Backend contract: what the trainer asks of a data-parallel engine (docs/design/0004).
// The trainer owns the loop (data, loss scaling, schedule, metrics, checkpoints); a backend owns
// where parameters, gradients and optimizer states live and how they move between ranks.
// Invariants every backend keeps:
//  - Every method is called by every rank, in the same order (they may run collectives).
//  - After end_micro_step(sync=true) each rank holds the average over ranks of the summed
//    micro-step gradients for the parameters (or the shards) it owns.
//  - unscale_and_clip (and clip_grad_norm) return the same pre-clip norm on every rank, over the
//    full model, so every rank takes the same overflow decision.
//  - After optimizer_step the model's parameters (or their gathered form) are identical to what
//    the unsharded spec trainer would hold, up to floating-point reassociation.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/format/tensor_file_sink.hpp"
#include "engine/unit_source.hpp"
#include "engine/unit_spec.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/config/job.hpp"
#include "runtime/config/plan/resolved_plan.hpp"
#include "engine/named_tensors.hpp"
#include "engine/unit_hooks.hpp"
#include "engine/optim/param_groups.hpp"

namespace accel::engine {

// Which ranks can read each other's checkpoint files (docs/design/0013): the storage group of each
// rank (machines sharing output_dir). A file whose content several ranks hold is written once per
// group, by the lowest of those ranks in it, so every group can resume at the same layout alone.
struct CheckpointStorage {
  std::vector<int> group_of_rank;  // indexed by rank; empty: one storage every rank shares

  bool same_storage(int a, int b) const {
    return group_of_rank.empty() || group_of_rank.at(size_t(a)) == group_of_rank.at(size_t(b));
  }
  // Whether `rank` writes a file every rank in `holders` (ascending) could write: it is the first
  // holder on its storage. With one storage: the first holder.
  bool writes(int rank, const std::vector<int>& holders) const {
    for (int h : holders)
      if (same_storage(h, rank)) return h == rank;
    return false;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // One line for the start-up log: buckets, stages, what is sharded.
  virtual std::string describe() const = 0;

  // Starts micro-step `micro_step` of the optimizer step; `sync` is true on the last micro-step
  // only (gradients are communicated then, never on accumulation micro-steps). Returns the hooks
  // the model's forward must use (nullptr: none). Gradient readiness does not depend on them: it
  // comes from each parameter's AccumulateGrad node (grad_ready_hooks.hpp), so a model with no
  // unit boundaries in its forward runs every strategy that keeps parameters gathered.
  virtual UnitHooks* begin_micro_step(int micro_step, bool sync) = 0;
  // Called after the micro-step's backward() returned. When `sync`, returns once every gradient
  // reduction has completed.
  virtual void end_micro_step(bool sync) = 0;
  // For a forward without unit boundaries (docs/design/0015): returns once every parameter holds
  // its current values (the re-gathers issued after an optimizer step have completed).
  virtual void wait_parameters() {}
  // Before a backward pass: points every `.grad` the backend keeps in its own buffers back at them.
  // A user's optimizer.zero_grad() (set_to_none, libtorch 2.x's default) drops them; the values
  // stay, since the buffers are the backend's and the step zeroes them (so that zero_grad is as
  // harmless as the prepared optimizer's, which does nothing). A `.grad` the user assigned is
  // copied into the buffer (the next backward accumulates on it, as in torch).
  virtual void rearm_grads() {}

  // The gradients hold grad_scale x the true ones (fp16 loss scaling; 1 otherwise). Returns the
  // true pre-clip global L2 norm of the full model's gradients. If it is not finite (an overflow)
  // nothing is touched; otherwise the gradients are divided by grad_scale and clipped per spec
  // when max_norm > 0 (unscale_and_clip_grad_norm).
  virtual double unscale_and_clip(double max_norm, double grad_scale) = 0;
  double clip_grad_norm(double max_norm) { return unscale_and_clip(max_norm, 1.0); }
  // Applies the optimizer, each parameter with its group's hyper-parameters (one entry per group of
  // optimizer_setup(), read at this step: a user's scheduler may have changed them), and zeroes
  // the gradients for the next step.
  virtual void optimizer_step(const std::vector<GroupHyper>& groups) = 0;
  // The built-in trainer's step: every group at `lr` (the schedule's), as set up otherwise.
  void optimizer_step(double lr) { optimizer_step(optimizer_setup().at_lr(lr)); }
  // The optimizer kind and parameter groups the backend was built with.
  virtual const OptimizerSetup& optimizer_setup() const = 0;
  // An overflowed step: the gradients are dropped (zeroed for the next step); parameters, master
  // weights and optimizer states (and the optimizer's step count) stay as they are.
  virtual void skip_step() = 0;

  // Hooks for a no-grad forward (evaluation); nullptr: none.
  virtual UnitHooks* eval_hooks() = 0;

  // The full parameters under their spec names, on the CPU (weights export). Collective; the
  // result is valid on rank 0 (other ranks may get an empty list).
  virtual NamedTensors full_parameters() = 0;
  // The same, streamed: `visit` is called on rank 0 with each unit's full parameters in turn (other
  // ranks: not at all), a unit's gathered values freed before the next is gathered, so no rank
  // holds the whole model (the weights export, docs/design/0031). Collective. The default gathers
  // everything first (an engine without units).
  // The parameters' spec names in the order full_parameters() lists them (units, then their
  // parameters: the order checkpoints and `accel merge-weights` use), so an export laid out before
  // the values arrive is byte-equal to a merge of the same state.
  virtual std::vector<std::string> parameter_order() const = 0;
  virtual void visit_full_parameters(const std::function<void(const NamedTensors&)>& visit) {
    const NamedTensors all = full_parameters();
    if (!all.empty()) visit(all);
  }

  // Gives this rank's part of the training state to `files` (the checkpoint's staging directory on
  // this rank's storage, or host staging for a background write; replicated files per
  // CheckpointStorage::writes) and returns a JSON record of the layout, the same on every rank (kept
  // in the checkpoint's trainer.json). load_state reads it back from a verified checkpoint.
  virtual nlohmann::json save_state(TensorFileSink& files, const CheckpointStorage& storage) = 0;
  virtual void load_state(const std::string& dir, const nlohmann::json& layout) = 0;

  // `accel launch --trace FILE`: start recording the per-unit schedule (false: this backend has
  // none to record), and write it as a Chrome trace to `path` (called by every rank at the end).
  virtual bool start_trace() { return false; }

  // This rank's model-state memory as the backend holds it, in bytes, from the storage of its own
  // tensors (not from the process's resident size): params, grads, grad_shard, master,
  // optimizer_states, live_params_peak / live_grads_peak (transient unit buffers), and, when
  // offloaded, nvme_bytes / nvme_buffer_bytes. For `accel bench` and estimate-memory checks.
  virtual nlohmann::json memory_report() const { return nlohmann::json::object(); }
  // Communicators this backend split from the world (HYBRID_SHARD's machine and replica groups),
  // by name: their traffic is not in the world's counters, so the run report adds it from these.
  virtual std::vector<std::pair<std::string, const comm::Communicator*>> group_communicators() const { return {}; }
  virtual void write_trace(const std::string& /*path*/) {}
};

// The dtype parameters, gradients and their collectives are computed in: the job's resolved plan's
// (bf16 under mixed_precision bf16 or a model loaded in bf16, fp16 under mixed_precision fp16,
// fp32 otherwise).
at::ScalarType compute_dtype(const config::JobConfig& job);

// Builds the engine `plan` resolves to (RunError naming the key for its first refusal) over a model
// described by `units` (a module prepared through the public API, the built-in trainer's included,
// whose units come from a policy; the parameters initialised, identically on every rank or
// broadcast by the engine) and the optimizer's groups. Units have no forward boundaries unless they
// name a module: strategies that free parameters between uses (ZeRO-3, FULL_SHARD, HYBRID_SHARD) and
// activation checkpointing need them. With accel::Unit<> wrappers the fsdp wrap policy groups
// consecutive units (NO_WRAP, SIZE_BASED_WRAP); without, the caller applied it to the module tree.
// With a `source` (unit_source.hpp) the units' values come from it, computed by each rank, and the
// parameters may be placeholders; the plan must then run the sharding engine.
std::unique_ptr<Backend> make_backend(const plan::ResolvedPlan& plan, comm::Communicator& comm,
                                      std::vector<UnitSpec> units, const OptimizerSetup& optimizer,
                                      std::shared_ptr<UnitSource> source = nullptr);
// The same for the job's plan, resolved for a prepared module (boundaries: has_unit_boundaries).
std::unique_ptr<Backend> make_backend(const config::JobConfig& job, comm::Communicator& comm,
                                      std::vector<UnitSpec> units, const OptimizerSetup& optimizer);
// Why the job cannot run a prepared module (the first refusal, with its key and fix), or "" if it
// can: what make_backend refuses, known before any collective. `unit_boundaries`: the module has
// accel::Unit<> wrappers (has_unit_boundaries of its specs), so strategies that free parameters
// between uses can run it.
std::string prepared_module_refusal(const config::JobConfig& job, bool unit_boundaries = false);

}  // namespace accel::engine

// accel as a library: your own torch::nn::Module and torch::optim optimizer,
// trained with the data parallelism the job file names (ddp, deepspeed zero_stage 0-3, fsdp
// NO_SHARD / SHARD_GRAD_OP / FULL_SHARD / HYBRID_SHARD), in a loop you write:
//
//   accel::Accelerator acc;                              // the job from ACCEL_JOB (accel launch)
//   auto& opt = acc.prepare(*model, adamw);              // shards states, hooks gradients
//   for (auto& batch : *loader) {                        // loader over acc.sampler(n)
//     auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
//     acc.backward(loss);                                // instead of loss.backward()
//     acc.clip_grad_norm(1.0);
//     opt.step();                                        // at accumulation boundaries only
//   }
//
// For ddp, zero stages 0-2, NO_SHARD and SHARD_GRAD_OP the model needs no change: units (flat
// buffers, reductions, optimizer shards) are chosen by a policy over its module tree, and gradients
// are found ready by hooks on each parameter's AccumulateGrad node. Strategies that free parameters
// between uses (zero_stage 3, FULL_SHARD, HYBRID_SHARD) need unit boundaries in the forward: wrap
// the blocks in accel::Unit<> (accel/unit.hpp); each wrapper is then a unit and the parameters
// outside every wrapper form the root, which stays gathered. Without wrappers those strategies are
// refused at prepare() with a message naming the key and this fix.
// Only torch and the standard library are included here.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accel/sampler.hpp"

namespace accel {

// Which modules become units. A module matches if any rule does; the root never does. Units claim
// their parameters bottom-up (an inner match first), the rest form the unit "root". Empty policy:
// the job's (fsdp auto_wrap_policy), else every child of the root that holds parameters.
struct UnitPolicy {
  // Class names as Module::name() gives them: "Block" matches BlockImpl and ns::BlockImpl.
  std::vector<std::string> classes;
  // Module paths with '*' standing for any characters: "h.*", "layers.*.mlp".
  std::vector<std::string> name_patterns;
  // A module whose parameters not claimed by an inner unit number at least this (FSDP's size rule).
  int64_t min_params = 0;
  std::function<bool(const std::string& path, const torch::nn::Module& module)> predicate;

  bool empty() const { return classes.empty() && name_patterns.empty() && min_params <= 0 && !predicate; }
};

// The job's training keys a user loop reads (training.*).
struct TrainingConfig {
  int micro_batch_size = 8;
  int gradient_accumulation_steps = 1;
  int max_steps = 100;
  uint64_t seed = 1337;
  std::string output_dir;
};

class Accelerator;
namespace detail {
struct Host;  // accel's own trainer's side of an Accelerator (not public API)
}

// The prepared optimizer: call its step() and zero_grad(), not the wrapped optimizer's.
class PreparedOptimizer {
 public:
  // At an accumulation boundary: applies the update with each param group's current options (your
  // schedulers act on wrapped().param_groups() as usual). Between boundaries: nothing.
  void step();
  // Nothing to do: accel zeroes its gradient buffers at each step. Kept for torch-style loops.
  void zero_grad() {}
  // Whether the last step() applied an update.
  bool step_was_applied() const { return applied_; }
  torch::optim::Optimizer& wrapped() { return *optimizer_; }

 private:
  friend class Accelerator;
  explicit PreparedOptimizer(Accelerator& acc, torch::optim::Optimizer& optimizer) : acc_(&acc), optimizer_(&optimizer) {}
  Accelerator* acc_;
  torch::optim::Optimizer* optimizer_;
  bool applied_ = false;
};

// One micro-step, begun before the forward (Accelerator::accumulate). It ends with backward().
class MicroStep {
 public:
  bool sync() const { return sync_; }  // the last micro-step before an optimizer step

 private:
  friend class Accelerator;
  explicit MicroStep(bool sync) : sync_(sync) {}
  bool sync_;
};

class Accelerator {
 public:
  // Under `accel launch`: the job from ACCEL_JOB, the place in the world from the launcher's
  // environment; joins the world (rendezvous, communicator). Throws std::runtime_error otherwise.
  Accelerator();
  // The job from `job_file`. Under `accel launch` (ACCEL_JOB set) the launcher's resolved job is
  // used instead; run directly, the job must ask for one process and runs as a world of one.
  explicit Accelerator(const std::string& job_file);
  // accel's own trainer: over a world it has joined already, with its checkpoint record format. A
  // program has no Host to give (its type is not in these headers); use the constructors above.
  explicit Accelerator(std::shared_ptr<detail::Host> host);
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  int rank() const;
  int world_size() const;
  bool is_main_process() const { return rank() == 0; }
  // Where this rank computes: its GPU (cuda:LOCAL_RANK) under device cuda, else the CPU. Move the
  // model there before prepare() (a model built in an accel::ShardedInit scope stays on the host:
  // prepare() places it) and each batch before its forward: model->to(acc.device()).
  torch::Device device() const;
  const TrainingConfig& training() const;

  // Overrides the job's unit policy for the next prepare().
  void set_unit_policy(UnitPolicy policy);

  // Hands the model and its optimizer to the job's backend: parameters are broadcast from rank 0
  // and become views of the backend's flat buffers (same tensors), optimizer states are sharded
  // as the strategy says. Collective. Call once, before training. Throws std::runtime_error naming
  // the problem (an unsupported strategy or optimizer, a parameter outside the optimizer, ...).
  PreparedOptimizer& prepare(torch::nn::Module& model, torch::optim::Optimizer& optimizer);
  // One line: the strategy, units, what is sharded.
  std::string describe() const;
  // The dtype the prepared module computes in: kBFloat16 under mixed_precision bf16, else kFloat.
  // Under bf16 the parameters are bf16 (fp32 masters stay with the optimizer shards), and
  // accel::Unit<> wrappers cast their floating inputs to it; a floating input of the root (outside
  // every wrapper) is yours to cast: model->forward(x.to(acc.compute_dtype())).
  torch::Dtype compute_dtype() const;
  // This rank's model-state memory as the backend holds it, in bytes, by part: params (replicated
  // or kept), param_shards, grads, grad_shard, master, optimizer_states, live_params_peak and
  // live_grads_peak (transient unit buffers at their peak), nvme_* when offloaded. From the storage
  // of the backend's tensors, not the process's resident size: what `accel estimate-memory`
  // predicts. Empty before prepare().
  std::map<std::string, int64_t> memory_report() const;

  // This rank's rows of a dataset of `size` rows (see sampler.hpp); shuffled per epoch with the
  // job's seed when `shuffle`.
  DistributedSampler sampler(size_t size, bool shuffle = false) const;

  // Starts the next micro-step before its forward (optional: backward() starts one if none is).
  MicroStep accumulate();
  // Whether the current micro-step (or the last one, until the next begins) synchronises gradients:
  // the last micro-step before an optimizer step.
  bool sync_gradients() const;
  // loss / gradient_accumulation_steps, backward, and the gradient reductions (on the sync
  // micro-step). Replaces loss.backward().
  void backward(const torch::Tensor& loss);
  // At a boundary: the global L2 norm of the gradients before clipping (the same on every rank),
  // clipping them to max_norm when max_norm > 0. Between boundaries: 0, nothing done.
  double clip_grad_norm(double max_norm);

  // Optimizer steps taken so far: the loop's position. Under fp16 a step whose gradients overflowed
  // is skipped (no update; step_was_applied() is false) and still counts here.
  int64_t step() const;
  // fp16: the steps skipped for an overflow so far, and the scale the next loss is multiplied by
  // inside backward() (0 and 1 without fp16). A learning-rate schedule over applied updates reads
  // step() - skipped_steps(), as DeepSpeed's does.
  int64_t skipped_steps() const;
  double loss_scale() const;
  // The mean of `value` over the ranks (collective).
  double reduce_mean(double value);
  void wait_for_everyone();

  // The full weights (and buffers) under the module's parameter names, as safetensors. Collective;
  // rank 0 writes `path`.
  void save_model(const std::string& path);
  // The counterpart: `model`'s weights (and the buffers the file has) under its parameter names,
  // from a safetensors file (save_model's) or a folder of safetensors shards with
  // model.safetensors.index.json (or one model.safetensors). Call it after building the model
  // (outside accel::ShardedInit) and before prepare(): under ZeRO 3 / FULL_SHARD each rank then reads
  // only the byte ranges of the slices it keeps; otherwise every rank reads the whole. Throws
  // std::runtime_error listing every missing, extra or mis-shaped tensor and its file.
  void load_model(torch::nn::Module& model, const std::string& path);
  // Appends {"step": step, name: value...} to <output_dir>/metrics.jsonl (rank 0; the file is
  // started afresh by the first call of a run, or after load_state() keeps the records up to the
  // steps it restored), and logs the values under their names to the job's trackers
  // (tracking.log_with: TensorBoard, MLflow), which keep the same records. MLflow takes names of
  // letters, digits, _ - . space : and / only; another name is refused (RunError) with it on.
  void log(int64_t step, const std::map<std::string, double>& values);

  // The built-in trainer's progress line for the optimizer step just taken, printed by rank 0 when
  // the trainer prints its own: every training.log_every steps, the first step this process takes
  // and step training.max_steps. "step 12/60 | loss 4.1234 | lr 1.00e-03 | grad_norm 0.532 |
  // 12.3k tok/s | 85.1 ms | peak 312 MiB", with " | loss_scale 65536" under fp16. Call it once per
  // optimizer step, after the prepared optimizer's step() at an accumulation boundary (elsewhere:
  // RunError). `loss`: the step's loss as you log it (acc.reduce_mean of each rank's); `tokens`:
  // this rank's tokens in the step, summed over the ranks. The lr is the first param group's at the
  // step, grad_norm what clip_grad_norm() returned at it (left out when not called), the time the
  // wall time since the last call (since prepare() or load_state() for the first), the peak the
  // largest over the ranks (allocated GPU memory, or resident host memory on the CPU). Collective.
  // Returns the line, on every rank.
  std::string print_progress(double loss, int64_t tokens);

  // Checkpoints: the built-in trainer's format and path.
  //
  // Collective, at an optimizer-step boundary (after the prepared optimizer's step(); a call with
  // micro-steps accumulated since is refused). Writes <root>/step_N (N = step()) atomically and
  // moves <root>/latest to it: the model and optimizer state as the backend holds them (shards
  // stay shards), the optimizer-step count, each rank's torch CPU generator, the module's buffers
  // and frozen parameters (rank 0's) and the registered objects. `root` empty: the job's
  // <output_dir>/checkpoints, as the built-in trainer's. Returns the step_N directory.
  // With training.async_checkpoint: true it returns once this rank's state is staged in host
  // memory (waiting first for the previous save, whose failure it throws); a background thread
  // writes and commits it, and `latest` moves when every rank's files are written. The state is
  // copied while the next forward and backward run: the prepared optimizer's step() waits for that
  // copy, so change parameters only through it until then.
  std::string save_state(const std::string& root = "");
  // Returns once the asynchronous save in flight (if any) is committed; throws its failure (the
  // checkpoint, the file, the OS error; `latest` stays on the last complete checkpoint). Without
  // training.async_checkpoint there is never one in flight. Destroying the Accelerator waits too,
  // but can only log a failure: call this before the program ends.
  void wait_for_checkpoint();
  // Collective, after prepare() and before the first micro-step (or at a step boundary). Restores
  // what save_state saved, at any world size and under any backend the job names, after checking
  // every file against the checkpoint's manifest and the checkpoint against the prepared model
  // (parameter names and shapes, optimizer kind, registered objects). `dir`: a step_N directory,
  // or a root (its `latest`). Empty: the job's training.resume (auto: <output_dir>/checkpoints'
  // latest, if any; never: nothing; a directory: that one). Returns false when there was nothing
  // to load; then step() is 0 and nothing changed. Generators: rank r's own at the same world
  // size; at another, the saved state when all ranks had the same one (else left as they are).
  bool load_state(const std::string& dir = "");
  // State of your program saved by save_state and restored by load_state under `name`: `save`
  // returns tensors (any dtype and shape: a counter, a position, a scheduler's numbers, bytes as
  // kUInt8), `load` receives them back, on every rank. Rank 0's are saved: keep them equal on every
  // rank, as a resume at another world size needs. Register before load_state, under the same
  // names as the program that saved (a difference is an error naming them).
  void register_for_checkpointing(const std::string& name, std::function<std::vector<torch::Tensor>()> save,
                                  std::function<void(const std::vector<torch::Tensor>&)> load);
  // The common case: one integer (an epoch, a data position) saved and restored in place.
  void register_for_checkpointing(const std::string& name, int64_t& value);

 private:
  friend class PreparedOptimizer;
  friend class ShardedInit;  // the public construction scope (sharded_init.hpp) keeps its slices in the State
  void optimizer_step(torch::optim::Optimizer& optimizer, bool& applied);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace accel

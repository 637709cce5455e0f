// The built-in trainer's loop on the public API (see api_training_loop.hpp).
#include "runtime/train/modules/api_training_loop.hpp"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ATen/core/grad_mode.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/train/api/accelerator_internals.hpp"
#include "runtime/train/checkpoint/trainer_record.hpp"
#include "runtime/train/data/dataset.hpp"
#include "runtime/train/model/model.hpp"
#include "runtime/train/model/model_weights.hpp"
#include "runtime/train/modules/builtin_module.hpp"
#include "runtime/train/optim/lr_schedule.hpp"
#include "runtime/train/optim/param_groups.hpp"

namespace accel::train {
namespace {

void refuse_unsupported(const config::JobConfig& job) {
  auto refuse = [](const std::string& what) {
    throw RunError("accel: the built-in loop on the public API does not run " + what +
                   " yet; the built-in trainer (a job without `program:`) does");
  };
  if (job.mixed_precision == config::MixedPrecision::fp16) refuse("mixed_precision fp16");
}

// The trainer's evaluation (trainer/evaluation.cpp) through the prepared module: the mean token loss
// over every held-out window, after the step. A no-grad forward outside a micro-step runs under the
// engine's evaluation hooks (gather, release). Every rank runs the same number of forwards; a rank
// past the last batch repeats batch 0 with weight 0. nullopt without held-out windows.
std::optional<double> evaluate(Accelerator& acc, BuiltinModule& model, const Dataset& data, int batch_size) {
  const int64_t batches = data.num_val_batches(batch_size);
  if (batches == 0) return std::nullopt;
  at::NoGradGuard no_grad;
  double loss_sum = 0, tokens = 0;
  const int world = acc.world_size();
  const int64_t rounds = (batches + world - 1) / world;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t i = round * world + acc.rank();
    const bool real = i < batches;
    Batch b = data.val_batch(real ? i : 0, batch_size);
    at::Tensor loss = token_cross_entropy(model.forward(b.x), b.y);
    const double n = real ? double(b.y.numel()) : 0.0;
    loss_sum += loss.item<double>() * n;
    tokens += n;
  }
  // Means over ranks: their ratio is the ratio of the sums.
  return acc.reduce_mean(loss_sum) / acc.reduce_mean(tokens);
}

// The torch optimizer the job's optimizer section describes, with the trainer's two param groups
// (builtin_optimizer_setup: 2-D and larger parameters decay, the rest do not), in spec order.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimizerSection& section,
                                                        const NamedTensors& parameters) {
  const OptimizerSetup setup = builtin_optimizer_setup(section);
  std::vector<std::vector<at::Tensor>> members(setup.groups.size());
  for (const auto& [name, p] : parameters) members[size_t(builtin_param_group(p.dim()))].push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (size_t g = 0; g < setup.groups.size(); ++g) {
    if (members[g].empty()) continue;
    const GroupHyper& h = setup.groups[g];
    if (setup.kind == config::OptimizerName::adamw) {
      groups.emplace_back(members[g], std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(h.lr)
                                                                                       .betas({h.beta1, h.beta2})
                                                                                       .eps(h.eps)
                                                                                       .weight_decay(h.weight_decay)));
    } else {
      groups.emplace_back(members[g], std::make_unique<torch::optim::SGDOptions>(
                                          torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weight_decay)));
    }
  }
  if (setup.kind == config::OptimizerName::adamw)
    return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(section.lr));
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(section.lr));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace

void run_builtin_training_on_api(Accelerator& acc, const config::JobConfig& job) {
  refuse_unsupported(job);
  const auto& t = job.training;
  std::shared_ptr<BuiltinModule> model = make_builtin_module(job.model);
  model->initialize(uint64_t(t.seed));
  if (!t.init_from.empty()) load_weights_into(model->spec_parameters(), t.init_from);
  std::unique_ptr<Dataset> data = make_dataset(job.data, job.model.vocab_size, t.seq_len, uint64_t(t.seed));
  std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(job.optimizer, model->spec_parameters());
  PreparedOptimizer& step_optimizer = acc.prepare(*model, *optimizer);
  if (acc.is_main_process()) logging::info(acc.describe());
  // The trainer's record keys, so this loop and the trainer resume each other's checkpoints.
  detail::AcceleratorInternals::state_io(acc).use_record_format(
      {kTrainerWriter, [&] { return trainer_record(job, acc.world_size(), *data, nlohmann::json::object()); },
       [&](const std::string& dir, const nlohmann::json& record) { check_trainer_record(dir, record, *data); }});

  acc.load_state();  // training.resume
  const int64_t start = acc.step();
  const int G = acc.training().gradient_accumulation_steps;
  const int rank = acc.rank(), world = acc.world_size();
  for (int64_t step = start; step < t.max_steps; ++step) {
    double loss_sum = 0;
    for (int m = 0; m < G; ++m) {
      acc.accumulate();
      Batch batch = data->train_batch(step, m, rank, world, t.micro_batch_size, G);
      at::Tensor loss = token_cross_entropy(model->forward(batch.x), batch.y);
      acc.backward(loss);  // loss / G, and the reductions on the last micro-step
      loss_sum += loss.item<double>();
    }
    const double lr = learning_rate(job.scheduler, job.optimizer.lr, step, t.max_steps);
    set_learning_rate(*optimizer, lr);
    const double grad_norm = acc.clip_grad_norm(t.max_grad_norm);
    step_optimizer.step();
    const double loss = acc.reduce_mean(loss_sum / G);
    std::map<std::string, double> record{{"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}};
    if (t.eval_every > 0 && (step + 1) % t.eval_every == 0)
      if (auto eval_loss = evaluate(acc, *model, *data, t.micro_batch_size)) record["eval_loss"] = *eval_loss;
    acc.log(step, record);
    const bool final_step = step + 1 == t.max_steps;
    if (final_step || (t.checkpoint_every > 0 && (step + 1) % t.checkpoint_every == 0)) acc.save_state();
  }
  if (t.save_weights) acc.save_model(t.output_dir + "/weights.safetensors");
}

}  // namespace accel::train

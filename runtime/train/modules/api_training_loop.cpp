// The built-in trainer's loop on the public API (see api_training_loop.hpp).
#include "runtime/train/modules/api_training_loop.hpp"

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/common/errors.hpp"
#include "runtime/common/log.hpp"
#include "runtime/train/data/dataset.hpp"
#include "runtime/train/model/model.hpp"
#include "runtime/train/modules/builtin_module.hpp"
#include "runtime/train/optim/lr_schedule.hpp"
#include "runtime/train/optim/param_groups.hpp"

namespace accel::train {
namespace {

void refuse_unsupported(const config::JobConfig& job) {
  const auto& t = job.training;
  auto refuse = [](const std::string& what) {
    throw RunError("accel: the built-in loop on the public API does not run " + what +
                   " yet; the built-in trainer (a job without `program:`) does");
  };
  if (t.eval_every > 0) refuse("evaluation (training.eval_every " + std::to_string(t.eval_every) + ")");
  if (!t.init_from.empty()) refuse("training.init_from");
  if (job.mixed_precision == config::MixedPrecision::fp16) refuse("mixed_precision fp16");
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
  std::unique_ptr<Dataset> data = make_dataset(job.data, job.model.vocab_size, t.seq_len, uint64_t(t.seed));
  std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(job.optimizer, model->spec_parameters());
  PreparedOptimizer& step_optimizer = acc.prepare(*model, *optimizer);
  if (acc.is_main_process()) logging::info(acc.describe());

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
    acc.log(step, {{"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}});
    const bool final_step = step + 1 == t.max_steps;
    if (final_step || (t.checkpoint_every > 0 && (step + 1) % t.checkpoint_every == 0)) acc.save_state();
  }
  if (t.save_weights) acc.save_model(t.output_dir + "/weights.safetensors");
}

}  // namespace accel::train

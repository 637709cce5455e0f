// A user's libtorch program that checkpoints through the public API, for
// tests/numerics/test_api_checkpoints.py (docs/design/0015 "save_state and load_state").
// What it keeps outside the model and optimizer is what a resume must restore, or it diverges:
//  - torch's CPU generator: each micro-step draws a feature mask (dropout shared by the whole
//    global batch, drawn alike on every rank, so its stream does not depend on the world size);
//  - registered objects: the data position (global micro-batches consumed: the rows come from it)
//    and a decay schedule of its own (a double it multiplies the learning rate by);
//  - a buffer: a micro-step counter the forward reads.
// Rows of micro-step p are global rows [p * B, (p + 1) * B), B = world x micro batch; rank r takes
// its micro batch of them in order (as DistributedSampler does).
// Flags: --stop-after K (save_state() after step K and stop), --width W (a mismatched module),
// --reset-rng / --reset-objects (forget what load_state restored: the test's negative controls),
// --rank-draws (each rank draws a different count: per-rank generator states), --save-every N
// and --crash-after K (rank 1 dies after step K on the launcher's first attempt); --barrier-check
// only tests wait_for_everyone() (rank 1 writes a file late; rank 0 must see it after the barrier);
// --chunks K computes each micro batch's loss as the mean of K parts' means (the same function, its
// sums over rows grouped as K ranks group them: the tests measure fp32's reordering noise with it).
#include <accel/accel.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

namespace {

// A residual block: fsdp's default transformer_layer_cls_to_wrap (Block) makes it a unit.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t c) : fc(register_module("fc", torch::nn::Linear(c, c))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t width)
      : in(register_module("in", torch::nn::Linear(16, width))),
        block(register_module("block", Block(width))),
        out(register_module("out", torch::nn::Linear(width, 1))) {
    micro_steps = register_buffer("micro_steps", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& keep) {
    torch::Tensor h = torch::tanh(in(x * (1 + 0.1 * torch::sin(micro_steps)))) * keep;
    return out(block(h));
  }
  torch::nn::Linear in;
  Block block;
  torch::nn::Linear out;
  torch::Tensor micro_steps;
};
TORCH_MODULE(Net);

// Global rows [first, first + n): deterministic in the row index, no generator involved.
std::pair<torch::Tensor, torch::Tensor> rows(int64_t first, int64_t n) {
  torch::Tensor index = torch::arange(first, first + n, torch::kFloat).unsqueeze(1);
  torch::Tensor x = torch::sin(index * 0.37 + torch::arange(16, torch::kFloat) * 1.3);
  torch::Tensor y = torch::sin(x.matmul(torch::linspace(-0.5, 0.5, 16))).unsqueeze(1);
  return {x, y};
}

}  // namespace

int main(int argc, char** argv) try {
  int64_t stop_after = -1, width = 32, save_every = 0, crash_after = -1, chunks = 1;
  bool reset_rng = false, reset_objects = false, rank_draws = false, barrier_check = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--stop-after") && i + 1 < argc) stop_after = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--width") && i + 1 < argc) width = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--save-every") && i + 1 < argc) save_every = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--crash-after") && i + 1 < argc) crash_after = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--chunks") && i + 1 < argc) chunks = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--reset-rng")) reset_rng = true;
    else if (!std::strcmp(argv[i], "--reset-objects")) reset_objects = true;
    else if (!std::strcmp(argv[i], "--rank-draws")) rank_draws = true;
    else if (!std::strcmp(argv[i], "--barrier-check")) barrier_check = true;
    else throw std::runtime_error(std::string("unknown flag ") + argv[i]);
  }
  accel::Accelerator acc;
  const accel::TrainingConfig& t = acc.training();
  if (barrier_check) {
    const std::string mark = t.output_dir + "/late_rank_was_here";
    if (acc.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // arrive well after rank 0
      std::ofstream(mark) << "1\n";
    }
    acc.wait_for_everyone();
    if (acc.rank() == 0 && !std::ifstream(mark)) throw std::runtime_error("wait_for_everyone returned before rank 1 came");
    acc.wait_for_everyone();  // rank 1 stays until rank 0 has looked
    return 0;
  }
  torch::manual_seed(int64_t(t.seed));
  Net net(width);
  const double base_lr = 1e-2;
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(base_lr).weight_decay(0.01));
  accel::PreparedOptimizer& opt = acc.prepare(*net, adamw);

  int64_t position = 0;    // global micro-batches consumed
  double lr_scale = 1.0;   // the program's own schedule
  acc.register_for_checkpointing("position", position);
  acc.register_for_checkpointing(
      "schedule", [&] { return std::vector<torch::Tensor>{torch::tensor({lr_scale}, torch::kDouble)}; },
      [&](const std::vector<torch::Tensor>& saved) { lr_scale = saved.at(0).item<double>(); });
  if (acc.load_state()) {  // training.resume: auto, never or a directory
    if (reset_rng) torch::manual_seed(int64_t(t.seed));
    if (reset_objects) position = 0, lr_scale = 1.0;
  }

  const int64_t micro = t.micro_batch_size, global = micro * acc.world_size();
  while (acc.step() < t.max_steps) {
    double loss_sum = 0;
    for (int m = 0; m < t.gradient_accumulation_steps; ++m) {
      torch::Tensor keep = torch::bernoulli(torch::full({width}, 0.8)) / 0.8;  // the same on every rank
      auto [x, y] = rows(position * global + acc.rank() * micro, micro);
      std::vector<torch::Tensor> means;
      for (int64_t k = 0; k < chunks; ++k)
        means.push_back(torch::mse_loss(net->forward(x.chunk(chunks)[k], keep), y.chunk(chunks)[k]));
      torch::Tensor loss = chunks == 1 ? means[0] : torch::stack(means).mean();
      acc.backward(loss);
      loss_sum += loss.item<double>();
      ++position;
      torch::NoGradGuard no_grad;
      net->micro_steps.add_(1);
    }
    for (auto& group : adamw.param_groups()) group.options().set_lr(base_lr * lr_scale);
    const double norm = acc.clip_grad_norm(1.0);
    const double mean = acc.reduce_mean(loss_sum / t.gradient_accumulation_steps);
    acc.log(acc.step() + 1, {{"loss", mean}, {"grad_norm", norm}, {"lr", base_lr * lr_scale}});
    opt.step();
    lr_scale *= 0.9;
    if (rank_draws) torch::rand({acc.rank() + 1});  // a per-rank stream: the ranks' generators part
    if (acc.step() == stop_after) {
      acc.save_state();
      return 0;
    }
    if (save_every > 0 && acc.step() % save_every == 0) acc.save_state();
    const char* restarts = std::getenv("ACCEL_RESTART_COUNT");
    if (acc.step() == crash_after && acc.rank() == 1 && (!restarts || !std::strcmp(restarts, "0")))
      std::_Exit(3);  // a worker failure on the first attempt: the launcher restarts the group
  }
  acc.save_model(t.output_dir + "/model.safetensors");
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}

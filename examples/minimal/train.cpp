// A plain libtorch program (model, optimizer, data loader, loop) that accel trains with the data
// parallelism job.yaml names. The lines marked "accel:" are all it takes (examples/README.md).
#include <accel/accel.hpp>  // accel:
#include <torch/torch.h>

// Rows of y = sin(x . w) for fixed x and w: the same on every rank.
struct Rows : torch::data::datasets::Dataset<Rows> {
  torch::Tensor x, y;
  explicit Rows(int64_t n) {
    torch::manual_seed(7);
    x = torch::randn({n, 16});
    y = torch::sin(x.matmul(torch::linspace(-0.25, 0.25, 16))).unsqueeze(1);
  }
  torch::data::Example<> get(size_t i) override { return {x[int64_t(i)], y[int64_t(i)]}; }
  std::optional<size_t> size() const override { return size_t(x.size(0)); }
};

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t c) : fc(register_module("fc", torch::nn::Linear(c, c))) {}
  torch::Tensor forward(torch::Tensor x) { return x + torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Block);

int main() try {
  accel::Accelerator acc;                                    // accel: the job and the world
  const accel::TrainingConfig& t = acc.training();           // accel: training.* from the job
  torch::manual_seed(int64_t(t.seed));
  torch::nn::Sequential net(torch::nn::Linear(16, 64), Block(64), Block(64), torch::nn::Linear(64, 1));
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  accel::PreparedOptimizer& opt = acc.prepare(*net, adamw);  // accel: shard, hook gradients
  const size_t rows = size_t(t.max_steps) * t.gradient_accumulation_steps * acc.world_size() * t.micro_batch_size;
  auto loader = torch::data::make_data_loader(Rows(int64_t(rows)).map(torch::data::transforms::Stack<>()),
                                              acc.sampler(rows), size_t(t.micro_batch_size));  // accel: sampler
  double loss_sum = 0;
  for (auto& batch : *loader) {
    torch::Tensor loss = torch::mse_loss(net->forward(batch.data), batch.target);
    acc.backward(loss);                                      // accel: was loss.backward()
    loss_sum += loss.item<double>();
    const bool boundary = acc.sync_gradients();              // accel: an optimizer step follows
    double mean = 0;
    if (boundary) {
      double norm = acc.clip_grad_norm(1.0);                 // accel: global norm, over the shards
      mean = acc.reduce_mean(loss_sum / t.gradient_accumulation_steps);
      acc.log(acc.step() + 1, {{"loss", mean}, {"grad_norm", norm}});  // accel: metrics.jsonl
      loss_sum = 0;
    }
    opt.step();  // applies at accumulation boundaries only
    opt.zero_grad();
    // accel: the trainer's progress line (rows as its tokens); rank 0 prints every training.log_every steps
    if (boundary) acc.print_progress(mean, int64_t(t.micro_batch_size) * t.gradient_accumulation_steps);
  }
  acc.save_model(t.output_dir + "/model.safetensors");     // accel: full weights, your names
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}

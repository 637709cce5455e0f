// examples/cnn: a small CNN with batch normalisation on a synthetic image set. Its BatchNorm layers
// are accel::SyncBatchNorm, which normalises over the global batch (every rank's rows), so the
// network trains as it would in one process at any world size; with --local-bn they are
// torch::nn::BatchNorm2d, which normalises over each rank's micro batch (examples/README.md).
// --chunks K computes the convolutions, the head and the loss on K parts of each micro batch's rows
// and BatchNorm over all of them: the same function, with the sums over rows grouped as K ranks
// group them (the tests measure fp32's reordering noise with it).
// The conv blocks are accel::Unit<> wrappers, so ZeRO-3 and FSDP FULL_SHARD can free them between
// uses; the linear head stays outside any unit, in the root.
// Lines marked "accel:" are the additions to a plain libtorch program (examples/README.md).
#include <accel/accel.hpp>  // accel:
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

// 3x16x16 images, the same on every rank: class c (0-9) is a bright 4x4 square in cell c of a 4x4
// grid, in colour channel c % 3, over noise.
struct Images : torch::data::datasets::Dataset<Images> {
  torch::Tensor x, y;
  explicit Images(int64_t n) {
    torch::manual_seed(7);
    y = torch::randint(10, {n});
    x = 0.5 * torch::randn({n, 3, 16, 16});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = y[i].item<int64_t>();
      x[i][c % 3].narrow(0, c / 4 * 4, 4).narrow(1, c % 4 * 4, 4).add_(1.0);
    }
  }
  torch::data::Example<> get(size_t i) override { return {x[int64_t(i)], y[int64_t(i)]}; }
  std::optional<size_t> size() const override { return size_t(x.size(0)); }
};

// f applied to each of `chunks` parts of x's rows, concatenated: f(x) with per-row sums grouped by part.
template <typename F>
torch::Tensor in_chunks(const torch::Tensor& x, int64_t chunks, F& f) {
  if (chunks == 1) return f.forward(x);
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& part : x.chunk(chunks)) parts.push_back(f.forward(part));
  return torch::cat(parts);
}

// Conv 3x3, batch norm, ReLU. Named Block: the job's fsdp.transformer_layer_cls_to_wrap names it.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t out, bool local_bn, int64_t chunks)
      : chunks(chunks), conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)))) {
    if (local_bn) norm = torch::nn::AnyModule(torch::nn::BatchNorm2d(out));  // each rank's own statistics
    else norm = torch::nn::AnyModule(accel::SyncBatchNorm(out));             // accel: the global batch's
    register_module("norm", norm.ptr());
  }
  torch::Tensor forward(torch::Tensor x) { return torch::relu(norm.forward(in_chunks(x, chunks, *conv))); }
  int64_t chunks;
  torch::nn::Conv2d conv;
  torch::nn::AnyModule norm;
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl(bool local_bn, int64_t chunks) : chunks(chunks) {
    const int64_t width[] = {3, 16, 32, 32};
    for (int i = 0; i < 3; ++i) h->push_back(blocks.emplace_back(width[i], width[i + 1], local_bn, chunks));  // h.0.conv.weight, ...
    register_module("h", h);
    head = register_module("head", torch::nn::Linear(32 * 4 * 4, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(blocks[0](x), 2);  // accel: each block call is a unit boundary; 16x16 -> 8x8
    x = torch::max_pool2d(blocks[1](x), 2);  // 8x8 -> 4x4
    x = blocks[2](x);
    return in_chunks(x.flatten(1), chunks, *head);
  }
  int64_t chunks;
  torch::nn::ModuleList h;
  std::vector<accel::Unit<Block>> blocks;  // accel: was std::vector<Block>
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

int main(int argc, char** argv) try {
  bool local_bn = false;
  int64_t chunks = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--local-bn") local_bn = true;
    else if (std::string(argv[i]) == "--chunks" && i + 1 < argc) chunks = std::stoll(argv[++i]);
    else throw std::runtime_error(std::string("unknown argument ") + argv[i]);
  }
  accel::Accelerator acc;                                    // accel: the job and the world
  const accel::TrainingConfig& t = acc.training();           // accel: training.* from the job
  torch::manual_seed(int64_t(t.seed));
  Net net(local_bn, chunks);
  torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  accel::PreparedOptimizer& opt = acc.prepare(*net, adamw);  // accel: shard, hook gradients and units
  const size_t rows = size_t(t.max_steps) * t.gradient_accumulation_steps * acc.world_size() * t.micro_batch_size;
  auto loader = torch::data::make_data_loader(Images(int64_t(rows)).map(torch::data::transforms::Stack<>()),
                                              acc.sampler(rows), size_t(t.micro_batch_size));  // accel: sampler
  double loss_sum = 0;
  for (auto& batch : *loader) {
    // The loss in fp32 whatever the compute dtype (under bf16 the logits are bf16).
    torch::Tensor logits = net->forward(batch.data).to(torch::kFloat), loss;
    if (chunks == 1) loss = torch::cross_entropy_loss(logits, batch.target);
    else {  // the mean of the parts' means, as the ranks' losses are averaged
      std::vector<torch::Tensor> means;
      for (int64_t k = 0; k < chunks; ++k)
        means.push_back(torch::cross_entropy_loss(logits.chunk(chunks)[k], batch.target.chunk(chunks)[k]));
      loss = torch::stack(means).mean();
    }
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
  acc.save_model(t.output_dir + "/model.safetensors");     // accel: weights and running statistics
} catch (const std::exception& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
